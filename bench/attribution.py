"""Exact attribution speed: our O(n 2^n) transforms against shapiq's ExactComputer, side by side.

The same set of indices on the same random game: Banzhaf values, every pairwise Banzhaf interaction, and
Shapley values. Targets: n = 16 at least 100x faster than shapiq; n = 20 under 1 s.

    python bench/attribution.py                 # n = 8, 12, 16, 20; shapiq up to n = 16
    python bench/attribution.py --shapiq-max 12 # a quicker run
    python bench/attribution.py --coverage      # coverage of the 95% Banzhaf intervals, per player: issue 13's
                                                # grid and the larger effects (2000 runs each, ~15 min)
    python bench/attribution.py --coverage --runs 500 --seed 1 --designs larger
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from itertools import combinations

import numpy as np

from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.games import masks_of_order


def ours(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = tf.n_players_of(v)
    table = tf.banzhaf_interaction_table(v)
    return table[masks_of_order(n, 1)], table[masks_of_order(n, 2)], tf.shapley_values(v)


def theirs(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from shapiq import ExactComputer

    n = tf.n_players_of(v)
    weights = np.int64(1) << np.arange(n)
    computer = ExactComputer(lambda x: v[x.astype(np.int64) @ weights], n_players=n)
    bv, bii, sv = computer("BV", 1), computer("BII", 2), computer("SV", 1)
    return (
        np.array([bv[(i,)] for i in range(n)]),
        np.array([bii[c] for c in combinations(range(n), 2)]),
        np.array([sv[(i,)] for i in range(n)]),
    )


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Best of `repeats` wall-clock times (the least disturbed by other work on the machine)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def coverage_table(runs: int, seed: int, which: str, jobs: int) -> None:
    """Per-player coverage of issue 13's grid and of the larger effects as a Markdown table (docs/attribution.md
    has one; tests/test_attribution_coverage.py runs a subset). Designs run in `jobs` processes, rows in order."""
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    from cudanalyst.attribution.simulate import GRID, LARGER, SPARSE, coverage

    designs = {"grid": GRID, "larger": LARGER, "all": GRID + LARGER, "sparse": SPARSE}[which]
    se = (0.95 * 0.05 / runs) ** 0.5
    print(f"{runs} runs per design, seed {seed}; 95% intervals of the 3 players' Banzhaf values (debugger / analyzer"
          f" / profiler); Monte-Carlo SE of a coverage near 0.95: {se:.4f}")
    print("| P | R | rate | pooled | effects (logit) | truth | coverage per player | below / above the truth "
          "(player 1) | mean half-width |")
    print("|---|---|---|---|---|---|---|---|---|")
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = pool.map(partial(coverage, runs=runs, seed=seed), designs)
        for d, c in zip(designs, results, strict=True):
            truth = " / ".join(f"{x:+.3f}" for x in c.truth)
            per = " / ".join(f"{x:.3f}" for x in c.covered)
            print(f"| {d.units} | {d.rollouts} | {d.rate}{'' if d.active == 1 else f', {d.active:.0%} active'} "
                  f"| {'tasks of 3 gens' if d.pooled else 'no'} "
                  f"| {'/'.join(f'{e:+g}' for e in d.effects)} | {truth} | {per} "
                  f"| {c.below[0]:.3f} / {c.above[0]:.3f} | {c.half_width:.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="8,12,16,20", help="player counts (default 8,12,16,20)")
    parser.add_argument("--shapiq-max", type=int, default=16,
                        help="largest n to run shapiq on (default 16: at n = 20 it would take hours)")
    parser.add_argument("--coverage", action="store_true",
                        help="instead: coverage of the 95%% Banzhaf intervals by simulation (issue 13's grid)")
    parser.add_argument("--runs", type=int, default=2000, help="with --coverage: simulated runs per design")
    parser.add_argument("--seed", type=int, default=2026, help="with --coverage: seed (the test's is 2026)")
    parser.add_argument("--designs", choices=("grid", "larger", "all", "sparse"), default="all",
                        help="with --coverage: issue 13's grid, the larger effects, or both (default); sparse: "
                        "designs where most units never succeed (a known limit, docs/attribution.md)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="with --coverage: processes")
    args = parser.parse_args()
    if args.coverage:
        coverage_table(args.runs, args.seed, args.designs, args.jobs)
        return
    print("indices: Banzhaf values + all pairwise Banzhaf interactions + Shapley values, random game")
    print(f"{'n':>3} {'coalitions':>11} {'ours [s]':>10} {'shapiq [s]':>11} {'ratio':>8}  agree")
    for n in (int(x) for x in args.sizes.split(",")):
        v = np.random.default_rng(n).random(1 << n)
        t_ours, result = timed(lambda v=v: ours(v), repeats=5 if n < 20 else 3)
        if n > args.shapiq_max:
            print(f"{n:>3} {1 << n:>11} {t_ours:>10.4f} {'skipped':>11} {'-':>8}  -   "
                  f"(shapiq not run above n = {args.shapiq_max}: too slow)")
            continue
        t_theirs, expected = timed(lambda v=v: theirs(v), repeats=3 if n <= 12 else 1)
        agree = all(np.allclose(a, b, atol=1e-9) for a, b in zip(result, expected, strict=True))
        print(f"{n:>3} {1 << n:>11} {t_ours:>10.4f} {t_theirs:>11.3f} {t_theirs / t_ours:>7.0f}x  {agree}")
    print("targets: n = 16 ratio >= 100x; n = 20 ours < 1 s")


if __name__ == "__main__":
    main()
