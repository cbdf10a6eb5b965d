"""The study of issue 15: the paper's four findings checked across several AttributionRuns (examples/study/).

A study is a folder of AttributionRun specs; a spec's file stem is its *role* (main, implicit-1.5b, ...). Each
role's run folder is `<runs>/<metadata.name>/` (or given). Runs are read with the report's own readers
(`report.load`: spec.json, outcomes/) and tabulated by `attribution.values.tabulate` with the `unchanged` policy;
a game's programs and their per-coalition rates come from `attribution.result.game_units` (the same inclusion rules
as the report's games). Nothing here starts anything or draws: pure functions of the runs' records.

An ARM is (role, arm, coalitions): each frozen program's rate of a metric under that arm (best-of-k per
rollout, mean over rollouts), averaged over the chosen coalitions. A COMPARISON is a linear combination of
arms (A - B, or (A1 - B1) - (A2 - B2)), PAIRED by frozen program: only the programs present in every arm count,
and their number is reported. Its interval is `attribution.contrast`'s: the combination is s+ A - s- B with A
and B weighted means of rates, its covariance over programs on the logit scale, Satterthwaite degrees of
freedom (docs/attribution.md), widened to hold the paired t-interval of the per-program differences (J - 1
degrees of freedom) too. The logit interval alone covered 78-90 % where a few programs carry every difference
(most programs fail under both arms: `fast` of the 0.5B model, where 2 of 48 programs differed); the t-interval
covers there, and the logit interval is the one built for rates near 0 or 1. Unit of replication: the frozen
program; estimand: the mean over frozen programs like these (this trajectory's tasks, generations pooled) of each
program's expected difference. Coverage by simulation: tests/test_study_coverage.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from cudanalyst.api import AttributionRun, SpecError, load_run
from cudanalyst.attribution.contrast import (
    Contrasts,
    contrast_intervals,
    is_difference,
    t_interval,
    unit_levels,
)
from cudanalyst.attribution.intervals import holm
from cudanalyst.attribution.result import attribute_tables, game_units
from cudanalyst.attribution.values import GAME_ARM, OutcomeError, OutcomeTables, tabulate
from cudanalyst.outcomes import UnitOutcome, with_fast_vs_baseline
from cudanalyst.report.compute import interaction_order, tool_report_lines
from cudanalyst.report.load import ReportError, load_outcomes, load_spec
from cudanalyst.runfolder import PLAN, REPORT_HTML, REPORT_JSON, outcome_spec
from cudanalyst.sizing import Design, pilot_levels, sizing, sizing_markdown
from cudanalyst.store import ObjectStore, StoreError

# The metrics of the comparisons and the tables. Specs that name only the older `fast` (ours, against the frozen
# program: examples/study/ and its published page) keep the study they had. Specs that ask for fastVsBaseline compare
# on the paper's fast (against the task's baseline) and show ours beside it in the arms and finding 2's tables.
METRICS = ("compiled", "pass", "fast")
PAPER_METRICS = ("compiled", "pass", "fastVsBaseline")
SHOWN_METRICS = (*PAPER_METRICS, "fastVsFrozen")
# Fields every paired run must share (the same frozen programs, samples, seeds and judging); the rest is
# what the runs vary (feedback, planning, controls, models) or does not decide outcomes (runs.outcome_spec; output).
PAIRED_FIELDS = ("trajectory", "players", "sampling", "evaluation")
NOT_OUTCOME_FIELDS = ("output",)  # an archived folder has moved; the rest: runs.outcome_spec
# A claim that an effect is small agrees when its interval lies inside +-MARGIN (the study's target half-width).
MARGIN = 0.05
Coalitions = Literal["all", "none", "any", "every"]
Unchanged = Literal["count", "exclude"]


class StudyError(ValueError):
    """Bad input: the message names the file and field."""


def study_metrics(specs: Mapping[str, tuple[str, AttributionRun]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the comparisons' metrics, the metrics the tables show), from the reference spec (main, else the first):
    the paper's fast where it asks for fastVsBaseline, else the older `fast` alone (module constants)."""
    if not specs:
        return METRICS, METRICS
    _, ref = specs["main"] if "main" in specs else next(iter(specs.values()))
    if "fastVsBaseline" in ref.spec.attribution.metrics:
        return PAPER_METRICS, SHOWN_METRICS
    return METRICS, METRICS


# ------------------------------------------------------------------------------------------- the design


@dataclass(frozen=True)
class Arm:
    """Per frozen program, the rate under `arm` of run `role`, averaged over `coalitions` of the game:
    all = every player's feedback, none = no feedback, any = the coalitions with some feedback, every = all 2^n.
    A control arm has one coalition (its own)."""

    role: str
    arm: str = GAME_ARM
    coalitions: Coalitions = "all"

    @property
    def label(self) -> str:
        what = self.arm if self.arm != GAME_ARM else {
            "all": "all feedback", "none": "no feedback", "any": "mean of coalitions with feedback",
            "every": "mean of all coalitions"}[self.coalitions]
        return f"{self.role}: {what}"


@dataclass(frozen=True)
class Claim:
    """One row of a finding: what the paper reports, the comparison that checks it and its direction (+1: the
    combination is positive, -1: negative, 0: about zero, within +-MARGIN)."""

    finding: int
    key: str
    paper: str
    terms: tuple[tuple[Arm, float], ...]
    direction: int
    # Also reported with copies left out: claims about what a plan's content does (findings 1 and 4), where the arms'
    # coders return their input unchanged at very different rates (finding 4: the 0.5B about half the time, Gemma
    # almost never), so copies counted would measure copying as much as the plans.
    copies: bool = False

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a.role for a, _ in self.terms))

    @property
    def measured(self) -> str:
        pos = [a.label for a, c in self.terms if c > 0]
        neg = [a.label for a, c in self.terms if c < 0]
        if len(pos) == 1 and len(neg) == 1:
            return f"[{pos[0]}] - [{neg[0]}]"
        # _diff_in_diff's order: (a1, +), (b2, +), (b1, -), (a2, -) for (a1 - b1) - (a2 - b2).
        return f"([{pos[0]}] - [{neg[0]}]) - ([{neg[1]}] - [{pos[1]}])"


def _diff(a: Arm, b: Arm) -> tuple[tuple[Arm, float], ...]:
    return ((a, 1.0), (b, -1.0))


def _diff_in_diff(a1: Arm, b1: Arm, a2: Arm, b2: Arm) -> tuple[tuple[Arm, float], ...]:
    # (a1 - b1) - (a2 - b2) = 2 (mean(a1, b2) - mean(b1, a2)): a difference of two mean rates (contrast.py).
    return ((a1, 1.0), (b2, 1.0), (b1, -1.0), (a2, -1.0))


FINDINGS = {
    1: "Explicit planning is feedback-conditioned",
    2: "Planning effectiveness arises from multi-tool interactions",
    3: "Summarization facilitates but does not replace planning",
    4: "Cross-model plan transferability",
}
# What the paper reports, one line each (from the explainer of Chong et al., ICML 2026).
CLAIMS: tuple[Claim, ...] = (
    Claim(1, "planning-without-feedback-vs-implicit",
          "Planning without feedback (P+NF) consistently degrades performance compared to implicit planning.",
          _diff(Arm("main", "noFeedback"), Arm("implicit-1.5b", GAME_ARM, "all")), -1, copies=True),
    Claim(1, "planning-without-feedback-vs-implicit-without-feedback",
          "Same, implicit planning also without feedback (planning alone, no feedback on either side).",
          _diff(Arm("main", "noFeedback"), Arm("implicit-1.5b", GAME_ARM, "none")), -1, copies=True),
    Claim(1, "planning-with-feedback-vs-without",
          "Feedback-aligned planning (P+F) yields stable improvements over planning without feedback.",
          _diff(Arm("main", GAME_ARM, "all"), Arm("main", "noFeedback")), +1, copies=True),
    Claim(1, "real-vs-randomized-feedback",
          "Randomized feedback confirms the benefit comes from the feedback's alignment, not its presence.",
          _diff(Arm("main", GAME_ARM, "all"), Arm("main", "randomizedFeedback")), +1, copies=True),
    Claim(1, "real-feedback-vs-dummy-plan",
          "Dummy plans confirm the benefit is not merely the presence of planning tokens.",
          _diff(Arm("main", GAME_ARM, "all"), Arm("main", "dummyPlan")), +1, copies=True),
    Claim(3, "summary-helps-weak-model",
          "Summarized feedback significantly improves outcomes for weaker models (here 0.5B).",
          _diff(Arm("summary-0.5b", GAME_ARM, "any"), Arm("raw-0.5b", GAME_ARM, "any")), +1),
    Claim(3, "summary-little-for-strong-model",
          "Stronger models derive limited additional gains from summarization (here 1.5B).",
          _diff(Arm("summary-1.5b", GAME_ARM, "any"), Arm("main", GAME_ARM, "any")), 0),
    Claim(3, "summary-helps-weak-more",
          "The summary's gain is larger for the weaker model than for the stronger one.",
          _diff_in_diff(Arm("summary-0.5b", GAME_ARM, "any"), Arm("raw-0.5b", GAME_ARM, "any"),
                        Arm("summary-1.5b", GAME_ARM, "any"), Arm("main", GAME_ARM, "any")), +1),
    Claim(4, "transfer-within-family",
          "Plans from a stronger model partially transfer to a weaker one of the same family (1.5B -> 0.5B).",
          _diff(Arm("transfer-0.5b", GAME_ARM, "every"), Arm("raw-0.5b", GAME_ARM, "every")), +1, copies=True),
    Claim(4, "transfer-other-family",
          "Plans given to a model of another family (Gemma 3 270M), against it planning for itself.",
          _diff(Arm("transfer-gemma", GAME_ARM, "every"), Arm("self-gemma", GAME_ARM, "every")), +1, copies=True),
    Claim(4, "transfer-gain-larger-within-family",
          "Gains are largest when the models share a family: the 0.5B's gain exceeds Gemma's.",
          _diff_in_diff(Arm("transfer-0.5b", GAME_ARM, "every"), Arm("raw-0.5b", GAME_ARM, "every"),
                        Arm("transfer-gemma", GAME_ARM, "every"), Arm("self-gemma", GAME_ARM, "every")), +1, copies=True),
    Claim(4, "same-plans-same-family-coder",
          "The same plans work better in a coder of the planner's family (0.5B) than of another (Gemma).",
          _diff(Arm("transfer-0.5b", GAME_ARM, "every"), Arm("transfer-gemma", GAME_ARM, "every")), +1, copies=True),
)
# Finding 2's rows, from the main run's own games (attribution.result via report.compute.attribution).
BANZHAF_CLAIMS = (
    ("analyzer", "compiled", "each", +1, "The analyzer consistently supports compilation success."),
    ("profiler", "fast", "last", +1, "The profiler drives performance gains (fast) in later generations."),
    ("debugger", "compiled", "pooled", 0, "The debugger has minimal marginal contribution in isolation."),
    ("debugger", "pass", "pooled", 0, "The debugger has minimal marginal contribution in isolation."),
    ("debugger", "fast", "pooled", 0, "The debugger has minimal marginal contribution in isolation."),
)
INTERACTION_CLAIM = "Interaction terms strengthen over generations: later generations rely on joint feedback."
NOT_IN_DESIGN = (
    (3, "Summarization cannot replace explicit planning (needs implicit planning with summaries: not in the "
        "study's runs)."),
)


# --------------------------------------------------------------------------------------------- the runs


@dataclass
class StudyRun:
    role: str
    spec_file: str
    spec: AttributionRun
    uri: str = ""
    records: list[UnitOutcome] = field(default_factory=list)
    run: AttributionRun | None = None  # as the folder recorded it
    missing: str = ""  # why the run cannot be used ("" when it can)
    notes: list[str] = field(default_factory=list)
    report: str = ""
    strata: dict[str, Any] | None = None  # what a stratified freeze drew, as plan.json recorded it at the run's start
    tool_reports: dict[str, Any] | None = None  # report.json's: whether the GPU tools behind the reports ran
    metrics: tuple[str, ...] = METRICS  # what the study tabulates (study_metrics: shown)
    _tables: dict[str, OutcomeTables] = field(default_factory=dict)

    def tables(self, unchanged: Unchanged) -> OutcomeTables:
        if unchanged not in self._tables:
            assert self.run is not None
            self._tables[unchanged] = tabulate(self.records, self.run.spec.players, self.metrics, unchanged=unchanged,
                                               pooled_unit="program")
        return self._tables[unchanged]


def _dump(run: AttributionRun) -> dict[str, Any]:
    return run.spec.model_dump(by_alias=True, mode="json")


def _first_difference(a: Any, b: Any, path: str) -> str | None:
    """The first field path where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            d = _first_difference(a.get(k), b.get(k), f"{path}.{k}")
            if d:
                return d
        return None
    return None if a == b else path


def load_specs(folder: str | Path) -> dict[str, tuple[str, AttributionRun]]:
    """role -> (file, spec) for every *.yaml of the study folder; paired fields must agree (else StudyError)."""
    root = Path(folder)
    if not root.is_dir():
        raise StudyError(f"{folder}: no such study folder (a folder of AttributionRun YAML files)")
    files = sorted(root.glob("*.yaml"))
    if not files:
        raise StudyError(f"{folder}: no *.yaml AttributionRun specs in it")
    specs: dict[str, tuple[str, AttributionRun]] = {}
    for f in files:
        try:
            specs[f.stem] = (str(f), load_run(str(f)))
        except SpecError as exc:
            raise StudyError(str(exc)) from None
    ref_role = "main" if "main" in specs else next(iter(specs))
    ref_file, ref = specs[ref_role]
    for f, run in specs.values():
        for name in PAIRED_FIELDS:
            ours, theirs = _dump(run)[name], _dump(ref)[name]
            if name == "trajectory":  # programs are frozen per (seed, task, generation): a run may skip generations
                ours, theirs = ({k: v for k, v in d.items() if k != "generations"} for d in (ours, theirs))
            diff = _first_difference(ours, theirs, f"spec.{name}")
            if diff:
                raise StudyError(f"{f}: {diff} differs from {ref_file}: the study's runs are paired by frozen "
                                 f"program, so {', '.join('spec.' + p for p in PAIRED_FIELDS)} must agree "
                                 "(trajectory.generations may differ: runs pair on the programs they share)")
    return specs


def attach_run(sr: StudyRun, store: ObjectStore) -> None:
    """Read a role's run folder: spec.json must match the role's spec in every field that decides outcomes
    (StudyError otherwise); a folder that cannot be read, or holds no outcome yet, leaves the run missing."""
    sr.uri = store.uri
    try:
        run = load_spec(store)
    except ReportError as exc:
        sr.missing = str(exc)
        return
    except StoreError as exc:
        sr.missing = f"{store.uri}: {exc}"
        return
    ours, theirs = outcome_spec(sr.spec.spec), outcome_spec(run.spec)
    for name in sorted(set(ours) - set(NOT_OUTCOME_FIELDS)):
        diff = _first_difference(theirs.get(name), ours.get(name), f"spec.{name}")
        if diff:
            raise StudyError(f"{store.uri_of('spec.json')}: {diff} differs from {sr.spec_file} (role {sr.role}): "
                             "this folder was made by another spec")
    if run.metadata.name != sr.spec.metadata.name:
        sr.notes.append(f"{sr.role}: the folder's run is named {run.metadata.name!r}, the spec "
                        f"{sr.spec.metadata.name!r}: request seeds derive from the name, so it is another draw of "
                        "the same design (same programs, settings and models), not the spec's own samples")
    try:
        # Records written before fastVsBaseline existed get it from their speedupVsBaseline (outcomes.py).
        sr.records = with_fast_vs_baseline(load_outcomes(store), run.spec.evaluation.fast_tolerance)
    except ReportError as exc:
        sr.missing = str(exc)
        return
    except StoreError as exc:
        sr.missing = f"{store.uri}: {exc}"
        return
    summary = _plan_summary(store)
    planned = summary.get("units") if isinstance(summary.get("units"), int) else None
    sr.strata = summary.get("strata") if isinstance(summary.get("strata"), dict) else None
    if planned is not None and len(sr.records) < planned:
        # A stopped run's outcomes are not a sample of it: correct candidates wait for timing, so the ones stored
        # first are mostly failures. Its rows wait for the run to be resumed and finished.
        sr.missing = (f"incomplete: {len(sr.records)} of {planned} units have an outcome (a stopped run; resume it "
                      "with the same command)")
        return
    sr.run = run
    try:
        if store.exists(REPORT_HTML):
            sr.report = store.uri_of(REPORT_HTML)
        if store.exists(REPORT_JSON):
            sr.tool_reports = store.get_json(REPORT_JSON).get("toolReports")
    except (StoreError, ValueError, AttributeError):
        pass


def _plan_summary(store: ObjectStore) -> dict[str, Any]:
    """plan.json (written when the run started: its units, and a stratified freeze's draw), or {} where the folder
    has none."""
    try:
        if not store.exists(PLAN):
            return {}
        summary = store.get_json(PLAN)
    except (StoreError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


# ---------------------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class ArmRates:
    """Per program (by name): its rate per chosen coalition, and its outcomes (rollouts) per coalition."""

    names: tuple[str, ...]
    rates: np.ndarray  # (J, C)
    trials: np.ndarray  # (J, C)
    samples: int
    balance: str


def arm_rates(sr: StudyRun, arm: Arm, metric: str, unchanged: Unchanged) -> ArmRates | str:
    """The arm's per-program rates (generations pooled), or why there are none."""
    if sr.missing:
        return f"{sr.role} not run: {sr.missing}"
    tables = sr.tables(unchanged)
    po = tables.games.get((arm.arm, metric, None))
    if po is None:
        return f"{sr.role} has no {arm.arm} arm for {metric}"
    u = game_units(po, tables.players)
    if u.programs == 0:
        return f"{sr.role}, {arm.arm}, {metric}: no program with an established outcome"
    full = (1 << len(tables.players)) - 1
    masks = po.masks
    if arm.arm != GAME_ARM:
        cols = np.arange(len(masks))
    else:
        pick = {"all": masks == full, "none": masks == 0, "any": masks != 0, "every": np.ones(len(masks), bool)}
        cols = np.flatnonzero(pick[arm.coalitions])
        if not cols.size:
            return f"{sr.role}: no outcomes under the coalitions {arm.coalitions!r} of its game"
    return ArmRates(u.names, u.rates[:, cols], u.unit_trials[:, cols], po.samples, po.balance)


Unit = Literal["program", "task"]
# The two levels every comparison is reported at: over this trajectory's frozen programs, and over tasks (kernels like
# these). A finding is general only where it holds over tasks.
UNITS: tuple[Unit, ...] = ("program", "task")


@dataclass(frozen=True)
class Comparison:
    value: float
    low: float | None
    high: float | None
    p_value: float | None
    dof: float | None
    programs: int
    # Programs in some arm but not in all (left out: the comparison is paired).
    unpaired: int
    unit: Unit = "program"
    units: int = 0  # units of replication behind the interval: programs, or their tasks


def task_of(program: str) -> str:
    """A program's task: game_units names a program `task/gGEN/id` (attribution.values)."""
    return program.split("/", 1)[0]


def combine(parts: Sequence[tuple[ArmRates, float]], confidence: float, unit: Unit = "program") -> Comparison:
    """sum_t coef_t x arm_t, paired by program, with contrast.py's interval over units (module docstring).
    Each arm's coalitions are averaged (weight 1/C) before its coefficient applies. unit="task": each task's
    paired programs are averaged first (its rate per cell, outcomes summed), and the tasks are the units, each
    weighing the same: the estimand is the mean over tasks like these of a task's mean program difference."""
    common = set(parts[0][0].names)
    for ar, _ in parts[1:]:
        common &= set(ar.names)
    union = set().union(*(set(ar.names) for ar, _ in parts))
    names = sorted(common)
    rates, trials, coefs = [], [], []
    for ar, coef in parts:
        index = {n: i for i, n in enumerate(ar.names)}
        rows = [index[n] for n in names]
        cols = ar.rates.shape[1]
        rates.append(ar.rates[rows])
        trials.append(ar.trials[rows])
        coefs += [coef / cols] * cols
    r, n, c = np.concatenate(rates, axis=1), np.concatenate(trials, axis=1), np.array(coefs)
    programs = len(names)
    if programs == 0:
        return Comparison(math.nan, None, None, None, None, 0, len(union), unit, 0)
    if unit == "task":
        tasks, which = np.unique([task_of(x) for x in names], return_inverse=True)
        count = np.bincount(which, minlength=len(tasks)).astype(np.float64)
        r = np.stack([r[which == t].sum(axis=0) for t in range(len(tasks))]) / count[:, None]
        n = np.stack([n[which == t].sum(axis=0) for t in range(len(tasks))])
    units = r.shape[0]
    if units < 2:  # one unit shows no variation between units: no interval
        return Comparison(float(r @ c), None, None, None, None, programs, len(union) - programs, unit, units)
    plus, minus = np.clip(c, 0, None), np.clip(-c, 0, None)
    total = np.maximum(n.sum(axis=0), 1)
    contrast = Contrasts(
        pos=(r @ plus)[:, None], neg=(r @ minus)[:, None],
        s_pos=np.array([plus.sum()]), s_neg=np.array([minus.sum()]),
        inv_pos=np.array([(plus**2 / total).sum()]), inv_neg=np.array([(minus**2 / total).sum()]),
        sq_pos=np.array([(plus**2).sum()]), sq_neg=np.array([(minus**2).sum()]),
        noise=((c**2)[None, :] / np.maximum(n, 1)).sum(axis=1)[:, None],
    )
    iv = contrast_intervals(contrast, np.ones(units), unit_levels(r, n, confidence), programs, confidence)
    low, high, p_value = float(iv.low[0]), float(iv.high[0]), float(iv.p_value[0])
    if is_difference(contrast)[0] and np.isfinite(low):
        # A difference: the hull with the paired t-interval over programs (J - 1 degrees of freedom), as each covers
        # where the other does not (module docstring), and the verdict stands only when both exclude 0 (hence the
        # larger p-value). A single arm's rate keeps the logit interval, made for rates near 0 or 1 (a t-interval
        # would leave [0, 1]).
        t_low, t_high, t_p = (float(x[0]) for x in t_interval((r @ c)[:, None], np.ones(units), units - 1, confidence))
        low, high, p_value = min(low, t_low), max(high, t_high), max(p_value, t_p) if np.isfinite(p_value) else t_p

    def num(x: float) -> float | None:
        return float(x) if np.isfinite(x) else None
    return Comparison(float(iv.estimate[0]), num(low), num(high), num(p_value), num(iv.dof[0]),
                      programs, len(union) - programs, unit, units)


def verdict(direction: int, low: float | None, high: float | None) -> str:
    """agrees / disagrees / inconclusive. Directional claims: inconclusive when the interval contains 0, agrees
    when it excludes 0 on the paper's side. Claims of a small effect (direction 0): agrees when the interval
    lies within +-MARGIN, disagrees when it excludes 0, inconclusive otherwise."""
    if low is None or high is None:
        return "inconclusive (no interval)"
    if direction == 0:
        if low > 0 or high < 0:
            return "disagrees"
        return "agrees" if low >= -MARGIN and high <= MARGIN else "inconclusive"
    if low <= 0 <= high:
        return "inconclusive"
    return "agrees" if (low > 0) == (direction > 0) else "disagrees"


def mark_holm(rows: list[dict[str, Any]], alpha: float) -> int:
    """Sets each row's `holm`: its interval still excludes 0 after Holm's correction over every comparison of the
    page that has a p-value (the family; its size is returned). Each interval holds at its own level; with some
    60 of them, about three exclude 0 by chance alone, which is what the correction answers."""
    tested = [r for r in rows if r.get("pValue") is not None]
    for r, rejected in zip(tested, holm([r["pValue"] for r in tested], alpha), strict=True):
        r["holm"] = bool(rejected)
    return len(tested)


def _programs_md(r: Mapping[str, Any]) -> str:
    """The frozen programs behind a row: those in every arm, and what was left out."""
    if r.get("programs") is None:
        return ""
    of = r.get("ofPrograms")
    if of is not None and of > r["programs"]:
        return f"{r['programs']} of {of} (in the others, some cell held only copies)"
    return f"{r['programs']}" + (f" ({r['unpaired']} unpaired left out)" if r.get("unpaired") else "")


def claim_rows(claim: Claim, runs: Mapping[str, StudyRun], confidence: float,
               metrics: Sequence[str] = METRICS) -> list[dict[str, Any]]:
    rows = []
    for unit, unchanged, metric in ((u, c, m) for u in UNITS for c in (("count", "exclude") if claim.copies
                                                                       else ("count",)) for m in metrics):
        # One row per level, copies reading and metric; the program level first.
        row: dict[str, Any] = {"finding": claim.finding, "claim": claim.key, "paper": claim.paper,
                               "measured": claim.measured, "metric": metric, "copies": unchanged,
                               "direction": claim.direction, "unit": unit}
        missing = [r for r in claim.roles if r not in runs]
        if missing:
            rows.append(row | {"verdict": "not run", "reason": f"no spec {', '.join(missing)}.yaml in the study"})
            continue
        parts = [(arm_rates(runs[a.role], a, metric, unchanged), coef) for a, coef in claim.terms]
        reasons = list(dict.fromkeys(p for p, _ in parts if isinstance(p, str)))
        if reasons:
            rows.append(row | {"verdict": "not run", "reason": "; ".join(reasons)})
            continue
        ks = {p.samples for p, _ in parts if not isinstance(p, str)}
        if len(ks) > 1 and unchanged == "count":
            rows.append(row | {"verdict": "not run", "reason": f"arms hold best-of-{sorted(ks)} samples: "
                               "not comparable (a run is incomplete)"})
            continue
        cmp_ = combine([(p, coef) for p, coef in parts if not isinstance(p, str)], confidence, unit)
        rows.append(row | {"value": cmp_.value, "low": cmp_.low, "high": cmp_.high, "pValue": cmp_.p_value,
                           "dof": cmp_.dof, "programs": cmp_.programs, "unpaired": cmp_.unpaired,
                           "units": cmp_.units,
                           "verdict": verdict(claim.direction, cmp_.low, cmp_.high) if cmp_.programs else
                           "not run", "reason": "" if cmp_.programs else "no program in every arm"})
    # With copies left out, a program drops from an arm where some cell (coalition) of it held only copies: say how
    # many of the count reading's programs remain, which "unpaired" alone does not (a program that drops from every
    # arm is in none, so it is not counted as unpaired).
    counted = {(r["metric"], r["unit"]): r.get("programs") for r in rows if r["copies"] == "count"}
    for r in rows:
        if r["copies"] == "exclude" and r.get("programs") is not None and counted.get((r["metric"], r["unit"])):
            r["ofPrograms"] = counted[(r["metric"], r["unit"])]
    return rows


def arm_table(runs: Mapping[str, StudyRun], roles: Sequence[str], confidence: float,
              metrics: Sequence[str] = METRICS) -> list[dict[str, Any]]:
    """Finding 1's arms: every arm (control, and the game's no-feedback and all-feedback coalitions) of the given
    runs, per metric, with copies counted and left out, and the share of copies."""
    rows = []
    for role in roles:
        sr = runs.get(role)
        if sr is None or sr.missing:
            rows.append({"role": role, "verdict": "not run", "reason": sr.missing if sr else f"no spec {role}.yaml"})
            continue
        arms = [Arm(role, GAME_ARM, "none"), Arm(role, GAME_ARM, "all")]
        arms += [Arm(role, a) for a in sr.tables("count").arms if a != GAME_ARM]
        for arm in arms:
            full = (1 << len(sr.spec.spec.players)) - 1
            want = 0 if arm.coalitions == "none" else full
            recs = [r for r in sr.records if r.arm == arm.arm and (
                arm.arm != GAME_ARM or sum(1 << sr.spec.spec.players.index(p) for p in r.coalition) == want)]
            copies = sum(r.unchanged for r in recs)
            row: dict[str, Any] = {"role": role, "arm": arm.label, "units": len(recs), "copies": copies}
            for unchanged in ("count", "exclude"):
                for metric in metrics:
                    ar = arm_rates(sr, arm, metric, unchanged)
                    if isinstance(ar, str):
                        row[f"{metric}/{unchanged}"] = {"reason": ar}
                        continue
                    c = combine([(ar, 1.0)], confidence)
                    row[f"{metric}/{unchanged}"] = {"value": c.value, "low": c.low, "high": c.high,
                                                    "programs": c.programs}
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------- finding 2


def finding2(sr: StudyRun | None, attribute: Callable[[list[UnitOutcome], AttributionRun], Any]) -> dict[str, Any]:
    """Per generation and pooled Banzhaf values and pairwise interactions of the main run, at both levels, of the
    metrics the study shows (whatever its folder's spec.json names: a resumed folder may name others). The report's
    own attribution (`attribute` is report.compute.attribution) gives the per-generation games over programs and the
    pooled ones over tasks; the same settings give the other two (`_other_level`): pooled over programs, and per
    generation over tasks. Its rows (the paper's claims) come after Holm (`finding2_rows`)."""
    if sr is None or sr.missing or sr.run is None:
        return {"verdict": "not run", "reason": sr.missing if sr else "no spec main.yaml in the study"}
    attribution = sr.run.spec.attribution.model_copy(update={"metrics": list(sr.metrics)})
    run = sr.run.model_copy(update={"spec": sr.run.spec.model_copy(update={"attribution": attribution})})
    result = attribute(sr.records, run)
    games = [g for g in (*result.games, *_other_level(sr.records, run, result.confidence).games) if g.evaluated]
    gens = sorted({g.generation for g in games if g.generation is not None})
    table = []
    for g in sorted(games, key=lambda g: (g.metric != "compiled", g.metric != "pass", g.generation is None,
                                          g.generation or 0, UNITS.index(g.unit))):
        for kind, part in (("banzhaf", g.banzhaf), ("interaction", g.interactions)):
            for key, est in part.items():
                table.append({"metric": g.metric, "generation": g.generation, "kind": kind, "index": key,
                              "value": est.value, "low": est.low, "high": est.high, "pValue": est.p_value,
                              "units": g.units, "unit": g.unit})
    return {"table": table, "generations": gens, "unchanged": result.unchanged}


def _other_level(records: Sequence[UnitOutcome], run: AttributionRun, confidence: float) -> Any:
    """The main run's games at the levels the report does not give: pooled over programs, per generation over
    tasks (each task's programs of that generation averaged into one unit). The report's settings; no bootstrap."""
    spec = run.spec
    tables = tabulate(records, spec.players, spec.attribution.metrics, unchanged=spec.attribution.unchanged,
                      pooled_unit="program")
    games = {}
    for (arm, metric, scope), po in tables.games.items():
        if arm != GAME_ARM:
            continue
        if scope is not None:
            names, unit = np.unique([task_of(x) for x in po.programs], return_inverse=True)
            po = replace(po, unit=unit.astype(np.int64).reshape(-1), unit_names=tuple(names), unit_kind="task")
        games[(arm, metric, scope)] = po
    return attribute_tables(replace(tables, games=games), estimator=spec.attribution.estimator,
                            order=interaction_order(spec.players), confidence=confidence, replicates=0,
                            seed=spec.sampling.seed)


def finding2_rows(f2: Mapping[str, Any], fast: str = "fast") -> list[dict[str, Any]]:
    """The paper's claims of finding 2 at both levels, from the table (`holm` marked over the page's family);
    their fast is `fast` (the paper's where the study asks for it)."""
    if "table" not in f2:
        return []
    table, gens = f2["table"], f2["generations"]

    def find(kind: str, index: str, metric: str, generation: int | None, unit: str) -> dict[str, Any] | None:
        return next((t for t in table if t["kind"] == kind and t["index"] == index and t["metric"] == metric
                     and t["generation"] == generation and t["unit"] == unit), None)

    rows = []
    for unit in UNITS:
        for player, metric, scope, direction, paper in BANZHAF_CLAIMS:
            metric = fast if metric == "fast" else metric
            scopes = {"each": gens, "last": gens[-1:], "pooled": [None]}[scope]
            for gen in scopes:
                t = find("banzhaf", player, metric, gen, unit)
                rows.append(_f2_row(paper, f"Banzhaf value of the {player}", metric, gen, direction, unit, t))
        for metric in ("pass", fast):
            for pair in sorted({t["index"] for t in table if t["kind"] == "interaction"}):
                for gen in gens[-1:]:
                    t = find("interaction", pair, metric, gen, unit)
                    rows.append(_f2_row(INTERACTION_CLAIM, f"interaction {pair} at the last generation", metric, gen,
                                        +1, unit, t))
    return rows


def _f2_row(paper: str, measured: str, metric: str, gen: int | None, direction: int, unit: str,
            t: dict[str, Any] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"finding": 2, "paper": paper, "measured": measured, "metric": metric,
                           "generation": gen, "direction": direction, "copies": "count", "unit": unit}
    if t is None:
        return row | {"verdict": "not run", "reason": f"no such game over {unit}s in the main run"}
    return row | {"value": t["value"], "low": t["low"], "high": t["high"], "pValue": t["pValue"],
                  "holm": t.get("holm"), "programs": t["units"], "units": t["units"],
                  "verdict": verdict(direction, t["low"], t["high"])}


# ------------------------------------------------------------------------------------ verdicts per finding


def standing(rows: Sequence[Mapping[str, Any]]) -> str:
    """What one claim's reading (a metric at a level, with its copies readings) says for its finding: agrees or
    disagrees only where every copies reading gives that verdict (the page's rule) and, for a directional verdict
    or a small effect found not small, it still excludes 0 after Holm over the page's family; otherwise
    inconclusive. A claim of a small effect agrees on its interval within +-MARGIN (no test of 0 to correct)."""
    verdicts = {r["verdict"] for r in rows}
    if len(verdicts) != 1 or next(iter(verdicts)) not in ("agrees", "disagrees"):
        return "inconclusive"
    v = next(iter(verdicts))
    if v == "agrees" and all(r["direction"] == 0 for r in rows):
        return v
    return v if all(r.get("holm") for r in rows) else "inconclusive"


def finding_verdicts(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per finding and level. A claim (one statement of the paper) stands for the paper when some reading of it (a
    metric, a generation) stands in agreement (`standing`) and none against, and against it the other way round.
    The finding: *disagree* when some claim stands against it (the finding as stated is contradicted) and none for,
    *agree* when every claim measured stands for it, *inconclusive* otherwise (none stands, only some do, or they
    conflict). `general`: the finding has the same verdict over tasks (kernels like these) as over programs."""
    out = []
    for finding in FINDINGS:
        level: dict[str, dict[str, Any]] = {}
        for unit in UNITS:
            groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
            for r in rows:
                if r["finding"] == finding and r.get("unit") == unit and r.get("value") is not None:
                    key = (r.get("claim") or r["measured"], r["paper"], r["metric"], r.get("generation"))
                    groups.setdefault(key, []).append(r)
            stand = {k: standing(g) for k, g in groups.items()}
            claims: dict[str, set[str]] = {}
            for k, v in stand.items():
                claims.setdefault(k[1], set()).add(v)
            per_claim = {c: ("agrees" if "agrees" in v and "disagrees" not in v else
                             "disagrees" if "disagrees" in v and "agrees" not in v else "inconclusive")
                         for c, v in claims.items()}

            def named(v: str, stand: Mapping[tuple[Any, ...], str] = stand) -> list[str]:
                return sorted(f"{k[0]} ({k[2]}{'' if k[3] is None else f', generation {k[3]}'})"
                              for k, x in stand.items() if x == v)
            against = any(v == "disagrees" for v in per_claim.values())
            every = bool(per_claim) and all(v == "agrees" for v in per_claim.values())
            verdict_ = ("disagree" if against and not any(v == "agrees" for v in per_claim.values()) else
                        "agree" if every else "inconclusive")
            level[unit] = {"verdict": verdict_ if groups else "not run", "claims": len(per_claim),
                           "claimsFor": sum(v == "agrees" for v in per_claim.values()),
                           "claimsAgainst": sum(v == "disagrees" for v in per_claim.values()),
                           "readings": len(groups), "agree": named("agrees"), "disagree": named("disagrees")}
        general = level["task"]["verdict"] in ("agree", "disagree") and \
            level["task"]["verdict"] == level["program"]["verdict"]
        out.append({"finding": finding, "title": FINDINGS[finding], **{u: level[u] for u in UNITS},
                    "general": general})
    return out


# -------------------------------------------------------------------------------------------- the study


def replayed(runs: Mapping[str, StudyRun]) -> dict[str, Any] | None:
    """What the runs replay: the main role's trajectory (its own description: recorded by which agent, or written by
    hand), read from here where its URI resolves, and whether the GPU tools behind its reports ran (the main run's
    report.json). The first study's critique: a page must say what its programs and reports are."""
    from cudanalyst.trajectory import TrajectoryError, load_trajectory

    sr = runs.get("main") or next(iter(runs.values()), None)
    if sr is None:
        return None
    uri = sr.spec.spec.trajectory.uri
    out: dict[str, Any] = {"role": sr.role, "uri": uri, "toolReports": sr.tool_reports}
    try:
        t = load_trajectory(uri)
    except (TrajectoryError, ValueError, OSError, StoreError) as exc:
        return out | {"unreadable": str(exc)}
    return out | {"description": t.manifest.description, "tasks": len({p.task for p in t.programs}),
                  "programs": len(t.programs)}


def frozen_draw(runs: Mapping[str, StudyRun]) -> dict[str, Any] | None:
    """What the stratified freeze drew, per task and state, as the runs recorded it at their start (plan.json): the
    first role's that has one (main first), and the roles whose draw differs from it. None without strata."""
    drawn = sorted(((role, sr.strata) for role, sr in runs.items() if sr.strata and sr.run is not None),
                   key=lambda rs: rs[0] != "main")
    if not drawn:
        return None
    role, strata = drawn[0]
    return {"role": role, "drawn": strata.get("drawn", {}), "short": len(strata.get("short", [])),
            "differ": [other for other, s in drawn[1:] if s.get("drawn") != strata.get("drawn")]}


def pilot_sizing(sr: StudyRun | None, effect: float, power: float, comparisons: int) -> dict[str, Any] | None:
    """docs/sizing.md's calculation with the main run as the pilot (its own spreads and rates, its programs and tasks
    as the design) and the page's Holm family as the comparisons; None where the main run cannot be used."""
    if sr is None or sr.run is None or not sr.records:
        return None
    spec = sr.run.spec
    levels = pilot_levels(tabulate(sr.records, spec.players, spec.attribution.metrics))
    if not levels:
        return None
    design = Design(players=len(spec.players), rollouts=spec.sampling.rollouts,
                    programs=len({r.program_id for r in sr.records}), tasks=len({r.task for r in sr.records}))
    sized = sizing(levels, design, effect, spec.attribution.confidence, power, max(1, comparisons))
    return sized | {"pilot": sr.uri}


def study(specs: Mapping[str, tuple[str, AttributionRun]], stores: Mapping[str, ObjectStore | None],
          attribute: Callable[[list[UnitOutcome], AttributionRun], Any], effect: float | None = None,
          power: float = 0.8) -> dict[str, Any]:
    """Every finding's rows from the runs that exist; a role without a store (folder absent) is 'not run'. With
    `effect`, the sizing of docs/sizing.md from the main run as the pilot, over the page's Holm family."""
    compared, shown = study_metrics(specs)
    runs: dict[str, StudyRun] = {}
    for role, (file, spec) in specs.items():
        sr = StudyRun(role, file, spec, metrics=shown)
        store = stores.get(role)
        if store is None:
            sr.missing = "its run folder is not there"
        else:
            attach_run(sr, store)
        runs[role] = sr
    confidence = specs["main"][1].spec.attribution.confidence if "main" in specs else 0.95
    rows: list[dict[str, Any]] = []
    for claim in CLAIMS:
        try:
            rows += claim_rows(claim, runs, confidence, compared)
        except OutcomeError as exc:  # records that cannot be tabulated: that claim's rows only
            rows.append({"finding": claim.finding, "claim": claim.key, "paper": claim.paper, "verdict": "not run",
                         "reason": str(exc)})
    f2 = finding2(runs.get("main"), attribute)
    # Holm over the page's family: every comparison of findings 1, 3 and 4 and every Banzhaf value and interaction of
    # finding 2's tables, at both levels.
    family = mark_holm([*rows, *f2.get("table", [])], 1 - confidence)
    if "table" in f2:
        f2["rows"] = finding2_rows(f2, compared[-1])
    for finding, text in NOT_IN_DESIGN:
        rows.append({"finding": finding, "paper": text, "verdict": "not run", "reason": "not in the study's design"})
    tested = [r for r in rows if r.get("pValue") is not None]
    return {
        "holmFamily": family,
        "holmParts": {f"{finding}/{unit}": sum(1 for r in (*tested, *f2.get("table", []))
                                               if r.get("pValue") is not None and r.get("unit") == unit
                                               and r.get("finding", 2) == finding)
                      for finding in FINDINGS for unit in UNITS},
        "verdicts": finding_verdicts([*rows, *f2.get("rows", [])]),
        "confidence": confidence,
        "margin": MARGIN,
        "runs": {role: {"spec": sr.spec_file, "name": sr.spec.metadata.name, "folder": sr.uri,
                        "report": sr.report, "outcomes": len(sr.records), "missing": sr.missing, "notes": sr.notes}
                 for role, sr in runs.items()},
        "rows": rows,
        "arms": arm_table(runs, ["main", "implicit-1.5b"], confidence, shown),
        "finding2": f2,
        "replayed": replayed(runs),
        "frozen": frozen_draw(runs),
        "sizing": pilot_sizing(runs.get("main"), effect, power, family) if effect is not None else None,
    }


# ------------------------------------------------------------------------------------------ the README


# A difference of equal rates comes out as +-1e-17 depending on the order numpy sums in (its version, its SIMD path):
# below this it is printed as the zero it is, so a page rebuilt elsewhere does not flip "+0.000" to "-0.000".
FLOAT_NOISE = 1e-9


def _fmt(x: float | None, sign: bool = True) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    x = 0.0 if abs(x) < FLOAT_NOISE else x
    return f"{x:+.3f}" if sign else f"{x:.3f}"


def _interval(r: Mapping[str, Any], sign: bool = True) -> str:
    if r.get("value") is None:
        return f"not run: {r.get('reason', '')}"
    if r.get("low") is None:
        return f"{_fmt(r['value'], sign)} (no interval)"
    return f"{_fmt(r['value'], sign)} [{_fmt(r['low'], sign)}, {_fmt(r['high'], sign)}]"


def readme(result: Mapping[str, Any], specs: Mapping[str, tuple[str, AttributionRun]], date: str,
           link: Callable[[str], str] = lambda uri: uri, preface: str = "") -> str:
    """The study's README: the verdicts per finding and level, the four findings' tables at both levels, the arms,
    the runs with their reports, the exact specs; `preface` (the user's own markdown: what was run and what is
    missing) goes under the title as it is. Every number in it comes from `result` (tests/test_study_page.py)."""
    conf = f"{result['confidence'] * 100:g}%"
    out = [f"# The paper's four findings, checked ({date})", ""]
    if preface.strip():
        out += [preface.strip(), ""]
    out += [
           "Generated by `cudanalyst study` (src/cudanalyst/analysis/study.py) from the run folders below. Each comparison is "
           "paired by frozen program (programs present in every arm of it) and reported at two levels, the unit of "
           f"replication named beside each interval ({conf}): **over programs**, the mean over frozen programs like "
           "these (this trajectory's programs, generations pooled) of each program's difference; **over tasks**, the "
           "mean over tasks like these (kernels like these) of each task's mean program difference, the task the unit "
           "(its programs of different generations descend from one another). A finding is *general* only where it "
           "holds over tasks. Verdict of a row: *inconclusive* when the interval contains 0, *agrees* when it excludes "
           "0 on the paper's side, *disagrees* on the other; a claim of a small effect agrees when its interval lies "
           f"within +-{result['margin']} (docs/study.md). " + _holm_md(result) + " Rates are " + _metrics_md(specs), ""]
    notes = [n for r in result["runs"].values() for n in r["notes"]]
    out += [f"- {n}" for n in notes] + ([""] if notes else [])
    out += _verdicts_md(result.get("verdicts", []))
    out += _replayed_md(result.get("replayed"))
    out += _frozen_md(result.get("frozen"))
    if result.get("sizing"):
        out += [sizing_markdown(result["sizing"], link(result["sizing"]["pilot"])).rstrip(), ""]
    for finding, title in FINDINGS.items():
        out += [f"## Finding {finding}: {title}", ""]
        if finding == 2:
            out += _finding2_md(result["finding2"], conf)
            continue
        out += _pairs_md([r for r in result["rows"] if r["finding"] == finding], with_copies=True)
        if finding == 1:
            out += _arms_md(result["arms"], study_metrics(specs)[1])
    out += ["## The runs", "", "| role | spec | run | outcomes | report |", "|---|---|---|---|---|"]
    for role, r in result["runs"].items():
        report = f"[report]({link(r['report'])})" if r["report"] else (f"not run: {r['missing']}" if r["missing"]
                                                                       else "no report yet")
        out.append(f"| {role} | `{r['spec']}` | {r['name']} | {r['outcomes']} | {report} |")
    out += ["", "## The exact specs", ""]
    for file, _ in specs.values():
        out += [f"`{file}`:", "", "```yaml", Path(file).read_text().rstrip(), "```", ""]
    return "\n".join(out) + "\n"


def _replayed_md(r: Mapping[str, Any] | None) -> list[str]:
    """What the runs replay, in the trajectory's own words, and what its GPU tools said."""
    if not r:
        return []
    out = ["## What the runs replay", ""]
    if "unreadable" in r:
        out.append(f"The trajectory `{r['uri']}` (role {r['role']}) could not be read where this page was built: "
                   f"{r['unreadable']}")
    else:
        out.append(f"`{r['uri']}`: {r['programs']} programs on {r['tasks']} tasks. "
                   + (r["description"] or "The trajectory does not describe itself."))
    lines = tool_report_lines({"toolReports": r.get("toolReports")})
    if lines:
        out += ["", "The GPU tools behind the frozen programs' reports (the main run's report):", ""]
        out += [f"- {line}" for line in lines]
    return out + [""]


def _frozen_md(frozen: Mapping[str, Any] | None) -> list[str]:
    """The frozen programs per task and recorded state (spec.trajectory.strata), from the runs' own plan.json."""
    if not frozen:
        return []
    states = ("broken", "wrong", "correct", "fast")
    rows = frozen["drawn"]
    totals = {s: sum(int(r.get(s, 0)) for r in rows.values()) for s in states}
    out = ["## The frozen programs", "",
           f"Drawn by recorded state (`spec.trajectory.strata`; docs/trajectory-format.md), one program per distinct "
           f"source, as the {frozen['role']} run recorded its draw at its start (plan.json): "
           f"{sum(totals.values())} programs on {len(rows)} tasks, {frozen['short']} strata short of what was asked. "
           "A frozen program already correct leaves `pass` nothing to gain (a copy passes); one already fast does the "
           "same for `fastVsBaseline`.",
           "", "| task | " + " | ".join(states) + " | all |", "|---|" + "---|" * (len(states) + 1)]
    for task, r in sorted(rows.items()):
        out.append(f"| {task} | " + " | ".join(str(r.get(s, 0)) for s in states) + f" | {sum(r.values())} |")
    out.append("| all | " + " | ".join(str(totals[s]) for s in states) + f" | {sum(totals.values())} |")
    if frozen["differ"]:
        out += ["", f"The runs of {', '.join(frozen['differ'])} drew otherwise: their rows pair only the programs "
                "they share with the others."]
    return out + [""]


def _holm_md(result: Mapping[str, Any]) -> str:
    """The family of Holm's correction, counted from the page's own rows."""
    parts = result.get("holmParts", {})

    def count(findings: Sequence[int], unit: str) -> int:
        return sum(parts.get(f"{f}/{unit}", 0) for f in findings)
    return (f"Each interval holds at its own level; *holm* says yes where it still excludes 0 after Holm's correction "
            f"over the page's family, the {result.get('holmFamily', 0)} intervals of this page that test 0: "
            f"{count((1, 3, 4), 'program')} comparisons of findings 1, 3 and 4 over programs and "
            f"{count((1, 3, 4), 'task')} over tasks, {count((2,), 'program')} Banzhaf values and interactions of "
            f"finding 2 over programs and {count((2,), 'task')} over tasks. A verdict without it may be one of the "
            "few that chance alone gives.")


def _units_md(r: Mapping[str, Any]) -> str:
    """The unit of replication beside an interval: how many, and what was left out."""
    unit, programs = r.get("unit", "program"), r.get("programs")
    n = r.get("units") or programs
    if not n:
        return ""
    if unit == "task":
        return f" ({n} tasks" + (f", {programs} programs" if r.get("finding") != 2 and programs else "") + ")"
    of, unpaired = r.get("ofPrograms"), r.get("unpaired")
    return (f" ({n} programs" + (f" of {of}: in the others some cell held only copies" if of and of > n else "")
            + (f"; {unpaired} unpaired left out" if unpaired else "") + ")")


def _verdicts_md(verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    if not verdicts:
        return []
    out = ["## Verdicts against the paper", "",
           "Per finding and level. A reading (a claim's metric, a generation) stands where its copies readings give "
           "the same verdict and, unless it agrees that an effect is small, it survives Holm; a claim stands for the "
           "paper where some reading stands for it and none against (`study.standing`, `study.finding_verdicts`). "
           "*agree*: every claim of the finding that was measured stands for it; *disagree*: some claim stands against "
           "it and none for; *inconclusive*: otherwise. *general*: the same verdict over tasks as over programs.", "",
           "| finding | over programs: verdict (claims for / against / measured) | over tasks: verdict (claims for / "
           "against / measured) | general | readings that stand over programs | readings that stand over tasks |",
           "|---|---|---|---|---|---|"]
    for v in verdicts:
        def say(level: Mapping[str, Any]) -> str:
            return "; ".join([*(f"agrees: {x}" for x in level["agree"]), *(f"disagrees: {x}" for x in level["disagree"])]) \
                or "none"
        def counts(level: Mapping[str, Any]) -> str:
            return f"{level['verdict']} ({level['claimsFor']} / {level['claimsAgainst']} / {level['claims']})"
        out.append(f"| {v['finding']}. {v['title']} | {counts(v['program'])} | {counts(v['task'])} | "
                   f"{'yes' if v['general'] else 'no'} | {say(v['program'])} | {say(v['task'])} |")
    return out + [""]


def _pairs_md(rows: Sequence[Mapping[str, Any]], with_copies: bool) -> list[str]:
    """One line per reading (claim, metric, copies; generation for finding 2) with both levels side by side."""
    head = "| what the paper reports | what we measured | metric | " + ("copies | " if with_copies else "generation | ")
    out = [head + "over programs: value [interval] | verdict | holm | over tasks: value [interval] | verdict | holm |",
           "|---" * (head.count("|") - 1 + 6) + "|"]
    lines: dict[tuple[Any, ...], dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        key = (r["paper"], r.get("measured", ""), r.get("metric", ""), r.get("copies", ""), r.get("generation"))
        lines.setdefault(key, {})[r.get("unit", "program")] = r
    previous = None
    for (paper, measured, metric, copies, gen), by_unit in lines.items():
        shown = paper if paper != previous else "〃"  # the claim once, its metrics below it
        previous = paper
        fourth = copies if with_copies else ("pooled" if gen is None else gen)
        cells = []
        for unit in UNITS:
            r = by_unit.get(unit)
            if r is None:
                cells += ["", "", ""]
                continue
            cells += [_interval(r) + (_units_md(r) if r.get("value") is not None else ""), r["verdict"],
                      "yes" if r.get("holm") else ""]
        out.append(f"| {shown} | {measured} | {metric} | {fourth} | " + " | ".join(str(c) for c in cells) + " |")
    return out + [""]


def _metrics_md(specs: Mapping[str, tuple[str, AttributionRun]]) -> str:
    """The sentence that closes the README's method paragraph: what the metrics are."""
    compared, _ = study_metrics(specs)
    if compared == METRICS:
        return "best-of-k per frozen program, cumulative metrics (compiled >= compile, pass >= pass, fast)."
    return ("best-of-k per frozen program and metric, cumulative metrics (compiled >= compile, pass >= pass, "
            "fastVsBaseline = pass and faster than the task's baseline, the paper's fast, used by every comparison; "
            "fastVsFrozen = faster than the frozen program, ours, shown beside it in the arms and finding 2's "
            "tables).")


def _arms_md(arms: Sequence[Mapping[str, Any]], metrics: Sequence[str] = METRICS) -> list[str]:
    shares = [(a["copies"] / a["units"], a["arm"]) for a in arms if a.get("units")]
    most = max(shares, default=None)
    example = f" ({most[1]}: {most[0]:.0%} of its candidates are copies)" if most else ""
    out = ["Every arm over programs, with copies (candidates that are the frozen program unchanged) counted and left "
           "out (`attribution.unchanged: count | exclude`), the frozen programs beside each rate. The claim is about "
           "what the plans' content does: a copy passes whenever its frozen program does, so under `count` an arm's "
           f"rate also measures how often the coder returns its input{example}. The claim needs copies left out; "
           "but leaving them out selects on an outcome of the arm (a cell can lose every sample), so a verdict "
           "stands only where both readings agree.", "",
           "| arm | units | copies | " + " | ".join(f"{m} ({u})" for u in ("count", "exclude") for m in metrics) + " |",
           "|---|---|---" + "|---" * 2 * len(metrics) + "|"]
    for a in arms:
        if "arm" not in a:
            out.append(f"| {a['role']} | not run: {a['reason']} |" + " |" * (2 + 2 * len(metrics)))
            continue
        cells = [_interval(a[f"{m}/{u}"], sign=False) + (f" ({a[f'{m}/{u}']['programs']} programs)"
                 if a[f"{m}/{u}"].get("programs") else "") for u in ("count", "exclude") for m in metrics]
        share = f"{a['copies']} ({a['copies'] / a['units']:.0%})" if a["units"] else str(a["copies"])
        out.append(f"| {a['arm']} | {a['units']} | {share} | " + " | ".join(cells) + " |")
    return out + [""]


def _finding2_md(f2: Mapping[str, Any], conf: str) -> list[str]:
    if "table" not in f2:
        return [f"not run: {f2.get('reason', '')}", ""]
    out = _pairs_md(f2["rows"], with_copies=False)
    out += [f"Every Banzhaf value and pairwise interaction of the main run at both levels ({conf} intervals; over "
            "programs the unit is the frozen program, per generation and pooled; over tasks it is the task, each "
            "task's programs of a generation averaged into one unit; `holm`: over the page's family):", "",
            "| metric | generation | index | value [interval] | holm | unit of replication |", "|---|---|---|---|---|---|"]
    for t in f2["table"]:
        gen = "pooled" if t["generation"] is None else t["generation"]
        name = t["index"] if t["kind"] == "banzhaf" else f"{t['index']} (interaction)"
        out.append(f"| {t['metric']} | {gen} | {name} | {_interval(t)} | {'yes' if t.get('holm') else ''} | "
                   f"{t['units']} {t['unit']}s |")
    return out + [""]


def to_json(result: Mapping[str, Any]) -> str:
    return json.dumps(result, indent=1, default=lambda x: None)
