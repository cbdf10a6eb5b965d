"""The shard's LLM stage against real vLLM serving the tiny model (marker vllm)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from llm_support import (
    endpoint_model,
    feedback_of,
    processes_mentioning,
    program,
    records,
    write_spec,
    write_trajectory,
)

from cudanalyst.runner.llm.prompts import TEMPLATE_VERSION, dummy_plan
from cudanalyst.runner.shard import main

RUN = "tiny"
MAX_TOKENS = 16


def requests_served(server) -> float:
    with urllib.request.urlopen(f"{server.endpoint.root}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(m) for m in re.findall(r'^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$', text, re.M))


def run_shard(spec: Path, *extra: str) -> int:
    return main(["--spec", str(spec), "--shard", "0", "--of", "1", "--stage", "llm", *extra])


@pytest.fixture
def explicit_run(tmp_path: Path, vllm_server) -> tuple[Path, Path]:
    traj = write_trajectory(tmp_path / "traj", [program("p1", feedback=feedback_of("p1")),
                                                 program("p2", feedback=feedback_of("p2"))])
    spec = write_spec(tmp_path / "run.yaml", name=RUN, trajectory=traj, output=str(tmp_path / "out"),
                      planner=endpoint_model(vllm_server), max_tokens=MAX_TOKENS,
                      controls=("noFeedback", "randomizedFeedback", "dummyPlan"))
    return spec, tmp_path / "out" / RUN


def test_llm_stage_writes_one_record_per_unit_with_prompts_and_completion(explicit_run, vllm_server) -> None:
    spec, run = explicit_run
    assert run_shard(spec) == 0
    cands = records(run, "candidates")
    # 2 programs x (4 coalitions + 3 controls) x 1 rollout x 2 samples
    assert len(cands) == 28 and records(run, "errors") == {}
    for rec in cands.values():
        assert rec["promptVersion"] == TEMPLATE_VERSION and rec["seed"] is not None
        messages = json.loads(rec["prompts"]["coder"])
        assert [m["role"] for m in messages] == ["system", "user"]
        assert 1 <= rec["tokens"]["coderCompletion"] <= MAX_TOKENS and rec["tokens"]["coderPrompt"] > 100
        assert rec["samplesInRequest"] == 2 and rec["sampleIndex"] == rec["sample"]
        assert isinstance(rec["completion"], str) and rec["plan"]
        if rec["arm"] == "dummyPlan":
            assert rec["plan"] == dummy_plan() and "planner" not in rec["prompts"]
        else:
            assert rec["tokens"]["plannerCompletion"] <= MAX_TOKENS and rec["plannerSeed"] is not None
            planner_user = json.loads(rec["prompts"]["planner"])[1]["content"]
            assert rec["plan"] is not None
            # Feedback sections are last, and exactly the coalition's (randomized: another program's).
            tail = planner_user[planner_user.index("## Your job"):]
            shown = re.findall(r"(debugger|analyzer) report of (p\d)", tail)
            if rec["arm"] == "noFeedback" or not rec["coalition"]:
                assert shown == [] and "No feedback" in tail
            elif rec["arm"] == "randomizedFeedback":
                assert [p for p, _ in shown] == ["debugger", "analyzer"]
                assert all(src != rec["programId"] for _, src in shown)
            else:
                assert [(p, src) for p, src in shown] == [(p, rec["programId"]) for p in rec["coalition"]]
    # The samples of one request share the prompt and plan; their completions are separate draws.
    by_group: dict[tuple, list[dict]] = {}
    for rec in cands.values():
        by_group.setdefault((rec["programId"], rec["arm"], tuple(rec["coalition"])), []).append(rec)
    assert len(by_group) == 14
    for recs in by_group.values():
        assert len({r["prompts"]["coder"] for r in recs}) == 1 and len({r["plan"] for r in recs}) == 1
        assert len({r["completion"] for r in recs}) == 2
    # A random model writes no kernel: each unit is a candidate with the reason, never dropped; its `fail`
    # outcome is the kernel stage's to write (only the kernel stage writes outcomes).
    assert all(rec["reason"] for rec in cands.values() if rec["code"] is None)
    assert not records(run, "outcomes")
    progress = json.loads((run / "progress" / "shard-0.json").read_text())
    assert progress["state"] == "succeeded" and progress["byStage"]["llm"] == {"done": 28, "total": 28}
    assert progress["done"] == 0
    assert len(records(run, "plans")) == 12  # dummyPlan needs none


def test_restarted_shard_skips_finished_units_and_reuses_plans(explicit_run, vllm_server) -> None:
    spec, run = explicit_run
    assert run_shard(spec) == 0
    cands = records(run, "candidates")
    stamps = {p.name: p.stat().st_mtime_ns for p in (run / "candidates").iterdir()}
    before = requests_served(vllm_server)
    assert run_shard(spec) == 0
    assert requests_served(vllm_server) == before  # nothing was asked of the model
    assert {p.name: p.stat().st_mtime_ns for p in (run / "candidates").iterdir()} == stamps
    # Lose the two samples of one group: only that group's coder request is made again, same plan.
    victim = next(r for r in cands.values() if r["arm"] == "coalition" and len(r["coalition"]) == 2)
    lost = [k for k, r in cands.items() if (r["programId"], r["arm"], r["coalition"]) ==
            (victim["programId"], "coalition", victim["coalition"])]
    for k in lost:
        (run / "candidates" / f"{k}.json").unlink()
    before = requests_served(vllm_server)
    assert run_shard(spec) == 0
    # One coder request with n=2 (vLLM counts each of its samples); a new plan would add one more.
    assert requests_served(vllm_server) == before + 2
    again = records(run, "candidates")
    assert len(again) == 28
    for k in lost:
        assert again[k]["plan"] == cands[k]["plan"] and again[k]["prompts"] == cands[k]["prompts"]
        assert again[k]["seed"] == cands[k]["seed"]


def test_prompt_longer_than_the_context_fails_its_units_and_keeps_the_rest(tmp_path: Path, vllm_server) -> None:
    huge = "// filler line to overflow the context window\n" * 1200 + program("x").source
    traj = write_trajectory(tmp_path / "traj", [program("p1"), program("p2", source=huge)])
    spec = write_spec(tmp_path / "run.yaml", name=RUN, trajectory=traj, output=str(tmp_path / "out"),
                      planner=endpoint_model(vllm_server), planning="implicit", max_tokens=MAX_TOKENS,
                      controls=("dummyPlan",))
    run = tmp_path / "out" / RUN
    assert run_shard(spec) == 1
    cands, errors = records(run, "candidates"), records(run, "errors")
    assert len(cands) == 10 and {r["programId"] for r in cands.values()} == {"p1"}
    assert len(errors) == 10 and {r["programId"] for r in errors.values()} == {"p2"}
    for rec in cands.values():  # implicit planning: reports go to the coder; dummyPlan hands it the dummy plan
        user = json.loads(rec["prompts"]["coder"])[1]["content"]
        assert "planner" not in rec["prompts"]
        if rec["arm"] == "dummyPlan":
            assert rec["plan"] == dummy_plan() and "## Plan for this revision" in user
        else:
            assert rec["plan"] is None and "## Plan for this revision" not in user
            assert ("Feedback from the debugger" in user) == ("debugger" in rec["coalition"])
    for e in errors.values():
        assert e["errorKind"] == "prompt-too-long" and "maximum context length" in e["error"]
        assert "coder" in e["prompts"]  # the prompt that did not fit is kept for inspection
    progress = json.loads((run / "progress" / "shard-0.json").read_text())
    assert progress["state"] == "failed" and progress["failures"][0]["kind"] == "coder:prompt-too-long"
    stamps = {p.name: p.stat().st_mtime_ns for p in (run / "candidates").iterdir()}
    assert run_shard(spec) == 1  # resumable: it retries the failed units only, and fails the same way
    assert {p.name: p.stat().st_mtime_ns for p in (run / "candidates").iterdir()} == stamps


def test_server_that_never_gets_healthy_fails_the_shard_and_leaves_no_process(
        tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    model = tmp_path / "never-healthy-model"
    model.symlink_to(tiny_models["tiny-llama"], target_is_directory=True)
    traj = write_trajectory(tmp_path / "traj", [program("p1")])
    spec = write_spec(tmp_path / "run.yaml", name=RUN, trajectory=traj, output=str(tmp_path / "out"),
                      planner={"model": str(model), "serve": "local", "extraArgs": ["--enforce-eager"]},
                      per_generation=1, samples=1, controls=("dummyPlan",))
    assert run_shard(spec, "--health-timeout", "2") == 1
    errors = records(tmp_path / "out" / RUN, "errors")
    assert len(errors) == 5
    # The coder (same model) is not started again after the planner's server failed: its units fail at once.
    assert {(e["arm"], e["phase"]) for e in errors.values()} == {("coalition", "planner"), ("dummyPlan", "coder")}
    assert all("not healthy within 2 s" in e["error"] and e["errorKind"] == "serving" for e in errors.values())
    assert processes_mentioning(str(model)) == []


def test_sigterm_to_the_runner_stops_its_model_server(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    import signal
    import subprocess

    model = tmp_path / "sigterm-model"
    model.symlink_to(tiny_models["tiny-llama"], target_is_directory=True)
    traj = write_trajectory(tmp_path / "traj", [program("p1")])
    spec = write_spec(tmp_path / "run.yaml", name=RUN, trajectory=traj, output=str(tmp_path / "out"),
                      planner={"model": str(model), "serve": "local", "extraArgs": ["--enforce-eager"]},
                      per_generation=1, samples=1)
    runner = subprocess.Popen(["cudanalyst-runner", "--spec", str(spec), "--shard", "0", "--of", "1",
                               "--stage", "llm", "--health-timeout", "600"])
    try:
        deadline = time.monotonic() + 60
        while not [p for p in processes_mentioning(str(model)) if p != runner.pid]:
            assert time.monotonic() < deadline, "the model server never started"
            time.sleep(0.2)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if runner.poll() is None:
            runner.kill()
    deadline = time.monotonic() + 30
    while processes_mentioning(str(model)):
        assert time.monotonic() < deadline, "the model server outlived the runner"
        time.sleep(0.2)


def test_all_in_flight_with_priorities_writes_what_one_at_a_time_writes(tmp_path: Path, vllm_server) -> None:
    """Issue 32: to a server of ours every request is in flight at once and plans go first in its queue; the
    records are the same, byte for byte, as one request at a time in plain order (each request has its seed)."""
    import yaml

    from cudanalyst.runner.llm.serving import SERVED_HERE_ANNOTATION

    traj = write_trajectory(tmp_path / "traj", [program("p1", feedback=feedback_of("p1")),
                                                 program("p2", feedback=feedback_of("p2"))])
    runs = {}
    for way in ("ours", "serial"):
        spec = write_spec(tmp_path / f"{way}.yaml", name=RUN, trajectory=traj, output=str(tmp_path / way),
                          planner=endpoint_model(vllm_server), max_tokens=MAX_TOKENS, controls=("noFeedback",))
        if way == "ours":  # as `cudanalyst run` hands its own server to a shard
            doc = yaml.safe_load(spec.read_text())
            doc["metadata"]["annotations"] = {SERVED_HERE_ANNOTATION: vllm_server.endpoint.base_url}
            spec.write_text(yaml.safe_dump(doc))
        assert run_shard(spec, *(("--concurrency", "1") if way == "serial" else ())) == 0
        runs[way] = records(tmp_path / way / RUN, "candidates")
    assert len(runs["ours"]) == 20 and runs["ours"].keys() == runs["serial"].keys()
    for key, record in runs["ours"].items():
        other = runs["serial"][key]
        for field in ("completion", "plan", "prompts", "seed", "code", "finishReason"):
            assert record.get(field) == other.get(field), (key, field)
