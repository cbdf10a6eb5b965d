"""Maximum Sample Reuse: exact with every coalition, converging with samples, honest about gaps."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.msr import msr_interactions, sample_coalitions
from cudanalyst.attribution.report import attribute_counts
from cudanalyst.attribution.values import RateCounts


@pytest.mark.parametrize("order", [1, 2, 3])
def test_equals_exact_with_every_coalition(order: int) -> None:
    n = 7
    v = np.random.default_rng(order).random(1 << n)
    estimate, _ = msr_interactions(np.arange(1 << n), v, n, order)
    np.testing.assert_allclose(estimate, tf.banzhaf_interactions(v, order), atol=1e-12)


def test_converges_with_samples_and_its_se_is_calibrated() -> None:
    n = 10
    rng = np.random.default_rng(0)
    v = rng.random(1 << n)
    exact = tf.banzhaf_values(v)
    errors, z_scores = [], []
    for count in (100, 1000, 10000, 100000):
        masks = sample_coalitions(n, count, rng)
        estimate, se = msr_interactions(masks, v[masks], n, 1)
        errors.append(np.sqrt(np.mean((estimate - exact) ** 2)))
        z_scores.append((estimate - exact) / se)
    # Error shrinks like 1/sqrt(samples): each 10x more samples cuts it by about 3x.
    assert all(later < earlier / 2 for earlier, later in itertools.pairwise(errors))
    assert errors[-1] < 0.01
    assert 0.6 < np.std(np.concatenate(z_scores)) < 1.5


def test_unobserved_group_gives_nan_not_a_number() -> None:
    n = 3
    masks = np.array([0b000, 0b001, 0b011])  # player 2 is never in
    estimate, _ = msr_interactions(masks, np.array([0.1, 0.5, 0.7]), n, 1)
    assert estimate[0] == pytest.approx(0.6 - 0.1)  # mean with player 0: (0.5+0.7)/2, without: 0.1
    assert np.isnan(estimate[2])


def test_report_picks_msr_for_sampled_coalitions() -> None:
    n, programs = 6, 20
    rng = np.random.default_rng(3)
    p = 0.2 + 0.5 * (np.arange(1 << n) & 1)  # only player 0 matters
    masks = np.unique(sample_coalitions(n, 40, rng))
    totals = np.full((masks.size, 1), programs)
    counts = RateCounts(
        masks=masks, rollouts=np.array([0]), successes=rng.binomial(totals, p[masks, None]),
        totals=totals, undetermined=np.zeros_like(totals),
    )
    result = attribute_counts(counts, [f"p{i}" for i in range(n)], "pass", None, replicates=400)
    assert result.estimator == "msr" and result.coalitions == masks.size
    assert result.shapley is None and result.moebius is None  # MSR gives Banzhaf indices only
    lead = result.banzhaf["p0"]
    assert lead.low < 0.5 < lead.high and lead.low > 0.3
    assert lead.bootstrap_low < 0.5 < lead.bootstrap_high
    with pytest.raises(ValueError, match="needs every coalition"):
        attribute_counts(counts, [f"p{i}" for i in range(n)], "pass", None, estimator="exact")
