"""The plan: a pure, deterministic function of spec + trajectory; shards partition the units."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from cudanalyst.api import parse_run
from cudanalyst.plan import coalitions, make_plan, shard_units, unit_key
from cudanalyst.planned_run import PlanError, plan_run
from cudanalyst.trajectory import FrozenProgram, TrajectoryError, dump_programs, freeze, manifest_for

ROOT = Path(__file__).resolve().parents[1]


def programs(tasks=("gemm", "atax"), generations=(0, 10), per=5) -> list[FrozenProgram]:
    return [
        FrozenProgram(task=t, generation=g, program_id=f"{t}-g{g}-p{i}", source=f"// {t} {g} {i}",
                      feedback={"debugger": "ok", "analyzer": "regs 32", "profiler": "1.0 ms"})
        for t in tasks for g in generations for i in range(per)
    ]


def run_for(trajectory_uri: str, **spec_edits) -> object:
    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    data = copy.deepcopy(data)
    data["spec"]["trajectory"] = {"uri": trajectory_uri, "generations": [0, 10], "programsPerGeneration": 2}
    for k, v in spec_edits.items():
        data["spec"][k] = v
    return parse_run(data)


@pytest.fixture
def trajectory_dir(tmp_path) -> Path:
    progs = programs()
    (tmp_path / "programs.jsonl").write_text(dump_programs(progs))
    (tmp_path / "trajectory.json").write_text(manifest_for(progs).model_dump_json(by_alias=True))
    return tmp_path


def test_coalitions_follow_bitmasks():
    c = coalitions(["a", "b", "c"])
    assert len(c) == 8 and c[0] == () and c[5] == ("a", "c") and c[7] == ("a", "b", "c")


def test_unit_count_and_unique_keys(trajectory_dir):
    run = run_for(str(trajectory_dir))
    plan = plan_run(run)
    spec = run.spec
    n_programs = 2 * 2 * 2  # tasks x generations x programsPerGeneration
    arms = 2 ** len(spec.players) + len(spec.controls)
    assert len(plan.programs) == n_programs
    assert len(plan.units) == n_programs * arms * spec.sampling.rollouts * spec.sampling.samples_per_coalition
    assert len({u.key for u in plan.units}) == len(plan.units)


def test_plan_is_deterministic_and_shards_partition(trajectory_dir):
    run = run_for(str(trajectory_dir), resources={"shards": 3, "gpusPerShard": 0})
    a, b = plan_run(run), plan_run(run)
    assert [u.key for u in a.units] == [u.key for u in b.units]
    shards = [shard_units(a, i, 3) for i in range(3)]
    keys = [u.key for s in shards for u in s]
    assert sorted(keys) == sorted(u.key for u in a.units)
    # a frozen program's units stay in one shard (shared prompt prefix, feedback computed once)
    owner = {}
    for i, s in enumerate(shards):
        for u in s:
            assert owner.setdefault(u.program_id, i) == i
    with pytest.raises(ValueError, match="--of 2"):
        shard_units(a, 0, 2)


def test_more_shards_than_programs_still_spreads_work(trajectory_dir):
    run = run_for(str(trajectory_dir), resources={"shards": 16, "gpusPerShard": 0})
    plan = plan_run(run)
    assert all(plan.shards), [len(s) for s in plan.shards]


def test_unit_key_depends_on_every_part():
    base = unit_key("r", "p", ("a",), "coalition", 0, 0)
    assert base == unit_key("r", "p", ("a",), "coalition", 0, 0)
    others = {unit_key("r2", "p", ("a",), "coalition", 0, 0), unit_key("r", "p2", ("a",), "coalition", 0, 0),
              unit_key("r", "p", ("b",), "coalition", 0, 0), unit_key("r", "p", ("a",), "dummyPlan", 0, 0),
              unit_key("r", "p", ("a",), "coalition", 1, 0), unit_key("r", "p", ("a",), "coalition", 0, 1)}
    assert base not in others and len(others) == 6


def test_freeze_is_seeded_and_stable():
    progs = programs(per=10)
    a = freeze(progs, [0, 10], 3, seed=7)
    assert [p.program_id for p in a] == [p.program_id for p in freeze(progs, [0, 10], 3, seed=7)]
    assert [p.program_id for p in a] != [p.program_id for p in freeze(progs, [0, 10], 3, seed=8)]
    # choosing for one task does not change another task's choice
    only_gemm = freeze(progs, [0, 10], 3, seed=7, tasks=["gemm"])
    assert [p.program_id for p in only_gemm] == [p.program_id for p in a if p.task == "gemm"]


def test_empty_generation_is_named():
    with pytest.raises(TrajectoryError, match="generation 30 has no program"):
        freeze(programs(), [0, 30], 2, seed=0)
    with pytest.raises(TrajectoryError, match="spec.trajectory.tasks.*conv2d"):
        freeze(programs(), [0], 2, seed=0, tasks=["conv2d"])


def test_plan_errors_name_the_trajectory(tmp_path):
    with pytest.raises(PlanError, match="spec.trajectory.uri: .*programs.jsonl"):
        plan_run(run_for(str(tmp_path)))
    (tmp_path / "programs.jsonl").write_text('{"task": "gemm"}\n')
    with pytest.raises(PlanError, match=r"programs.jsonl:1: generation"):
        plan_run(run_for(str(tmp_path)))


def test_make_plan_counts_control_arms():
    run = run_for("unused", controls=["noFeedback", "randomizedFeedback", "dummyPlan"])
    plan = make_plan(run, programs(tasks=("gemm",), generations=(0,), per=1))
    arms = plan.overview()["unitsByArm"]
    per = run.spec.sampling.rollouts * run.spec.sampling.samples_per_coalition
    assert arms == {"coalition": 8 * per, "noFeedback": per, "randomizedFeedback": per, "dummyPlan": per}
    randomized = [u for u in plan.units if u.arm == "randomizedFeedback"]
    assert randomized[0].coalition == tuple(run.spec.players)


def test_msr_samples_distinct_coalitions():
    players = [f"p{i}" for i in range(10)]
    run = run_for("unused", players=players, attribution={"estimator": "msr", "coalitionSamples": 40})
    plan = make_plan(run, programs(tasks=("gemm",), generations=(0,), per=1))
    game = [u.coalition for u in plan.units if u.arm == "coalition"]
    assert len(set(game)) == 40 == plan.overview()["coalitions"]
    again = make_plan(run, programs(tasks=("gemm",), generations=(0,), per=1))
    assert [u.key for u in again.units] == [u.key for u in plan.units]
    exact = run_for("unused", players=players[:3])
    assert make_plan(exact, programs(tasks=("gemm",), generations=(0,), per=1)).overview()["coalitions"] == 8


def test_openevolve_folder_is_planned_directly():
    """spec.trajectory.format: openevolve converts on the fly, as `cudanalyst import` would."""
    folder = ROOT / "tests" / "data" / "openevolve" / "gemm"
    if not folder.is_dir():
        pytest.fail(f"fixture {folder} is missing (tests/data/make_import_fixtures.py writes it)")
    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    from cudanalyst.trajectory import load_trajectory

    progs = load_trajectory(str(folder), fmt="openevolve").programs
    gens = sorted({p.generation for p in progs})
    data["spec"]["trajectory"] = {"uri": str(folder), "format": "openevolve", "generations": gens[:1],
                                  "programsPerGeneration": 1, "tasks": ["gemm"]}
    plan = plan_run(parse_run(data))
    assert plan.programs and all(p.task == "gemm" for p in plan.programs)


def test_a_recording_that_ran_only_the_shown_tools_is_not_replayed_as_if_its_tools_gave_no_report(tmp_path):
    # runTools: shown leaves a withheld report unmade; replayed, the agent would read "(the profiler produced no
    # report for this program)" where no tool was asked. The plan refuses it, naming the field and a program.
    progs = programs()
    progs[0] = progs[0].model_copy(update={"feedback": {"debugger": "ok", "analyzer": "regs 32"}})
    (tmp_path / "programs.jsonl").write_text(dump_programs(progs))
    shown = manifest_for(progs, source={"format": "openevolve", "recording": "pcg-none-s0", "runTools": "shown"})
    (tmp_path / "trajectory.json").write_text(shown.model_dump_json(by_alias=True))
    run = run_for(str(tmp_path), trajectory={"uri": str(tmp_path), "generations": [0, 10], "programsPerGeneration": 5})
    with pytest.raises(PlanError, match=r"spec.players: 1 report\(s\) .*profiler of gemm program gemm-g0-p0.*"
                                        r"pcg-none-s0.*runTools: shown"):
        plan_run(run)
    # The players whose reports were all made can still be attributed; and a missing report in any other
    # trajectory is what its tool gave (none), replayed as such.
    assert plan_run(run_for(str(tmp_path), players=["debugger", "analyzer"],
                            trajectory={"uri": str(tmp_path), "generations": [0, 10], "programsPerGeneration": 5}))
    (tmp_path / "trajectory.json").write_text(manifest_for(progs).model_dump_json(by_alias=True))
    assert len(plan_run(run).programs) == 20
