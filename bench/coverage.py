"""Coverage of every interval the report shows, by simulation, through the CLI's own code (issue 29, part 3).

Each simulated run's outcome records go through `tabulate -> attribute_tables` (the path of `cudanalyst attribute
--outcomes` and of the report after the records are parsed; `attribution.simulate`). Per run and player, it checks
whether the population Banzhaf value lies inside:

- the main interval (the exact estimator's; `low`/`high`), and in how many runs the "only K of J change" widening
  fired, and how those runs covered;
- the bootstrap interval (`bootstrapLow/High`, the report's "bootstrap interval"), computed for every game here
  (the report shows it only from `result.BOOTSTRAP_MIN_UNITS` units), with its zero-width intervals counted;
- MSR's interval with every coalition present (`estimator: msr`; the first MSR_ALL_RUNS runs of a design: it is the
  exact interval, checked in each), and with 6 of the 8 coalitions drawn at random per run (MSR over a sample of
  coalitions, as `auto` does for a game that misses some).

    python bench/coverage.py                    # 2,000 runs per design, seed 2026, 2 processes: the docs' table
    python bench/coverage.py --runs 200 --jobs 1

Designs: P = 8, 12, 24, 48 frozen programs (one generation) and 4 tasks of 3 generations (pooled), best-of-5, one
rollout, rates near 0.05 (low) and 0.5 (medium); heterogeneous program effects as in `simulate` (logit effects
+0.6 / 0 / -0.3); and 24 and 48 programs of which only 10 % can succeed at all (a few carry the game). tests/test_coverage_smoke.py runs one design on few runs.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import partial

import numpy as np

from cudanalyst.attribution import contrast
from cudanalyst.attribution.result import attribute_tables
from cudanalyst.attribution.simulate import PLAYERS, Design, simulate_columns, truth
from cudanalyst.attribution.values import OutcomeColumns, tabulate

DESIGNS = tuple(Design(p, 1, rate, False) for rate in (0.05, 0.5) for p in (8, 12, 24, 48)) + tuple(
    Design(4, 1, rate, True) for rate in (0.05, 0.5)) + tuple(
    # A few programs carry the game: only 10 % can succeed at all (where the widening is for).
    Design(p, 1, 0.5, False, active=0.1) for p in (24, 48))
MSR_KEEP = 6  # coalitions of 8 kept per run for MSR over a sample
MSR_ALL_RUNS = 200  # runs per design that also run MSR over every coalition (it gives the exact interval: checked)
REPLICATES = 1000  # bootstrap replicates, as the spec's default


@dataclass
class Tally:
    """Per player: runs whose interval held the truth, lay wholly below / above it; runs with no interval;
    zero-width intervals; the sum of half-widths."""

    covered: list[int] = field(default_factory=lambda: [0] * len(PLAYERS))
    below: list[int] = field(default_factory=lambda: [0] * len(PLAYERS))
    above: list[int] = field(default_factory=lambda: [0] * len(PLAYERS))
    missing: int = 0
    zero_width: int = 0
    half_width: float = 0.0

    def add(self, player: int, low: float | None, high: float | None, target: float) -> None:
        if low is None or high is None:
            self.missing += 1
            return
        self.covered[player] += low <= target <= high
        self.below[player] += high < target
        self.above[player] += low > target
        self.zero_width += high == low
        self.half_width += (high - low) / 2


@dataclass
class Result:
    design: str
    units: int
    pooled: bool
    rate: float
    active: float
    runs: int
    truth: list[float]
    exact: Tally
    bootstrap: Tally
    msr_all: Tally
    msr_sampled: Tally
    widened: Tally  # the main interval in the runs where the "only K of J change" widening fired
    unwidened: Tally  # the same runs' logit interval without the widening
    widened_runs: int = 0
    msr_equals_exact: int = 0  # runs where MSR over every coalition gave the exact interval, to 1e-12


def _keep_coalitions(cols: OutcomeColumns, keep: np.ndarray) -> OutcomeColumns:
    sel = np.isin(cols.mask, keep)
    pick = np.flatnonzero(sel)
    return replace(cols, arm=tuple(np.asarray(cols.arm)[pick]), task=tuple(np.asarray(cols.task)[pick]),
                   generation=cols.generation[pick], program=tuple(np.asarray(cols.program)[pick]),
                   mask=cols.mask[pick], rollout=cols.rollout[pick], sample=cols.sample[pick],
                   label=cols.label[pick], ceiling=cols.ceiling[pick], unchanged=cols.unchanged[pick])


def _game(cols: OutcomeColumns, design: Design, estimator: str, replicates: int, seed: int):  # type: ignore[no-untyped-def]
    tables = tabulate(cols, PLAYERS, ["pass"])
    tables = replace(tables, games={k: po for k, po in tables.games.items() if (k[2] is None) == design.pooled})
    report = attribute_tables(tables, estimator=estimator, confidence=0.95,  # type: ignore[arg-type]
                              replicates=replicates, seed=seed, bootstrap_min_units=2)
    (game,) = report.games
    return game


def _unwidened(cols: OutcomeColumns, design: Design, seed: int):  # type: ignore[no-untyped-def]
    """The main interval without the "only K of J change" widening (for the table only)."""
    saved = contrast.few_changing
    contrast.few_changing = lambda changing, units: False  # contrast_intervals reads it from its module
    try:
        return _game(cols, design, "exact", 0, seed)
    finally:
        contrast.few_changing = saved


def run_design(design: Design, runs: int, seed: int) -> Result:
    rng = np.random.default_rng([seed, design.units, int(design.rate * 100), design.pooled])
    target, _ = truth(design)
    res = Result(design.label(), design.units, design.pooled, design.rate, design.active, runs, [float(x) for x in target],
                 Tally(), Tally(), Tally(), Tally(), Tally(), Tally())
    for r in range(runs):
        cols = simulate_columns(design, rng)
        exact = _game(cols, design, "exact", REPLICATES, r)
        msr = _game(cols, design, "msr", 0, r) if r < MSR_ALL_RUNS else None
        keep = rng.choice(1 << len(PLAYERS), MSR_KEEP, replace=False)
        sampled = _game(_keep_coalitions(cols, keep), design, "msr", 0, r)
        fired = "only" in exact.interval_note
        res.widened_runs += fired
        plain = _unwidened(cols, design, r) if fired else None
        same = msr is not None
        for i, player in enumerate(PLAYERS):
            e, s = exact.banzhaf[player], sampled.banzhaf[player]
            res.exact.add(i, e.low, e.high, target[i])
            res.bootstrap.add(i, e.bootstrap_low, e.bootstrap_high, target[i])
            res.msr_sampled.add(i, s.low, s.high, target[i])
            if plain is not None:
                res.widened.add(i, e.low, e.high, target[i])
                res.unwidened.add(i, plain.banzhaf[player].low, plain.banzhaf[player].high, target[i])
            if msr is None:
                continue
            m = msr.banzhaf[player]
            res.msr_all.add(i, m.low, m.high, target[i])
            same &= e.low is not None and m.low is not None and abs(e.low - m.low) < 1e-12 and \
                abs((e.high or 0) - (m.high or 0)) < 1e-12
        res.msr_equals_exact += same
    return res


def _rates(t: Tally, runs: int) -> str:
    return " / ".join(f"{c / runs:.3f}" for c in t.covered) if runs else "-"


def table(results: list[Result]) -> str:
    lines = ["| design | truth (debugger / analyzer / profiler) | main interval | main: below / above (debugger) "
             f"| widening fired: runs, coverage in them (without it) | bootstrap | bootstrap left out (zero width) | MSR, all 8 coalitions (first {MSR_ALL_RUNS} runs) "
             "| MSR, 6 of 8 coalitions | main half-width |", "|---" * 10 + "|"]
    for r in results:
        scope = f"{r.units} tasks of 3 gens, pooled" if r.pooled else f"P = {r.units}"
        scope += "" if r.active == 1 else f", {r.active:.0%} can succeed"
        widened = (f"{r.widened_runs} ({r.widened_runs / r.runs:.0%}): {_rates(r.widened, r.widened_runs)}; "
                   f"unwidened {_rates(r.unwidened, r.widened_runs)}" if r.widened_runs else "0")
        lines.append(
            f"| {scope}, rate ~{r.rate} | {' / '.join(f'{x:+.3f}' for x in r.truth)} | {_rates(r.exact, r.runs)} "
            f"| {r.exact.below[0] / r.runs:.3f} / {r.exact.above[0] / r.runs:.3f} | {widened} "
            f"| {_rates(r.bootstrap, r.runs)} | {r.bootstrap.missing} of {r.runs * len(PLAYERS)} "
            f"| {_rates(r.msr_all, min(r.runs, MSR_ALL_RUNS))} | {_rates(r.msr_sampled, r.runs)} "
            f"| {r.exact.half_width / (r.runs * len(PLAYERS) - r.exact.missing):.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000, help="simulated runs per design (default 2000)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--json", help="also write every tally to this file")
    args = parser.parse_args()
    se = (0.95 * 0.05 / args.runs) ** 0.5
    print(f"{args.runs} runs per design, seed {args.seed}; 95 % intervals of the 3 players' Banzhaf values of pass "
          f"(coverage per player: debugger / analyzer / profiler); Monte-Carlo SE near 0.95: {se:.4f}\n")
    results = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        # Each design's row as it is done (a slow machine shows progress), the table in order at the end.
        for r in pool.map(partial(run_design, runs=args.runs, seed=args.seed), DESIGNS):
            results.append(r)
            print(table([r]).splitlines()[-1], flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump([asdict(x) for x in results], f, indent=1, default=lambda o: o.item())  # numpy scalars
    print("\n" + table(results))
    print(f"\nMSR over every coalition gave the exact interval in {sum(r.msr_equals_exact for r in results)} of "
          f"{sum(min(r.runs, MSR_ALL_RUNS) for r in results)} runs where both ran.")


if __name__ == "__main__":
    main()
