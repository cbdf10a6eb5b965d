"""Does a design sized from a pilot see what the sizing says it sees? Power by simulation (issue 29, docs/sizing.md).

The study's design came from its pilot (docs/decisions.md, "The study's design, from its pilot"): `sizing` took the
pilot's spreads and rate and said which Banzhaf value a design of P programs and R rollouts sees at power 0.8 after
Holm over the page's family. This checks that promise through the code the study uses, at the program level:

1. a pilot (P programs, one rollout, best-of-3) is simulated from a population (`attribution.simulate`: each
   program its own baseline and player effects, logit scale) and read by `sizing.pilot_levels`, as `cudanalyst plan
   --pilot` reads a run;
2. `sizing.sizing` says what the design (P programs, R rollouts) sees: the smallest Banzhaf value delta* it detects;
3. the population's first player gets the logit effect whose population Banzhaf value on `pass` is delta* (the
   others none), and RUNS runs of the design go through `tabulate -> attribute_tables` (the report's exact
   interval and its p-value);
4. power is the share of runs whose p-value is under alpha / comparisons, the Holm step the sizing assumed, with the
   estimate on the right side. The sizing's promise is 0.8.

Repeated over PILOTS pilots, since the promise rests on one pilot's estimates. The unit of replication is the
simulated run (and, over the table's rows, the pilot). The spread between programs that a one-rollout pilot hides
under its noise (docs/sizing.md) is the known way this can fall short: the table says how far.

    python bench/sizing_power.py                          # 20 pilots x 100 runs, each design: a few minutes
    python bench/sizing_power.py --pilots 5 --runs 60     # quicker
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np

from cudanalyst.attribution.result import attribute_tables
from cudanalyst.attribution.simulate import PLAYERS, Design, simulate_columns, truth
from cudanalyst.attribution.values import tabulate
from cudanalyst.sizing import Design as SizedDesign
from cudanalyst.sizing import pilot_levels, sizing

METRIC = "pass"
BASELINE = -2.0  # a best-of-3 rate near the pilot's (0.25-0.40)
COMPARISONS = 228  # the pilot page's Holm family
CONFIDENCE = 0.95  # the spec's attribution.confidence; Holm's strictest step is (1 - CONFIDENCE) / COMPARISONS


def pilot_sees(population: Design, rollouts: int, rng: np.random.Generator, power: float) -> float:
    """What one simulated pilot (one rollout) says the design with `rollouts` rollouts sees over programs."""
    pilot = replace(population, rollouts=1)
    levels = [lv for lv in pilot_levels(tabulate(simulate_columns(pilot, rng), PLAYERS, [METRIC]))
              if lv.metric == METRIC]
    design = SizedDesign(players=len(PLAYERS), rollouts=rollouts, programs=population.units, tasks=1)
    # Only what the design sees is read; the effect asked for does not change it.
    sized = sizing(levels, design, effect=0.1, confidence=CONFIDENCE, power=power, comparisons=COMPARISONS)
    (row,) = sized["metrics"]  # type: ignore[index]
    return float(row["programs"]["detectable"])


def effect_for(population: Design, delta: float) -> float:
    """The first player's logit effect whose population Banzhaf value on pass is delta (bisection on truth)."""
    lo, hi = 0.0, 4.0
    for _ in range(30):
        mid = (lo + hi) / 2
        value = truth(replace(population, effects=(mid, 0.0, 0.0)))[0][0]
        lo, hi = (mid, hi) if value < delta else (lo, mid)
    return (lo + hi) / 2


def attained(population: Design, runs: int, rng: np.random.Generator, alpha: float) -> float:
    """Share of runs whose first player's p-value is under alpha, its estimate above 0."""
    hits = 0
    for _ in range(runs):
        tables = tabulate(simulate_columns(population, rng), PLAYERS, [METRIC])
        tables = replace(tables, games={k: po for k, po in tables.games.items() if k[2] is not None})
        (game,) = attribute_tables(tables, estimator="exact", replicates=0).games
        est = game.banzhaf[PLAYERS[0]]
        hits += est.p_value is not None and est.p_value < alpha and (est.value or 0) > 0
    return hits / runs


def run(programs: int, rollouts: int, pilots: int, runs: int, seed: int, power: float = 0.8) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    alpha = (1 - CONFIDENCE) / COMPARISONS
    base = Design(programs, rollouts, 0.5, False, samples=3, effects=(0.0, 0.0, 0.0), baseline=BASELINE)
    rows = []
    for _ in range(pilots):
        # The pilot comes from the population without the effect: the sizing reads only its spreads and its rate.
        sees = pilot_sees(base, rollouts, rng, power)
        population = replace(base, effects=(effect_for(base, sees), 0.0, 0.0))
        rows.append((sees, attained(population, runs, rng, alpha), truth(population)[1]))
    sees_, power_, rate_ = (np.array(x) for x in zip(*rows, strict=True))
    return {"programs": programs, "rollouts": rollouts, "pilots": pilots, "runs": runs,
            "sees": (float(sees_.min()), float(np.median(sees_)), float(sees_.max())),
            "power": float(power_.mean()), "powerRange": (float(power_.min()), float(power_.max())),
            "se": math.sqrt(float(power_.mean()) * (1 - float(power_.mean())) / (pilots * runs)),
            "rate": float(rate_.mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pilots", type=int, default=20)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    print(f"power by simulation, alpha = 0.05 / {COMPARISONS}, promised 0.8; {args.pilots} pilots x {args.runs} runs "
          f"a design; metric {METRIC}, best-of-3, baseline logit {BASELINE}")
    print("| programs | rollouts | sees (min / median / max over pilots) | rate | attained power [range over pilots] |")
    print("|---|---|---|---|---|")
    for programs, rollouts in ((60, 1), (60, 2), (88, 2)):
        r = run(programs, rollouts, args.pilots, args.runs, args.seed)
        lo, mid, hi = r["sees"]  # type: ignore[misc]
        plo, phi = r["powerRange"]  # type: ignore[misc]
        print(f"| {programs} | {rollouts} | {lo:.3f} / {mid:.3f} / {hi:.3f} | {r['rate']:.2f} | "
              f"{r['power']:.3f} +- {r['se']:.3f} [{plo:.2f}, {phi:.2f}] |", flush=True)


if __name__ == "__main__":
    main()
