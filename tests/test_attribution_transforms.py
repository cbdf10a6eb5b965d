"""Exact indices: games with known answers, and shapiq's ExactComputer as an oracle."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.games import masks_of_order, popcounts


def table(n: int, fn) -> np.ndarray:
    """v(S) for every mask from a function of the member set."""
    return np.array([fn({i for i in range(n) if m >> i & 1}) for m in range(1 << n)], dtype=float)


def test_additive_game_gives_weights_and_no_interaction() -> None:
    w = np.array([0.5, -0.2, 0.1, 0.3])
    v = table(4, lambda s: 0.05 + sum(w[i] for i in s))
    np.testing.assert_allclose(tf.banzhaf_values(v), w)
    np.testing.assert_allclose(tf.shapley_values(v), w)
    np.testing.assert_allclose(tf.banzhaf_interactions(v, 2), 0, atol=1e-12)
    m = tf.moebius(v)
    assert m[0] == pytest.approx(0.05)
    np.testing.assert_allclose(m[[1, 2, 4, 8]], w)
    np.testing.assert_allclose(m[popcounts(4) >= 2], 0, atol=1e-12)


def test_unanimity_game() -> None:
    # u_T(S) = 1 iff T <= S, with T = {0, 2} among 5 players.
    n, t = 5, {0, 2}
    v = table(n, lambda s: float(t <= s))
    np.testing.assert_allclose(tf.banzhaf_values(v), [0.5, 0, 0.5, 0, 0], atol=1e-12)
    np.testing.assert_allclose(tf.shapley_values(v), [0.5, 0, 0.5, 0, 0], atol=1e-12)
    pairs = dict(zip(combinations(range(n), 2), tf.banzhaf_interactions(v, 2), strict=True))
    assert pairs[(0, 2)] == pytest.approx(1.0)
    assert all(abs(x) < 1e-12 for k, x in pairs.items() if k != (0, 2))
    expected = np.zeros(1 << n)
    expected[0b101] = 1
    np.testing.assert_allclose(tf.moebius(v), expected, atol=1e-12)


def test_majority_game() -> None:
    # Three voters, a coalition wins with two or more: symmetric, each pivotal in half of the others' coalitions.
    v = table(3, lambda s: float(len(s) >= 2))
    np.testing.assert_allclose(tf.banzhaf_values(v), [0.5] * 3)
    np.testing.assert_allclose(tf.shapley_values(v), [1 / 3] * 3)
    # I_ij = 2^-1 [(v(ij) - v(i) - v(j) + v()) + (v(ijk) - v(ik) - v(jk) + v(k))] = (1 + (-1)) / 2 = 0:
    # either of i, j is enough with k present, both are needed without it.
    np.testing.assert_allclose(tf.banzhaf_interactions(v, 2), [0.0] * 3, atol=1e-12)
    np.testing.assert_allclose(tf.moebius(v)[[3, 5, 6]], [1.0] * 3)
    assert tf.banzhaf_interactions(v, 3)[0] == pytest.approx(-2.0)  # m({0,1,2}) = 1 - 3 = -2


def test_moebius_round_trip_and_batch_axis() -> None:
    rng = np.random.default_rng(3)
    v = rng.random((7, 1 << 6))
    np.testing.assert_allclose(tf.from_moebius(tf.moebius(v)), v)
    np.testing.assert_allclose(tf.banzhaf_values(v)[2], tf.banzhaf_values(v[2]))
    np.testing.assert_allclose(tf.shapley_interactions(v, 2)[4], tf.shapley_interactions(v[4], 2))


def test_efficiency_and_definition_of_banzhaf() -> None:
    rng = np.random.default_rng(4)
    n = 7
    v = rng.random(1 << n)
    assert tf.shapley_values(v).sum() == pytest.approx(v[-1] - v[0])
    # b_i by its definition, one coalition at a time (the slow way the transform replaces).
    for i in range(n):
        others = [m for m in range(1 << n) if not m >> i & 1]
        direct = sum(v[m | 1 << i] - v[m] for m in others) / 2 ** (n - 1)
        assert tf.banzhaf_values(v)[i] == pytest.approx(direct)


def test_rejects_tables_that_are_not_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="2\\^n entries"):
        tf.moebius(np.zeros(6))


@pytest.mark.parametrize("n", [3, 6, 8])
def test_shapiq_exact_computer_agrees(n: int) -> None:
    shapiq = pytest.importorskip("shapiq", reason="shapiq is the oracle (pip install shapiq, in the dev extra)")
    rng = np.random.default_rng(n)
    v = rng.normal(size=1 << n)
    weights = np.int64(1) << np.arange(n)
    computer = shapiq.ExactComputer(lambda x: v[x.astype(np.int64) @ weights], n_players=n)

    def oracle(index: str, order: int, k: int) -> list[float]:
        values = computer(index, order)
        return [values[c] for c in combinations(range(n), k)]

    np.testing.assert_allclose(tf.banzhaf_values(v), oracle("BV", 1, 1), atol=1e-10)
    np.testing.assert_allclose(tf.shapley_values(v), oracle("SV", 1, 1), atol=1e-10)
    for k in (2, 3):
        np.testing.assert_allclose(tf.banzhaf_interactions(v, k), oracle("BII", k, k), atol=1e-10)
        np.testing.assert_allclose(tf.shapley_interactions(v, k), oracle("SII", k, k), atol=1e-10)
    moebius = computer("Moebius")
    m = tf.moebius(v)
    for k in range(n + 1):
        np.testing.assert_allclose(
            m[masks_of_order(n, k)], [moebius[c] for c in combinations(range(n), k)], atol=1e-10
        )
