"""Exact game-theoretic indices from a table of v(S), by O(n 2^n) butterfly transforms.

Every index here is linear in v and factorises over players, so it is computed one player (bit) at a
time: view the table as (..., high bits, 2, low bits), and combine the halves "without i" (lo) and
"with i" (hi) in place. n such passes over the array, no loop over coalitions. A leading batch axis
is allowed everywhere (bootstrap replicates), the coalition axis is always the last one.

- Moebius:            hi -= lo                      m(S) = sum_{T<=S} (-1)^{|S-T|} v(T)
- Banzhaf interaction: hi -= lo; lo += hi / 2       I_B(S) = 2^-(n-|S|) sum_{T<=N-S} delta_S v(T)
                                                    (I_B of a singleton is the Banzhaf value)
- superset sum:       lo += hi                      used for Shapley interactions:
                                                    I_Sh(S) = sum_{T>=S} m(T) / (|T|-|S|+1)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from cudanalyst.attribution.games import FloatArray, masks_of_order, popcounts


def n_players_of(values: npt.ArrayLike) -> int:
    """n for a table whose last axis has 2^n entries."""
    size = np.shape(values)[-1]
    n = int(size).bit_length() - 1
    if size < 1 or 1 << n != size:
        raise ValueError(f"a game table needs 2^n entries on its last axis, got {size}")
    return n


def _halves(a: FloatArray, n: int) -> Iterator[tuple[FloatArray, FloatArray]]:
    """For each player i: views of the entries without i (lo) and with i (hi), same shape."""
    batch = a.shape[:-1]
    for i in range(n):
        view = a.reshape(*batch, 1 << (n - 1 - i), 2, 1 << i)
        yield view[..., 0, :], view[..., 1, :]


def _as_table(values: npt.ArrayLike) -> tuple[FloatArray, int]:
    """A fresh float64 copy to transform in place, and n."""
    a = np.array(values, dtype=np.float64, copy=True, order="C")
    return a, n_players_of(a)


def moebius(values: npt.ArrayLike) -> FloatArray:
    """Moebius coefficients (Harsanyi dividends) m(S) for every mask S."""
    a, n = _as_table(values)
    for lo, hi in _halves(a, n):
        hi -= lo
    return a


def from_moebius(coefficients: npt.ArrayLike) -> FloatArray:
    """The inverse of `moebius`: v(S) = sum over T <= S of m(T)."""
    a, n = _as_table(coefficients)
    for lo, hi in _halves(a, n):
        hi += lo
    return a


def superset_sum(values: npt.ArrayLike) -> FloatArray:
    """x'(S) = sum over T >= S of x(T)."""
    a, n = _as_table(values)
    for lo, hi in _halves(a, n):
        lo += hi
    return a


def banzhaf_interaction_table(values: npt.ArrayLike) -> FloatArray:
    """The Banzhaf interaction index of every coalition at once (entry S = I_B(S)).

    Entry 0 is the mean of v over all coalitions, singletons are Banzhaf values, pairs are the
    pairwise Banzhaf interactions, and so on for any order.
    """
    a, n = _as_table(values)
    scratch = np.empty(a.shape[:-1] + (a.shape[-1] // 2,))
    for lo, hi in _halves(a, n):
        hi -= lo
        half = scratch.reshape(hi.shape)
        np.multiply(hi, 0.5, out=half)
        lo += half
    return a


def banzhaf_values(values: npt.ArrayLike) -> FloatArray:
    """b_i = 2^-(n-1) sum over S without i of v(S+i) - v(S): mean of v with i minus mean without i."""
    a = np.asarray(values, dtype=np.float64)
    n = n_players_of(a)
    return np.stack([hi.mean(axis=(-2, -1)) - lo.mean(axis=(-2, -1)) for lo, hi in _halves(a, n)], axis=-1)


def banzhaf_interactions(values: npt.ArrayLike, order: int = 2) -> FloatArray:
    """Banzhaf interaction indices of one order, aligned with `masks_of_order(n, order)`."""
    n = n_players_of(values)
    return banzhaf_interaction_table(values)[..., masks_of_order(n, order)]


def _player_sums(weights: FloatArray, n: int) -> FloatArray:
    """For each player i, the sum of weights over the coalitions that contain i."""
    return np.stack([hi.sum(axis=(-2, -1)) for _, hi in _halves(weights, n)], axis=-1)


def shapley_values(values: npt.ArrayLike, coefficients: FloatArray | None = None) -> FloatArray:
    """phi_i = sum over T containing i of m(T) / |T| (pass `coefficients` when Moebius is at hand)."""
    n = n_players_of(values)
    m = moebius(values) if coefficients is None else coefficients
    size = popcounts(n)
    weights = np.divide(m, size, out=np.zeros_like(m), where=size > 0)
    return _player_sums(weights, n)


def shapley_interactions(
    values: npt.ArrayLike, order: int = 2, coefficients: FloatArray | None = None
) -> FloatArray:
    """Shapley interaction indices (Grabisch) of one order, aligned with `masks_of_order(n, order)`.

    I_Sh(S) = sum over T >= S of m(T) / (|T| - |S| + 1); for a fixed order the weight depends on |T|
    alone, so one superset-sum pass computes every coalition of that order.
    """
    n = n_players_of(values)
    m = moebius(values) if coefficients is None else coefficients
    size = popcounts(n)
    weights = np.divide(m, size - order + 1, out=np.zeros_like(m), where=size >= order)
    return superset_sum(weights)[..., masks_of_order(n, order)]
