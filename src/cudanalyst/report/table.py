"""The result table: per player, its Banzhaf value and interval for each metric (rich).

One table, three sources: an attribution result (`cudanalyst run`'s final print, the report), a
report.json, and an AttributionRun's status.results (`cudanalyst status`). A metric that was not
evaluated reads "not evaluated" in every cell, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from cudanalyst.api.status import Results
from cudanalyst.attribution.result import AttributionResult

NOT_EVALUATED = "not evaluated"
HOLM_MARK = " *"  # excludes 0 after Holm's correction


@dataclass(frozen=True)
class ValueRow:
    """One cell of the table: a player's value for a metric (value None: not evaluated)."""

    player: str
    metric: str
    value: float | None
    low: float | None = None
    high: float | None = None
    holm: bool = False  # the interval excludes 0 after Holm's correction over the report's family


@dataclass(frozen=True)
class ResultTable:
    players: list[str]
    metrics: list[str]
    rows: list[ValueRow]
    confidence: float = 0.95
    scope: str = "pooled"


def _as_dict(attribution: AttributionResult | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(attribution, AttributionResult):
        return attribution.model_dump(by_alias=True, mode="json")
    return attribution


def from_attribution(attribution: AttributionResult | Mapping[str, Any], generation: int | None = None) -> ResultTable:
    """The table of one scope (pooled by default, or one generation) of an attribution result."""
    data = _as_dict(attribution)
    players, metrics = list(data["players"]), list(data["metrics"])
    rows = []
    for game in data["games"]:
        if (generation is None) != bool(game["pooled"]) or (generation is not None and game["generation"] != generation):
            continue
        for player in players:
            est = game["banzhaf"].get(player) or {}
            if not game["evaluated"] or est.get("value") is None:
                rows.append(ValueRow(player, game["metric"], None))
            else:
                rows.append(ValueRow(player, game["metric"], est["value"], est.get("low"), est.get("high"),
                                     bool(est.get("holm"))))
    scope = "pooled" if generation is None else f"generation {generation}"
    return ResultTable(players, metrics, rows, float(data.get("confidence", 0.95)), scope)


def from_report(report: Mapping[str, Any], generation: int | None = None) -> ResultTable:
    """The table from a report.json object."""
    return from_attribution(report["attribution"], generation)


def from_status(results: Results, players: Sequence[str], metrics: Sequence[str]) -> ResultTable:
    """The table from status.results (`Results.model_validate` of what the API server returns); pooled values only."""
    not_evaluated = set(results.not_evaluated)
    rows = []
    seen = set()
    for item in results.banzhaf:
        if item.generation != "pooled":
            continue
        seen.add((item.player, item.metric))
        rows.append(ValueRow(item.player, item.metric, item.value, item.low, item.high))
    # Metrics the status names as not evaluated keep their column, saying so (others show "-").
    for metric in metrics:
        for player in players:
            if (player, metric) not in seen and metric in not_evaluated:
                rows.append(ValueRow(player, metric, None))
    return ResultTable(list(players), list(metrics), rows, results.confidence)


def format_cell(row: ValueRow | None) -> str:
    if row is None:
        return "-"
    if row.value is None:
        return NOT_EVALUATED
    if row.low is None or row.high is None:
        return f"{row.value:+.3f} (no interval)"
    return f"{row.value:+.3f} [{row.low:+.3f}, {row.high:+.3f}]{HOLM_MARK if row.holm else ''}"


def render(table: ResultTable, title: str | None = None) -> Table:
    """A rich Table: one row per player, one column per metric."""
    pct = f"{table.confidence * 100:g}%"
    marked = any(r.holm for r in table.rows)
    out = Table(title=title or f"Banzhaf values ({table.scope}, {pct} intervals)", title_justify="left",
                caption="* excludes 0 after Holm's correction" if marked else None, caption_justify="left")
    out.add_column("player", style="bold")
    cells = {(r.player, r.metric): r for r in table.rows}
    evaluated = {m: any(r.value is not None for r in table.rows if r.metric == m) for m in table.metrics}
    for metric in table.metrics:
        out.add_column(metric if evaluated[metric] else f"{metric} ({NOT_EVALUATED})", justify="right",
                       style=None if evaluated[metric] else "dim")
    for player in table.players:
        out.add_row(player, *(format_cell(cells.get((player, m))) for m in table.metrics))
    return out


def plain_rows(table: ResultTable) -> list[list[str]]:
    """Header and rows as strings (the HTML report prints the same cells)."""
    cells = {(r.player, r.metric): r for r in table.rows}
    rows = [["player", *table.metrics]]
    rows += [[p, *(format_cell(cells.get((p, m))) for m in table.metrics)] for p in table.players]
    return rows
