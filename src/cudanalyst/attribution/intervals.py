"""Uncertainty of the indices: analytic standard errors and a bootstrap within each coalition.

Each v(S) is an independent rate (different LLM samples per coalition), and every index is linear in v,
so Var(index) = sum_S c_S^2 Var(v(S)) with the index's coefficients c_S. For the butterfly transforms the
squared coefficients factorise the same way, so the variances come from the same kind of O(n 2^n) pass
applied to Var(v). The bootstrap resamples programs within each coalition and rollout (a binomial draw
per cell, which is the same thing for 0/1 outcomes) and recomputes the indices on every replicate.
"""

from __future__ import annotations

from collections.abc import Callable
from math import factorial
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from cudanalyst.attribution.games import FloatArray, masks_of_order, popcounts
from cudanalyst.attribution.transforms import _halves, _player_sums, n_players_of
from cudanalyst.attribution.values import RateCounts

# Replicates are computed in batches so that B x 2^n floats stay near this many bytes.
_BATCH_BYTES = 64 << 20


def z_value(confidence: float) -> float:
    """Two-sided normal quantile, e.g. 1.96 for 0.95."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf((1 + confidence) / 2)


def moebius_variance(variances: npt.ArrayLike) -> FloatArray:
    """Var m(S) = sum over T <= S of Var v(T) (coefficients are +-1)."""
    a = np.array(variances, dtype=np.float64)
    for lo, hi in _halves(a, n_players_of(a)):
        hi += lo
    return a


def banzhaf_interaction_variance_table(variances: npt.ArrayLike) -> FloatArray:
    """Var I_B(S) for every S: per player the squared coefficients are lo: 1/4, 1/4 and hi: 1, 1."""
    a = np.array(variances, dtype=np.float64)
    for lo, hi in _halves(a, n_players_of(a)):
        hi += lo
        np.multiply(hi, 0.25, out=lo)
    return a


def _shapley_weight(n: int, order: int, outside: npt.NDArray[np.int64]) -> FloatArray:
    """Coefficient size of v(T u L) in the Shapley interaction of an order-`order` coalition, |T| = outside."""
    fact = np.array([factorial(k) for k in range(n + 1)], dtype=np.float64)
    return fact[n - outside - order] * fact[outside] / fact[n - order + 1]


def shapley_value_variance(variances: npt.ArrayLike) -> FloatArray:
    """Var phi_i = sum over S without i of w(|S|)^2 (Var v(S+i) + Var v(S))."""
    var = np.asarray(variances, dtype=np.float64)
    n = n_players_of(var)
    size = popcounts(n)
    # Entry S+i carries |S+i| - 1 = |S| players besides i; entry S carries |S|.
    w2_lo = _shapley_weight(n, 1, np.minimum(size, n - 1)) ** 2
    w2_hi = _shapley_weight(n, 1, np.maximum(size - 1, 0)) ** 2
    lo_part = _player_sums_without(var * w2_lo, n)
    hi_part = _player_sums(var * w2_hi, n)
    return lo_part + hi_part


def _player_sums_without(weights: FloatArray, n: int) -> FloatArray:
    return np.stack([lo.sum(axis=(-2, -1)) for lo, _ in _halves(weights, n)], axis=-1)


def shapley_interaction_variance(variances: npt.ArrayLike, order: int) -> FloatArray:
    """Var of each Shapley interaction of one order (aligned with `masks_of_order`).

    Each v(U) enters I_Sh(S) once, with weight depending on |U \\ S|; the loop is over the C(n, order)
    indices, each a vectorised sum over all coalitions.
    """
    var = np.asarray(variances, dtype=np.float64)
    n = n_players_of(var)
    size = popcounts(n)
    universe = np.arange(1 << n)
    out = []
    for s in masks_of_order(n, order):
        outside = size[universe & ~s]
        out.append((var * _shapley_weight(n, order, outside) ** 2).sum(axis=-1))
    return np.stack(out, axis=-1) if out else np.zeros(var.shape[:-1] + (0,))


def bootstrap_rates(counts: RateCounts, replicates: int, rng: np.random.Generator) -> FloatArray:
    """Replicates of v (shape (B, C)): programs resampled with replacement within coalition and rollout."""
    totals = counts.totals
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(totals > 0, counts.successes / np.maximum(totals, 1), 0.0)
    draws = rng.binomial(totals, p, size=(replicates, *totals.shape))
    present = totals > 0
    per_rollout = np.where(present, draws / np.maximum(totals, 1), 0.0)
    return per_rollout.sum(axis=-1) / np.maximum(present.sum(axis=-1), 1)


def bootstrap_percentiles(
    statistic: Callable[[FloatArray], FloatArray],
    counts: RateCounts,
    replicates: int,
    confidence: float,
    seed: int = 0,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(low, high, bootstrap standard error) of statistic(v) over replicates; statistic maps (B, C) -> (B, K)."""
    rng = np.random.default_rng(seed)
    batch = max(1, _BATCH_BYTES // (8 * max(1, counts.masks.size)))
    parts = []
    done = 0
    while done < replicates:
        take = min(batch, replicates - done)
        parts.append(statistic(bootstrap_rates(counts, take, rng)))
        done += take
    stats = np.concatenate(parts, axis=0)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha], axis=0)
    return low, high, stats.std(axis=0, ddof=1)
