"""Freezing by recorded state (spec.trajectory.strata, issue 29): the states, the seeded draw, what `cudanalyst
plan` prints, and that a spec without strata freezes exactly as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from cudanalyst.api import AttributionRun
from cudanalyst.api.spec import StrataSpec
from cudanalyst.plan import strata_line
from cudanalyst.planned_run import PlanError, plan_run
from cudanalyst.trajectory import FrozenProgram, TrajectoryError, freeze, freeze_strata, load_trajectory
from cudanalyst.trajectory.states import program_state

RECORDED = "builtin://recorded-h200-2026-11-30"


def program(pid: str, task: str = "gemm", generation: int = 0, source: str | None = None,
            **metrics: object) -> FrozenProgram:
    # Each program its own source unless given one: the draw keeps one program per source.
    return FrozenProgram(task=task, generation=generation, program_id=pid, source=source or f'char id[] = "{pid}";',
                         metrics=metrics)


def pool() -> list[FrozenProgram]:
    """Per task and generation 0/1: 5 broken, 4 wrong, 3 correct, 1 fast, 2 of unknown state."""
    out = []
    for task in ("gemm", "atax"):
        for g in (0, 1):
            out += [program(f"{task}-{g}-b{i}", task, g, compiled=0.0) for i in range(5)]
            out += [program(f"{task}-{g}-w{i}", task, g, compiled=1.0, correct=0.0) for i in range(4)]
            out += [program(f"{task}-{g}-c{i}", task, g, compiled=1.0, correct=1.0, speedup=1.05) for i in range(3)]
            out += [program(f"{task}-{g}-f0", task, g, compiled=True, correct=True, speedup=2.0)]
            out += [program(f"{task}-{g}-u{i}", task, g, compiled=1.0, gpu_evaluated=0.0) for i in range(2)]
    return out


def spec(tmp_path: Path, trajectory: dict) -> dict:
    return {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": "s"},
            "spec": {"trajectory": trajectory, "players": ["debugger", "analyzer"],
                     "models": {"planner": {"endpoint": "http://127.0.0.1:9/v1", "model": "m"}},
                     "sampling": {"rollouts": 1, "samplesPerCoalition": 1}, "output": {"uri": str(tmp_path / "o")}}}


def test_a_programs_state_comes_from_its_recorded_metrics() -> None:
    assert program_state(program("a", compiled=False, correct=False), 0.12) == "broken"
    assert program_state(program("a", compiled=1.0, contract=0.0, correct=0.0), 0.12) == "broken"
    assert program_state(program("a", compiled=1.0, correct=0.0, speedup=3.0), 0.12) == "wrong"
    assert program_state(program("a", compiled=True, correct=True, speedup=1.12), 0.12) == "correct"
    assert program_state(program("a", compiled=True, correct=True), 0.12) == "correct"  # not timed
    assert program_state(program("a", compiled=True, correct=True, speedup=1.13), 0.12) == "fast"
    assert program_state(program("a", compiled=True, correct=True, speedup=1.13), 0.2) == "correct"
    # compiled only (recorded without a GPU) or nothing recorded: no state, in no stratum
    assert program_state(program("a", compiled=1.0, gpu_evaluated=0.0), 0.12) is None
    assert program_state(program("a", combined_score=0.5), 0.12) is None


def test_the_draw_takes_the_asked_count_of_each_state_per_task_and_says_what_fell_short() -> None:
    counts = {"broken": 3, "wrong": 2, "correct": 4, "fast": 1}
    frozen, draws = freeze_strata(pool(), [0, 1], counts, seed=3)
    for task in ("gemm", "atax"):
        mine = [p for p in frozen if p.task == task]
        states = [program_state(p, 0.12) for p in mine]
        # pooled over both generations: 10 broken, 8 wrong, 6 correct, 2 fast there
        assert {s: states.count(s) for s in counts} == counts
    assert not any(d.short for d in draws) and len(draws) == 8
    assert all(p.metrics.get("gpu_evaluated") is None for p in frozen)  # unknown state never drawn
    assert frozen == sorted(frozen, key=lambda p: (p.generation, p.task, p.program_id))

    per_gen, draws = freeze_strata(pool(), [0, 1], counts, seed=3, per="generation")
    short = [(d.task, d.generation, d.state, d.available, d.drawn) for d in draws if d.short]
    assert short == [("atax", 0, "correct", 3, 3), ("atax", 1, "correct", 3, 3),
                     ("gemm", 0, "correct", 3, 3), ("gemm", 1, "correct", 3, 3)]
    assert len(per_gen) == 2 * 2 * (3 + 2 + 3 + 1)


def test_the_draw_is_seeded_and_one_stratum_never_moves_another() -> None:
    counts = {"broken": 3, "wrong": 2, "correct": 2, "fast": 1}
    a, _ = freeze_strata(pool(), [0, 1], counts, seed=7)
    assert a == freeze_strata(list(reversed(pool())), [0, 1], counts, seed=7)[0]  # input order does not matter
    other = {p.program_id for p in freeze_strata(pool(), [0, 1], counts, seed=8)[0]}
    assert other != {p.program_id for p in a}
    more_wrong, _ = freeze_strata(pool(), [0, 1], counts | {"wrong": 4}, seed=7)
    broken = {p.program_id for p in a if program_state(p, 0.12) == "broken"}
    assert broken == {p.program_id for p in more_wrong if program_state(p, 0.12) == "broken"}
    only_gemm, _ = freeze_strata(pool(), [0, 1], counts, seed=7, tasks=["gemm"])
    assert only_gemm == [p for p in a if p.task == "gemm"]  # adding a task never changes another's draw


def test_bad_strata_name_the_field() -> None:
    with pytest.raises(TrajectoryError, match="spec.trajectory.generations: generation 5"):
        freeze_strata(pool(), [0, 5], {"broken": 1}, seed=0)
    with pytest.raises(TrajectoryError, match="spec.trajectory.tasks: not in the trajectory: mvt"):
        freeze_strata(pool(), [0], {"broken": 1}, seed=0, tasks=["mvt"])
    nothing = [p for p in pool() if program_state(p, 0.12) != "fast"]
    with pytest.raises(TrajectoryError, match="spec.trajectory.strata: no program"):
        freeze_strata(nothing, [0], {"fast": 2}, seed=0)
    with pytest.raises(ValidationError, match="at least one program"):
        StrataSpec.model_validate({"broken": 0})
    with pytest.raises(ValidationError, match="per"):
        StrataSpec.model_validate({"broken": 1, "per": "program"})


def test_a_spec_without_strata_freezes_exactly_as_before(tmp_path: Path) -> None:
    run = AttributionRun.model_validate(spec(tmp_path, {"uri": RECORDED, "generations": [0, 10],
                                                        "programsPerGeneration": 2}))
    assert run.spec.trajectory.strata is None
    plan = plan_run(run)
    assert plan.programs == freeze(load_trajectory(RECORDED).programs, [0, 10], 2, 0)
    assert plan.draws == [] and "strata" not in plan.overview()


def test_a_stratum_draws_distinct_sources_keeping_the_first_found_of_each() -> None:
    # The baseline, and the agent's unchanged resubmissions of it in later generations (spaced and commented
    # differently), are one program: drawn twice it would count as two replications.
    base = "__global__ void k(float* a) { a[0] = 1.0f; }"
    correct = dict(compiled=1.0, correct=1.0, speedup=1.0)
    programs = [program("z-baseline", generation=0, source=base, **correct),
                program("a-resubmitted", generation=20, source="// unchanged\n" + base.replace(" ", "  "), **correct),
                program("m-resubmitted", generation=10, source=base, **correct),
                program("b-changed", generation=10, source=base.replace("1.0f", "2.0f"), **correct),
                *(program(f"broken{i}", compiled=0.0) for i in range(3))]
    frozen, draws = freeze_strata(programs, [0, 10, 20], {"correct": 3, "broken": 3}, seed=0)
    assert sorted(p.program_id for p in frozen if p.program_id.endswith(("baseline", "resubmitted", "changed"))) \
        == ["b-changed", "z-baseline"]  # the generation-0 copy stands for its repeats
    correct_draw = next(d for d in draws if d.state == "correct")
    assert (correct_draw.available, correct_draw.drawn, correct_draw.repeats, correct_draw.short) == (2, 2, 2, True)
    assert correct_draw.to_dict()["repeats"] == 2
    broken_draw = next(d for d in draws if d.state == "broken")
    assert (broken_draw.drawn, broken_draw.repeats) == (3, 0)
    # the same pool without the repeats draws the same programs
    unique = [p for p in programs if not p.program_id.endswith("resubmitted")]
    assert freeze_strata(unique, [0, 10], {"correct": 3, "broken": 3}, seed=0)[0] == frozen


def test_a_stratified_spec_plans_its_draw_and_an_empty_one_is_refused(tmp_path: Path) -> None:
    data = spec(tmp_path, {"uri": RECORDED, "generations": [0, 10, 20],
                           "strata": {"broken": 2, "wrong": 1, "correct": 1, "fast": 1}})
    plan = plan_run(AttributionRun.model_validate(data))
    states = {(p.task, program_state(p, 0.12)) for p in plan.programs}
    assert ("syrk", "fast") in states and ("gemm", "broken") in states
    drawn = plan.overview()["strata"]["drawn"]  # type: ignore[index]
    assert drawn["syrk"] == {"broken": 2, "wrong": 1, "correct": 1, "fast": 1}
    assert sum(sum(row.values()) for row in drawn.values()) == len(plan.programs)
    line = strata_line(plan.draws)  # what `cudanalyst run` prints at its start
    short = sum(d.short for d in plan.draws)
    assert line.startswith("frozen by recorded state over 8 task(s): broken 16, wrong ")
    assert short > 0 and f"; {short} of {len(plan.draws)} strata gave fewer" in line
    data["spec"]["trajectory"]["strata"] = {"fast": 3}
    data["spec"]["trajectory"]["tasks"] = ["gemm"]
    with pytest.raises(PlanError, match="spec.trajectory.strata"):
        plan_run(AttributionRun.model_validate(data))


def test_plan_prints_the_counts_per_task_and_warns_about_short_strata(tmp_path: Path) -> None:
    data = spec(tmp_path, {"uri": RECORDED, "generations": [0, 10, 20], "tasks": ["gemm", "syrk"],
                           "strata": {"broken": 2, "wrong": 2, "correct": 2, "fast": 1}})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    cmd = [sys.executable, "-m", "cudanalyst", "plan", str(path)]
    shown = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**_env(), "COLUMNS": "160"})
    assert shown.returncode == 0, shown.stderr
    assert "frozen programs by recorded state" in shown.stdout
    row = next(line for line in shown.stdout.splitlines() if "│ syrk" in line)
    assert [c.strip() for c in row.split("│")[2:7]] == ["2", "2", "2", "1", "7"]
    assert "warning: spec.trajectory.strata.wrong: gemm has 0 distinct wrong program(s), 2 asked; drew 0" in \
        " ".join(shown.stdout.split())
    as_json = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=300, env=_env())
    out = json.loads(as_json.stdout)
    assert out["strata"]["drawn"]["gemm"]["wrong"] == 0 and out["strata"]["drawn"]["syrk"]["fast"] == 1
    # gemm's 6 correct programs in that recording are one source, its baseline resubmitted
    assert {(s["task"], s["state"]) for s in out["strata"]["short"]} == {("gemm", "wrong"), ("gemm", "correct"),
                                                                        ("gemm", "fast")}
    assert "warning: spec.trajectory.strata.correct: gemm has 1 distinct correct program(s) (5 more repeat a " \
           "source), 2 asked; drew 1" in out["warnings"]
    assert any(w.startswith("warning: spec.trajectory.strata.fast: gemm") for w in out["warnings"])


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_the_study_real_specs_freeze_by_state_and_pair_as_a_study() -> None:
    from cudanalyst.analysis.study import load_specs

    root = Path(__file__).parents[1] / "examples" / "study-real"
    for folder, recording in ((root, "study-real-1-5b"), (root / "second-agent", "study-real-1-5b-islands-diff")):
        specs = load_specs(folder)  # the study's own check: paired fields agree
        assert "main" in specs and len(specs) >= 2
        for _, run in specs.values():
            trajectory = run.spec.trajectory
            assert trajectory.strata is not None and trajectory.strata.counts() == {
                "broken": 2, "wrong": 2, "correct": 2, "fast": 1}
            assert trajectory.uri == f"./recordings/{recording}/trajectory/"
