"""What `cudanalyst run` and `cudanalyst record` show on the terminal (or write to a log file)."""

from __future__ import annotations

from typing import Any

from cudanalyst.exits import EXIT_FAILURE, EXIT_INTERRUPTED


def ended_early(exc: BaseException, console: Any, logs: object, kept: str) -> int:
    """What `cudanalyst run` and `record` print and exit with when Ctrl-C (or an error) ends a pass early:
    what is kept and how to resume, or the error, and where the logs are."""
    if isinstance(exc, KeyboardInterrupt):
        console.print(f"[yellow]stopped[/]; {kept}: run the same command again to resume (logs: {logs})")
        return EXIT_INTERRUPTED
    console.print(f"[red]error:[/] {exc}\nlogs: {logs}")
    return EXIT_FAILURE
