"""Helpers shared by the subcommands: loading a run with errors that name the field, and exiting."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from cudanalyst.api import AttributionRun, SpecError, load_run

EXIT_FAILURE = 1
EXIT_INVALID = 2


EXIT_INTERRUPTED = 130  # what a shell reports for Ctrl-C


def ended_early(exc: BaseException, console: Any, logs: object, kept: str) -> int:
    """What `cudanalyst run` and `record` print and exit with when Ctrl-C (or an error) ends a pass early:
    what is kept and how to resume, or the error, and where the logs are."""
    if isinstance(exc, KeyboardInterrupt):
        console.print(f"[yellow]stopped[/]; {kept}: run the same command again to resume (logs: {logs})")
        return EXIT_INTERRUPTED
    console.print(f"[red]error:[/] {exc}\nlogs: {logs}")
    return EXIT_FAILURE


def die(message: str, code: int = EXIT_INVALID) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def load_or_die(path: str) -> AttributionRun:
    try:
        return load_run(path)
    except SpecError as exc:
        die(str(exc))
