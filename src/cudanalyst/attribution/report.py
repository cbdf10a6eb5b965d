"""The attribution result as JSON-able records: from a game table, or from outcome records with intervals."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.games import FloatArray, Game, coalition_key, masks_of_order
from cudanalyst.attribution.intervals import (
    banzhaf_interaction_variance_table,
    bootstrap_percentiles,
    bootstrap_rates,
    moebius_variance,
    shapley_value_variance,
    z_value,
)
from cudanalyst.attribution.msr import msr_interactions
from cudanalyst.attribution.values import GAME_ARM, OutcomeTables, RateCounts

Estimator = Literal["exact", "msr", "auto"]

NOTES = [
    "Metrics are cumulative: compiled = compile or better, pass = pass or fast, fast = fast "
    "(the authors' code counts pass as exactly pass in one place; we use the cumulative rate everywhere).",
    "v(S) = mean over rollouts of the fraction of frozen programs whose best-of-k sample reaches the metric; "
    "pooled = the same over the programs of every generation.",
    "Intervals: value +- z * SE (analytic, rates as Bernoulli means within each coalition and rollout); "
    "bootstrapLow/High: percentile interval, programs resampled within each coalition and rollout.",
    "A metric the evaluation could not establish (e.g. pass/fast with no GPU) is null, never guessed.",
]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class Estimate(_Model):
    """A value with its analytic standard error and intervals (null where it cannot be established)."""

    value: float | None
    se: float | None = None
    low: float | None = None
    high: float | None = None
    bootstrap_low: float | None = None
    bootstrap_high: float | None = None


class GameResult(_Model):
    """Indices of one attribution game: one metric, one generation (or pooled)."""

    metric: str
    generation: int | None = Field(description="The generation; null when pooled over all of them.")
    pooled: bool
    evaluated: bool
    reason: str = ""
    estimator: Literal["exact", "msr"]
    coalitions: int = Field(description="Coalitions with outcomes.")
    programs: int = Field(description="Frozen programs counted per coalition and rollout (the most of any).")
    rollouts: int
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
    rates: dict[str, Estimate] = Field(description="Rate per coalition the arm was run with.")


class AttributionReport(_Model):
    players: list[str]
    metrics: list[str]
    confidence: float
    bootstrap: int = Field(description="Bootstrap replicates (0: analytic intervals only).")
    order: int = Field(description="Order of the reported interactions.")
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


def _estimates(
    keys: Sequence[str], value: FloatArray, se: FloatArray, z: float, boot: tuple[FloatArray, FloatArray] | None
) -> dict[str, Estimate]:
    out = {}
    for i, key in enumerate(keys):
        ok = math.isfinite(value[i]) and math.isfinite(se[i])
        out[key] = Estimate(
            value=_num(value[i]),
            se=_num(se[i]) if ok else None,
            low=_num(value[i] - z * se[i]) if ok else None,
            high=_num(value[i] + z * se[i]) if ok else None,
            bootstrap_low=_num(boot[0][i]) if boot is not None else None,
            bootstrap_high=_num(boot[1][i]) if boot is not None else None,
        )
    return out


def _null(keys: Sequence[str]) -> dict[str, Estimate]:
    return {k: Estimate(value=None) for k in keys}


def _split(stat: FloatArray, sizes: Sequence[int]) -> list[FloatArray]:
    return np.split(stat, np.cumsum(sizes)[:-1], axis=-1)


def _exact_game(
    counts: RateCounts, n: int, order: int, confidence: float, replicates: int, seed: int
) -> dict[str, tuple[np.ndarray, FloatArray, FloatArray, tuple[FloatArray, FloatArray] | None]]:
    v, var = counts.rates(), counts.variances()
    singles, pairs, everyone = masks_of_order(n, 1), masks_of_order(n, order), np.arange(1 << n)

    def statistic(batch: FloatArray) -> FloatArray:
        table = tf.banzhaf_interaction_table(batch)
        m = tf.moebius(batch)
        return np.concatenate(
            [table[..., singles], table[..., pairs], tf.shapley_values(batch, m), m], axis=-1
        )

    vtable = banzhaf_interaction_variance_table(var)
    parts = {
        "banzhaf": (singles, tf.banzhaf_values(v), np.sqrt(vtable[singles])),
        "interactions": (pairs, tf.banzhaf_interactions(v, order), np.sqrt(vtable[pairs])),
        "shapley": (singles, tf.shapley_values(v), np.sqrt(shapley_value_variance(var))),
        "moebius": (everyone, tf.moebius(v), np.sqrt(moebius_variance(var))),
    }
    boots: list[tuple[FloatArray, FloatArray] | None] = [None] * 4
    if replicates:
        low, high, _ = bootstrap_percentiles(statistic, counts, replicates, confidence, seed)
        sizes = [n, len(pairs), n, 1 << n]
        boots = list(zip(_split(low, sizes), _split(high, sizes), strict=True))
    return {k: (*parts[k], boots[i]) for i, k in enumerate(parts)}


def _msr_game(
    counts: RateCounts, n: int, order: int, confidence: float, replicates: int, seed: int
) -> dict[str, tuple[np.ndarray, FloatArray, FloatArray, tuple[FloatArray, FloatArray] | None]]:
    v = counts.rates()
    out = {}
    for name, k in (("banzhaf", 1), ("interactions", order)):
        est, se = msr_interactions(counts.masks, v, n, k)
        boot = None
        if replicates:
            rng = np.random.default_rng(seed)
            # Resample coalitions (the MSR draw) and, within each, the programs.
            weights = rng.multinomial(counts.masks.size, np.full(counts.masks.size, 1 / counts.masks.size), replicates)
            stats = msr_interactions(counts.masks, bootstrap_rates(counts, replicates, rng), n, k, weights)[0]
            alpha = (1 - confidence) / 2
            with np.errstate(invalid="ignore"):
                boot = tuple(np.quantile(stats, [alpha, 1 - alpha], axis=0))
        out[name] = (masks_of_order(n, k), est, se, boot)
    return out


def attribute_counts(
    counts: RateCounts,
    players: Sequence[str],
    metric: str,
    generation: int | None,
    *,
    estimator: Estimator = "auto",
    order: int = 2,
    confidence: float = 0.95,
    replicates: int = 1000,
    seed: int = 0,
) -> GameResult:
    """One game's indices with intervals."""
    n = len(players)
    complete = counts.masks.size == 1 << n
    chosen: Literal["exact", "msr"] = "exact" if estimator == "auto" and complete else (
        "msr" if estimator == "auto" else estimator
    )
    if chosen == "exact" and not complete:
        missing = sorted(set(range(1 << n)) - set(counts.masks.tolist()))
        raise ValueError(
            f"metric {metric}, generation {generation if generation is not None else 'pooled'}: the exact estimator "
            f"needs every coalition; no outcomes for {', '.join(repr(coalition_key(m, players)) for m in missing[:5])}"
            f"{' and more' if len(missing) > 5 else ''} (use the msr estimator for sampled coalitions)"
        )
    z = z_value(confidence)
    keys = {
        "banzhaf": [coalition_key(int(m), players) for m in masks_of_order(n, 1)],
        "interactions": [coalition_key(int(m), players) for m in masks_of_order(n, order)],
        "shapley": [coalition_key(int(m), players) for m in masks_of_order(n, 1)],
        "moebius": [coalition_key(m, players) for m in range(1 << n)],
    }
    value_keys = [coalition_key(int(m), players) for m in counts.masks]
    common = dict(
        metric=metric, generation=generation, pooled=generation is None, estimator=chosen,
        coalitions=int(counts.masks.size), programs=int(counts.totals.max()),
        rollouts=int(counts.rollouts.size),
    )
    if not counts.evaluated:
        return GameResult(
            **common, evaluated=False,
            reason=f"{metric} could not be established for every program (the evaluation stopped below it)",
            values=_null(value_keys), banzhaf=_null(keys["banzhaf"]), interactions=_null(keys["interactions"]),
            shapley=_null(keys["shapley"]) if chosen == "exact" else None,
            moebius=_null(keys["moebius"]) if chosen == "exact" else None,
        )
    v, se_v = counts.rates(), np.sqrt(counts.variances())
    compute: Callable[..., dict] = _exact_game if chosen == "exact" else _msr_game
    parts = compute(counts, n, order, confidence, replicates, seed)
    v_boot = None
    if replicates:
        low, high, _ = bootstrap_percentiles(lambda b: b, counts, replicates, confidence, seed)
        v_boot = (low, high)
    indices = {name: _estimates(keys[name], est, se, z, boot) for name, (_, est, se, boot) in parts.items()}
    return GameResult(**common, evaluated=True, values=_estimates(value_keys, v, se_v, z, v_boot), **indices)


def attribute_tables(
    tables: OutcomeTables,
    *,
    estimator: Estimator = "auto",
    order: int = 2,
    confidence: float = 0.95,
    replicates: int = 1000,
    seed: int = 0,
) -> AttributionReport:
    """Every game (metric x generation and pooled) and every control arm's rates."""
    check_order(order, len(tables.players))
    games, controls = [], []
    z = z_value(confidence)
    for (arm, metric, generation), counts in tables.counts.items():
        if arm == GAME_ARM:
            games.append(attribute_counts(
                counts, tables.players, metric, generation, estimator=estimator, order=order,
                confidence=confidence, replicates=replicates, seed=seed,
            ))
            continue
        keys = [coalition_key(int(m), tables.players) for m in counts.masks]
        rates = (
            _estimates(keys, counts.rates(), np.sqrt(counts.variances()), z, None)
            if counts.evaluated else _null(keys)
        )
        controls.append(ControlResult(
            arm=arm, metric=metric, generation=generation, pooled=generation is None,
            evaluated=counts.evaluated, rates=rates,
        ))
    return AttributionReport(
        players=list(tables.players), metrics=list(tables.metrics), confidence=confidence,
        bootstrap=replicates, order=order, games=games, controls=controls,
    )
