"""`cudanalyst policy RUN... [-o policy.yaml]`: a FeedbackPolicy learned from finished AttributionRuns.

RUN is a finished run's folder (`<output.uri>/<name>/`, local, file:// or s3://) or its report/report.json. Per
program state (broken, unverified, wrong, correct, fast) the policy lists each feedback component, shown or
withheld and in which form, and which model plans and which writes code; every choice cites the Banzhaf value or
run-to-run difference it rests on (value, interval, level). Where no interval excludes 0 (after Holm, unless
`--correction none`) the default stays: shown, raw. Exit 2 on bad input (a missing, unfinished or foreign folder),
naming it; nothing is written then.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from cudanalyst.cli.common import EXIT_INVALID


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("policy", help="learn a feedback policy from finished runs", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN", help="a finished run's folder, or its report/report.json")
    p.add_argument("-o", "--output", default="-", metavar="FILE", help="where the YAML goes (default: stdout)")
    p.add_argument("--name", default="learned", help="metadata.name of the policy (default %(default)s)")
    p.add_argument("--level", choices=("program", "task"), default="program",
                   help="unit of replication of the per-state Banzhaf intervals (default %(default)s)")
    p.add_argument("--correction", choices=("holm", "none"), default="holm",
                   help="holm: an interval counts only if it still excludes 0 after Holm (default %(default)s)")
    p.add_argument("--hold-out", default="", metavar="TASK,...",
                   help="leave these tasks' outcomes out of the learning (a comparison then evaluates on them)")
    p.set_defaults(handler=run)


def _write(path: str, text: str) -> None:
    """Whole or not at all: a temporary file beside the target, renamed over it."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, target)


def run(args: argparse.Namespace) -> int:
    import re

    from cudanalyst.api import NAME_PATTERN
    from cudanalyst.policy import PolicyInputError, learn, load_finished, to_yaml

    if not re.match(NAME_PATTERN, args.name):
        print(f"error: --name {args.name!r}: not a DNS label (lowercase letters, digits, '-')", file=sys.stderr)
        return EXIT_INVALID
    if args.output != "-" and not Path(args.output).parent.is_dir():
        print(f"error: -o {args.output}: its folder does not exist", file=sys.stderr)
        return EXIT_INVALID
    try:
        runs = [load_finished(r) for r in args.runs]
        names = [r.name for r in runs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise PolicyInputError(f"the same run given twice: {', '.join(dupes)}")
        held_out = [t.strip() for t in args.hold_out.split(",") if t.strip()]
        policy = learn(runs, args.name, args.level, args.correction, held_out)
    except PolicyInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    text = to_yaml(policy)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        _write(args.output, text)
    withheld = [f"{s}: {c.component}" for s, r in policy.spec.states.items() for c in r.components if not c.show]
    moved = [f"{s}: {c.component} ({c.form})" for s, r in policy.spec.states.items() for c in r.components
             if c.show and any(e.sign(args.correction == "holm") for e in c.evidence)]
    print(f"policy {args.name} from {len(runs)} run(s): withheld {', '.join(withheld) or 'nothing'}; kept on "
          f"evidence {', '.join(moved) or 'nothing'}; planner {policy.spec.models.planner or 'none (the coder plans)'}"
          + ("" if args.output == "-" else f" -> {args.output}"), file=sys.stderr)
    return 0
