"""Coverage of the Banzhaf intervals by simulation, through `tabulate -> attribute_tables` (the path of
`cudanalyst attribute --outcomes` after parsing; `test_attribution_programs.py` checks that parsed records
and these columns give the same report).

Designs (issue 13): heterogeneous program effects; P = 4, 12, 48 units; best-of-5; R = 1 and 3 rollouts;
one generation, or three pooled (the unit is then the task); rates near 0.05 and 0.5. 300 runs per
design, every design of the grid (about 2-3 minutes on two cores; `python bench/attribution.py --coverage`
prints the same table with more runs). Target for the 95% intervals, averaged over the three players:
93-97% for P >= 12, at least 93% (conservative) for P = 4. Each player alone must reach 89%: the player
with the largest effect at rate 0.05 and P = 12 is the known weak spot (skewed outcomes, few units; see
docs/attribution.md).
"""

from __future__ import annotations

import pytest

from cudanalyst.attribution.simulate import Design, coverage

RUNS = 300
DESIGNS = [Design(p, r, rate, pooled) for p in (4, 12, 48) for r in (1, 3) for rate in (0.05, 0.5)
           for pooled in (False, True)]


@pytest.mark.slow
@pytest.mark.parametrize("design", DESIGNS, ids=lambda d: d.label().replace(" ", "_"))
def test_banzhaf_intervals_cover_the_population_value(design: Design) -> None:
    result = coverage(design, RUNS, seed=2026)
    assert result.no_interval == 0
    if design.units >= 12:
        assert 0.93 <= result.mean <= 0.97, (design.label(), result.covered)
    else:
        assert result.mean >= 0.93, (design.label(), result.covered)
    assert result.covered.min() >= 0.89, (design.label(), result.covered)
