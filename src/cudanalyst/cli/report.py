"""`cudanalyst report URI`: build a run's report (report.json, a self-contained report.html, PNGs).

URI is the run's own folder, `<spec.output.uri>/<name>/` (s3://, file:// or a path). The report is
written to URI/report/ unless --out names another folder; the HTML's location is printed last.
"""

from __future__ import annotations

import argparse
import sys

from cudanalyst.cli.common import EXIT_FAILURE, EXIT_INVALID
from cudanalyst.store import InvalidKey, S3Settings, StoreError, open_store


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="build the HTML/JSON report of a run folder", description=__doc__)
    p.add_argument("uri", help="the run folder: <output.uri>/<name>/ (s3://bucket/runs/NAME/, file:// or a path)")
    p.add_argument("--out", metavar="DIR", help="write the report here instead of URI/report/ (a path or store URI)")
    p.add_argument("--s3-endpoint", default="", help="S3 endpoint URL for MinIO/Ceph (default: AWS / boto3 chain)")
    p.add_argument("--s3-region", default="", help="S3 region (default: boto3's chain)")
    p.add_argument("--quiet", action="store_true", help="print only the report's location")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cudanalyst.report import ReportError, build_report, render_table

    settings = S3Settings(endpoint=args.s3_endpoint, region=args.s3_region)
    try:
        store = open_store(args.uri, settings)
        out = open_store(args.out, settings) if args.out else None
        report = build_report(store, out)
    except (ReportError, InvalidKey) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        print("error: the report's figures need matplotlib: pip install 'cudanalyst[report]'", file=sys.stderr)
        return EXIT_FAILURE
    if not args.quiet:
        console = Console()
        render_table(report, console)
        from cudanalyst.report.compute import summary_lines

        for line in summary_lines(report):  # each names the cause the records give
            console.print(line, highlight=False)
    print(report["htmlUri"])
    return 0
