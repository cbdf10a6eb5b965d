"""The attribution result as JSON-able records: from a game table, or from outcome records with intervals.

From outcomes, each game's intervals come from the variation between its units of replication (frozen
programs; tasks when generations are pooled): each index is a contrast of two mean rates, its interval
taken on their logit scale with Satterthwaite degrees of freedom (`contrast.py`); MSR's indices are contrasts too and
get the same interval. See docs/attribution.md.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.contrast import (
    Intervals,
    changing_units,
    coefficient_contrasts,
    contrast_intervals,
    exact_contrasts,
    few_changing,
    rate_contrasts,
    unit_levels,
)
from cudanalyst.attribution.games import FloatArray, Game, coalition_key, masks_of_order
from cudanalyst.attribution.intervals import (
    PRIOR_UNITS,
    holm,
    percentile_interval,
    unit_weights,
)
from cudanalyst.attribution.msr import msr_coefficients, msr_interactions, sampling_variance
from cudanalyst.attribution.values import GAME_ARM, OutcomeTables, ProgramOutcomes

Estimator = Literal["exact", "msr", "auto"]
# A bootstrap interval needs this share of finite replicates (an MSR replicate that drew no coalition
# of some group is NaN); below it the interval is left out and the game says why.
MIN_FINITE_REPLICATES = 0.95
# The percentile bootstrap over units is shown only from this many units of replication. In simulation it covered
# 56-94 % of the 95 % it claims at every size tested (4 to 48 units; bench/coverage.py, docs/attribution.md,
# "Coverage of every interval shown"), so it is shown at none: a caller may still ask for it (bench/coverage.py does).
BOOTSTRAP_MIN_UNITS: float = math.inf

NOTES = [
    "Metrics are cumulative: compiled = compile or better, pass = pass or fast, fast = fast "
    "(the authors' code counts pass as exactly pass in one place; we use the cumulative rate everywhere).",
    "v(S) = mean over the game's frozen programs of each program's rate under S (best-of-k per rollout, "
    "mean over rollouts); pooled = the programs of every generation together.",
    "Unit of replication: the frozen program (per generation), the task (pooled). Estimand: the mean over "
    "programs like these, drawn from this trajectory, of each program's expected index. low/high: each index is "
    "a contrast of two mean rates (s+ A - s- B); their covariance over units (the pairing across coalitions "
    "used), pooled with an Agresti-Coull adjusted-rate prior worth one unit, gives an ellipse on the logit scale "
    "of A and B, mapped back (asymmetric near rates 0 and 1, the t-interval near 1/2); t reference with "
    "Satterthwaite degrees of freedom (dof) for units of unequal noise. se is on the rate scale. Rollouts and "
    "samples are replicates inside a unit. MSR estimates get the same interval (each is a contrast of two mean rates "
    "over the coalitions present), plus the variance of drawing the coalitions when they are a sample.",
    "bootstrapLow/High: percentile interval resampling whole units with all their coalitions (MSR: units and "
    "sampled coalitions, each once); not shown: in simulation it covered 56-94 % of what it claims at 4 to 48 units "
    "(docs/attribution.md), and never with zero width.",
    "holm: the interval still excludes 0 after Holm's correction over every Banzhaf value and interaction "
    "of the report's games (the family); pValue is before correction.",
    "A program whose outcome could not be established for a metric (e.g. pass/fast with no GPU) leaves that "
    "metric's games, counted with its reason under exclusions; nothing is guessed.",
]
# Added where a result has either of the two fast metrics (docs/decisions.md, "Two fast metrics").
FAST_NOTE = (
    "Two fast metrics: fastVsBaseline = pass or better and faster than the task's baseline by more than "
    "fastTolerance (the paper's fast, \"performance gain over baseline\"); fastVsFrozen (named fast in older specs) = "
    "faster than the frozen program, or than the baseline where the frozen program cannot be timed. Best-of-k is "
    "taken per metric. A copy of a frozen program that already beats the baseline reaches fastVsBaseline, never "
    "fastVsFrozen."
)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class Estimate(_Model):
    """A value with its standard error and intervals (null where it cannot be established)."""

    value: float | None
    se: float | None = None
    low: float | None = None
    high: float | None = None
    bootstrap_low: float | None = None
    bootstrap_high: float | None = None
    p_value: float | None = Field(None, description="Two-sided, for value = 0, before correction (indices only).")
    dof: float | None = Field(None, description="Degrees of freedom of this interval's t reference.")
    holm: bool | None = Field(None, description="The interval excludes 0 after Holm's correction over the family.")


class Exclusion(_Model):
    programs: int
    reason: str


class GameResult(_Model):
    """Indices of one attribution game: one metric, one generation (or pooled)."""

    metric: str
    generation: int | None = Field(description="The generation; null when pooled over all of them.")
    pooled: bool
    evaluated: bool
    reason: str = ""
    estimator: Literal["exact", "msr"]
    estimator_note: str = Field("", description="Why the estimator differs from the one asked for (auto).")
    coalitions: int = Field(description="Coalitions with outcomes.")
    programs: int = Field(description="Frozen programs in the game (all coalitions, outcome established).")
    unit: Literal["program", "task"] = Field(description="The unit of replication.")
    units: int = Field(description="Units of replication behind the intervals (programs, or tasks pooled).")
    excluded_programs: int = 0
    exclusions: list[Exclusion] = Field(default_factory=list, description="Programs left out, by reason.")
    rollouts: int
    samples: int = Field(0, description="k of best-of-k.")
    balance: str = Field("", description="Unequal sample counts and how they were handled; empty if balanced.")
    dof: float | None = Field(None, description="Nominal degrees of freedom, units - 1 + prior; each estimate's "
                                                "own (Satterthwaite, never more) is its `dof`.")
    interval_note: str = Field("", description="Why intervals are missing, when they are.")
    values: dict[str, Estimate] = Field(description="v(S) per coalition.")
    banzhaf: dict[str, Estimate]
    interactions: dict[str, Estimate] = Field(description="Banzhaf interactions of the requested order.")
    shapley: dict[str, Estimate] | None = Field(None, description="Exact estimator only.")
    moebius: dict[str, Estimate] | None = Field(None, description="Exact estimator only.")


class ControlResult(_Model):
    """Rates of a control arm (no feedback, randomized feedback, dummy plan, ...)."""

    arm: str
    metric: str
    generation: int | None
    pooled: bool
    evaluated: bool
    programs: int = 0
    excluded_programs: int = 0
    rates: dict[str, Estimate] = Field(description="Rate per coalition the arm was run with.")


class AttributionResult(_Model):
    players: list[str]
    metrics: list[str]
    confidence: float
    bootstrap: int = Field(description="Bootstrap replicates (0: t-intervals only).")
    order: int = Field(description="Order of the reported interactions.")
    unchanged: Literal["count", "exclude"] = Field("count", description="Unchanged copies counted or left out.")
    holm_family: int = Field(0, description="Indices in the Holm family (Banzhaf values and interactions).")
    games: list[GameResult]
    controls: list[ControlResult]
    notes: list[str] = Field(default_factory=lambda: list(NOTES))


# ------------------------------------------------------------------------------ plain game indices


def _keyed(players: Sequence[str], masks: np.ndarray, values: FloatArray) -> dict[str, float]:
    return {coalition_key(int(m), players): float(x) for m, x in zip(masks, values, strict=True)}


def check_order(order: int, n: int) -> None:
    """Orders 1..n; the default pairs are allowed with one player (there are just none to report)."""
    if not 1 <= order <= max(n, 2):
        raise ValueError(f"order must be between 1 and the number of players ({n}), got {order}")


def game_indices(game: Game, order: int = 2, shapley_interactions: bool = False) -> dict[str, object]:
    """{"players", "banzhaf", "interactions", "shapley", "moebius"} of an exact game, as plain floats."""
    n, p, v = game.n, game.players, game.values
    check_order(order, n)
    table = tf.banzhaf_interaction_table(v)
    m = tf.moebius(v)
    out: dict[str, object] = {
        "players": list(p),
        "banzhaf": _keyed(p, masks_of_order(n, 1), table[masks_of_order(n, 1)]),
        "interactions": _keyed(p, masks_of_order(n, order), table[masks_of_order(n, order)]),
        "shapley": dict(zip(p, map(float, tf.shapley_values(v, m)), strict=True)),
        "moebius": _keyed(p, np.arange(1 << n), m),
    }
    if shapley_interactions:
        out["shapleyInteractions"] = _keyed(p, masks_of_order(n, order), tf.shapley_interactions(v, order, m))
    return out


# ------------------------------------------------------------------------------ from outcome records


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass
class _Part:
    """One family of estimates of a game (values, banzhaf, ...): keys, point, se, interval, p-value, dof,
    bootstrap interval."""

    keys: list[str]
    iv: Intervals
    boot: tuple[FloatArray, FloatArray] | None = None
    tested: bool = False  # in the Holm family


def _estimates(part: _Part) -> dict[str, Estimate]:
    iv = part.iv
    out = {}
    boot_shown = (part.boot[1] > part.boot[0]) if part.boot is not None else np.zeros(len(part.keys), bool)
    for i, key in enumerate(part.keys):
        ok = math.isfinite(iv.estimate[i]) and math.isfinite(iv.se[i])
        out[key] = Estimate(
            value=_num(iv.estimate[i]),
            se=_num(iv.se[i]) if ok else None,
            low=_num(iv.low[i]) if ok else None,
            high=_num(iv.high[i]) if ok else None,
            # A zero-width bootstrap interval (every resample alike: no unit succeeds, say) claims certainty the
            # data do not give: left out.
            bootstrap_low=_num(part.boot[0][i]) if boot_shown[i] else None,
            bootstrap_high=_num(part.boot[1][i]) if boot_shown[i] else None,
            p_value=_num(iv.p_value[i]) if part.tested and ok else None,
            dof=_num(iv.dof[i]) if ok else None,
        )
    return out


def _null(keys: Sequence[str]) -> dict[str, Estimate]:
    return {k: Estimate(value=None) for k in keys}


@dataclass
class GameUnits:
    """A game's included programs, averaged into units of replication."""

    rates: FloatArray  # (J, C): each unit's rate per coalition (mean over its programs' rollout means)
    weights: FloatArray  # (J,): programs per unit
    trials: FloatArray  # (C,): program-rollout outcomes per coalition
    successes: FloatArray  # (C,)
    programs: int
    exclusions: list[Exclusion]
    unit_trials: FloatArray  # (J, C): each unit's program-rollout outcomes per coalition
    names: tuple[str, ...] = ()  # (J,): each unit's name (ProgramOutcomes.unit_names): runs pair by it (study.py)


def game_units(po: ProgramOutcomes, players: Sequence[str]) -> GameUnits:
    """Programs with an established outcome in every coalition and rollout they have; the rest leave the
    game (the design stays paired), counted by reason."""
    has_all = po.present.any(axis=2).all(axis=1)
    established = (po.known | ~po.present).all(axis=(1, 2))
    include = has_all & established
    # Programs known only because every sample failed below the cap go with the capped ones that left.
    with_capped = include & po.capped & bool((po.capped & ~established).any())
    include &= ~with_capped
    reasons: Counter[str] = Counter()
    for g in np.flatnonzero(~include):
        if not established[g]:
            reasons[f"not established: {po.unknown.get(int(g), 'unknown')}"] += 1
        elif with_capped[g]:
            reasons["evaluated no further than the programs left out above (every sample failed before), so left "
                    "out with them: keeping only these would select by outcome"] += 1
        else:
            missing = [coalition_key(int(m), players) or "(none)" for m in po.masks[~po.present[g].any(axis=1)]]
            shown = ", ".join(repr(k) for k in missing[:3]) + (" and more" if len(missing) > 3 else "")
            reasons[f"no outcomes under coalition {shown} (units missing or failed)"] += 1
    exclusions = [Exclusion(programs=c, reason=r) for r, c in reasons.most_common()]
    present = po.present[include]
    hits = (po.reached & po.present)[include]
    with np.errstate(invalid="ignore", divide="ignore"):
        per_program = hits.sum(axis=2) / present.sum(axis=2)  # (G, C) mean over rollouts
    unit_ids, unit = np.unique(po.unit[include], return_inverse=True)
    weights = np.bincount(unit.reshape(-1), minlength=len(unit_ids)).astype(np.float64)
    rates = np.zeros((len(unit_ids), po.masks.size))
    np.add.at(rates, unit.reshape(-1), per_program)
    rates /= np.maximum(weights, 1)[:, None]
    unit_trials = np.zeros_like(rates)
    np.add.at(unit_trials, unit.reshape(-1), present.sum(axis=2))
    return GameUnits(rates, weights, present.sum(axis=(0, 2)).astype(np.float64),
                  hits.sum(axis=(0, 2)).astype(np.float64), int(include.sum()), exclusions, unit_trials,
                  tuple(po.unit_names[int(i)] for i in unit_ids))


def _nominal_dof(u: GameUnits) -> float:
    return len(u.weights) - 1 + PRIOR_UNITS if len(u.weights) > 1 else 0.0


def _rate_part(u: GameUnits, keys: list[str], confidence: float) -> _Part:
    levels = unit_levels(u.rates, u.unit_trials, confidence)
    return _Part(keys, contrast_intervals(rate_contrasts(u.rates, u.trials, u.unit_trials), u.weights, levels,
                                          u.programs, confidence))


def _boot_rates(u: GameUnits, replicates: int, rng: np.random.Generator) -> FloatArray:
    """(B, C) rates with whole units resampled (all their coalitions together)."""
    w = unit_weights(len(u.weights), replicates, rng) * u.weights
    return (w @ u.rates) / w.sum(axis=1, keepdims=True)


def _exact_parts(u: GameUnits, n: int, order: int, confidence: float, replicates: int, seed: int,
                 keys: dict[str, list[str]]) -> dict[str, _Part]:
    singles, pairs = masks_of_order(n, 1), masks_of_order(n, order)
    sizes = [n, len(pairs), n, 1 << n]

    def statistic(v: FloatArray) -> FloatArray:
        table = tf.banzhaf_interaction_table(v)
        m = tf.moebius(v)
        return np.concatenate([table[..., singles], table[..., pairs], tf.shapley_values(v, m), m], axis=-1)

    contrasts = exact_contrasts(u.rates, u.trials, u.unit_trials, n, order)
    iv = contrast_intervals(contrasts, u.weights, unit_levels(u.rates, u.unit_trials, confidence), u.programs,
                            confidence, changing_units(u.rates))
    # The point values stay the transforms' own (shapiq is their oracle); the contrasts agree to rounding.
    w = u.weights / u.weights.sum()
    iv = Intervals(w @ statistic(u.rates), iv.se, iv.low, iv.high, iv.p_value, iv.dof)
    boot = None
    if replicates and len(u.weights) > 1:
        low, high, _ = percentile_interval(statistic(_boot_rates(u, replicates, np.random.default_rng(seed))),
                                           confidence)
        boot = list(zip(np.split(low, np.cumsum(sizes)[:-1]), np.split(high, np.cumsum(sizes)[:-1]), strict=True))
    names = ["banzhaf", "interactions", "shapley", "moebius"]
    cuts = np.cumsum(sizes)[:-1]
    pieces = [np.split(x, cuts) for x in (iv.estimate, iv.se, iv.low, iv.high, iv.p_value, iv.dof)]
    return {name: _Part(keys[name], Intervals(*(x[i] for x in pieces)), boot[i] if boot else None,
                        name in ("banzhaf", "interactions"))
            for i, name in enumerate(names)}


def _msr_parts(u: GameUnits, masks: np.ndarray, n: int, order: int, confidence: float, replicates: int, seed: int,
               keys: dict[str, list[str]]) -> tuple[dict[str, _Part], float, str]:
    """MSR's Banzhaf values and interactions with the exact estimator's interval: each is a contrast of two mean
    rates over the coalitions present (`msr.msr_coefficients`), so `contrast_intervals` applies as it is; with
    every coalition present once it is the exact interval. When the coalitions are a sample, drawing them adds
    the variance of each group mean (`msr.sampling_variance`). (The previous value -+ t se covered the largest
    effect 90-93 % at low rates up to 24 programs, missing on one side; docs/attribution.md, bench/coverage.py.)"""
    sampled = masks.size < 1 << n
    v_hat = (u.weights @ u.rates) / u.weights.sum()
    levels = unit_levels(u.rates, u.unit_trials, confidence)
    changing = changing_units(u.rates)
    parts, note = {}, ""
    rng = np.random.default_rng(seed)
    for name, k in (("banzhaf", 1), ("interactions", order)):
        coef = msr_coefficients(masks, n, k)
        ok = np.isfinite(coef).all(axis=0)
        contrasts = coefficient_contrasts(u.rates, u.trials, u.unit_trials, np.where(ok, coef, 0.0))
        extra = sampling_variance(masks, v_hat, n, k) if sampled else None
        with np.errstate(invalid="ignore", divide="ignore"):  # an index with an empty group: NaN below
            iv = contrast_intervals(contrasts, u.weights, levels, u.programs, confidence, changing, extra)
        iv = Intervals(*(np.where(ok, x, np.nan) for x in (iv.estimate, iv.se, iv.low, iv.high, iv.p_value, iv.dof)))
        boot = None
        if replicates and len(u.weights) > 1:
            rates = _boot_rates(u, replicates, rng)
            cw = rng.multinomial(masks.size, np.full(masks.size, 1 / masks.size), replicates) if sampled else None
            low, high, finite = percentile_interval(msr_interactions(masks, rates, n, k, cw)[0], confidence)
            if finite >= MIN_FINITE_REPLICATES * replicates:
                boot = (low, high)
            else:
                note = (f"bootstrap interval left out: only {finite} of {replicates} replicates drew every "
                        "group of coalitions an index needs")
        parts[name] = _Part(keys[name], iv, boot, True)
    return parts, _nominal_dof(u), note


def attribute_game(
    po: ProgramOutcomes,
    players: Sequence[str],
    metric: str,
    generation: int | None,
    *,
    estimator: Estimator = "auto",
    order: int = 2,
    confidence: float = 0.95,
    replicates: int = 1000,
    seed: int = 0,
    bootstrap_min_units: float = BOOTSTRAP_MIN_UNITS,
) -> GameResult:
    """One game's indices with intervals over its units of replication.

    `exact` with a coalition missing does not switch: the game is not evaluated and names the coalition.
    `auto` switches to MSR there and says so in `estimatorNote`."""
    n = len(players)
    complete = po.masks.size == 1 << n
    chosen: Literal["exact", "msr"] = "msr" if estimator == "msr" or (estimator == "auto" and not complete) else "exact"
    missing = sorted(set(range(1 << n)) - set(po.masks.tolist()))
    missing_text = (", ".join(repr(coalition_key(m, players)) for m in missing[:5])
                    + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    estimator_note = (f"auto: MSR, because no outcomes for coalition {missing_text}"
                      if estimator == "auto" and not complete else "")
    keys = {
        "banzhaf": [coalition_key(int(m), players) for m in masks_of_order(n, 1)],
        "interactions": [coalition_key(int(m), players) for m in masks_of_order(n, order)],
        "shapley": [coalition_key(int(m), players) for m in masks_of_order(n, 1)],
        "moebius": [coalition_key(m, players) for m in range(1 << n)],
    }
    value_keys = [coalition_key(int(m), players) for m in po.masks]
    u = game_units(po, players)
    unit = po.unit_kind
    common = dict(
        metric=metric, generation=generation, pooled=generation is None, estimator=chosen,
        estimator_note=estimator_note, coalitions=int(po.masks.size), programs=u.programs, unit=unit,
        units=len(u.weights), excluded_programs=len(po.programs) - u.programs, exclusions=u.exclusions,
        rollouts=int(po.rollouts.size), samples=po.samples, balance=po.balance,
    )

    def null(reason: str) -> GameResult:
        return GameResult(
            **common, evaluated=False, reason=reason, values=_null(value_keys), banzhaf=_null(keys["banzhaf"]),
            interactions=_null(keys["interactions"]),
            shapley=_null(keys["shapley"]) if chosen == "exact" else None,
            moebius=_null(keys["moebius"]) if chosen == "exact" else None,
        )

    if chosen == "exact" and not complete:
        return null(f"the exact estimator needs every coalition; no outcomes for {missing_text} "
                    f"({len(missing)} of {1 << n} missing; estimator auto or msr would use the coalitions present, "
                    "as a sample)")
    if u.programs == 0:
        why = "; ".join(f"{e.programs} program(s): {e.reason}" for e in u.exclusions[:3])
        return null(f"{metric} could not be established for any program ({why})")
    values = _rate_part(u, value_keys, confidence)
    boot_note = ""
    if replicates and 1 < len(u.weights) < bootstrap_min_units:
        boot_note = (f"bootstrap interval not shown: it covers less than it claims with {len(u.weights)} {unit}s "
                     "(in simulation, 56-94 % at 4 to 48 units; docs/attribution.md)")
        replicates = 0
    if replicates and len(u.weights) > 1:
        low, high, _ = percentile_interval(_boot_rates(u, replicates, np.random.default_rng(seed)), confidence)
        values.boot = (low, high)
    if chosen == "exact":
        parts = _exact_parts(u, n, order, confidence, replicates, seed, keys)
    else:
        parts, _, msr_note = _msr_parts(u, po.masks, n, order, confidence, replicates, seed, keys)
        boot_note = boot_note or msr_note
    dof = _nominal_dof(u)
    interval_note = boot_note
    if len(u.weights) < 2:
        interval_note = (f"no interval: one {unit} ({u.programs} program(s)); intervals come from the "
                         f"variation between {unit}s, and one shows none")
    elif few_changing(changing := changing_units(u.rates), len(u.weights)):
        widened = ("the intervals of differences are widened to hold their t-interval on that few" if chosen == "exact"
                   else "MSR's t-intervals can undercover on that few")
        interval_note = "; ".join(x for x in (interval_note, (
            f"exploratory: only {changing} of {len(u.weights)} {unit}s change between coalitions; {widened} "
            "(docs/attribution.md)")) if x)
    return GameResult(
        **common, evaluated=True, dof=dof if dof > 0 else None, interval_note=interval_note,
        values=_estimates(values), **{name: _estimates(part) for name, part in parts.items()},
    )


def _control(po: ProgramOutcomes, arm: str, players: Sequence[str], metric: str, generation: int | None,
             confidence: float) -> ControlResult:
    keys = [coalition_key(int(m), players) for m in po.masks]
    u = game_units(po, players)
    common = dict(arm=arm, metric=metric, generation=generation, pooled=generation is None, programs=u.programs,
                  excluded_programs=len(po.programs) - u.programs)
    if u.programs == 0:
        return ControlResult(**common, evaluated=False, rates=_null(keys))
    return ControlResult(**common, evaluated=True, rates=_estimates(_rate_part(u, keys, confidence)))


def mark_holm(games: Sequence[GameResult], confidence: float) -> int:
    """Mark every Banzhaf value and interaction of `games` that stays significant after Holm; the family size."""
    family = [est for g in games if g.evaluated for part in (g.banzhaf, g.interactions) for est in part.values()
              if est.p_value is not None]
    rejected = holm([e.p_value for e in family], 1 - confidence)
    for est, r in zip(family, rejected, strict=True):
        est.holm = bool(r)
    return len(family)


def attribute_tables(
    tables: OutcomeTables,
    *,
    estimator: Estimator = "auto",
    order: int = 2,
    confidence: float = 0.95,
    replicates: int = 1000,
    seed: int = 0,
    bootstrap_min_units: float = BOOTSTRAP_MIN_UNITS,
) -> AttributionResult:
    """Every game (metric x generation and pooled) and every control arm's rates."""
    check_order(order, len(tables.players))
    games, controls = [], []
    for (arm, metric, generation), po in tables.games.items():
        if arm == GAME_ARM:
            games.append(attribute_game(
                po, tables.players, metric, generation, estimator=estimator, order=order,
                confidence=confidence, replicates=replicates, seed=seed, bootstrap_min_units=bootstrap_min_units,
            ))
        else:
            controls.append(_control(po, arm, tables.players, metric, generation, confidence))
    family = mark_holm(games, confidence)
    return AttributionResult(
        players=list(tables.players), metrics=list(tables.metrics), confidence=confidence,
        bootstrap=replicates, order=order, unchanged=tables.unchanged, holm_family=family, games=games,
        controls=controls,
        notes=NOTES + ([FAST_NOTE] if {"fastVsBaseline", "fastVsFrozen"} & set(tables.metrics) else []),
    )
