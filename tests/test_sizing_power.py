"""A fast version of bench/sizing_power.py: does a design sized from a pilot see what the sizing says it sees?

One simulated pilot sizes the study's design (60 programs, two rollouts, best-of-3, Holm over 228 comparisons); the
population then gets the Banzhaf value the sizing says that design sees, and RUNS runs of it go through the report's
attribution. The sizing promises power 0.8. With RUNS runs the Monte-Carlo error is about 0.05, so the share of runs
that see the effect must lie in [0.6, 0.97]: a noise term off by a factor of two (rollouts or coalitions miscounted)
gives about 0.3 or 0.99 and fails. The full table (20 pilots x 100 runs, three designs) is in docs/sizing.md.
"""

from __future__ import annotations

from pathlib import Path

from script_support import load_script

ROOT = Path(__file__).resolve().parents[1]
RUNS = 60


def bench():  # type: ignore[no-untyped-def]
    return load_script(ROOT / "bench" / "sizing_power.py", "sizing_power_bench")


def test_a_design_sized_from_its_pilot_sees_its_effect_at_about_the_promised_power() -> None:
    result = bench().run(programs=60, rollouts=2, pilots=1, runs=RUNS, seed=7)
    low, _, high = result["sees"]
    assert 0.1 < low <= high < 0.2  # the study's design: about 0.15 over programs
    assert 0.6 <= result["power"] <= 0.97, result
