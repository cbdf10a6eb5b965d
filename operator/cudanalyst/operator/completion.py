"""On completion: outcome records -> attribution (the foundation's maths) -> full report in the store,
and a small summary for the run's status (etcd objects stay far below their 1 MB limit).

report.json has exactly the shape `cudanalyst report` writes (it is the same function), so the HTML
and figures can be added later from a workstation without recomputing anything differently."""

from __future__ import annotations

from typing import Any

from cudanalyst.api import AttributionRun
from cudanalyst.api.status import (
    InteractionValue,
    MetricCount,
    MetricExclusion,
    PlayerValue,
    References,
    Results,
)
from cudanalyst.attribution.result import AttributionResult, Estimate
from cudanalyst.attribution.values import GAME_ARM
from cudanalyst.report import compute
from cudanalyst.report.build import report_object
from cudanalyst.report.load import load_run_folder
from cudanalyst.runfolder import REPORT_JSON
from cudanalyst.store import ObjectStore

MAX_PLAYER_VALUES = 512  # the CRD's bound on status.results.banzhaf
MAX_INTERACTIONS = 32


def _interval(est: Estimate) -> tuple[float, float | None, float | None] | None:
    """(value, low, high); low and high stay None where the design gives no interval: a zero-width interval
    in the status would claim a certainty the run does not have."""
    if est.value is None:
        return None
    return est.value, est.low, est.high


def status_results(report: AttributionResult, metrics: list[str], full: dict[str, Any] | None = None) -> Results:
    """status.results: Banzhaf values with intervals (pooled first), the strongest pairwise interactions by
    |value|, the top player on the first evaluated metric, the metrics that could not be evaluated, the
    programs left out of each metric's games and why, estimator switches, the game's samples reaching each metric
    and the references `fast` was measured against (`full`: the report.json object, for the last three)."""
    games = sorted(report.games, key=lambda g: (not g.pooled, metrics.index(g.metric) if g.metric in metrics else 99,
                                                g.generation if g.generation is not None else -1))
    values: list[PlayerValue] = []
    interactions: list[InteractionValue] = []
    for game in games:
        if not game.evaluated:
            continue
        generation = "pooled" if game.pooled else str(game.generation)
        for player, est in game.banzhaf.items():
            triple = _interval(est)
            if triple is not None:
                values.append(PlayerValue(player=player, metric=game.metric, generation=generation,
                                          value=triple[0], low=triple[1], high=triple[2]))
        if game.pooled:
            for pair, est in game.interactions.items():
                triple = _interval(est)
                if triple is not None:
                    interactions.append(InteractionValue(players=pair, metric=game.metric, generation=generation,
                                                         value=triple[0], low=triple[1], high=triple[2]))
    evaluated = {g.metric for g in report.games if g.pooled and g.programs > 0}
    top_player, top_metric = "", ""
    for metric in metrics:
        pooled = [v for v in values if v.metric == metric and v.generation == "pooled"]
        if pooled:
            top_player, top_metric = max(pooled, key=lambda v: v.value).player, metric
            break
    interactions.sort(key=lambda v: -abs(v.value))
    refs = ((full or {}).get("units") or {}).get("references")
    counts = (((full or {}).get("units") or {}).get("reached") or {}).get(GAME_ARM) or {}
    units = sum((((full or {}).get("units") or {}).get("labels") or {}).get(GAME_ARM, {}).values())
    return Results(
        top_player=top_player,
        metric=top_metric,
        confidence=report.confidence,
        banzhaf=values[:MAX_PLAYER_VALUES],
        top_interactions=interactions[:MAX_INTERACTIONS],
        not_evaluated=[m for m in metrics if m not in evaluated],
        exclusions=[
            MetricExclusion(metric=g.metric, excluded=g.excluded_programs, of=g.programs + g.excluded_programs,
                            reason="; ".join(f"{e.programs}: {e.reason}" for e in g.exclusions)[:1024])
            for g in games if g.pooled and g.excluded_programs
        ][:4],
        reached=[MetricCount(metric=m, reached=counts[m]["reached"], known=counts[m]["known"], units=units)
                 for m in metrics if m in counts],
        estimator_notes=[n[:1024] for n in (full or {}).get("estimatorNotes", [])][:16],
        references=References(frozen=refs.get("frozen", 0), baseline=refs.get("baseline", 0),
                              not_timed=refs.get("notTimed", 0)) if refs else None,
    )


def aggregate(run: AttributionRun, store: ObjectStore) -> tuple[Results, str]:
    """Read every outcome, compute the report, write it (overwriting is harmless: same inputs, same
    report), and return (status.results, report URI). Raises OutcomeError/ValueError for unusable outcomes."""
    folder = load_run_folder(store)
    result = compute.attribution(folder.outcomes, folder.run)
    full = report_object(folder, result)
    store.put_json(REPORT_JSON, full)
    return status_results(result, list(run.spec.attribution.metrics), full), store.uri_of(REPORT_JSON)
