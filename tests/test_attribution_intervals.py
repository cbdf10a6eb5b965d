"""Analytic standard errors against brute-force coefficients, against the bootstrap, and their coverage."""

from __future__ import annotations

import numpy as np
import pytest

from cudanalyst.attribution import intervals as iv
from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.games import masks_of_order
from cudanalyst.attribution.values import RateCounts


def coefficients(transform, n: int) -> np.ndarray:
    """The index's coefficient matrix, by applying it to every unit vector (batch axis)."""
    return transform(np.eye(1 << n))  # row T = index values of the game e_T; column = index


@pytest.mark.parametrize(
    ("transform", "variance"),
    [
        (tf.banzhaf_interaction_table, iv.banzhaf_interaction_variance_table),
        (tf.moebius, iv.moebius_variance),
        (tf.shapley_values, iv.shapley_value_variance),
        (lambda v: tf.shapley_interactions(v, 2), lambda var: iv.shapley_interaction_variance(var, 2)),
        (lambda v: tf.shapley_interactions(v, 3), lambda var: iv.shapley_interaction_variance(var, 3)),
    ],
)
def test_variance_passes_equal_squared_coefficients(transform, variance) -> None:
    n = 5
    var = np.random.default_rng(0).random(1 << n)
    expected = var @ coefficients(transform, n) ** 2
    np.testing.assert_allclose(variance(var), expected, rtol=1e-12)


def random_counts(n: int, programs: int, rollouts: int, seed: int) -> RateCounts:
    rng = np.random.default_rng(seed)
    totals = np.full((1 << n, rollouts), programs)
    return RateCounts(
        masks=np.arange(1 << n), rollouts=np.arange(rollouts),
        successes=rng.binomial(totals, rng.uniform(0.1, 0.9, size=(1 << n, 1))),
        totals=totals, undetermined=np.zeros_like(totals),
    )


def test_analytic_and_bootstrap_intervals_agree() -> None:
    n = 3
    counts = random_counts(n, programs=8, rollouts=3, seed=1)
    pairs = masks_of_order(n, 2)

    def statistic(v: np.ndarray) -> np.ndarray:
        table = tf.banzhaf_interaction_table(v)
        return np.concatenate([table[..., 1:], tf.shapley_values(v), tf.moebius(v)], axis=-1)

    low, high, boot_se = iv.bootstrap_percentiles(statistic, counts, 20000, 0.95, seed=2)
    var = counts.variances()
    analytic_se = np.sqrt(np.concatenate([
        iv.banzhaf_interaction_variance_table(var)[1:], iv.shapley_value_variance(var), iv.moebius_variance(var)
    ]))
    assert pairs.size == 3
    np.testing.assert_allclose(boot_se, analytic_se, rtol=0.04)
    point = statistic(counts.rates())
    z = iv.z_value(0.95)
    # Percentile endpoints sit where value -+ z SE does, to within a small fraction of the width.
    np.testing.assert_allclose(low, point - z * analytic_se, atol=0.12 * z * analytic_se.max())
    np.testing.assert_allclose(high, point + z * analytic_se, atol=0.12 * z * analytic_se.max())


def test_bootstrap_rates_are_stratified_by_rollout() -> None:
    counts = RateCounts(
        masks=np.array([0]), rollouts=np.array([0, 1]), successes=np.array([[0, 5]]), totals=np.array([[5, 5]]),
        undetermined=np.zeros((1, 2), dtype=np.int64),
    )
    # Rollout 0 all fail, rollout 1 all pass: resampling within a rollout can never move the mean off 0.5.
    assert counts.rates()[0] == 0.5 and counts.variances()[0] == 0
    np.testing.assert_array_equal(iv.bootstrap_rates(counts, 100, np.random.default_rng(0)), 0.5)


def test_analytic_intervals_cover_the_true_banzhaf_value() -> None:
    # Simulate many runs of a known game of rates; the 90% interval should cover about 90% of the time.
    n, programs, rollouts, runs = 3, 30, 3, 600
    rng = np.random.default_rng(5)
    p = rng.uniform(0.2, 0.8, size=1 << n)
    truth = tf.banzhaf_values(p)
    successes = rng.binomial(programs, p[None, :, None], size=(runs, 1 << n, rollouts))
    rates = successes.mean(axis=-1) / programs
    var = (successes / programs * (1 - successes / programs) / programs).sum(axis=-1) / rollouts**2
    se = np.sqrt(iv.banzhaf_interaction_variance_table(var)[..., [1, 2, 4]])
    covered = np.abs(tf.banzhaf_values(rates) - truth) <= iv.z_value(0.9) * se
    assert 0.86 < covered.mean() < 0.94


def test_z_value() -> None:
    assert iv.z_value(0.95) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError, match="between 0 and 1"):
        iv.z_value(1.0)
