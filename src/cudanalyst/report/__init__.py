"""A run's report: attribution with intervals, figures, a self-contained HTML page, and the result table.

`build_report(run_store)` reads a run folder and writes report/ (report.json, report.html, *.png);
`render_table(report)` prints the per-player result table that `cudanalyst run` and `cudanalyst status`
show. matplotlib (the `report` extra) is imported only when figures are drawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cudanalyst.report.load import ReportError, RunFolder, load_run_folder

if TYPE_CHECKING:
    from rich.console import Console

    from cudanalyst.store import ObjectStore

__all__ = ["ReportError", "RunFolder", "build_report", "load_run_folder", "render_table"]


def build_report(run_store: ObjectStore, out: ObjectStore | None = None) -> dict[str, Any]:
    """Build and write the report of a run folder; the report.json object plus `htmlUri` (where it went)."""
    from cudanalyst.report.build import build_and_write

    built, html_uri = build_and_write(run_store, out)
    return {**built.report, "htmlUri": html_uri}


def render_table(report: Mapping[str, Any], console: Console | None = None, generation: int | None = None) -> None:
    """Print the result table (pooled, or one generation) of a report.json object."""
    from rich.console import Console

    from cudanalyst.report.table import from_report, render

    (console or Console()).print(render(from_report(report, generation)))
