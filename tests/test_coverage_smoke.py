"""A fast version of bench/coverage.py: one design, few runs, through the same code (tabulate -> attribute_tables).

The full table (2,000 runs a design, 16 designs) is in docs/attribution.md and docs/results/coverage-2026-12-01/.
Here: P = 24 programs at a medium rate, RUNS runs. Each player's main interval and MSR's over 6 of the 8 coalitions
must cover within K = 2.5 Monte-Carlo errors of the 93-97 % band: [0.893, 0.995] with 300 runs (a coverage of 0.89
or one of 1.00 fails). MSR over every coalition must give the exact interval in every run it runs on.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from script_support import load_script

from cudanalyst.attribution.simulate import Design

ROOT = Path(__file__).resolve().parents[1]
RUNS = 300
K = 2.5


def bench():  # type: ignore[no-untyped-def]
    return load_script(ROOT / "bench" / "coverage.py", "coverage_bench")


def band(runs: int) -> tuple[float, float]:
    return 0.93 - K * math.sqrt(0.93 * 0.07 / runs), 0.97 + K * math.sqrt(0.97 * 0.03 / runs)


@pytest.mark.slow
def test_the_main_and_msr_intervals_cover_in_a_few_runs() -> None:
    module = bench()
    result = module.run_design(Design(24, 1, 0.5, False), RUNS, seed=2026)
    low, high = band(RUNS)
    assert (round(low, 3), round(high, 3)) == (0.893, 0.995)
    for tally in (result.exact, result.msr_sampled):
        assert tally.missing == 0
        for covered in tally.covered:
            assert low <= covered / RUNS <= high, (tally, result.truth)
    # MSR over every coalition runs on the first MSR_ALL_RUNS runs: the exact interval in each.
    assert result.msr_equals_exact == min(RUNS, module.MSR_ALL_RUNS) and result.msr_all.missing == 0
