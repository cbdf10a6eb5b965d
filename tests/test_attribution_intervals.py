"""Analytic variances against brute-force coefficients; the t-interval over units (MSR); the contrast intervals
(contrast.py) against brute force, the t-interval near rate 1/2, their shape at low rates and their p-values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from cudanalyst.attribution import contrast as ct
from cudanalyst.attribution import intervals as iv
from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.games import masks_of_order


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


def test_adjusted_rate_is_agresti_coull() -> None:
    z2 = iv.z_value(0.95) ** 2
    assert iv.adjusted_rate(0, 10, 0.95) == pytest.approx(z2 / 2 / (10 + z2))
    assert 0 < iv.adjusted_rate(0, 10, 0.95) < iv.adjusted_rate(10, 10, 0.95) < 1


def test_holm_step_down() -> None:
    # alpha 0.05, m = 4: thresholds 0.0125, 0.0167, 0.025, 0.05 in order of p.
    p = np.array([0.01, 0.04, 0.015, 0.03])
    np.testing.assert_array_equal(iv.holm(p, 0.05), [True, False, True, False])
    np.testing.assert_array_equal(iv.holm([0.02, np.nan], 0.05), [True, False])  # NaN is never a finding
    assert not iv.holm([0.2, 0.01, 0.3], 0.05)[[0, 2]].any()


def test_percentile_interval_skips_nan_replicates() -> None:
    stats = np.array([[0.0], [1.0], [np.nan], [2.0]])
    low, high, finite = iv.percentile_interval(stats, 0.5)
    assert finite == 3 and low[0] == pytest.approx(0.5) and high[0] == pytest.approx(1.5)


def test_z_value() -> None:
    assert iv.z_value(0.95) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError, match="between 0 and 1"):
        iv.z_value(1.0)


# ------------------------------------------------------------------ the contrast intervals (contrast.py)


def test_factorised_maps_are_the_transforms() -> None:
    v = np.random.default_rng(1).random((3, 1 << 5))
    np.testing.assert_allclose(ct.factorised(v, ct.BANZHAF), tf.banzhaf_interaction_table(v), atol=1e-15)
    np.testing.assert_allclose(ct.factorised(v, ct.MOEBIUS), tf.moebius(v), atol=1e-15)


@pytest.mark.parametrize(("n", "order"), [(3, 2), (4, 2), (4, 3)])
def test_exact_contrasts_split_every_index_by_the_sign_of_its_coefficients(n: int, order: int) -> None:
    rng = np.random.default_rng(n + order)
    rates = rng.random((6, 1 << n))
    trials = rng.integers(5, 40, 1 << n).astype(float)
    unit_trials = rng.integers(1, 6, (6, 1 << n)).astype(float)
    c = ct.exact_contrasts(rates, trials, unit_trials, n, order)

    def statistic(v: np.ndarray) -> np.ndarray:
        table = tf.banzhaf_interaction_table(v)
        return np.concatenate([table[..., masks_of_order(n, 1)], table[..., masks_of_order(n, order)],
                               tf.shapley_values(v), tf.moebius(v)], axis=-1)

    coef = statistic(np.eye(1 << n))  # (coalitions, indices): brute force
    pos, neg = np.maximum(coef, 0), np.maximum(-coef, 0)
    np.testing.assert_allclose(c.estimate_per_unit, statistic(rates), atol=1e-12)
    np.testing.assert_allclose(c.pos, rates @ pos, atol=1e-12)
    np.testing.assert_allclose(c.neg, rates @ neg, atol=1e-12)
    np.testing.assert_allclose(c.s_pos, pos.sum(axis=0), atol=1e-12)
    np.testing.assert_allclose(c.s_neg, neg.sum(axis=0), atol=1e-12)
    np.testing.assert_allclose(c.inv_pos, (pos**2).T @ (1 / trials), atol=1e-12)
    np.testing.assert_allclose(c.inv_neg, (neg**2).T @ (1 / trials), atol=1e-12)
    np.testing.assert_allclose(c.sq_pos, (pos**2).sum(axis=0), atol=1e-12)
    np.testing.assert_allclose(c.noise, (1 / unit_trials) @ coef**2, atol=1e-12)
    # Every index but m(empty) is a difference of two mean rates (s+ = s-).
    np.testing.assert_allclose(c.s_pos[:-(1 << n)], c.s_neg[:-(1 << n)], atol=1e-12)
    assert c.s_neg[-(1 << n)] == 0


def test_satterthwaite_dof() -> None:
    assert ct.satterthwaite_dof(np.ones((12, 2)), np.ones(12)) == pytest.approx([11, 11])
    rng = np.random.default_rng(2)
    variances, weights = rng.random((7, 1)) * 3, rng.random(7)
    w = weights / weights.sum()
    centre = np.eye(7) - np.outer(np.ones(7), w)  # residuals r = (I - 1 w') x
    cov = centre @ np.diag(variances[:, 0]) @ centre.T
    d = np.diag(w**2)
    expected = np.trace(d @ cov) ** 2 / np.trace(d @ cov @ d @ cov)  # 2 E[V]^2 / Var[V] of V = r' D r
    assert ct.satterthwaite_dof(variances, weights)[0] == pytest.approx(expected, rel=1e-12)
    # One unit far noisier than the rest: its variance is nearly all the estimate, so few degrees of freedom.
    assert ct.satterthwaite_dof(np.array([[100.0]] + [[1.0]] * 11), np.ones(12))[0] < 2


def _rates(units: int, per_coalition: np.ndarray, rng: np.random.Generator, trials: int) -> np.ndarray:
    return rng.binomial(trials, per_coalition, size=(units, per_coalition.size)) / trials


def test_contrast_interval_is_the_t_interval_near_one_half() -> None:
    rng = np.random.default_rng(3)
    p = 0.45 + 0.1 * rng.random(8)
    rates = _rates(48, p, rng, 50)
    trials = np.full(8, 48 * 50.0)
    c = ct.exact_contrasts(rates, trials, np.full((48, 8), 50.0), 3, 2)
    iv = ct.contrast_intervals(c, np.ones(48), ct.unit_levels(rates, np.full((48, 8), 50.0), 0.95), 48, 0.95)
    t = stats.t.ppf(0.975, iv.dof)
    symmetric_low, symmetric_high = iv.estimate - t * iv.se, iv.estimate + t * iv.se
    np.testing.assert_allclose(iv.low, symmetric_low, atol=0.02 * (symmetric_high - symmetric_low).max())
    np.testing.assert_allclose(iv.high, symmetric_high, atol=0.02 * (symmetric_high - symmetric_low).max())


def test_contrast_interval_at_low_rates_is_asymmetric_inside_the_range_and_never_zero_width() -> None:
    rng = np.random.default_rng(4)
    p = np.where(np.arange(8) & 1, 0.08, 0.02)  # player 0 raises a low rate
    rates = _rates(12, p, rng, 3)
    unit_trials = np.full((12, 8), 3.0)
    c = ct.exact_contrasts(rates, unit_trials.sum(axis=0), unit_trials, 3, 2)
    levels = ct.unit_levels(rates, unit_trials, 0.95)
    iv = ct.contrast_intervals(c, np.ones(12), levels, 12, 0.95)
    rate = ct.contrast_intervals(ct.rate_contrasts(rates, unit_trials.sum(axis=0), unit_trials), np.ones(12), levels,
                                 12, 0.95)
    # A rate near 0 is uncertain mostly upwards (its noise grows with it): longer above, never below 0.
    assert (rate.high - rate.estimate > rate.estimate - rate.low).all() and (rate.low >= 0).all()
    assert (iv.low >= -c.s_neg - 1e-12).all() and (iv.high <= c.s_pos + 1e-12).all()
    assert (iv.low <= iv.estimate).all() and (iv.estimate <= iv.high).all()
    zero = np.zeros((12, 8))
    c0 = ct.exact_contrasts(zero, unit_trials.sum(axis=0), unit_trials, 3, 2)
    iv0 = ct.contrast_intervals(c0, np.ones(12), ct.unit_levels(zero, unit_trials, 0.95), 12, 0.95)
    assert (iv0.low < 0).all() == (c0.s_neg > 0).all() and (iv0.high > 0).all()  # all rates 0: still a width
    one = ct.contrast_intervals(ct.exact_contrasts(rates[:1], unit_trials[0], unit_trials[:1], 3, 2), np.ones(1),
                                np.array([0.05]), 1, 0.95)
    assert np.isnan(one.low).all() and np.isnan(one.se).all()  # one unit: no interval


def test_contrast_p_value_agrees_with_the_interval() -> None:
    rng = np.random.default_rng(5)
    agree = 0
    for _ in range(40):
        p = np.clip(0.1 + 0.3 * rng.random() * (np.arange(8) & 1) + 0.05 * rng.random(8), 0, 1)
        rates = _rates(10, p, rng, 2)
        unit_trials = np.full((10, 8), 2.0)
        c = ct.exact_contrasts(rates, unit_trials.sum(axis=0), unit_trials, 3, 2)
        iv = ct.contrast_intervals(c, np.ones(10), ct.unit_levels(rates, unit_trials, 0.95), 10, 0.95)
        tested = np.isfinite(iv.p_value)
        assert tested[:6].all()  # Banzhaf values and interactions: differences of two mean rates
        excludes = (iv.low[tested] > 0) | (iv.high[tested] < 0)
        np.testing.assert_array_equal(excludes, iv.p_value[tested] < 0.05)
        agree += excludes.sum()
    assert agree > 0  # some intervals did exclude 0


def test_a_game_few_units_carry_is_widened_and_its_p_value_agrees() -> None:
    rng = np.random.default_rng(8)
    agree = widened = 0
    for _ in range(40):
        rates = np.zeros((60, 8))  # 60 units, only 8 of them ever succeed; the first player's effect is large
        p = np.clip(0.05 + 0.9 * rng.random() * (np.arange(8) & 1) + 0.05 * rng.random(8), 0, 1)
        rates[:8] = _rates(8, p, rng, 2)
        unit_trials = np.full((60, 8), 2.0)
        changing = ct.changing_units(rates)
        assert changing <= 8 and ct.few_changing(changing, 60)
        c = ct.exact_contrasts(rates, unit_trials.sum(axis=0), unit_trials, 3, 2)
        levels = ct.unit_levels(rates, unit_trials, 0.95)
        plain = ct.contrast_intervals(c, np.ones(60), levels, 60, 0.95)
        iv = ct.contrast_intervals(c, np.ones(60), levels, 60, 0.95, changing)
        tested = np.isfinite(iv.p_value)
        assert tested[:6].all()
        assert (iv.low[tested] <= plain.low[tested] + 1e-12).all() and (iv.high[tested] >= plain.high[tested] - 1e-12).all()
        widened += int(((iv.high - iv.low)[tested] > (plain.high - plain.low)[tested] + 1e-9).sum())
        excludes = (iv.low[tested] > 0) | (iv.high[tested] < 0)
        np.testing.assert_array_equal(excludes, iv.p_value[tested] < 0.05)
        agree += excludes.sum()
    assert widened > 0 and agree > 0


def test_the_widening_fires_below_one_in_six_changing_units_only() -> None:
    # A third fired in most low-rate runs at 8-24 programs, where the logit interval alone covered (bench/coverage.py).
    assert ct.few_changing(3, 24) and not ct.few_changing(4, 24)
    assert ct.few_changing(1, 12) and not ct.few_changing(2, 12)
    assert ct.few_changing(1, 4) and not ct.few_changing(2, 4)  # one unit alone, at any size
    assert ct.few_changing(9, 96) and not ct.few_changing(10, 96)


def test_unit_levels_shrink_by_the_method_of_moments() -> None:
    trials = np.full((20, 8), 2.0)
    same = np.full((20, 8), 0.5)
    np.testing.assert_allclose(ct.unit_levels(same, trials, 0.95), ct.unit_levels(same, trials, 0.95)[0])
    rng = np.random.default_rng(6)
    spread = np.repeat(rng.choice([0.05, 0.9], size=(20, 1)), 8, axis=1)  # real differences between units
    levels = ct.unit_levels(spread, np.full((20, 8), 200.0), 0.95)
    np.testing.assert_allclose(levels, spread[:, 0], atol=0.02)
