"""Helpers shared by the subcommands: loading a run with errors that name the field, and exiting
(the exit statuses and `die` are cudanalyst.exits', which the runner shares)."""

from __future__ import annotations

from cudanalyst.api import AttributionRun, SpecError, load_run
from cudanalyst.exits import EXIT_FAILURE, EXIT_INVALID, die

__all__ = ["EXIT_FAILURE", "EXIT_INVALID", "die", "load_or_die"]


def load_or_die(path: str) -> AttributionRun:
    try:
        return load_run(path)
    except SpecError as exc:
        die(str(exc))
