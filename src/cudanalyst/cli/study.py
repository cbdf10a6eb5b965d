"""`cudanalyst study STUDY_DIR --runs DIR --out DIR`: the paper's four findings checked across the study's runs.

STUDY_DIR holds the AttributionRun specs (examples/study/); a spec's file stem is its role (main, raw-0.5b, ...)
and its run folder is `<runs>/<metadata.name>/` unless `--run ROLE=URI` names another (a path, file:// or s3://).
Writes OUT/README.md (the four findings' tables, the arms with and without copies, the runs with links to their
reports, the exact specs) and OUT/study.json (the numbers). A run that is not there makes its rows "not run",
saying why. Exit 2 on bad input: a missing study or runs folder, specs whose paired fields differ, a run folder
made by another spec; nothing is written then.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from cudanalyst.cli.common import EXIT_FAILURE, EXIT_INVALID
from cudanalyst.store import ObjectStore, S3Settings, StoreError, open_store


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="check the paper's findings across the study's run folders", description=__doc__)
    p.add_argument("study", help="folder of the study's AttributionRun specs (examples/study/)")
    p.add_argument("--runs", required=True, metavar="DIR", help="folder (or store URI) holding the run folders")
    p.add_argument("--run", action="append", default=[], metavar="ROLE=URI",
                   help="this role's run folder instead of RUNS/<name>/ (repeatable)")
    p.add_argument("--out", required=True, metavar="DIR", help="where README.md and study.json go")
    p.add_argument("--date", default=dt.date.today().isoformat(), help="the date in the README's title")
    p.add_argument("--preface", default=None, metavar="FILE",
                   help="markdown put under the README's title (what was run, where, what is missing), kept verbatim")
    p.add_argument("--s3-endpoint", default="", help="S3 endpoint URL for MinIO/Ceph")
    p.add_argument("--effect", type=float, default=None, metavar="DELTA",
                   help="add the sizing section: the programs and tasks a Banzhaf value of DELTA needs, with the main "
                        "run as the pilot and the page's Holm family as the comparisons (docs/sizing.md)")
    p.add_argument("--power", type=float, default=0.8, help="with --effect: the chance of seeing it (default 0.8)")
    p.set_defaults(handler=run)


def _is_local(uri: str) -> bool:
    return not uri.startswith("s3://")


def run(args: argparse.Namespace) -> int:
    from cudanalyst.analysis.study import StudyError, load_specs, readme, study, to_json
    from cudanalyst.report.compute import attribution
    from cudanalyst.sizing import input_problem

    def bad(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return EXIT_INVALID

    problem = input_problem(args.effect, args.power) if args.effect is not None else None
    if problem:
        return bad(problem)
    settings = S3Settings(endpoint=args.s3_endpoint) if args.s3_endpoint else None
    try:
        specs = load_specs(args.study)
    except StudyError as exc:
        return bad(str(exc))
    runs_root = args.runs.removeprefix("file://")
    if _is_local(args.runs) and not Path(runs_root).is_dir():
        return bad(f"--runs {args.runs}: no such folder")
    given: dict[str, str] = {}
    for item in args.run:
        role, sep, uri = item.partition("=")
        if not sep or not uri:
            return bad(f"--run {item!r}: expected ROLE=URI")
        if role not in specs:
            return bad(f"--run {item!r}: no role {role!r} in {args.study} (roles: {', '.join(specs)})")
        given[role] = uri
    stores: dict[str, ObjectStore | None] = {}
    try:
        for role, (_, spec) in specs.items():
            uri = given.get(role) or f"{args.runs.rstrip('/')}/{spec.metadata.name}/"
            if _is_local(uri) and not Path(uri.removeprefix("file://")).is_dir():
                if role in given:
                    return bad(f"--run {role}={uri}: no such folder")
                stores[role] = None  # not run yet: its rows say so
                continue
            stores[role] = open_store(uri, settings)
        result = study(specs, stores, attribution, args.effect, args.power)
    except StudyError as exc:
        return bad(str(exc))
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    out = Path(args.out)
    try:
        preface = Path(args.preface).read_text() if args.preface else ""
    except OSError as exc:
        return bad(f"--preface {args.preface}: {exc.strerror}")

    def link(uri: str) -> str:  # relative where both are on this machine, so the README travels with the runs
        path = uri.removeprefix("file://")
        return os.path.relpath(path, out.resolve()) if _is_local(uri) and os.path.isabs(path) else uri

    if args.effect is not None and result["sizing"] is None:
        print("warning: --effect: no sizing section: the main run is not there, not finished, or has no pooled game "
              "with every coalition and two programs", file=sys.stderr)
    # study.json names local folders as the README does, relative to OUT: the page and its numbers travel together.
    for r in result["runs"].values():
        r["folder"], r["report"] = (link(r[k]) if r[k] else r[k] for k in ("folder", "report"))
    if result.get("sizing"):
        result["sizing"]["pilot"] = link(result["sizing"]["pilot"])
    text = readme(result, specs, args.date, link, preface)
    data = to_json(result)
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(data)
    (out / "README.md").write_text(text)
    counts: dict[str, int] = {}
    for r in result["rows"] + result["finding2"].get("rows", []):
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    print(f"{out / 'README.md'}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return 0
