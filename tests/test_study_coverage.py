"""Coverage of the study's paired comparisons (cudanalyst.analysis.study.combine), by simulation at the study's size.

Each simulated study draws J frozen programs from a population with heterogeneous rates: a program's logit
baseline ~ N(mu, 1) and its own effect of the compared arm ~ N(delta, 0.5) (logit scale); each cell (program x
coalition or arm) is one best-of-5 outcome, success probability 1 - (1 - p)^5 (rollouts 1, as the study's specs).
The estimand is the population mean of a program's expected difference (best-of-5 rates), computed once per
design from 400,000 programs. A nominal 95 % interval must cover it at least 93 % of the time over 2,000 studies
(Monte-Carlo standard error 0.005 near 0.95) and be no wider than needed (at most 99 %).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from cudanalyst.analysis.study import ArmRates, combine

STUDIES = 2000
K = 5  # samples per coalition: best-of-5


def best_of_k(logits: np.ndarray) -> np.ndarray:
    return 1 - (1 - expit(logits)) ** K


def draw(rng: np.random.Generator, programs: int, mu: float, delta: float, cells: int, arms: int):
    """(arms, programs, cells) best-of-5 success probabilities: arm 0 is the baseline, arm a > 0 adds its own
    per-program effect (delta for arm 1, -delta / 2 for arms 2 and 3 in the diff-in-diff); every cell has a small
    coalition effect of its own per program (SD 0.3)."""
    base = rng.normal(mu, 1.0, size=(programs, 1))
    shifts = [0.0, delta, -delta / 2, delta / 2][:arms]
    out = []
    for shift in shifts:
        effect = rng.normal(shift, 0.5, size=(programs, 1)) if shift else 0.0
        out.append(best_of_k(base + effect + rng.normal(0, 0.3, size=(programs, cells))))
    return np.stack(out)


# (programs, mu, delta, cells per arm, arms): 2 arms = A - B; 4 arms = (A1 - B1) - (A2 - B2).
DESIGNS = {
    "48 programs, rate ~0.5, one cell": (48, -1.6, 0.6, 1, 2),
    "32 programs, rate ~0.5, one cell": (32, -1.6, 0.6, 1, 2),
    "16 programs, rate ~0.5, one cell": (16, -1.6, 0.6, 1, 2),
    "48 programs, rate ~0.05, one cell": (48, -4.6, 0.6, 1, 2),
    "48 programs, rate ~0.9, one cell": (48, 0.0, -0.6, 1, 2),
    "48 programs, rate ~0.5, mean of 7 coalitions": (48, -1.6, 0.6, 7, 2),
    "48 programs, rate ~0.3, diff-in-diff of 4 runs": (48, -2.2, 0.6, 1, 4),
}


def truth(mu: float, delta: float, cells: int, arms: int) -> float:
    p = draw(np.random.default_rng(12345), 400_000, mu, delta, cells, arms).mean(axis=(1, 2))
    return float(p[1] - p[0]) if arms == 2 else float((p[1] - p[0]) - (p[3] - p[2]))


@pytest.mark.parametrize("design", list(DESIGNS))
def test_paired_comparison_covers_at_the_study_size(design: str) -> None:
    programs, mu, delta, cells, arms = DESIGNS[design]
    target = truth(mu, delta, cells, arms)
    rng = np.random.default_rng(2026)
    names = tuple(f"p{i}" for i in range(programs))
    ones = np.ones((programs, cells))
    coefs = [-1.0, 1.0, 1.0, -1.0][:arms]  # baseline -, arm 1 +; diff-in-diff: - (arm 3 - arm 2)
    covered = widths = 0.0
    for _ in range(STUDIES):
        outcomes = (rng.random((arms, programs, cells)) < draw(rng, programs, mu, delta, cells, arms)).astype(float)
        parts = [(ArmRates(names, outcomes[a], ones, K, ""), coefs[a]) for a in range(arms)]
        c = combine(parts, 0.95)
        assert c.programs == programs and c.low is not None and c.high is not None
        covered += c.low <= target <= c.high
        widths += c.high - c.low
    coverage = covered / STUDIES
    print(f"{design}: truth {target:+.3f}, coverage {coverage:.3f}, mean half-width {widths / STUDIES / 2:.3f}")
    assert 0.93 <= coverage <= 0.99, f"{design}: coverage {coverage:.3f} (truth {target:+.3f})"


# Sparse: most programs never succeed (rate exactly 0 in both arms: `fast` for a weak model, or copies of a slow
# frozen program), and `active` programs carry every difference; their per-sample rate ~ N(p, p/2), clipped, and
# arm 1 adds `delta` to it. 2,640- and 1,920-unit runs of the 0.5B model looked like this (2 of 48 programs differed
# on fast). (programs, active, p, delta); 7 coalitions a side, best-of-5 cells.
SPARSE = {
    "48 programs, 2 ever succeed, no difference": (48, 2, 0.05, 0.0),
    "48 programs, 4 ever succeed, no difference": (48, 4, 0.1, 0.0),
    "48 programs, 8 ever succeed, arm 1 better": (48, 8, 0.1, 0.1),
}


def sparse_rates(rng: np.random.Generator, n: int, p: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
    base = np.clip(rng.normal(p, p / 2, size=n), 0.005, 0.9)
    return 1 - (1 - base) ** K, 1 - (1 - np.clip(base + delta, 0, 1)) ** K


@pytest.mark.parametrize("design", list(SPARSE))
def test_paired_comparison_covers_when_a_few_programs_carry_every_difference(design: str) -> None:
    programs, active, p, delta = SPARSE[design]
    a0, a1 = sparse_rates(np.random.default_rng(12345), 400_000, p, delta)
    target = active / programs * float((a1 - a0).mean())  # the population's mean difference
    rng = np.random.default_rng(2026)
    names = tuple(f"p{i}" for i in range(programs))
    cells = 7
    ones = np.ones((programs, cells))
    covered = widths = 0.0
    for _ in range(STUDIES):
        prob = np.zeros((2, programs))
        who = rng.choice(programs, active, replace=False)
        prob[0, who], prob[1, who] = sparse_rates(rng, active, p, delta)
        outcomes = (rng.random((2, programs, cells)) < prob[:, :, None]).astype(float)
        c = combine([(ArmRates(names, outcomes[0], ones, K, ""), -1.0),
                     (ArmRates(names, outcomes[1], ones, K, ""), 1.0)], 0.95)
        assert c.low is not None and c.high is not None
        covered += c.low <= target <= c.high
        widths += c.high - c.low
    coverage = covered / STUDIES
    print(f"{design}: truth {target:+.4f}, coverage {coverage:.3f}, mean half-width {widths / STUDIES / 2:.3f}")
    # Conservative here (about 1.00 with no difference): the t-interval's width comes from the few programs that
    # differ. The logit-scale interval alone covered 0.78 and 0.90 in the first two designs.
    assert coverage >= 0.93, f"{design}: coverage {coverage:.3f} (truth {target:+.4f})"


def test_pairing_keeps_only_programs_in_every_arm() -> None:
    a = ArmRates(("p1", "p2", "p3"), np.array([[1.0], [0.0], [1.0]]), np.ones((3, 1)), K, "")
    b = ArmRates(("p2", "p3", "p4"), np.array([[0.0], [0.0], [1.0]]), np.ones((3, 1)), K, "")
    c = combine([(a, 1.0), (b, -1.0)], 0.95)
    # p2: 0 - 0, p3: 1 - 0: the mean over the two paired programs; p1 and p4 are left out, counted.
    assert (c.programs, c.unpaired) == (2, 2)
    assert c.value == pytest.approx(0.5)


# Over tasks (issue 29): T tasks of M programs each; a task's logit baseline ~ N(mu, 1) and its effect ~ N(delta,
# 0.5), each program's own deviations N(0, 0.5) and N(0, 0.3) around its task's. The estimand is the mean over tasks
# like these of a task's expected mean program difference (tasks weigh the same). (tasks, programs, mu, delta).
TASKS = {
    "4 tasks of 12 programs, rate ~0.5": (4, 12, -1.6, 0.6),
    "8 tasks of 6 programs, rate ~0.5": (8, 6, -1.6, 0.6),
    "8 tasks of 6 programs, rate ~0.1": (8, 6, -3.5, 0.6),
    "16 tasks of 3 programs, rate ~0.5": (16, 3, -1.6, 0.6),
}


def task_draw(rng: np.random.Generator, tasks: int, programs: int, mu: float, delta: float) -> np.ndarray:
    """(2, tasks * programs) best-of-5 success probabilities, baseline arm and arm 1."""
    base = np.repeat(rng.normal(mu, 1.0, tasks), programs) + rng.normal(0, 0.5, tasks * programs)
    effect = np.repeat(rng.normal(delta, 0.5, tasks), programs) + rng.normal(0, 0.3, tasks * programs)
    return np.stack([best_of_k(base), best_of_k(base + effect)])


@pytest.mark.parametrize("design", list(TASKS))
def test_the_comparison_over_tasks_covers_the_mean_over_tasks(design: str) -> None:
    tasks, programs, mu, delta = TASKS[design]
    p = task_draw(np.random.default_rng(12345), 200_000, 1, mu, delta)
    target = float((p[1] - p[0]).mean())  # with one program per task, the mean over tasks of a task's mean
    rng = np.random.default_rng(2026)
    names = tuple(f"t{t}/g0/p{i}" for t in range(tasks) for i in range(programs))
    ones = np.ones((tasks * programs, 1))
    covered = widths = 0.0
    for _ in range(STUDIES):
        outcomes = (rng.random((2, tasks * programs)) < task_draw(rng, tasks, programs, mu, delta)).astype(float)
        c = combine([(ArmRates(names, outcomes[0][:, None], ones, K, ""), -1.0),
                     (ArmRates(names, outcomes[1][:, None], ones, K, ""), 1.0)], 0.95, unit="task")
        assert c.units == tasks and c.programs == tasks * programs and c.low is not None and c.high is not None
        covered += c.low <= target <= c.high
        widths += c.high - c.low
    coverage = covered / STUDIES
    print(f"{design}: truth {target:+.3f}, coverage {coverage:.3f}, mean half-width {widths / STUDIES / 2:.3f}")
    assert 0.93 <= coverage <= 0.99, f"{design}: coverage {coverage:.3f} (truth {target:+.3f})"
