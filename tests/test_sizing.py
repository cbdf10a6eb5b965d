"""Sizing a study (`cudanalyst plan --effect`, issue 29): the programs and tasks the smallest effect needs, at both
levels, from a pilot's outcomes; the calculation printed for a study page and as JSON."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from cudanalyst.attribution.intervals import PRIOR_UNITS
from cudanalyst.attribution.values import parse_records, tabulate
from cudanalyst.cli import main as cli_main
from cudanalyst.sizing import Design, default_levels, detectable, pilot_levels, sizing, units_for

PLAYERS = ["debugger", "analyzer", "profiler"]
COALITIONS = [list(c) for k in range(4) for c in itertools.combinations(PLAYERS, k)]
EXAMPLE = Path(__file__).parents[1] / "examples" / "h200-pipeline.yaml"


def records(task_effects: list[float], within: float, programs: int = 6, rollouts: int = 6,
            seed: int = 0) -> list[dict]:
    """A pilot: per task its own debugger effect on pass, and per program an effect spread `within` around it."""
    rng = np.random.default_rng(seed)
    out = []
    for t, effect in enumerate(task_effects):
        for p in range(programs):
            own = effect + within * (1 if p % 2 else -1)
            pid = f"t{t}p{p}"
            for c, r in itertools.product(COALITIONS, range(rollouts)):
                chance = min(max(0.3 + own * ("debugger" in c), 0.0), 1.0)
                label = "pass" if rng.random() < chance else "compile"
                out.append({"key": f"{pid}-{'+'.join(c)}-{r}", "run": "pilot", "task": f"task{t}", "generation": 0,
                            "programId": pid, "coalition": c, "arm": "coalition", "rollout": r, "sample": 0,
                            "label": label, "evaluatedUpTo": "fast"})
    return out


def levels_of(raw: list[dict]) -> dict:
    tables = tabulate(parse_records((r["key"], r) for r in raw), PLAYERS, ["pass"])
    (lv,) = pilot_levels(tables)
    return lv


def test_the_pilot_splits_the_spread_between_tasks_and_within_them() -> None:
    by_task = levels_of(records([-0.25, 0.25, -0.25, 0.25, 0.0, 0.5], within=0.0))
    by_program = levels_of(records([0.2] * 6, within=0.3))
    assert by_task.player == by_program.player == "debugger"  # the effect's player has the largest spread
    assert by_task.sigma_task > 0.15 and by_task.sigma_task > 2 * by_task.sigma_within
    assert by_program.sigma_within > 0.15 and by_program.sigma_within > 2 * by_program.sigma_task
    assert (by_task.programs, by_task.tasks, by_task.rollouts, by_task.source) == (36, 6, 6, "pilot")


def test_units_needed_are_the_fewest_that_see_the_effect() -> None:
    alpha = 0.05
    n = units_for(0.1, 1.0, alpha, 0.8)
    assert n is not None and detectable(n, 1.0, alpha, 0.8) <= 0.1 < detectable(n - 1, 1.0, alpha, 0.8)
    # Large n: the normal approximation ((z_{1-a/2} + z_power) sd / delta)^2 = 784.9.
    assert abs(n - ((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 10) ** 2) < 5
    # Power 0.5: the expected half-width of the t-interval is the effect.
    assert detectable(20, 0.3, alpha, 0.5) == pytest.approx(stats.t.ppf(0.975, 19 + PRIOR_UNITS) * 0.3 / math.sqrt(20))
    assert detectable(1, 0.3, alpha, 0.8) is None and units_for(0.1, 0.0, alpha, 0.8) == 2
    assert units_for(1e-4, 1.0, alpha, 0.8) is None  # beyond MAX_UNITS


def test_both_levels_answer_and_more_tests_or_fewer_tasks_need_more() -> None:
    lv = levels_of(records([-0.25, 0.25, -0.25, 0.25, 0.0, 0.5], within=0.1))
    design = Design(players=3, rollouts=2, programs=64, tasks=16)
    one = sizing([lv], design, 0.1, 0.95, 0.8, 1)["metrics"][0]  # type: ignore[index]
    many = sizing([lv], design, 0.1, 0.95, 0.8, 12)["metrics"][0]  # type: ignore[index]
    assert one["programs"]["unit"] == "program" and one["tasks"]["unit"] == "task"
    assert one["tasks"]["programsPerTask"] == 4
    assert many["programs"]["needed"] > one["programs"]["needed"] and many["tasks"]["needed"] > one["tasks"]["needed"]
    # More programs a task cannot replace tasks: the floor over any m is at most what m = 4 needs.
    assert one["tasks"]["neededAnyProgramsPerTask"] <= one["tasks"]["needed"]
    # What this plan's own units see is the effect whose units_for is at most what it has.
    seen = one["programs"]["detectable"]
    assert units_for(seen + 1e-3, one["programs"]["sd"], 0.05, 0.8) <= 64
    assert default_levels(["pass"])[0].sigma_task == default_levels(["pass"])[0].sigma_program


def test_plan_prints_the_calculation_and_its_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pilot = tmp_path / "pilot" / "outcomes"
    pilot.mkdir(parents=True)
    for r in records([-0.25, 0.25, 0.0, 0.5], within=0.1, programs=4, rollouts=2):
        (pilot / f"{r['key']}.json").write_text(json.dumps(r))
    args = ["plan", str(EXAMPLE), "--pilot", str(pilot.parent), "--effect", "0.15", "--comparisons", "6"]
    assert cli_main([*args, "--json"]) == 0
    sized = json.loads(capsys.readouterr().out)["sizing"]
    assert sized["alpha"] == pytest.approx(0.05 / 6, abs=1e-6) and sized["power"] == 0.8
    rows = {r["metric"]: r for r in sized["metrics"]}
    assert rows["pass"]["source"] == "pilot" and rows["pass"]["tasks"]["needed"] >= 2
    # The pilot's own counts (4 tasks of 4 programs) stay apart from the levels' answers of the same name.
    assert (rows["pass"]["pilotPrograms"], rows["pass"]["pilotTasks"]) == (16, 4)
    assert "| 16 / 4 |" in sized["markdown"]
    assert "### Sizing" in sized["markdown"] and "Holm over 6 comparisons" in sized["markdown"]
    assert cli_main(args) == 0
    shown = capsys.readouterr().out
    assert "| pass | debugger |" in shown and f"-> {rows['pass']['programs']['needed']} programs" in shown
    with pytest.raises(SystemExit) as exit_:
        cli_main(["plan", str(EXAMPLE), "--effect", "0"])
    assert exit_.value.code == 2 and "--effect 0" in capsys.readouterr().err
