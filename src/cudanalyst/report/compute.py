"""The numbers of a report, computed by `cudanalyst.attribution` from parsed outcome records.

Pure functions: nothing here reads the store or draws. The game's section has the same shape as
`cudanalyst attribute --outcomes` prints (`AttributionResult`), so one reader serves both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cudanalyst.api import AttributionRun
from cudanalyst.attribution.result import (
    AttributionResult,
    Estimator,
    GameResult,
    attribute_tables,
    mark_holm,
)
from cudanalyst.attribution.values import GAME_ARM, tabulate
from cudanalyst.outcomes import LABELS, METRIC_THRESHOLD, UnitOutcome

POOLED = "pooled"


def interaction_order(players: Sequence[str]) -> int:
    """Pairwise interactions; with one player there are none, and order 1 keeps the maths defined."""
    return 2 if len(players) >= 2 else 1


def estimator_of(run: AttributionRun) -> Estimator:
    """The spec's estimator, as it is: exact never switches by itself (a game missing a coalition is not
    evaluated and names it); auto may use MSR for such a game, and says so."""
    return run.spec.attribution.estimator


def attribution(records: Sequence[UnitOutcome], run: AttributionRun) -> AttributionResult:
    """Every game (metric x generation, and pooled) and control arm, with t-intervals over units."""
    spec = run.spec
    tables = tabulate(records, spec.players, spec.attribution.metrics, unchanged=spec.attribution.unchanged)
    result = attribute_tables(
        tables,
        estimator=estimator_of(run),
        order=interaction_order(spec.players),
        confidence=spec.attribution.confidence,
        replicates=spec.attribution.bootstrap,
        seed=spec.sampling.seed,
    )
    return _without_order_one_interactions(result, spec.players)


def _without_order_one_interactions(result: AttributionResult, players: Sequence[str]) -> AttributionResult:
    """With one player there are no pairs: drop the order-1 "interactions" (they repeat the Banzhaf value)."""
    if interaction_order(players) == 1:
        for game in result.games:
            game.interactions = {}
    return result


def task_breakdown(records: Sequence[UnitOutcome], run: AttributionRun) -> list[dict[str, Any]]:
    """Per task, pooled over its generations: programs, labels and the pooled games.

    Within one task the units are its frozen programs (the estimand: the mean over this task's programs).
    Programs of one lineage are related across generations, so these intervals describe the task and are
    exploratory; their Holm marks are over the per-task family. No bootstrap: the games are many and small.
    """
    spec = run.spec
    out = []
    family: list[GameResult] = []
    for task in sorted({r.task for r in records}):
        subset = [r for r in records if r.task == task]
        result = attribute_tables(
            tabulate(subset, spec.players, spec.attribution.metrics, unchanged=spec.attribution.unchanged,
                     pooled_unit="program"),
            estimator=estimator_of(run), order=interaction_order(spec.players),
            confidence=spec.attribution.confidence, replicates=0, seed=spec.sampling.seed,
        )
        result = _without_order_one_interactions(result, spec.players)
        pooled = [g for g in result.games if g.pooled]
        family += pooled
        out.append({
            "task": task,
            "programs": len({(r.generation, r.program_id) for r in subset if r.arm == GAME_ARM}),
            "generations": sorted({r.generation for r in subset}),
            "labels": label_counts(subset).get(GAME_ARM, dict.fromkeys(LABELS, 0)),
            "games": pooled,
        })
    mark_holm(family, spec.attribution.confidence)
    for item in out:
        item["games"] = [g.model_dump(by_alias=True, mode="json") for g in item["games"]]
    return out


def label_counts(records: Sequence[UnitOutcome]) -> dict[str, dict[str, int]]:
    """Sample labels per arm (counts of unit records, not best-of-k)."""
    by_arm: dict[str, dict[str, int]] = {}
    for r in records:
        arm = by_arm.setdefault(r.arm, dict.fromkeys(LABELS, 0))
        arm[r.label.value] += 1
    return by_arm


def metric_counts(records: Sequence[UnitOutcome], metrics: Sequence[str]) -> dict[str, dict[str, dict[str, int]]]:
    """Per arm and metric, samples reaching it and samples whose outcome for it is established (unit records,
    not best-of-k): the two fast metrics side by side, each read as the attribution reads it."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in records:
        arm = out.setdefault(r.arm, {m: {"reached": 0, "known": 0} for m in metrics})
        for m in metrics:
            label, up_to = r.metric_label(m)
            reached = label.rank >= METRIC_THRESHOLD[m].rank
            arm[m]["reached"] += reached
            arm[m]["known"] += reached or up_to.rank > label.rank  # as tabulate: short of it, and seen to be
    return out


def evaluated_up_to(records: Sequence[UnitOutcome]) -> dict[str, int]:
    """How far the evaluation could see, counted over records (e.g. {"compile": 120} with no GPU)."""
    out: dict[str, int] = {}
    for r in records:
        out[r.evaluated_up_to.value] = out.get(r.evaluated_up_to.value, 0) + 1
    return out


def not_evaluated_metrics(result: AttributionResult) -> list[str]:
    """Metrics whose pooled game has no program with an established outcome (shown as "not evaluated")."""
    pooled = {g.metric: g for g in result.games if g.pooled}
    return [m for m in result.metrics if m in pooled and pooled[m].programs == 0]


def exclusions(result: AttributionResult) -> dict[str, dict[str, Any]]:
    """Per metric (pooled game): programs left out of its games, of how many, and the reasons."""
    out = {}
    for g in result.games:
        if g.pooled and g.excluded_programs:
            out[g.metric] = {"excluded": g.excluded_programs, "of": g.programs + g.excluded_programs,
                             "reasons": [e.model_dump(by_alias=True) for e in g.exclusions]}
    return out


def estimator_notes(result: AttributionResult) -> list[str]:
    """Games that used another estimator than the one asked for, or whose exact estimate failed."""
    notes = []
    for g in result.games:
        scope = "pooled" if g.pooled else f"generation {g.generation}"
        if g.estimator_note:
            notes.append(f"{g.metric}, {scope}: {g.estimator_note}")
        elif not g.evaluated and "exact estimator" in g.reason:
            notes.append(f"{g.metric}, {scope}: {g.reason}")
    return notes


def references(records: Sequence[UnitOutcome]) -> dict[str, int]:
    """How many units' `fast` was measured against the frozen program, the task's baseline, or nothing."""
    counts = {"frozen": 0, "baseline": 0, "notTimed": 0}
    for r in records:
        counts[r.reference or "notTimed"] += 1
    return counts


def copy_rates(records: Sequence[UnitOutcome], players: Sequence[str]) -> dict[str, Any]:
    """Candidates that are the frozen program unchanged, per arm and per coalition of the game."""
    def rate(rs: list[UnitOutcome]) -> dict[str, Any]:
        copies = sum(r.unchanged for r in rs)
        return {"unchanged": copies, "units": len(rs), "rate": copies / len(rs) if rs else None}

    by_arm: dict[str, list[UnitOutcome]] = {}
    by_coalition: dict[str, list[UnitOutcome]] = {}
    for r in records:
        by_arm.setdefault(r.arm, []).append(r)
        if r.arm == GAME_ARM:
            key = ",".join(p for p in players if p in r.coalition)
            by_coalition.setdefault(key, []).append(r)
    return {
        "byArm": {arm: rate(rs) for arm, rs in sorted(by_arm.items(), key=lambda kv: (kv[0] != GAME_ARM, kv[0]))},
        "byCoalition": {k: rate(by_coalition[k]) for k in sorted(by_coalition, key=lambda k: coalition_order(k, players))},
    }


def _reasons_text(reasons: Sequence[dict[str, Any]], limit: int = 2) -> str:
    shown = "; ".join(f"{r['programs']}: {r['reason']}" for r in reasons[:limit])
    return shown + (f"; and {len(reasons) - limit} more reason(s)" if len(reasons) > limit else "")


def summary_lines(report: dict[str, Any]) -> list[str]:
    """What the console says under the result table: metrics not (fully) evaluated, each with the real
    cause taken from the records, estimator switches, and the references `fast` was measured against."""
    lines = []
    excluded = report.get("exclusions") or {}
    for metric in report.get("metrics", []):
        item = excluded.get(metric)
        if not item:
            continue
        why = _reasons_text(item["reasons"])
        if metric in report.get("notEvaluated", []):
            lines.append(f"not evaluated: {metric}, for all {item['of']} programs ({why})")
        else:
            kept = item["of"] - item["excluded"]
            lines.append(f"{metric}: {item['excluded']} of {item['of']} programs not evaluated, left out of its "
                         f"games ({why}); attributed over the other {kept}")
    lines += [f"estimator: {note}" for note in report.get("estimatorNotes", [])]
    counts = ((report.get("units") or {}).get("reached") or {}).get(GAME_ARM)
    if counts:
        lines.append(reached_line(counts, sum(((report.get("units") or {}).get("labels") or {})
                                              .get(GAME_ARM, {}).values())))
    refs = (report.get("units") or {}).get("references") or {}
    if refs.get("baseline"):
        lines.append(f"fast measured against the frozen program for {refs.get('frozen', 0)} units, against the "
                     f"task's baseline for {refs['baseline']} (their frozen program could not be timed)")
    lines += tool_report_lines(report)
    return lines


def reached_line(counts: dict[str, dict[str, int]], units: int) -> str:
    """'samples reaching each metric: compiled 40, pass 30, fastVsBaseline 9 (of 28 established), ...'."""
    parts = [f"{m} {c['reached']}" + (f" (of {c['known']} established)" if c["known"] < units else "")
             for m, c in counts.items()]
    return f"samples of the game reaching each metric (of {units}): " + ", ".join(parts)


def coalition_order(key: str, players: Sequence[str]) -> tuple[int, list[int]]:
    """By size, then by the members' positions in spec order."""
    members = [players.index(p) for p in key.split(",")] if key else []
    return (len(members), members)


def tool_report_lines(report: dict[str, Any]) -> list[str]:
    """Per GPU tool, its reports on the frozen programs that compiled: ok and failed by cause (issue 28)."""
    out = []
    for tool, c in (report.get("toolReports") or {}).items():
        if not c.get("ok") and not c.get("failed"):
            continue
        causes = ", ".join(f"{k} {v}" for k, v in sorted(c["failed"].items(), key=lambda kv: -kv[1]))
        out.append(f"{tool} reports on {c['compiled']} compiled frozen programs: ok {c['ok']}, failed "
                   f"{sum(c['failed'].values())}{f' ({causes})' if causes else ''}, not run {c['notRun']}"
                   + ("; mostly failed: the agent was mostly told the tool could not run" if c.get("mostlyFailed")
                      else ""))
    return out

