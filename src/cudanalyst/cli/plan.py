"""`cudanalyst plan FILE`: the units and shards a run will execute, with estimated tokens and GPU time."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from cudanalyst.cli.common import EXIT_INVALID, die, load_or_die
from cudanalyst.plan import estimate
from cudanalyst.runs import PlanError, plan_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="show the units, shards and estimated cost of a run", description=__doc__)
    p.add_argument("file", help="AttributionRun YAML or JSON")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    ar = load_or_die(args.file)
    try:
        plan = plan_run(ar)
    except PlanError as exc:
        die(str(exc), EXIT_INVALID)
    summary = plan.summary() | {"estimate": estimate(ar, plan)}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    table = Table(title=f"plan of {ar.metadata.name}", show_header=False)
    for key in ("players", "programs", "coalitions", "units", "unitsByArm", "shards"):
        value = summary[key]
        table.add_row(key, ", ".join(map(str, value)) if isinstance(value, list) else
                      (json.dumps(value) if isinstance(value, dict) else str(value)))
    for key, value in summary["estimate"].items():
        table.add_row(key, str(value))
    Console().print(table)
    return 0
