"""The comparison's machinery (issue 30, part 3): the arms' recordings and the analysis of re-measured programs.
The recordings themselves run on the H200 (docs/policy.md); here the specs they are made from and the numbers
made of what `measure` writes (rows built here: the analysis is pure)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from cudanalyst.api.recording import load_recording
from cudanalyst.comparison import analyse, best_speedups, readme

ROOT = Path(__file__).resolve().parents[1]
COMPARISON = ROOT / "examples" / "policy" / "comparison-h200.yaml"
SCRIPT = ROOT / "scripts" / "policy_comparison.py"


def specs(comparison: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "specs", str(comparison), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)


def test_every_arm_and_seed_is_a_valid_recording_that_differs_only_where_the_arm_does(tmp_path: Path) -> None:
    proc = specs(COMPARISON, tmp_path)
    assert proc.returncode == 0, proc.stderr
    recs = {p.stem: load_recording(p) for p in tmp_path.glob("*.yaml")}
    assert len(recs) == 6 * 3
    by = {(r.metadata.labels["arm"], int(r.metadata.labels["seed"])): r.spec for r in recs.values()}
    all0 = by[("all", 0)]
    assert all0.policy is None and all0.planner is None and all0.iterations_per_generation == 1
    learned = by[("learned", 0)].policy  # the uncorrected policy of the study on recorded agents, tasks held out
    assert learned is not None and learned.held_out == sorted(all0.tasks)
    assert not learned.rule("broken", "analyzer").show and not learned.rule("correct", "analyzer").show
    assert learned.rule("broken", "debugger").show and learned.rule("fast", "analyzer").show
    assert by[("random", 0)].gating == "random" and by[("random", 0)].policy == by[("learned", 0)].policy
    none = by[("none", 0)].policy
    assert none is not None and all(not none.rule(s, c).show for s in ("broken", "wrong", "correct", "fast")
                                    for c in none.players)
    split = by[("split", 0)]
    assert split.planner is not None and split.planner.model == "qwen2.5-coder-1.5b-instruct"
    assert split.model.model == "qwen2.5-coder-0.5b-instruct" and split.policy is not None
    assert by[("small", 0)].model.model == "qwen2.5-coder-0.5b-instruct" and by[("small", 0)].policy is None
    # The same budget, tasks and sampling in every arm; seeds differ only in the seed.
    for (arm, seed), s in by.items():
        assert (s.tasks, s.iterations, s.population, s.temperature, s.max_tokens) == \
            (all0.tasks, all0.iterations, all0.population, all0.temperature, all0.max_tokens), arm
        assert s.seed == seed


def test_shared_servers_point_every_recording_at_the_fixed_ports_and_without_them_each_serves_its_own(
        tmp_path: Path) -> None:
    doc = yaml.safe_load(COMPARISON.read_text())
    assert doc["sharedServers"] == {"large": 8101, "small": 8102}  # the H200 run's spec: one GPU, arms side by side
    proc = specs(COMPARISON, tmp_path / "shared")
    assert proc.returncode == 0, proc.stderr
    by = {p.stem: load_recording(p).spec for p in (tmp_path / "shared").glob("*.yaml")}
    large = ("endpoint", "http://127.0.0.1:8101/v1", "qwen2.5-coder-1.5b-instruct")
    small = ("endpoint", "http://127.0.0.1:8102/v1", "qwen2.5-coder-0.5b-instruct")
    for name, s in by.items():
        arm = name.split("-")[1]
        assert (s.model.serve, s.model.endpoint, s.model.model) == (small if arm in ("split", "small") else large)
        assert s.model.api == "chat"
    split = by["pc-split-s1"]
    assert (split.planner.serve, split.planner.endpoint, split.planner.model) == large
    assert split.policy.models.planner == split.planner.model  # the policy names the model the endpoint serves
    # Without them: each recording serves the comparison's model itself, with its settings.
    del doc["sharedServers"]
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / doc["policy"]).write_text((COMPARISON.parent / doc["policy"]).read_text())
    proc = specs(tmp_path / "own.yaml", tmp_path / "own")
    assert proc.returncode == 0, proc.stderr
    own = load_recording(tmp_path / "own" / "pc-all-s0.yaml").spec.model
    assert (own.serve, own.model, own.gpu_memory_utilization) == ("local", "qwen2.5-coder-1.5b-instruct",
                                                                  doc["large"]["gpuMemoryUtilization"])


def test_shared_servers_on_one_port_exit_2_naming_the_field(tmp_path: Path) -> None:
    doc = yaml.safe_load(COMPARISON.read_text())
    doc["sharedServers"] = {"large": 8101, "small": 8101}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / doc["policy"]).write_text((COMPARISON.parent / doc["policy"]).read_text())
    proc = specs(tmp_path / "c.yaml", tmp_path / "out")
    assert proc.returncode == 2 and "sharedServers" in proc.stderr and "ports of their own" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_comparison_of_one_generation_exits_2_naming_iterations_and_parallel(tmp_path: Path) -> None:
    doc = yaml.safe_load(COMPARISON.read_text())
    doc.update(iterations=4, parallel=4)  # one generation: every child would evolve the baseline
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / doc["policy"]).write_text((COMPARISON.parent / doc["policy"]).read_text())
    proc = specs(tmp_path / "c.yaml", tmp_path / "out")
    assert proc.returncode == 2 and "c.yaml: iterations (4) must exceed parallel (4)" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_comparison_in_generations_differs_from_the_first_only_in_its_name_parallel_and_tools_run() -> None:
    first = yaml.safe_load(COMPARISON.read_text())
    again = yaml.safe_load((COMPARISON.parent / "comparison-h200-generations.yaml").read_text())
    assert again.pop("name") != first.pop("name")  # none of the first's kept recordings is resumed
    assert (again.pop("parallel"), first.pop("parallel")) == (2, 4)
    assert again.pop("runTools") == "shown" and "runTools" not in first and again == first
    assert again["iterations"] // 2 == 4  # four generations of two


def test_run_tools_shown_reaches_every_arms_recording_and_the_first_comparisons_specs_stay_as_they_were(
        tmp_path: Path) -> None:
    proc = specs(COMPARISON.parent / "comparison-h200-generations.yaml", tmp_path / "pcg")
    assert proc.returncode == 0, proc.stderr
    docs = {p.stem: yaml.safe_load(p.read_text()) for p in (tmp_path / "pcg").glob("*.yaml")}
    assert len(docs) == 18 and all(d["spec"]["runTools"] == "shown" for d in docs.values())
    assert load_recording(tmp_path / "pcg" / "pcg-none-s0.yaml").spec.run_tools == "shown"
    # pc's kept recordings resume only under the spec they were made with: no new field in it.
    proc = specs(COMPARISON, tmp_path / "pc")
    assert proc.returncode == 0, proc.stderr
    assert not any("runTools" in p.read_text() for p in (tmp_path / "pc").glob("*.yaml"))
    from cudanalyst.recording import CHANGEABLE, recorded_spec

    kept = ROOT / "docs" / "results" / "policy-2026-12-04" / "recordings" / "pc-random-s1.tar.xz"
    with tarfile.open(kept) as tar:
        spec_json = json.load(tar.extractfile("pc-random-s1/spec.json"))  # type: ignore[arg-type]
    ours = recorded_spec(load_recording(tmp_path / "pc" / "pc-random-s1.yaml"))
    assert {k: v for k, v in spec_json["spec"].items() if k not in CHANGEABLE.values()} == ours  # prepare_store's


@pytest.mark.parametrize("change, said", [
    ({"sharedServers": None}, "sharedServers: absent"),
    ({"large": {"model": "no-such-model-here", "serve": "local"}}, "large.model: model path 'no-such-model-here'"),
])
def test_serve_models_refuses_what_it_cannot_serve_with_exit_2(tmp_path: Path, change: dict[str, Any],
                                                                said: str) -> None:
    doc = {**yaml.safe_load(COMPARISON.read_text()), **change}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({k: v for k, v in doc.items() if v is not None}))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "serve_models.py"), str(tmp_path / "c.yaml"),
                           "--which", "large", "--ready", str(tmp_path / "ready")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "ready").exists()


@pytest.mark.parametrize("tasks, named", [
    (["gemm", "softmax", "xs_lookup", "cg_spmv"], "gemm were in the policy's own runs"),
    (["bicg", "softmax", "cg_spmv"], "no held-out task of the family xsbench"),
])
def test_tasks_that_are_not_held_out_from_every_family_exit_2(tmp_path: Path, tasks: list[str], named: str) -> None:
    doc = yaml.safe_load(COMPARISON.read_text())
    doc["tasks"] = tasks
    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump(doc))
    (tmp_path / doc["policy"]).write_text((COMPARISON.parent / doc["policy"]).read_text())
    proc = specs(spec, tmp_path / "out")
    assert proc.returncode == 2 and named in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def row(arm: str, task: str, seed: int, iteration: int, compiled: bool = True, correct: bool = True,
        speedup: float | None = None) -> dict[str, Any]:
    return {"arm": arm, "task": task, "seed": seed, "iteration": iteration, "compiled": compiled,
            "correct": correct, "speedup": speedup}


def test_the_best_speedup_counts_verified_programs_found_within_the_budget_only() -> None:
    rows = [row("all", "t", 0, 0, speedup=1.0), row("all", "t", 0, 2, speedup=3.0),
            row("all", "t", 0, 9, speedup=50.0),  # after N
            row("all", "t", 0, 3, correct=False, speedup=None),
            row("none", "t", 0, 0, speedup=1.0), row("none", "t", 0, 1, compiled=False, correct=False)]
    assert best_speedups(rows, 8) == {("all", "t", 0): 3.0, ("none", "t", 0): 1.0}


def test_each_arm_gets_an_interval_over_tasks_and_seeds_and_a_paired_ratio_to_all() -> None:
    rows = []
    for task, base in (("a", 2.0), ("b", 4.0)):
        for seed in (0, 1, 2):
            rows += [row("all", task, seed, 0, speedup=1.0), row("all", task, seed, 1, speedup=base)]
            # learned: twice all's speedup on every unit, and fails to compile once per unit
            rows += [row("learned", task, seed, 0, speedup=1.0), row("learned", task, seed, 1, speedup=2 * base),
                     row("learned", task, seed, 2, compiled=False, correct=False)]
    usage = [{"arm": a, "task": t, "seed": s, "promptTokens": 100.0, "savedTokens": 10.0 if a == "learned" else 0.0,
              "gpuSeconds": 60.0} for a in ("all", "learned") for t in ("a", "b") for s in (0, 1, 2)]
    result = analyse(rows, usage, iterations=8)
    arms = {r["arm"]: r for r in result["arms"]}
    assert [r["arm"] for r in result["arms"]] == ["all", "learned"]
    assert arms["all"]["units"] == 6 and arms["all"]["tasks"] == ["a", "b"] and arms["all"]["seeds"] == [0, 1, 2]
    assert math.isclose(arms["all"]["bestSpeedup"]["value"], math.sqrt(8.0))  # geometric mean of 2 and 4
    low, high = arms["all"]["bestSpeedup"]["low"], arms["all"]["bestSpeedup"]["high"]
    assert low < math.sqrt(8.0) < high
    ratio = arms["learned"]["speedupRatioToAll"]
    assert math.isclose(ratio["value"], 2.0) and ratio["pairs"] == 6
    assert math.isclose(ratio["low"], 2.0) and math.isclose(ratio["high"], 2.0)  # the same on every unit
    assert arms["all"]["compiledRate"]["value"] == 1.0 and math.isclose(arms["learned"]["compiledRate"]["value"], 0.5)
    along = [{k: r[k] for k in ("iteration", "programs", "compiled", "pass")} for r in arms["learned"]["alongIterations"]]
    assert along == [{"iteration": 1, "programs": 6, "compiled": 1.0, "pass": 1.0},
                     {"iteration": 2, "programs": 6, "compiled": 0.0, "pass": 0.0}]
    assert arms["learned"]["alongIterations"][0]["compiledInterval"] == [1.0, 1.0]  # every unit compiled
    assert arms["learned"]["savedTokens"]["value"] == 10.0 and arms["all"]["gpuSeconds"]["value"] == 60.0
    # Over the 8 iterations, the ones without a child included: learned's 100 % compile rate of its children is
    # one compiled child in 8 iterations, as all's.
    assert math.isclose(arms["all"]["childRate"]["value"], 1 / 8) and math.isclose(arms["learned"]["childRate"]["value"], 2 / 8)
    assert math.isclose(arms["all"]["compiledPerIteration"]["value"], 1 / 8)
    assert math.isclose(arms["learned"]["compiledPerIteration"]["value"], 1 / 8)
    page = readme(result, "t")
    assert "| learned | 6 | 5.657x" in page and "2.000x [2.000, 2.000]" in page


def test_the_learned_policy_is_set_against_its_random_control_and_the_split_against_the_small_model() -> None:
    # Paired by unit, as the ratio to all: learned is 1.5x random on task a and equal on b (seeds 0-1); split has
    # seed 0 only, so it is paired with small on the units both have.
    rows = []
    for task, seed in (("a", 0), ("a", 1), ("b", 0), ("b", 1)):
        for arm, s in (("all", 2.0), ("random", 2.0), ("learned", 3.0 if task == "a" else 2.0), ("small", 1.5)):
            rows += [row(arm, task, seed, 0, speedup=1.0), row(arm, task, seed, 1, speedup=s)]
        if seed == 0:
            rows += [row("split", task, seed, 0, speedup=1.0), row("split", task, seed, 1, speedup=3.0)]
    result = analyse(rows, [], iterations=8)
    by = {(c["arm"], c["against"]): c["speedupRatio"] for c in result["contrasts"]}
    assert set(by) == {("learned", "random"), ("split", "small")}
    assert math.isclose(by[("learned", "random")]["value"], math.sqrt(1.5)) and by[("learned", "random")]["pairs"] == 4
    assert by[("learned", "random")]["low"] < 1.0 < by[("learned", "random")]["high"]
    assert math.isclose(by[("split", "small")]["value"], 2.0) and by[("split", "small")]["pairs"] == 2
    page = readme(result, "t")
    assert "learned against random 1.225x [" in page and "(4 units)" in page and "split against small 2.000x" in page
    # Without the control there is nothing to set the policy against.
    alone = analyse([r for r in rows if r["arm"] != "random"], [], iterations=8)
    assert [(c["arm"], c["against"]) for c in alone["contrasts"]] == [("split", "small")]


def test_rates_are_set_against_all_and_between_the_contrasts_unit_by_unit() -> None:
    # Per unit of 4 children: all passes 2 on task a and 0 on b; none passes 3 on a and 1 on b (0.25 more on every
    # unit, so a zero-width interval); random equals all, learned passes one more than random on a only.
    rows = []
    passes = {"all": {"a": 2, "b": 0}, "none": {"a": 3, "b": 1}, "random": {"a": 2, "b": 0},
              "learned": {"a": 3, "b": 0}}
    for arm, by_task in passes.items():
        for task, k in by_task.items():
            for seed in (0, 1):
                rows.append(row(arm, task, seed, 0, speedup=1.0))
                rows += [row(arm, task, seed, i, correct=i <= k, speedup=1.0 if i <= k else None) for i in (1, 2, 3, 4)]
    # A unit of all with no child: left out of every pair it would be in, not counted as a rate of 0.
    rows.append(row("all", "c", 0, 0, speedup=1.0))
    rows.append(row("none", "c", 0, 0, speedup=1.0))
    rows += [row("none", "c", 0, i, speedup=1.0) for i in (1, 2)]
    result = analyse(rows, [], iterations=8)
    arms = {r["arm"]: r for r in result["arms"]}
    none = arms["none"]["passRateDifferenceToAll"]
    assert none["pairs"] == 4 and math.isclose(none["value"], 0.25)
    assert math.isclose(none["low"], 0.25) and math.isclose(none["high"], 0.25)
    assert arms["none"]["compiledRateDifferenceToAll"]["value"] == 0.0  # every child compiled in both arms
    learned = {(c["arm"], c["against"]): c for c in result["contrasts"]}[("learned", "random")]["passRateDifference"]
    assert math.isclose(learned["value"], 0.125) and learned["pairs"] == 4
    assert learned["low"] < 0.0 < learned["high"]  # one task of two moved: not excluded from 0
    page = readme(result, "t")
    assert "none compile +0.000 [+0.000, +0.000], pass +0.250 [+0.250, +0.250] (4 units)" in page
    assert "learned and random: compile +0.000" in page and "pass +0.125 [" in page


def test_under_run_tools_shown_the_page_says_saved_tokens_count_only_reports_that_were_made() -> None:
    rows = [row(a, t, 0, i, speedup=1.0) for a in ("all", "none") for t in "ab" for i in (0, 1)]
    # none's prompts are half and a third of all's on the two units: a geometric mean of 1/sqrt(6).
    usage = [{"arm": "all", "task": t, "seed": 0, "promptTokens": 600.0} for t in "ab"]
    usage += [{"arm": "none", "task": "a", "seed": 0, "promptTokens": 300.0},
              {"arm": "none", "task": "b", "seed": 0, "promptTokens": 200.0}]
    result = analyse(rows, usage, iterations=8)
    ratio = {r["arm"]: r for r in result["arms"]}["none"]["promptTokensRatioToAll"]
    assert math.isclose(ratio["value"], 1 / math.sqrt(6)) and ratio["pairs"] == 2
    assert ratio["low"] < ratio["value"] < ratio["high"]
    assert "none saves 0" not in readme(result, "t")  # runTools unknown or all: no such sentence
    result["runTools"] = "shown"
    page = readme(result, "t")
    assert "*saved tokens* count only the reports that were made and then withheld (none, which runs no tool, saves 0" in page
    assert "none 0.408x [" in page


def test_the_page_names_the_card_each_seed_was_re_timed_on_when_its_rows_say() -> None:
    rows = [row(a, "t", s, i, speedup=1.0) for a in ("all", "none") for s in (0, 1) for i in (0, 1)]
    plain = analyse(rows, [], iterations=8)
    assert "cards" not in plain and "Re-timed on" not in readme(plain, "t")  # rows of before: nothing said
    cards = {0: "NVIDIA H200", 1: "NVIDIA H100 80GB HBM3"}
    result = analyse([{**r, "gpu": cards[r["seed"]]} for r in rows], [], iterations=8)
    assert result["cards"] == {"0": ["NVIDIA H200"], "1": ["NVIDIA H100 80GB HBM3"]}
    assert "Re-timed on: seed 0 NVIDIA H200; seed 1 NVIDIA H100 80GB HBM3." in readme(result, "t")


def test_one_unit_gives_a_value_without_an_interval() -> None:
    result = analyse([row("all", "a", 0, 0, speedup=1.0), row("all", "a", 0, 1, speedup=3.0)], [], 8)
    best = result["arms"][0]["bestSpeedup"]
    assert math.isclose(best["value"], 3.0) and best["low"] is None and best["high"] is None


def test_measure_reports_a_program_that_does_not_build_without_touching_the_gpu() -> None:
    import importlib.util

    from cudanalyst.tasks import get_task

    spec = importlib.util.spec_from_file_location("policy_comparison", SCRIPT)
    assert spec is not None and spec.loader is not None
    pc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pc)
    got = pc.measure_program(get_task("gemm"), "this is not CUDA", None, None, pool=None)  # nvcc refuses it
    assert got == {"compiled": False, "correct": False, "speedup": None}
    assert pc.arm_and_seed("pc-learned-s2", "pc") == ("learned", 2)


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def recording_folder(runs: Path, name: str, tokens: tuple[int, int] = (1000, 100), saved: int = 0) -> Path:
    """A finished recording as the recorder leaves it, as far as `measure` and `analyse` read it."""
    folder = runs / name
    (folder / "trajectory").mkdir(parents=True)
    (folder / "trajectory" / "programs.jsonl").write_text("")
    (folder / "spec.json").write_text(json.dumps({"name": name}))
    programs = folder / "openevolve" / "bicg" / "checkpoints" / "checkpoint_8" / "programs"
    programs.mkdir(parents=True)
    (folder / "openevolve" / "bicg" / "checkpoints" / "checkpoint_4").mkdir()  # an earlier one: not read
    for i in range(2):
        (programs / f"p{i}.json").write_text(json.dumps(
            {"metadata": {"token_usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]}}}))
    # Two passes' evaluation logs: source a twice (a repeat costs what its first run did), b once, c did not compile.
    evaluations = folder / "openevolve" / "bicg" / "evaluations"
    evaluations.mkdir()
    tools = {"compute-sanitizer": {"seconds": 10.0, "waitedSeconds": 99.0}, "nsight-compute": {"seconds": 20.0}}
    (evaluations / "pass-1.jsonl").write_text(
        json.dumps({"sha256": "a", "compiled": True, "tools": tools}) + "\n"
        + json.dumps({"sha256": "c", "compiled": False, "tools": {}}) + "\n")
    (evaluations / "pass-2.jsonl").write_text(
        json.dumps({"sha256": "a", "compiled": True, "repeat": True, "tools": tools}) + "\n"
        + json.dumps({"sha256": "b", "compiled": True, "tools": {"nsight-compute": {"seconds": 5.0}}}) + "\n")
    if saved:
        (folder / "openevolve" / "bicg" / "gating.jsonl").write_text(
            json.dumps({"iteration": 1, "savedTokens": saved}) + "\n")
    return folder


def test_measure_keeps_what_it_measured_before_and_refuses_other_settings(tmp_path: Path) -> None:
    rec = recording_folder(tmp_path / "runs", "pc-all-s0")
    out = tmp_path / "pc-measured"
    out.mkdir()
    (out / "pc-all-s0.jsonl").write_text(json.dumps(row("all", "bicg", 0, 0, speedup=1.0)) + "\n")
    # Measured before: kept, and no worker (no GPU) is started for it.
    proc = run_script("measure", str(rec), "--comparison", str(COMPARISON), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "pc-all-s0: measured before (1 programs), kept" in proc.stdout
    settings = json.loads((out / "spec.json").read_text())
    assert settings["comparison"] == "pc" and settings["evaluation"]  # what the rows were measured under
    # The same folder under other evaluation settings: refused, the rows left as they were.
    doc = yaml.safe_load(COMPARISON.read_text())
    doc["evaluation"] = {**doc.get("evaluation", {}), "trials": 7}
    other = tmp_path / "c.yaml"
    other.write_text(yaml.safe_dump(doc))
    (tmp_path / doc["policy"]).write_text((COMPARISON.parent / doc["policy"]).read_text())
    proc = run_script("measure", str(rec), "--comparison", str(other), "--out", str(out))
    assert proc.returncode == 2 and "measured under other evaluation settings" in proc.stderr, proc.stderr
    assert json.loads((out / "pc-all-s0.jsonl").read_text())["speedup"] == 1.0


def test_analyse_takes_tokens_and_gpu_seconds_from_the_recordings_kept_or_not(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    recording_folder(runs, "pc-all-s0", tokens=(1000, 100))
    learned = recording_folder(tmp_path / "elsewhere", "pc-learned-s0", tokens=(600, 100), saved=800)
    runs.mkdir(exist_ok=True)
    # pc-learned-s0 as a kept archive (scripts/recording_archive.py keep), the way docs/results holds it.
    with tarfile.open(runs / "pc-learned-s0.tar.xz", "w:xz") as tar:
        tar.add(learned, arcname="pc-learned-s0")
    (runs / "times-pc-all-s0.tsv").write_text("pc-all-s0\t300\npc-all-s0\t60\n")  # two passes
    (runs / "times-pc-learned-s0.tsv").write_text("pc-learned-s0\t240\n")
    measured = tmp_path / "measured"
    measured.mkdir()
    for arm, speedup in (("all", 1.5), ("learned", 3.0)):
        rows = [{**row(arm, "bicg", 0, 0, speedup=1.0), "recording": f"pc-{arm}-s0"},
                {**row(arm, "bicg", 0, 2, speedup=speedup), "recording": f"pc-{arm}-s0"}]
        (measured / f"pc-{arm}-s0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (measured / "spec.json").write_text("{}")  # measure's own record: not rows
    proc = run_script("analyse", str(measured), "--recordings", str(runs), "--comparison", str(COMPARISON),
                      "--out", str(tmp_path / "page"))
    assert proc.returncode == 0, proc.stderr
    arms = {a["arm"]: a for a in json.loads((tmp_path / "page" / "comparison.json").read_text())["arms"]}
    assert arms["all"]["promptTokens"]["value"] == 2000 and arms["learned"]["promptTokens"]["value"] == 1200
    assert arms["learned"]["savedTokens"]["value"] == 800
    # The prompts' cost against all, unit by unit: 1,200 against 2,000 tokens (pc runs every tool, so the page
    # says nothing of reports never made).
    assert math.isclose(arms["learned"]["promptTokensRatioToAll"]["value"], 0.6)
    assert arms["learned"]["promptTokensRatioToAll"]["pairs"] == 1 and "promptTokensRatioToAll" not in arms["all"]
    first = (tmp_path / "page" / "README.md").read_text()
    assert "as the ratio to all (each arm's own trajectory, so not the gating's effect alone): learned 0.600x (1 " in first
    assert "runTools: shown" not in first
    assert arms["all"]["gpuSeconds"]["value"] == 360 and arms["learned"]["gpuSeconds"]["value"] == 240
    assert arms["all"]["toolSeconds"]["value"] == 35  # a once (10 + 20, its wait left out) and b (5)
    assert "| tool GPU s |" in (tmp_path / "page" / "README.md").read_text()
    assert math.isclose(arms["learned"]["speedupRatioToAll"]["value"], 2.0)
    # The comparison's other 16 recordings have no rows: the page names them, the one recorded apart.
    recording_folder(runs, "pc-split-s1", tokens=(10, 1))
    missing = json.loads((tmp_path / "page" / "comparison.json").read_text())["notMeasured"]
    assert len(missing) == 16 and not any(m["recording"] in ("pc-all-s0", "pc-learned-s0") for m in missing)
    proc = run_script("analyse", str(measured), "--recordings", str(runs), "--comparison", str(COMPARISON),
                      "--out", str(tmp_path / "page"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "page" / "README.md").read_text()
    assert "**Not on this page:** pc-split-s1 (recorded, not measured yet); pc-all-s1," in page, page
    assert "pc-split-s1" not in page.split("(recorded, not measured yet)")[1]
    # A recording stopped part-way (checkpoints, no trajectory), as a folder or as a kept archive, is neither.
    stopped = recording_folder(tmp_path / "elsewhere", "pc-none-s2", tokens=(10, 1))
    shutil.rmtree(stopped / "trajectory")
    with tarfile.open(runs / "pc-none-s2.tar.xz", "w:xz") as tar:
        tar.add(stopped, arcname="pc-none-s2")
    shutil.rmtree(recording_folder(runs, "pc-random-s2", tokens=(10, 1)) / "trajectory")
    proc = run_script("analyse", str(measured), "--recordings", str(runs), "--comparison", str(COMPARISON),
                      "--out", str(tmp_path / "page"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "page" / "README.md").read_text()
    assert "; pc-none-s2, pc-random-s2 (recording stopped part-way; it resumes); pc-all-s1," in page, page
    page_json = json.loads((tmp_path / "page" / "comparison.json").read_text())
    missing = {m["recording"]: m for m in page_json["notMeasured"]}
    assert missing["pc-none-s2"] == {"recording": "pc-none-s2", "started": True, "recorded": False}
    assert missing["pc-split-s1"]["recorded"] and not missing["pc-all-s1"]["started"]
    # Without a recording's times: exit 2 naming the file, and no page.
    (runs / "times-pc-learned-s0.tsv").unlink()
    proc = run_script("analyse", str(measured), "--recordings", str(runs), "--comparison", str(COMPARISON),
                      "--out", str(tmp_path / "page2"))
    assert proc.returncode == 2 and "times-pc-learned-s0.tsv: not found" in proc.stderr, proc.stderr
    assert not (tmp_path / "page2").exists()
    # A times line of another recording: exit 2 naming the file and line.
    (runs / "times-pc-learned-s0.tsv").write_text("pc-learned-s0\t240\npc-all-s0\t5\n")
    proc = run_script("analyse", str(measured), "--recordings", str(runs), "--comparison", str(COMPARISON),
                      "--out", str(tmp_path / "page2"))
    assert proc.returncode == 2 and "times-pc-learned-s0.tsv:2:" in proc.stderr, proc.stderr


def test_rate_intervals_stay_within_what_a_rate_can_be() -> None:
    # Three units whose one child never compiles and one whose child does: the raw t-interval of the compile rate
    # (mean 0.25, sd 0.5, 4 units) runs from below 0 to above 1.
    rows = [row("all", t, 0, 0, speedup=1.0) for t in "abcd"]
    rows += [row("all", t, 0, 1, compiled=(t == "a"), correct=(t == "a"), speedup=1.0 if t == "a" else None)
             for t in "abcd"]
    usage = [{"arm": "all", "task": t, "seed": 0, "promptTokens": 100.0 if t == "a" else 1.0} for t in "abcd"]
    arm = analyse(rows, usage, iterations=8)["arms"][0]
    assert arm["compiledRate"]["value"] == 0.25 and arm["compiledRate"]["low"] == 0.0
    assert arm["compiledRate"]["high"] == 1.0  # 0.25 + 3.18 * 0.5 / 2 = 1.05, clipped
    assert arm["alongIterations"][0]["compiledInterval"] == [0.0, 1.0]
    assert arm["promptTokens"]["low"] == 0.0 < arm["promptTokens"]["high"]  # tokens are never negative
