"""Analytic standard errors against brute-force coefficients, against the bootstrap, and their coverage."""

from __future__ import annotations

import numpy as np
import pytest

from cudanalyst.attribution import intervals as iv
from cudanalyst.attribution import transforms as tf


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


def test_between_units_is_the_t_interval_over_units_and_never_zero_width() -> None:
    rng = np.random.default_rng(0)
    per_unit = rng.normal(size=(12, 2))
    est, se, dof = iv.between_units(per_unit, np.ones(12), np.zeros(2))
    np.testing.assert_allclose(est, per_unit.mean(axis=0))
    # With a zero prior the variance is s^2 / J * (J-1) / (J-1+prior units): the prior pulls it, never raises it.
    s2 = per_unit.var(axis=0, ddof=1) / 12
    np.testing.assert_allclose(se**2, 11 * s2 / (11 + iv.PRIOR_UNITS))
    assert dof == 11 + iv.PRIOR_UNITS
    # Every unit the same (all programs failed everywhere): the adjusted-rate prior keeps a width.
    _, se0, _ = iv.between_units(np.zeros((4, 1)), np.ones(4), np.array([0.01]))
    assert se0[0] > 0
    # One unit: no variation between units, so no interval at all.
    _, se1, dof1 = iv.between_units(np.zeros((1, 1)), np.ones(1), np.array([0.01]))
    assert np.isnan(se1[0]) and dof1 == 0


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
