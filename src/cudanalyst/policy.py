"""A FeedbackPolicy learned from finished AttributionRuns (`cudanalyst policy RUN...`).

Per program state (cudanalyst.gating.program_state of each frozen program's recorded metrics), the run's outcomes
of that state's programs are attributed again (cudanalyst.attribution, read-only) on the outcome such a program
needs next (broken -> compiled, unverified and wrong -> pass, correct and fast -> faster than itself). A component
whose Banzhaf interval lies below 0 is withheld, above 0 kept; where no interval excludes 0 the default stays
(shown, raw) and the reason says so. Holm over the policy's whole family is recorded beside each value.

The form (raw or summary) and the model split come from pairs of runs that differ only there (feedback.mode; the
planner model with the same coder), compared paired by frozen program with the study's contrast
(cudanalyst.analysis.study.combine) on the all-feedback arm.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cudanalyst.api import AttributionRun
from cudanalyst.api.policy import (
    STATES,
    ComponentRule,
    Evidence,
    FeedbackPolicy,
    ModelChoice,
    PolicySpec,
    StateRule,
)
from cudanalyst.gating import program_state
from cudanalyst.outcomes import UnitOutcome

# What a program in each state needs next; the first metric the run measured is used.
STATE_METRICS: dict[str, tuple[str, ...]] = {
    "broken": ("compiled",),
    "unverified": ("pass",),
    "wrong": ("pass",),
    "correct": ("fastVsFrozen", "fast", "fastVsBaseline"),
    "fast": ("fastVsFrozen", "fast", "fastVsBaseline"),
}
POLICY_METRIC = "pass"  # the model split is judged on correct kernels, over every program
BOOTSTRAP = 100  # only the t-intervals are used; the bootstrap's percentile interval is not read


class PolicyInputError(ValueError):
    """A run that cannot be learned from: the message names the path and what is wrong."""


@dataclass
class FinishedRun:
    uri: str
    run: AttributionRun
    records: list[UnitOutcome]
    states: dict[str, str] = field(default_factory=dict)  # programId -> state
    given: str = ""  # the path or URI as the user gave it (the policy's sources name it so)

    @property
    def name(self) -> str:
        return self.run.metadata.name


def _folder_of(path: str) -> str:
    """A run folder from what was given: the folder itself, or its report/report.json."""
    if "://" in path and not path.startswith("file://"):
        return path
    local = Path(path.removeprefix("file://"))
    if local.is_file():
        if local.name == "report.json" and local.parent.name == "report":
            return str(local.parent.parent)
        raise PolicyInputError(f"{path}: not a run folder or its report/report.json (give the folder "
                               "<output.uri>/<name>/ of a finished AttributionRun)")
    if not local.exists():
        raise PolicyInputError(f"{path}: no such run folder")
    return str(local)


def load_finished(path: str) -> FinishedRun:
    """The run's spec, outcomes and frozen programs' states; PolicyInputError if it is not a finished run."""
    from cudanalyst.outcomes import with_fast_vs_baseline
    from cudanalyst.planned_run import PlanError, plan_run
    from cudanalyst.report.load import ReportError, load_outcomes, load_spec
    from cudanalyst.runfolder import PLAN, REPORT_JSON
    from cudanalyst.store import StoreError, open_store

    folder = _folder_of(path)
    try:
        store = open_store(folder)
        run = load_spec(store)
        records = with_fast_vs_baseline(load_outcomes(store), run.spec.evaluation.fast_tolerance)
        planned = store.get_json(PLAN).get("units") if store.exists(PLAN) else None
        reported = store.get_json(REPORT_JSON).get("units", {}).get("outcomes") if store.exists(REPORT_JSON) else None
    except (ReportError, StoreError, ValueError, AttributeError) as exc:
        raise PolicyInputError(f"{path}: {exc}") from None
    if isinstance(planned, int):
        if len(records) < planned:
            raise PolicyInputError(f"{store.uri_of(PLAN)}: unfinished run: {len(records)} of {planned} units have "
                                   "an outcome (resume it with the same command, then learn from it)")
    elif reported != len(records):
        raise PolicyInputError(f"{store.uri}: cannot tell the run finished: it has no {PLAN} and its {REPORT_JSON} "
                               f"{'is missing' if reported is None else f'counts {reported} outcomes, not {len(records)}'}"
                               " (build the report of the finished run: cudanalyst report)")
    try:
        programs = plan_run(run).programs
    except (PlanError, ValueError, OSError, StoreError) as exc:
        raise PolicyInputError(f"{store.uri_of('spec.json')}: spec.trajectory: its frozen programs cannot be read "
                               f"({exc})") from None
    states = {p.program_id: program_state(p.metrics)[0] for p in programs}
    return FinishedRun(store.uri, run, records, states, given=folder)


def hold_out(runs: Sequence[FinishedRun], tasks: Sequence[str]) -> list[FinishedRun]:
    """The runs without these tasks' outcomes, so that a policy learned from them has never seen those tasks.

    PolicyInputError when a task is in none of the runs (a typo would otherwise hold out nothing, silently), or
    when nothing is left to learn from."""
    tasks = list(dict.fromkeys(tasks))
    if not tasks:
        return list(runs)
    seen = {r.task for fr in runs for r in fr.records}
    unknown = [t for t in tasks if t not in seen]
    if unknown:
        raise PolicyInputError(f"--hold-out: {', '.join(unknown)}: no outcome of the runs has this task (their "
                               f"tasks: {', '.join(sorted(seen))})")
    left = [replace(fr, records=[r for r in fr.records if r.task not in tasks]) for fr in runs]
    if not any(fr.records for fr in left):
        raise PolicyInputError(f"--hold-out: {', '.join(tasks)} are all the runs' tasks: nothing left to learn from")
    return left


# ---- per state: Banzhaf values over the state's programs ----------------------------------------------------


def _metric_for(state: str, run: AttributionRun) -> str | None:
    measured = set(run.spec.attribution.metrics)
    return next((m for m in STATE_METRICS[state] if m in measured), None)


def _state_game(fr: FinishedRun, state: str, metric: str, level: str) -> Any:
    from cudanalyst.attribution.result import attribute_tables
    from cudanalyst.attribution.values import tabulate
    from cudanalyst.report.compute import estimator_of, interaction_order

    recs = [r for r in fr.records if fr.states.get(r.program_id) == state]
    if not recs:
        return None
    spec = fr.run.spec
    tables = tabulate(recs, spec.players, [metric], unchanged=spec.attribution.unchanged, pooled_unit=level)
    result = attribute_tables(tables, estimator=estimator_of(fr.run), order=interaction_order(spec.players),
                              confidence=spec.attribution.confidence, replicates=BOOTSTRAP, seed=spec.sampling.seed)
    return next((g for g in result.games if g.pooled), None)


def _evidence(run: str, metric: str, index: str, est: Any, game: Any, confidence: float) -> Evidence:
    return Evidence(run=run, metric=metric, index=index, value=est.value, low=est.low, high=est.high,
                    confidence=confidence, level=game.unit, units=game.units, p_value=est.p_value, holm=est.holm)


def _cite(evidence: Sequence[Evidence], corrected: bool) -> str:
    """The evidence that decided, briefly (the full list is the rule's `evidence`)."""
    moved = [e for e in evidence if e.sign(corrected)]
    shown = moved or evidence
    return "; ".join(f"{e.run} {e.value:+.3f} [{e.low:+.3f}, {e.high:+.3f}]" for e in shown[:3]
                     if e.value is not None and e.low is not None and e.high is not None) + (
        f"; and {len(shown) - 3} more" if len(shown) > 3 else "")


def _component_rule(player: str, metric: str, state: str, evidence: list[Evidence], corrected: bool) -> ComponentRule:
    signs = {e.sign(corrected) for e in evidence}
    which = "after Holm" if corrected else "uncorrected"
    if not evidence:
        return ComponentRule(component=player, reason=f"default (shown, raw): no frozen program of the runs was "
                             f"{state}, so nothing was measured")
    if 1 in signs and -1 in signs:
        return ComponentRule(component=player, evidence=evidence, reason=f"default (shown, raw): the runs disagree "
                             f"on {metric} ({_cite(evidence, corrected)})")
    if -1 in signs:
        return ComponentRule(component=player, show=False, evidence=evidence, reason=f"withheld: it lowers {metric} "
                             f"for {state} programs, an interval below 0 {which} ({_cite(evidence, corrected)})")
    if 1 in signs:
        return ComponentRule(component=player, evidence=evidence, reason=f"shown: it raises {metric} for {state} "
                             f"programs, an interval above 0 {which} ({_cite(evidence, corrected)})")
    loose = sum(1 for e in evidence if e.sign(False))
    extra = (f"; {loose} uncorrected interval(s) exclude 0 but not after Holm" if corrected and loose else "")
    return ComponentRule(component=player, evidence=evidence, reason=f"default (shown, raw): no interval excludes 0 "
                         f"{which} on {metric} in {len(evidence)} run(s){extra}: no effect to act on")


# ---- between runs: form and model split ---------------------------------------------------------------------


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differences(a.get(k), b.get(k), f"{path}.{k}".lstrip("."))]
    return [] if a == b else [path]


def _spec_view(run: AttributionRun) -> dict[str, Any]:
    """What decides a unit's outcome, with the models resolved per role and the controls left out (a control arm
    does not change the game's arm)."""
    from cudanalyst.runfolder import outcome_spec

    view = outcome_spec(run.spec)
    view.pop("controls", None)
    view.pop("attribution", None)
    view.pop("output", None)
    models = view.get("models", {})
    view["models"] = {"planner": models.get("planner"), "coder": models.get("coder") or models.get("planner")}
    return view


def model_name(run: AttributionRun, role: str) -> str:
    spec = run.spec.models.planner if role == "planner" else run.spec.models.resolved_coder()
    return Path(str(spec.model).rstrip("/")).name or str(spec.model)


def _compare(a: FinishedRun, b: FinishedRun, metric: str, state: str | None, confidence: float) -> Evidence | None:
    """All-feedback rate of a minus b, paired by frozen program (of `state`, or all)."""
    from cudanalyst.analysis.study import Arm, StudyRun, arm_rates, combine

    parts = []
    for fr, coef in ((a, 1.0), (b, -1.0)):
        recs = [r for r in fr.records if state is None or fr.states.get(r.program_id) == state]
        if not recs or metric not in fr.run.spec.attribution.metrics:
            return None
        sr = StudyRun(fr.name, "", fr.run, fr.uri, records=recs, run=fr.run, metrics=(metric,))
        ar = arm_rates(sr, Arm(fr.name), metric, fr.run.spec.attribution.unchanged)
        if isinstance(ar, str):
            return None
        parts.append((ar, coef))
    c = combine(parts, confidence)
    if c.programs == 0:
        return None
    return Evidence(run=f"{a.name} - {b.name}", metric=metric, index="all feedback", value=c.value, low=c.low,
                    high=c.high, confidence=confidence, level="program", units=c.programs, p_value=c.p_value)


def form_pairs(runs: Sequence[FinishedRun]) -> list[tuple[FinishedRun, FinishedRun]]:
    """(summary run, raw run) pairs that differ only in feedback.mode."""
    out = []
    for a, b in itertools.permutations(runs, 2):
        if a.run.spec.feedback.mode == "summary" and b.run.spec.feedback.mode == "raw":
            diffs = _differences(_spec_view(a.run), _spec_view(b.run))
            if diffs and all(d.startswith("feedback.") for d in diffs):
                out.append((a, b))
    return out


def model_pairs(runs: Sequence[FinishedRun]) -> list[tuple[FinishedRun, FinishedRun]]:
    """(split run, self run) pairs: the same coder, another planner in the first, everything else equal."""
    out = []
    for a, b in itertools.permutations(runs, 2):
        va, vb = _spec_view(a.run), _spec_view(b.run)
        diffs = _differences(va, vb)
        split = va["models"]["planner"] != va["models"]["coder"] and vb["models"]["planner"] == vb["models"]["coder"]
        if split and diffs and all(d.startswith("models.planner") for d in diffs):
            out.append((a, b))
    return out


def _mark_holm(evidence: Sequence[Evidence], confidence: float) -> int:
    from cudanalyst.attribution.intervals import holm

    family = [e for e in evidence if e.p_value is not None]
    for e, r in zip(family, holm([e.p_value for e in family], 1 - confidence), strict=True):
        e.holm = bool(r)
    return len(family)


def _form(metric: str, ev: list[Evidence], corrected: bool) -> tuple[str, str]:
    if not ev:
        return "raw", "raw (default): no pair of runs that differ only in feedback.mode covers this state"
    signs = {e.sign(corrected) for e in ev}
    if signs == {1}:
        return "summary", f"summary: summarised feedback raised {metric} over raw ({_cite(ev, corrected)})"
    if -1 in signs and 1 not in signs:
        return "raw", f"raw: summarised feedback lowered {metric} ({_cite(ev, corrected)})"
    return "raw", f"raw (default): no interval of summary - raw excludes 0 on {metric} ({_cite(ev, corrected)})"


def _models(pairs: list[tuple[FinishedRun, Evidence]], corrected: bool) -> ModelChoice:
    if not pairs:
        return ModelChoice(reason="default: the coder plans in its own answer; no pair of runs that differ only in "
                           "the planner model was given")
    ev = [e for _, e in pairs]
    helped = sorted(((e.low or 0.0), i) for i, (_, e) in enumerate(pairs) if e.sign(corrected) == 1)
    if helped:
        best = pairs[helped[-1][1]][0]
        return ModelChoice(planner=model_name(best.run, "planner"), coder=model_name(best.run, "coder"),
                           evidence=ev, reason=f"split: a separate planner raised {POLICY_METRIC}, an interval above 0 "
                           f"({_cite(ev, corrected)})")
    return ModelChoice(evidence=ev, reason="default: the coder plans in its own answer; no interval of split - self "
                       f"excludes 0 above it on {POLICY_METRIC} ({_cite(ev, corrected)})")


# ---- the policy ---------------------------------------------------------------------------------------------


def learn(runs: Sequence[FinishedRun], name: str = "learned", level: str = "program",
          correction: str = "holm", held_out: Sequence[str] = ()) -> FeedbackPolicy:
    """The policy of these runs (see the module docstring); `correction` holm or none; `held_out` tasks are left
    out of every run first (hold_out)."""
    from cudanalyst.attribution.result import mark_holm

    if not runs:
        raise PolicyInputError("no runs given")
    runs = hold_out(runs, held_out)
    corrected = correction == "holm"
    players = list(dict.fromkeys(p for fr in runs for p in fr.run.spec.players))
    confidence = min(fr.run.spec.attribution.confidence for fr in runs)
    games: dict[tuple[str, str], tuple[str, Any]] = {}
    for fr in runs:
        for state in STATES:
            metric = _metric_for(state, fr.run)
            game = _state_game(fr, state, metric, level) if metric else None
            if game is not None and game.evaluated:
                games[(fr.name, state)] = (metric, game)
    family = mark_holm([g for _, g in games.values()], confidence)  # over every value the policy looked at
    metrics = {s: next((m for fr in runs if (m := _metric_for(s, fr.run))), "") for s in STATES}
    fpairs, mpairs = form_pairs(runs), model_pairs(runs)
    form_ev = {s: [e for a, b in fpairs if (e := _compare(a, b, metrics[s], s, confidence))] for s in STATES}
    model_ev = [(a, e) for a, b in mpairs if (e := _compare(a, b, POLICY_METRIC, None, confidence))]
    comparisons = _mark_holm([*(e for v in form_ev.values() for e in v), *(e for _, e in model_ev)], confidence)
    states: dict[str, StateRule] = {}
    for state in STATES:
        metric = metrics[state]
        components = []
        for player in players:
            ev = [_evidence(run, m, player, g.banzhaf[player], g, confidence)
                  for (run, s), (m, g) in games.items() if s == state and player in g.banzhaf]
            components.append(_component_rule(player, metric, state, ev, corrected))
        form, why = _form(metric, form_ev[state], corrected)
        for c in components:
            if c.show and form_ev[state]:
                c.form = form  # type: ignore[assignment]
                c.reason += f"; form {why}"
                c.evidence = [*c.evidence, *form_ev[state]]
        states[state] = StateRule(metric=metric, components=components)
    notes = [
        "Rules: a component is withheld in a state only where an interval of its Banzhaf value there lies below 0, "
        "and kept where one lies above; otherwise the default (shown, raw) stays. Form and model split come from "
        "pairs of runs that differ only there, compared paired by frozen program on the all-feedback arm.",
        f"Level: {level} (the unit of replication of every Banzhaf interval here). Correction: {correction}; Holm "
        f"families: {family} Banzhaf values, {comparisons} run-to-run comparisons (each value's `holm` says whether "
        "it survives).",
        f"Form pairs: {', '.join(f'{a.name} vs {b.name}' for a, b in fpairs) or 'none'}; model pairs: "
        f"{', '.join(f'{a.name} vs {b.name}' for a, b in mpairs) or 'none'}.",
    ]
    spec = PolicySpec(players=players, states=states, models=_models(model_ev, corrected),  # type: ignore[arg-type]
                      level=level, correction=correction, sources=[fr.given or fr.uri for fr in runs],
                      tasks=sorted({r.task for fr in runs for r in fr.records}),
                      held_out=sorted(set(held_out)), notes=notes)
    return FeedbackPolicy.model_validate({"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "FeedbackPolicy",
                                          "metadata": {"name": name}, "spec": spec.model_dump(by_alias=True)})


class _Flow(dict):  # type: ignore[type-arg]
    """A mapping written on one line: each piece of evidence, so a rule's reasons stay readable above it."""


def _flow_evidence(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: ([_Flow({a: round(b, 4) if isinstance(b, float) else b for a, b in e.items()}) for e in v]
                    if k == "evidence" else _flow_evidence(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_flow_evidence(x) for x in node]
    return node


def to_yaml(policy: FeedbackPolicy) -> str:
    """The document for a person: block style, each piece of evidence on one line (numbers to 4 places)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(_Flow, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data.items(),
                                                                       flow_style=True))
    return yaml.dump(_flow_evidence(policy.to_dict()), Dumper=Dumper, sort_keys=False, width=120)
