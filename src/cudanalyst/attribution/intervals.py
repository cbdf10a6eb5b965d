"""Helpers of the intervals: normal and t quantiles, Agresti-Coull rates, Holm's step-down, the unit bootstrap, and the
analytic variances of the indices for independent rates.

The intervals themselves are `contrast.py`'s: every index (exact or MSR) is a contrast of two mean rates over the
units of replication (frozen programs; tasks pooled), its interval taken on their logit scale. Their prior is the
independent-Bernoulli variance at an Agresti-Coull adjusted rate worth `PRIOR_UNITS` units. The squared
coefficients of the indices factorise per player like the coefficients, so the variance tables below are O(n 2^n)
passes. See docs/attribution.md for the choice and its coverage.
"""

from __future__ import annotations

import warnings
from math import factorial
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

# scipy.special, not scipy.stats: the operator imports this maths, and scipy.stats is 73 MB of its memory.
from scipy import special

from cudanalyst.attribution.games import FloatArray, masks_of_order, popcounts
from cudanalyst.attribution.transforms import _halves, _player_sums, n_players_of

# Weight, in units, of the adjusted-proportion prior variance (tuned by the coverage simulation:
# tests/test_attribution_coverage.py; larger is more conservative with few units).
PRIOR_UNITS = 1.0


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


def adjusted_rate(successes: npt.ArrayLike, trials: npt.ArrayLike, confidence: float) -> FloatArray:
    """Agresti-Coull centre (x + z^2/2) / (n + z^2): never 0 or 1, so its p(1 - p) is never 0."""
    z2 = z_value(confidence) ** 2
    return (np.asarray(successes, dtype=np.float64) + z2 / 2) / (np.asarray(trials, dtype=np.float64) + z2)


def t_quantile(confidence: float, dof: float) -> float:
    """Two-sided Student t quantile (e.g. 2.20 for 0.95 at 11 degrees of freedom)."""
    z_value(confidence)  # the same check of the level
    return float(special.stdtrit(dof, (1 + confidence) / 2))


def holm(p: npt.ArrayLike, alpha: float) -> npt.NDArray[np.bool_]:
    """Holm's step-down: which hypotheses are rejected at family-wise level alpha (NaN: never)."""
    p = np.asarray(p, dtype=np.float64)
    rejected = np.zeros(p.shape, bool)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = order.size
    for rank, i in enumerate(order):
        if p[i] > alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def unit_weights(units: int, replicates: int, rng: np.random.Generator) -> FloatArray:
    """Bootstrap multiplicities (B, J): whole units drawn with replacement, all their coalitions together."""
    return rng.multinomial(units, np.full(units, 1 / units), size=replicates).astype(np.float64)


def percentile_interval(stats_: FloatArray, confidence: float) -> tuple[FloatArray, FloatArray, int]:
    """Percentile interval over the finite replicates (a replicate whose MSR group was not drawn is NaN),
    and how many replicates were finite, per column (the smallest)."""
    alpha = (1 - confidence) / 2
    finite = np.isfinite(stats_)
    with warnings.catch_warnings():  # an all-NaN column is reported as NaN, said elsewhere
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanquantile(stats_, [alpha, 1 - alpha], axis=0)
    return low, high, int(finite.sum(axis=0).min()) if stats_.size else 0
