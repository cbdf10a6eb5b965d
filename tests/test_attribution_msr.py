"""Maximum Sample Reuse: exact with every coalition, converging with samples, honest about gaps."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.msr import (
    msr_coefficients,
    msr_interactions,
    sample_coalitions,
    sampling_variance,
)
from cudanalyst.attribution.result import attribute_tables
from cudanalyst.attribution.values import GAME_ARM, OutcomeColumns, tabulate
from cudanalyst.outcomes import Label


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


def sampled_run(n: int, masks: np.ndarray, programs: int, seed: int):
    """Outcome tables of a game played on sampled coalitions: only player 0 matters (+0.5)."""
    rng = np.random.default_rng(seed)
    p = 0.2 + 0.5 * (masks & 1)
    label = np.where(rng.random((programs, masks.size)) < p, Label.PASS.rank, Label.FAIL.rank).reshape(-1)
    size = programs * masks.size
    cols = OutcomeColumns(
        arm=(GAME_ARM,) * size, task=tuple(f"t{i}" for i in np.repeat(np.arange(programs), masks.size)),
        generation=np.zeros(size, dtype=np.int64),
        program=tuple(f"p{i}" for i in np.repeat(np.arange(programs), masks.size)),
        mask=np.tile(masks, programs), rollout=np.zeros(size, dtype=np.int64), sample=np.zeros(size, dtype=np.int64),
        label=label.astype(np.int64), ceiling=np.full(size, Label.FAST.rank), unchanged=np.zeros(size, bool),
    )
    return tabulate(cols, [f"p{i}" for i in range(n)], ["pass"])


def test_report_uses_msr_for_sampled_coalitions_with_finite_bootstrap() -> None:
    n = 6
    masks = np.unique(sample_coalitions(n, 40, np.random.default_rng(3)))
    tables = sampled_run(n, masks, 20, seed=4)
    # 20 units: below the report's BOOTSTRAP_MIN_UNITS, so the bootstrap is asked for at any size here.
    result = attribute_tables(tables, estimator="msr", replicates=400, bootstrap_min_units=2)
    game = next(g for g in result.games if not g.pooled)
    assert game.estimator == "msr" and game.coalitions == masks.size and game.units == 20
    assert game.shapley is None and game.moebius is None  # MSR gives Banzhaf indices only
    lead = game.banzhaf["p0"]
    assert lead.low < 0.5 < lead.high and lead.low > 0.3
    # Programs and coalitions resampled once each; replicates that miss a group are dropped, not NaN out.
    assert lead.bootstrap_low is not None and lead.bootstrap_low < 0.5 < lead.bootstrap_high
    assert all(e.bootstrap_low is not None for e in game.interactions.values())


def test_exact_never_switches_auto_does_and_says_so() -> None:
    n = 4
    masks = np.arange(1 << n)[np.arange(1 << n) != 0b1010]  # one coalition missing
    tables = sampled_run(n, masks, 8, seed=5)
    exact = next(g for g in attribute_tables(tables, estimator="exact", replicates=0).games if not g.pooled)
    assert not exact.evaluated and exact.estimator == "exact"
    assert "no outcomes for 'p1,p3'" in exact.reason and exact.banzhaf["p0"].value is None
    auto = next(g for g in attribute_tables(tables, estimator="auto", replicates=0).games if not g.pooled)
    assert auto.evaluated and auto.estimator == "msr"
    assert "auto: MSR" in auto.estimator_note and "'p1,p3'" in auto.estimator_note


def test_msr_over_every_coalition_gives_the_exact_interval() -> None:
    # MSR is linear in v, so its indices are contrasts like the exact ones (result._msr_parts): with every
    # coalition present the interval, p-value and dof are the exact estimator's, not a t-interval beside it.
    tables = sampled_run(3, np.arange(8), 12, seed=6)
    exact = next(g for g in attribute_tables(tables, estimator="exact", replicates=0).games if not g.pooled)
    msr = next(g for g in attribute_tables(tables, estimator="msr", replicates=0).games if not g.pooled)
    for part in ("banzhaf", "interactions"):
        for key, e in getattr(exact, part).items():
            m = getattr(msr, part)[key]
            assert (m.low, m.high, m.p_value) == pytest.approx((e.low, e.high, e.p_value), abs=1e-12)
            assert m.low < m.value < m.high or m.low == m.value or m.high == m.value


def test_drawn_coalitions_add_their_own_variance_and_none_when_complete() -> None:
    n = 4
    v = np.random.default_rng(9).random(1 << n)
    var_a, var_b = sampling_variance(np.arange(1 << n), v, n, 1)
    np.testing.assert_allclose((var_a, var_b), 0.0)  # every coalition present: nothing was drawn
    masks = np.array([0, 1, 2, 3, 5, 6, 9, 12, 15])
    var_a, var_b = sampling_variance(masks, v[masks], n, 1)
    assert (var_a > 0).all() and (var_b > 0).all()
    # Player 0: with it 1, 3, 5, 9, 15 (5 of 8), without 0, 2, 6, 12 (4 of 8); spread pooled over both groups.
    with_, without = v[[1, 3, 5, 9, 15]], v[[0, 2, 6, 12]]
    spread = (((with_ - with_.mean()) ** 2).sum() + ((without - without.mean()) ** 2).sum()) / 7
    assert var_a[0] == pytest.approx(spread / 5 * (1 - 5 / 8))
    assert var_b[0] == pytest.approx(spread / 4 * (1 - 4 / 8))
    coef = msr_coefficients(masks, n, 1)
    assert coef[:, 0] @ v[masks] == pytest.approx(with_.mean() - without.mean())


def test_msr_over_sampled_coalitions_holds_and_finds_the_one_effect() -> None:
    tables = sampled_run(3, np.array([0, 1, 2, 3, 4, 7]), 16, seed=7)
    game = next(g for g in attribute_tables(tables, estimator="msr", replicates=0).games if not g.pooled)
    lead = game.banzhaf["p0"]
    assert lead.low < 0.5 < lead.high and lead.p_value < 0.05


def test_the_bootstrap_is_not_shown_unless_asked_and_never_with_zero_width() -> None:
    tables = sampled_run(3, np.arange(8), 12, seed=8)
    game = next(g for g in attribute_tables(tables, estimator="exact", replicates=200).games if not g.pooled)
    assert all(e.bootstrap_low is None for e in game.banzhaf.values())
    assert "bootstrap interval not shown: it covers less than it claims with 12 programs" in game.interval_note
    asked = next(g for g in attribute_tables(tables, estimator="exact", replicates=200, bootstrap_min_units=12).games
                 if not g.pooled)
    assert all(e.bootstrap_low is not None for e in asked.banzhaf.values()) and "bootstrap" not in asked.interval_note
    # Every program fails under every coalition: every bootstrap replicate is 0, a zero-width interval.
    never = tables_where_nothing_succeeds(48)
    game = next(g for g in attribute_tables(never, estimator="exact", replicates=200, bootstrap_min_units=2).games
                if not g.pooled)
    assert game.banzhaf["p0"].low is not None and game.banzhaf["p0"].low < 0 < game.banzhaf["p0"].high
    assert all(e.bootstrap_low is None and e.bootstrap_high is None for e in game.banzhaf.values())


def tables_where_nothing_succeeds(programs: int):
    size = programs * 8
    cols = OutcomeColumns(
        arm=(GAME_ARM,) * size, task=("t",) * size, generation=np.zeros(size, dtype=np.int64),
        program=tuple(f"p{i}" for i in np.repeat(np.arange(programs), 8)), mask=np.tile(np.arange(8), programs),
        rollout=np.zeros(size, dtype=np.int64), sample=np.zeros(size, dtype=np.int64),
        label=np.full(size, Label.FAIL.rank), ceiling=np.full(size, Label.FAST.rank), unchanged=np.zeros(size, bool),
    )
    return tabulate(cols, ["p0", "p1", "p2"], ["pass"])
