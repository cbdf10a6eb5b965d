"""`cudanalyst`: the command line. Each subcommand lives in its own module with `register(subparsers)`.

`run` and `record` are the local executor's (they start model servers and the runner's shards on this
machine): the console script hands them in (`cudanalyst.entrypoints`), so the CLI never names the runner.

Exit status (cudanalyst.exits): 0 success, 1 a failure while working, 2 invalid input (a bad spec, file, game or
URI).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence

from cudanalyst import __version__
from cudanalyst.exits import EXIT_INTERRUPTED, guarded

# Registers one subcommand (its parser, with `handler` set as a default) on `cudanalyst`'s subparsers.
Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

# Subcommands in the order `--help` lists them: the core's modules, and the names handed in (run, record).
COMMANDS = ["validate", "crd", "plan", "run", "record", "status", "report", "attribute", "study", "policy", "importer",
            "tasks"]


def build_parser(more: Mapping[str, Register] | None = None) -> argparse.ArgumentParser:
    """The parser of the core's commands and of those in `more` ({name: its register}); a name neither has
    (run and record without the runner) is left out."""
    more = more or {}
    parser = argparse.ArgumentParser(
        prog="cudanalyst",
        description="Attribute which feedback (debugger, analyzer, profiler, ...) drives an LLM agent that "
        "writes CUDA kernels: replay frozen programs under every coalition of feedback components and compute "
        "Banzhaf values and interactions.",
    )
    parser.add_argument("--version", action="version", version=f"cudanalyst {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        if name in more:
            more[name](sub)
            continue
        try:
            module = importlib.import_module(f"cudanalyst.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"cudanalyst.cli.{name}":
                continue  # a command that is not the core's, or not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None, more: Mapping[str, Register] | None = None) -> int:
    args = build_parser(more).parse_args(argv)
    try:
        # A subcommand whose extra is missing (run: runner, report: report, status: operator) names it, exit 2.
        return guarded(f"cudanalyst {args.command}", lambda: args.handler(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
