"""Maximum Sample Reuse (Wang & Jia, AISTATS 2023) for Banzhaf values and interactions.

With coalitions drawn uniformly (each player in with probability 1/2), the Banzhaf interaction of a set
S of order k is an alternating sum over L <= S of E[v(U) | U n S = L]:

    I_B(S) = sum over L <= S of (-1)^(k - |L|) E[v(U) | U n S = L]

MSR estimates each conditional mean by the mean of v over *all* sampled coalitions in that group, so every
sample is reused for every index. With every coalition present once the group means are exact, and so is
the estimate. Shapley weights do not factorise this way, so MSR gives Banzhaf indices only.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cudanalyst.attribution.games import FloatArray, masks_of_order, popcounts

IntArray = npt.NDArray[np.int64]


def sample_coalitions(n: int, count: int, rng: np.random.Generator) -> IntArray:
    """`count` coalitions drawn uniformly with replacement, as masks."""
    bits = rng.integers(0, 2, size=(count, n), dtype=np.int64)
    return bits @ (np.int64(1) << np.arange(n, dtype=np.int64))


def group_matrix(masks: IntArray, n: int, order: int) -> tuple[FloatArray, FloatArray]:
    """One-hot (samples, targets x 2^order) of each sample's group L = U n S per target S, and the signs.

    The signs (targets x 2^order,) are (-1)^(order - |L|).
    """
    targets = masks_of_order(n, order)
    members = [[i for i in range(n) if s >> i & 1] for s in targets]
    # Group id of sample U for target S: the bits of U at S's members, packed (a software pext).
    group = np.zeros((masks.size, len(targets)), dtype=np.int64)
    for j in range(order):
        member_bit = np.array([m[j] for m in members], dtype=np.int64)
        group |= ((masks[:, None] >> member_bit[None, :]) & 1) << j
    width = 1 << order
    column = group + np.arange(len(targets))[None, :] * width
    onehot = np.zeros((masks.size, len(targets) * width))
    np.put_along_axis(onehot, column, 1.0, axis=1)
    signs = np.tile(np.where((order - popcounts(order)) % 2 == 0, 1.0, -1.0), len(targets))
    return onehot, signs


def msr_interactions(
    masks: npt.ArrayLike, values: npt.ArrayLike, n: int, order: int = 1, weights: npt.ArrayLike | None = None
) -> tuple[FloatArray, FloatArray]:
    """MSR estimates of the order-`order` Banzhaf indices (aligned with `masks_of_order`) and their SEs.

    `values` may carry a leading batch axis (bootstrap replicates), as may `weights` (multiplicities
    of the samples). An index whose groups are not all observed is NaN. The standard error treats the
    samples of each group as a random sample of that group (it includes the noise in v and the spread
    of v across coalitions): SE^2 = sum over groups of s_g^2 / n_g.
    """
    m = np.asarray(masks, dtype=np.int64)
    v = np.asarray(values, dtype=np.float64)
    w = np.ones(m.size) if weights is None else np.asarray(weights, dtype=np.float64)
    onehot, signs = group_matrix(m, n, order)
    width = 1 << order
    count = w @ onehot
    total = (w * v) @ onehot
    square = (w * v * v) @ onehot
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / count, np.nan)
        spread = np.where(count > 1, (square - count * mean**2) / (count - 1), np.nan)
        estimate = (signs * mean).reshape(*mean.shape[:-1], -1, width).sum(axis=-1)
        se = np.sqrt(np.maximum(spread / count, 0.0)).reshape(*mean.shape[:-1], -1, width)
        se = np.sqrt((se**2).sum(axis=-1))
    return estimate, se


def msr_coefficients(masks: npt.ArrayLike, n: int, order: int = 1) -> FloatArray:
    """(C, K) coefficient of each sampled coalition's v in each MSR index (aligned with `masks_of_order`):
    +-1/count_L in its group L, NaN columns where a group is empty. MSR is linear in v, so its indices are
    contrasts of two mean rates like the exact ones (`contrast.coefficient_contrasts`)."""
    m = np.asarray(masks, dtype=np.int64)
    onehot, signs = group_matrix(m, n, order)
    count = onehot.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_group = np.where(count > 0, onehot * signs / count, np.nan)
    return per_group.reshape(m.size, -1, 1 << order).sum(axis=-1)


def sampling_variance(masks: npt.ArrayLike, pooled: npt.ArrayLike, n: int, order: int = 1) -> tuple[FloatArray,
                                                                                                FloatArray]:
    """(Var A, Var B) of each MSR index's two means from drawing the coalitions (each (K,)): a group mean over
    count_L sampled coalitions has variance s^2 / count_L, s^2 the spread of the pooled rates v(S) between the
    coalitions of a group, pooled over the index's groups (a group of one coalition shows none on its own), times
    the finite-population factor 1 - count_L / 2^(n - order) (the coalitions are distinct). A is
    the mean of the groups with sign +, B of those with sign -, each over its number of groups. The spread also
    holds the rates' own noise, counted again (conservative, a little). NaN where no group has two coalitions."""
    m = np.asarray(masks, dtype=np.int64)
    v = np.asarray(pooled, dtype=np.float64)
    onehot, signs = group_matrix(m, n, order)
    width = 1 << order
    count = onehot.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, (v @ onehot) / count, np.nan)
        sq = np.where(count > 0, (v * v) @ onehot - count * mean**2, 0.0)
    sq, count_k = sq.reshape(-1, width), count.reshape(-1, width)
    dof = np.maximum(count_k - 1, 0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.where(dof > 0, np.maximum(sq.sum(axis=1), 0.0) / dof, np.nan)
        inv = np.where(count_k > 0, 1 / count_k, np.nan)
    # The game's coalitions are distinct: drawn without replacement from the 2^(n - order) of each group, so
    # each group mean's variance carries the finite-population factor (0 when the group is complete).
    inv = inv * (1 - count_k / (1 << (n - order)))
    sign = signs.reshape(-1, width)
    groups = width // 2
    var_a = spread * np.where(sign > 0, inv, 0).sum(axis=1) / groups**2
    var_b = spread * np.where(sign < 0, inv, 0).sum(axis=1) / groups**2
    return var_a, var_b
