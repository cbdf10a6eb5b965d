"""The numbers of a report, computed by `cudanalyst.attribution` from parsed outcome records.

Pure functions: nothing here reads the store or draws. The game's section has the same shape as
`cudanalyst attribute --outcomes` prints (`AttributionReport`), so one reader serves both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cudanalyst.api import AttributionRun
from cudanalyst.attribution.report import AttributionReport, Estimator, attribute_tables
from cudanalyst.attribution.values import GAME_ARM, tabulate
from cudanalyst.outcomes import OutcomeRecord

POOLED = "pooled"
LABELS = ("fail", "compile", "pass", "fast")


def interaction_order(players: Sequence[str]) -> int:
    """Pairwise interactions; with one player there are none, and order 1 keeps the maths defined."""
    return 2 if len(players) >= 2 else 1


def estimator_of(run: AttributionRun) -> Estimator:
    # exact -> auto: a run still in progress may lack some coalitions in a generation; auto then
    # falls back to MSR for that game and says so in the game's `estimator` field, instead of failing.
    return "auto" if run.spec.attribution.estimator == "exact" else "msr"


def attribution(records: Sequence[OutcomeRecord], run: AttributionRun) -> AttributionReport:
    """Every game (metric x generation, and pooled) and control arm, with analytic and bootstrap intervals."""
    spec = run.spec
    tables = tabulate(records, spec.players, spec.attribution.metrics)
    result = attribute_tables(
        tables,
        estimator=estimator_of(run),
        order=interaction_order(spec.players),
        confidence=spec.attribution.confidence,
        replicates=spec.attribution.bootstrap,
        seed=spec.sampling.seed,
    )
    return _without_order_one_interactions(result, spec.players)


def _without_order_one_interactions(result: AttributionReport, players: Sequence[str]) -> AttributionReport:
    """With one player there are no pairs: drop the order-1 "interactions" (they repeat the Banzhaf value)."""
    if interaction_order(players) == 1:
        for game in result.games:
            game.interactions = {}
    return result


def task_breakdown(records: Sequence[OutcomeRecord], run: AttributionRun) -> list[dict[str, Any]]:
    """Per task, pooled over its generations: programs, labels and the pooled games (analytic intervals).

    Bootstrap is left out here: per-task games are many and small, and the analytic interval is the
    one the bootstrap agrees with.
    """
    spec = run.spec
    out = []
    for task in sorted({r.task for r in records}):
        subset = [r for r in records if r.task == task]
        result = attribute_tables(
            tabulate(subset, spec.players, spec.attribution.metrics),
            estimator=estimator_of(run), order=interaction_order(spec.players),
            confidence=spec.attribution.confidence, replicates=0, seed=spec.sampling.seed,
        )
        result = _without_order_one_interactions(result, spec.players)
        games = [g.model_dump(by_alias=True, mode="json") for g in result.games if g.pooled]
        out.append({
            "task": task,
            "programs": len({(r.generation, r.program_id) for r in subset if r.arm == GAME_ARM}),
            "generations": sorted({r.generation for r in subset}),
            "labels": label_counts(subset).get(GAME_ARM, dict.fromkeys(LABELS, 0)),
            "games": games,
        })
    return out


def label_counts(records: Sequence[OutcomeRecord]) -> dict[str, dict[str, int]]:
    """Sample labels per arm (counts of unit records, not best-of-k)."""
    by_arm: dict[str, dict[str, int]] = {}
    for r in records:
        arm = by_arm.setdefault(r.arm, dict.fromkeys(LABELS, 0))
        arm[r.label.value] += 1
    return by_arm


def evaluated_up_to(records: Sequence[OutcomeRecord]) -> dict[str, int]:
    """How far the evaluation could see, counted over records (e.g. {"compile": 120} with no GPU)."""
    out: dict[str, int] = {}
    for r in records:
        out[r.evaluated_up_to.value] = out.get(r.evaluated_up_to.value, 0) + 1
    return out


def not_evaluated_metrics(result: AttributionReport) -> list[str]:
    """Metrics whose pooled game could not be evaluated (shown as "not evaluated", never as zeros)."""
    pooled = {g.metric: g.evaluated for g in result.games if g.pooled}
    return [m for m in result.metrics if pooled.get(m) is False]


def coalition_order(key: str, players: Sequence[str]) -> tuple[int, list[int]]:
    """By size, then by the members' positions in spec order."""
    members = [players.index(p) for p in key.split(",")] if key else []
    return (len(members), members)
