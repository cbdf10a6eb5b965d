"""`cudanalyst attribute`: Banzhaf values, interactions, Shapley values and Moebius coefficients.

From a game file (`--game FILE`: {"players": [...], "values": {"": 0.1, "a": 0.3, "a,b": 0.5, ...}}, every
coalition present, a coalition is its players joined by commas in any order), or from a run's outcome
records (`--outcomes URI`: the run folder holding outcomes/*.json and spec.json), with intervals per
metric and generation. Prints JSON; exit 2 for invalid input.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cudanalyst.api.spec import METRICS, EvaluationSpec
from cudanalyst.attribution.games import GameError, check_players, load_game_file
from cudanalyst.attribution.result import attribute_tables, check_order, game_indices
from cudanalyst.attribution.values import OutcomeError, parse_records, tabulate
from cudanalyst.outcomes import METRIC_THRESHOLD, with_fast_vs_baseline
from cudanalyst.runfolder import OUTCOMES, SPEC
from cudanalyst.store import ObjectStore, S3Settings, StoreError, open_store

EXIT_INVALID = 2


class InputError(ValueError):
    """Invalid input to the command (exit 2)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attribute",
        help="Banzhaf/Shapley attribution from a game file or a run's outcomes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--game", metavar="FILE", help="JSON game file with every coalition's value")
    source.add_argument("--outcomes", metavar="URI", help="run folder (s3://bucket/runs/NAME/, file:// or a path)")
    p.add_argument("--order", type=int, default=2, help="order of the reported interactions (default 2: pairs)")
    p.add_argument("--shapley-interactions", action="store_true",
                   help="with --game: also print Shapley interactions of that order")
    p.add_argument("--players", help="with --outcomes: comma-separated players in spec order "
                   "(default: from the run's spec.json)")
    p.add_argument("--metrics", help="with --outcomes: comma-separated subset of compiled,pass,fastVsBaseline,"
                   "fastVsFrozen (fast: fastVsFrozen's older name) (default: the spec's, else compiled,pass,"
                   "fastVsBaseline,fastVsFrozen)")
    p.add_argument("--estimator", choices=["auto", "exact", "msr"], default=None,
                   help="exact needs every coalition; msr (Maximum Sample Reuse) works from sampled ones; "
                   "auto picks exact when every coalition is present (default: the spec's, else auto)")
    p.add_argument("--confidence", type=float, default=None, help="interval level (default: the spec's, else 0.95)")
    p.add_argument("--bootstrap", type=int, default=None,
                   help="bootstrap replicates, 0 for analytic intervals only (default: the spec's, else 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--s3-endpoint", default="", help="S3 endpoint URL for MinIO/Ceph (default: AWS / boto3 chain)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        result = _game(args) if args.game else _outcomes(args)
    except (GameError, OutcomeError, InputError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _game(args: argparse.Namespace) -> dict[str, Any]:
    game = load_game_file(args.game)
    _check_order(args.order, game.n)
    return game_indices(game, args.order, args.shapley_interactions)


def _check_order(order: int, n: int) -> None:
    try:
        check_order(order, n)
    except ValueError as exc:
        raise InputError(f"--order {order}: {exc}") from exc


def _spec_of(store: ObjectStore) -> dict[str, Any]:
    """The run's spec from spec.json (a whole AttributionRun or its spec), or {} when there is none."""
    if not store.exists(SPEC):
        return {}
    data = store.get_json(SPEC)
    spec = data.get("spec", data) if isinstance(data, dict) else None
    if not isinstance(spec, dict):
        raise InputError(f"{store.uri_of(SPEC)}: expected an AttributionRun or its spec (a JSON object)")
    return spec


def _csv(value: str, option: str) -> list[str]:
    items = [x.strip() for x in value.split(",")]
    if not value.strip() or any(not x for x in items):
        raise InputError(f"{option} {value!r}: expected comma-separated names")
    return items


def _outcomes(args: argparse.Namespace) -> dict[str, Any]:
    settings = S3Settings(endpoint=args.s3_endpoint) if args.s3_endpoint else None
    store = open_store(args.outcomes, settings)
    spec = _spec_of(store)
    attribution = spec.get("attribution") or {}
    spec_uri = store.uri_of(SPEC)

    if args.players:
        players = check_players(_csv(args.players, "--players"), "--players")
    elif "players" in spec:
        players = check_players(spec["players"], f"{spec_uri}: spec.players")
    else:
        raise InputError(f"{store.uri}: no spec.json with players; name them with --players a,b,c")
    metrics = _csv(args.metrics, "--metrics") if args.metrics else list(attribution.get("metrics", METRICS))
    for m in metrics:
        if m not in METRIC_THRESHOLD:
            raise InputError(f"metric {m!r}: expected one of {', '.join(METRIC_THRESHOLD)}")
    confidence = args.confidence if args.confidence is not None else float(attribution.get("confidence", 0.95))
    if not 0 < confidence < 1:
        raise InputError(f"--confidence {confidence}: must be between 0 and 1")
    replicates = args.bootstrap if args.bootstrap is not None else int(attribution.get("bootstrap", 1000))
    if replicates < 0:
        raise InputError(f"--bootstrap {replicates}: must be 0 or more")
    estimator = args.estimator or attribution.get("estimator", "auto")
    _check_order(args.order, len(players))

    keys = [k for k in store.list(OUTCOMES) if k.endswith(".json")]
    if not keys:
        raise InputError(f"{store.uri}: no outcome records (outcomes/*.json)")
    # Reads are I/O bound (one GET per unit on S3): overlap them, keep the order.
    with ThreadPoolExecutor(max_workers=16) as pool:
        objects = list(pool.map(store.get_json, keys))
    records = parse_records(zip(map(store.uri_of, keys), objects, strict=True))
    tolerance = (spec.get("evaluation") or {}).get("fastTolerance", EvaluationSpec().fast_tolerance)
    records = with_fast_vs_baseline(records, float(tolerance))  # older records: from speedupVsBaseline
    tables = tabulate(records, players, metrics)
    try:
        report = attribute_tables(
            tables, estimator=estimator, order=args.order, confidence=confidence, replicates=replicates, seed=args.seed
        )
    except ValueError as exc:
        raise InputError(f"{store.uri}: {exc}") from exc
    return report.model_dump(by_alias=True, mode="json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cudanalyst")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["attribute", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
