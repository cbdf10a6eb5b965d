"""Design help: the expected half-width of the Banzhaf intervals before a run, and the units it needs.

The interval comes from the variation between units of replication (`contrast.py`); near rate 1/2 it is the
t-interval over units, so its half-width is t * sd / sqrt(J), where sd is the spread of one unit's own
Banzhaf value. At rates near 0 or 1 the real interval is asymmetric (longer towards 1/2) and its degrees of
freedom fall when units differ in rate, so this is a guide there, not a promise. That spread has two parts:
how much the true effect differs between programs (`spread`, assumed or taken from a pilot run), and
the Bernoulli noise of the unit's own rates, rate (1 - rate) / (R * programs per unit) * sum_S c_S^2,
with sum_S c_S^2 = 2^-(n-2) for a Banzhaf value of n players.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.intervals import PRIOR_UNITS, t_quantile
from cudanalyst.attribution.values import GAME_ARM, OutcomeTables, ProgramOutcomes

# Assumed spread (SD) between programs of a program's own Banzhaf value, when no pilot run is given:
# effects of +-0.15 from one program to the next are the order the H200 runs showed per task.
DEFAULT_SPREAD = 0.15
DEFAULT_RATE = 0.5  # the noisiest rate: the half-width is then an upper bound for that spread
TARGET_HALF_WIDTH = 0.05
MAX_UNITS = 100_000


def unit_sd(spread: float, rate: float, rollouts: int, players: int, programs_per_unit: int = 1) -> float:
    """SD of one unit's own Banzhaf value: effect spread and its own Bernoulli noise."""
    noise = rate * (1 - rate) / (rollouts * programs_per_unit) / 2 ** (players - 2)
    return math.sqrt(spread**2 + noise)


def half_width(units: int, sd: float, confidence: float = 0.95) -> float | None:
    """Expected half-width with `units` units (None below two: no interval)."""
    if units < 2:
        return None
    return t_quantile(confidence, units - 1 + PRIOR_UNITS) * sd / math.sqrt(units)


def units_needed(sd: float, target: float = TARGET_HALF_WIDTH, confidence: float = 0.95) -> int | None:
    """The fewest units whose expected half-width is at most `target` (None beyond MAX_UNITS)."""
    lo, hi = 2, MAX_UNITS
    if (half_width(hi, sd, confidence) or math.inf) > target:
        return None
    while lo < hi:  # the half-width falls with units: bisect
        mid = (lo + hi) // 2
        if (half_width(mid, sd, confidence) or math.inf) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class Spread:
    """Per metric: the spread of per-program Banzhaf values and the mean rate, with where they came from."""

    metric: str
    spread: float
    rate: float
    source: str


def complete_rates(po: ProgramOutcomes) -> tuple[np.ndarray, np.ndarray]:
    """A game's programs with every coalition known and present, and their rate per coalition (programs x
    coalitions): what a pilot's spread is computed from (here and in cudanalyst.sizing)."""
    ok = (po.known | ~po.present).all(axis=(1, 2)) & po.present.any(axis=2).all(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = ((po.reached & po.present).sum(axis=2) / po.present.sum(axis=2))[ok]
    return ok, rate


def pilot_spreads(tables: OutcomeTables) -> list[Spread]:
    """From an earlier run's outcomes: per metric, the between-program spread of each program's own Banzhaf
    value (the largest over players, from the per-generation games), less the pilot's own Bernoulli noise."""
    out = []
    n = len(tables.players)
    for metric in tables.metrics:
        variances, rates, noise = [], [], []
        for (arm, m, scope), po in tables.games.items():
            if arm != GAME_ARM or m != metric or scope is None or po.masks.size != 1 << n:
                continue
            ok, rate = complete_rates(po)
            if ok.sum() < 2:
                continue
            values = tf.banzhaf_values(rate)
            variances.append(values.var(axis=0, ddof=1).max())
            rates.append(float(rate.mean()))
            rollouts = max(1, po.rollouts.size)
            noise.append(rates[-1] * (1 - rates[-1]) / rollouts / 2 ** (n - 2))
        if variances:
            spread = math.sqrt(max(float(np.mean(variances)) - float(np.mean(noise)), 0.0))
            out.append(Spread(metric, spread, float(np.mean(rates)), "pilot"))
    return out


def design_rows(spreads: Sequence[Spread], *, players: int, rollouts: int, programs_per_generation: int,
                tasks: int, generations: int, confidence: float) -> list[dict[str, object]]:
    """Per metric: expected half-width per generation (units: programs) and pooled (units: tasks), and the
    units each needs for TARGET_HALF_WIDTH."""
    rows = []
    per_gen_units = programs_per_generation * tasks
    for s in spreads:
        sd_gen = unit_sd(s.spread, s.rate, rollouts, players)
        sd_pool = unit_sd(s.spread, s.rate, rollouts, players, programs_per_generation * generations)
        hw_gen, hw_pool = half_width(per_gen_units, sd_gen, confidence), half_width(tasks, sd_pool, confidence)
        rows.append({
            "metric": s.metric, "spread": round(s.spread, 4), "rate": round(s.rate, 3), "source": s.source,
            "perGeneration": {"units": per_gen_units, "unit": "program",
                              "halfWidth": None if hw_gen is None else round(hw_gen, 3),
                              "programsFor0.05": units_needed(sd_gen, confidence=confidence)},
            "pooled": {"units": tasks, "unit": "task", "halfWidth": None if hw_pool is None else round(hw_pool, 3),
                       "tasksFor0.05": units_needed(sd_pool, confidence=confidence)},
        })
    return rows
