"""Coverage of the policy comparison's paired interval (cudanalyst.comparison.analyse: an arm's best verified
speedup over `all`'s, a t-interval of the log ratio over units = task x seed), by simulation at the comparison's
size (6 held-out tasks x 3 seeds, 8 iterations).

The estimand is the mean over the comparison's own tasks (fixed, each weighing the same) of a task's expected log
ratio over seeds: what the page's interval claims for these tasks. Not the mean over tasks never seen, which would
take the task as the unit (6, not 18). A unit's best speedup is simulated the way the agent produces it: the
re-measured baseline (1 % noise) and K ~ Binomial(8, p) correct children, each exp(N(headroom, sd)); arms differ in
p per task, and tasks in p, headroom and sd. A nominal 95 % interval must cover the estimand at least 93 % of the
time over 1,000 comparisons (Monte-Carlo standard error 0.007; a fixed generator, so the same draw every run) and
be no wider than needed (at most 99 %).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cudanalyst.comparison import analyse

ITERATIONS = 8
COMPARISONS = 1000


def best(rng: np.random.Generator, p_correct: float, headroom: float, sd: float, size: int = 1) -> np.ndarray:
    """Best verified speedups of `size` units: the baseline re-measured, or the best correct child."""
    base = np.exp(rng.normal(0.0, 0.01, size))
    k = rng.binomial(ITERATIONS, p_correct, size)
    kids = np.exp(rng.normal(headroom, sd, (size, ITERATIONS)))
    kids[np.arange(ITERATIONS)[None, :] >= k[:, None]] = 0.0  # only the first k children are correct
    return np.maximum(base, kids.max(axis=1))


# Per task: (p correct under all, p correct under the other arm, log headroom, sd of a child's log speedup).
DESIGNS = {
    "tasks that differ, small effects": [(0.4, 0.5, -0.2, 0.3), (0.3, 0.3, -0.5, 0.3), (0.5, 0.4, 0.0, 0.2),
                                         (0.2, 0.3, 0.3, 0.4), (0.6, 0.6, -0.1, 0.1), (0.3, 0.4, 0.5, 0.5)],
    "no headroom: every ratio is timing noise": [(0.4, 0.4, -1.0, 0.3)] * 6,
    "rare large wins": [(0.05, 0.1, 1.0, 0.5)] * 6,
    "an effect on one task only": [(0.3, 0.3, -0.2, 0.3)] * 5 + [(0.2, 0.8, 0.7, 0.4)],
}


def truth(tasks: list[tuple[float, float, float, float]]) -> float:
    rng = np.random.default_rng(12345)
    return float(np.mean([np.log(best(rng, pb, h, sd, 200_000)).mean() - np.log(best(rng, pa, h, sd, 200_000)).mean()
                          for pa, pb, h, sd in tasks]))


def comparison(rng: np.random.Generator, tasks: list[tuple[float, float, float, float]], seeds: int) -> list[dict]:
    rows = []
    for t, (pa, pb, h, sd) in enumerate(tasks):
        for arm, p in (("all", pa), ("learned", pb)):
            for seed, speedup in enumerate(best(rng, p, h, sd, seeds)):
                rows.append({"arm": arm, "task": f"t{t}", "seed": seed, "iteration": 1, "compiled": True,
                             "correct": True, "speedup": float(speedup)})
    return rows


@pytest.mark.parametrize("design", list(DESIGNS))
def test_the_ratio_to_all_covers_at_the_comparison_size(design: str) -> None:
    target = truth(DESIGNS[design])
    rng = np.random.default_rng(2026)
    covered = 0
    for _ in range(COMPARISONS):
        arms = {a["arm"]: a for a in analyse(comparison(rng, DESIGNS[design], seeds=3), [], ITERATIONS)["arms"]}
        ratio = arms["learned"]["speedupRatioToAll"]
        assert ratio["pairs"] == 18
        covered += math.log(ratio["low"]) <= target <= math.log(ratio["high"])
    assert 0.93 <= covered / COMPARISONS <= 0.99, (design, covered / COMPARISONS, math.exp(target))


# The page's prompt-token ratio to all (analyse's promptTokensRatioToAll) is the same paired t-interval of the log ratio
# over units. A unit's prompt tokens: the task's level, times the arm's factor on that task (what it withholds), times
# the unit's own trajectory (lognormal, sd by task), and in one unit of ten an agent that answered fewer iterations
# (a factor 0.3-1). Per task: (log factor of the other arm against all, sd of a unit's log tokens).
TOKEN_DESIGNS = {
    "a policy that withholds more on some tasks": [(-0.6, 0.15), (-0.1, 0.3), (-0.3, 0.2), (0.0, 0.4), (-0.8, 0.1),
                                                   (-0.2, 0.25)],
    "no saving: every ratio is the trajectories' noise": [(0.0, 0.3)] * 6,
}


def tokens(rng: np.random.Generator, level: float, sd: float, size: int) -> np.ndarray:
    short = np.where(rng.random(size) < 0.1, rng.uniform(0.3, 1.0, size), 1.0)
    return np.exp(level + rng.normal(0.0, sd, size)) * short


@pytest.mark.parametrize("design", list(TOKEN_DESIGNS))
def test_the_prompt_token_ratio_to_all_covers_at_the_comparison_size(design: str) -> None:
    tasks = TOKEN_DESIGNS[design]
    target = float(np.mean([factor for factor, _ in tasks]))  # the short answers fall on both arms alike
    rng = np.random.default_rng(2027)
    rows = [{"arm": a, "task": f"t{t}", "seed": s, "iteration": 0, "compiled": True, "correct": True, "speedup": 1.0}
            for a in ("all", "learned") for t in range(len(tasks)) for s in range(3)]
    covered = 0
    for _ in range(COMPARISONS):
        usage = []
        for t, (factor, sd) in enumerate(tasks):
            level = 10.0 + t / 3
            for arm, shift in (("all", 0.0), ("learned", factor)):
                usage += [{"arm": arm, "task": f"t{t}", "seed": s, "promptTokens": float(v)}
                          for s, v in enumerate(tokens(rng, level + shift, sd, 3))]
        arms = {a["arm"]: a for a in analyse(rows, usage, ITERATIONS)["arms"]}
        ratio = arms["learned"]["promptTokensRatioToAll"]
        assert ratio["pairs"] == 18
        covered += math.log(ratio["low"]) <= target <= math.log(ratio["high"])
    assert 0.93 <= covered / COMPARISONS <= 0.99, (design, covered / COMPARISONS)


# The page's compile and pass rates against all (analyse's *RateDifferenceToAll) are a paired t-interval of the
# difference of two units' rates over units. A unit's rate is its passed children over its children: 1 to 8 children
# (an iteration without one gives none), each passing with the unit's own chance, drawn from a Beta around the
# task's rate for that arm (so units of one task differ, as seeds do). The estimand is the mean over the tasks of
# the difference of the arms' rates. Per task: (rate under all, rate under the other arm).
RATE_DESIGNS = {
    "rates that differ by task, small effects": [(0.4, 0.5), (0.3, 0.3), (0.6, 0.4), (0.2, 0.3), (0.7, 0.7),
                                                 (0.35, 0.5)],
    "no difference, rates near the page's": [(0.38, 0.38), (0.2, 0.2), (0.6, 0.6), (0.3, 0.3), (0.5, 0.5),
                                             (0.4, 0.4)],
    "rare passes: rates near 0": [(0.05, 0.05), (0.1, 0.05), (0.02, 0.1), (0.05, 0.1), (0.1, 0.1), (0.05, 0.02)],
}


def unit_rows(rng: np.random.Generator, arm: str, task: str, seed: int, rate: float) -> list[dict]:
    children = 1 + rng.binomial(ITERATIONS - 1, 0.75)
    chance = rng.beta(5 * rate, 5 * (1 - rate))  # mean `rate`
    rows = [{"arm": arm, "task": task, "seed": seed, "iteration": 0, "compiled": True, "correct": True,
             "speedup": 1.0}]
    for i in range(1, children + 1):
        ok = bool(rng.random() < chance)
        rows.append({"arm": arm, "task": task, "seed": seed, "iteration": i, "compiled": True, "correct": ok,
                     "speedup": 1.0 if ok else None})
    return rows


@pytest.mark.parametrize("design", list(RATE_DESIGNS))
def test_the_pass_rate_difference_to_all_covers_at_the_comparison_size(design: str) -> None:
    tasks = RATE_DESIGNS[design]
    target = float(np.mean([other - ref for ref, other in tasks]))
    rng = np.random.default_rng(2028)
    covered = 0
    for _ in range(COMPARISONS):
        rows = []
        for t, (ref, other) in enumerate(tasks):
            for s in range(3):
                rows += unit_rows(rng, "all", f"t{t}", s, ref) + unit_rows(rng, "learned", f"t{t}", s, other)
        arms = {a["arm"]: a for a in analyse(rows, [], ITERATIONS)["arms"]}
        difference = arms["learned"]["passRateDifferenceToAll"]
        assert difference["pairs"] == 18
        covered += difference["low"] <= target <= difference["high"]
    assert 0.93 <= covered / COMPARISONS <= 0.99, (design, covered / COMPARISONS)
