"""`cudanalyst`: the command line. Each subcommand lives in its own module with `register(subparsers)`.

Exit status: 0 success, 1 a failure while working, 2 invalid input (a bad spec, file, game or URI).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from cudanalyst import __version__

# Subcommand modules, in the order `--help` lists them.
COMMANDS = ["validate", "crd", "plan", "run", "record", "status", "report", "attribute", "study", "importer", "tasks"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cudanalyst",
        description="Attribute which feedback (debugger, analyzer, profiler, ...) drives an LLM agent that "
        "writes CUDA kernels: replay frozen programs under every coalition of feedback components and compute "
        "Banzhaf values and interactions.",
    )
    parser.add_argument("--version", action="version", version=f"cudanalyst {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"cudanalyst.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"cudanalyst.cli.{name}":
                continue  # a command whose module is not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from cudanalyst.entrypoints import guarded

    args = build_parser().parse_args(argv)
    try:
        # A subcommand whose extra is missing (run: runner, report: report, status: operator) names it, exit 2.
        return guarded(f"cudanalyst {args.command}", lambda: args.handler(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
