"""Helpers shared by the subcommands: loading a run with errors that name the field, and exiting."""

from __future__ import annotations

import sys
from typing import NoReturn

from cudanalyst.api import AttributionRun, SpecError, load_run

EXIT_FAILURE = 1
EXIT_INVALID = 2


def die(message: str, code: int = EXIT_INVALID) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def load_or_die(path: str) -> AttributionRun:
    try:
        return load_run(path)
    except SpecError as exc:
        die(str(exc))
