"""`cudanalyst validate FILE`: check an AttributionRun against the models (the same rules as the CRD)."""

from __future__ import annotations

import argparse

from cudanalyst.cli.common import load_or_die


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check an AttributionRun file", description=__doc__)
    p.add_argument("file", help="AttributionRun YAML or JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    ar = load_or_die(args.file)
    spec = ar.spec
    print(f"{args.file}: valid AttributionRun {ar.metadata.name!r}: {len(spec.players)} players "
          f"({', '.join(spec.players)}), {2 ** len(spec.players)} coalitions, generations "
          f"{spec.trajectory.generations}, {spec.resources.shards} shard(s)")
    return 0
