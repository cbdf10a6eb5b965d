"""`cudanalyst record` for real: OpenEvolve (the PyPI package) against vLLM's CPU build serving the tiny test
model, our evaluator compiling every program (no GPU here), checkpoints in a real S3 endpoint (moto on
loopback) or a folder, the import, and a killed recording resumed.

The tiny model writes no CUDA, so its programs fail to compile: what is asserted is the plumbing, which does
not depend on the model being good (programs evolved, reports made and carried into the next prompts,
checkpoints stored, the trajectory usable by an AttributionRun)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_killed_run import descendants, running, wait_for

from cudanalyst.store import S3Settings, open_store
from cudanalyst.trajectory import load_trajectory

PLAYERS = {"debugger", "analyzer", "profiler"}
# OpenEvolve's prompt holds the task's contract, the parent and its reports: about 2,700 tokens of the tiny
# tokenizer (the session's server has room for them too).
CONTEXT = 4096


def recording(tmp_path: Path, name: str, model: dict[str, Any], output: str, iterations: int,
              **spec: Any) -> Path:
    data = {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "TrajectoryRecording", "metadata": {"name": name},
            "spec": {"tasks": ["conv2d"], "model": model, "iterations": iterations, "islands": 1, "population": 8,
                     "seed": 3, "maxTokens": 64, "output": {"uri": output}, **spec}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def record(path: Path, work: Path, env: dict[str, str] | None = None,
           **popen: Any) -> subprocess.Popen[str]:
    work.mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "cudanalyst", "record", str(path)], text=True,
                            env={**os.environ, "TMPDIR": str(work), **(env or {})}, **popen)


def raw_report(feedback: str, player: str) -> str:
    """The importer keeps an artifact as '[name]\\ntext'; the prompt shows the text."""
    return feedback.removeprefix(f"[{player}]\n")


def check_trajectory(uri: str, s3: S3Settings | None, iterations: int) -> list[Any]:
    programs = load_trajectory(uri, s3).programs
    assert len(programs) >= iterations + 1  # the baseline and one child per iteration
    by_id = {p.program_id: p for p in programs}
    children = [p for p in programs if p.parent_id]
    assert len(children) >= iterations
    for p in programs:
        assert set(p.feedback) == PLAYERS, p.program_id
        assert "Debugger report" in p.feedback["debugger"]
        assert "Analyzer report" in p.feedback["analyzer"]
        assert "no GPU" in p.feedback["profiler"]  # said plainly: compiled only
        assert p.metrics["gpu_evaluated"] == 0.0 and "correct" not in p.metrics
        assert {t: r.status for t, r in p.tools.items()} == {"compute-sanitizer": "not-run", "nsight-compute": "not-run"}
    for child in children:
        # What the agent saw: each report of the parent, verbatim, in the prompt that produced the child.
        parent = by_id[child.parent_id]
        for player in PLAYERS:
            assert f"### {player}" in child.context.prompt
            assert raw_report(parent.feedback[player], player) in child.context.prompt, (child.program_id, player)
    assert [p.metrics["compiled"] for p in programs if not p.parent_id] == [1.0]  # one root: the baseline
    return programs


def test_a_recording_of_two_iterations_lands_in_s3_and_an_attribution_run_plans_over_it(
        tmp_path: Path, tiny_models: dict[str, Path], s3_endpoint: Any, s3_bucket: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = {"model": str(tiny_models["tiny-llama"]), "serve": "local", "maxModelLen": CONTEXT, "dtype": "float32",
             "gpuMemoryUtilization": 0.1, "extraArgs": ["--distributed-executor-backend", "uni"]}
    path = recording(tmp_path, "rec-s3", model, f"s3://{s3_bucket}/recordings/", 2,
                     s3={"endpoint": s3_endpoint.url, "region": s3_endpoint.region})
    keys = {"AWS_ACCESS_KEY_ID": s3_endpoint.access_key_id, "AWS_SECRET_ACCESS_KEY": s3_endpoint.secret_access_key}
    work = tmp_path / "work"
    proc = record(path, work, keys, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=1800)
    assert proc.returncode == 0, out
    assert "compiled only" in out and "conv2d: iteration 2/2 checkpointed" in out
    # The counts per GPU tool (issue 28): compiled only, so no tool ran on any program.
    flat = " ".join(out.split())  # the console wraps its lines
    for tool in ("compute-sanitizer", "Nsight Compute"):
        assert f"tool reports: {tool}: " in flat and "compiled programs: ok 0, failed 0, not run" in flat, out

    client = s3_endpoint.client()
    stored = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix="recordings/rec-s3/")["Contents"]]
    for n in (1, 2):
        assert any(k.startswith(f"recordings/rec-s3/openevolve/conv2d/checkpoints/checkpoint_{n}/programs/")
                   for k in stored), n
    progress = json.loads(client.get_object(Bucket=s3_bucket, Key="recordings/rec-s3/progress/conv2d.json")["Body"]
                          .read())
    assert progress["checkpoint"] == 2 and progress["iterations"] == 2
    # The evaluations' log of this pass, beside the checkpoints: a line per evaluation (the baseline and 2 children).
    (evals,) = [k for k in stored if k.startswith("recordings/rec-s3/openevolve/conv2d/evaluations/pass-")]
    lines = client.get_object(Bucket=s3_bucket, Key=evals)["Body"].read().decode().splitlines()
    assert len(lines) >= 3 and all(json.loads(x)["task"] == "conv2d" for x in lines), lines
    # How each iteration ended, beside the checkpoints: a line per iteration, the model answered every one.
    ended = [json.loads(x) for x in client.get_object(Bucket=s3_bucket, Key="recordings/rec-s3/openevolve/conv2d/"
                                                      "iterations.jsonl")["Body"].read().decode().splitlines()]
    assert sorted(e["iteration"] for e in ended) == [1, 2], ended
    assert all(e["child"] or e["cause"] == "agent" for e in ended), ended
    assert "iterations: 2, " in flat and "0 the model did not answer" in flat, out

    for k, v in keys.items():
        monkeypatch.setenv(k, v)
    s3 = S3Settings(endpoint=s3_endpoint.url, region=s3_endpoint.region)
    uri = f"s3://{s3_bucket}/recordings/rec-s3/trajectory/"
    assert f"-> {uri}" in out.replace("\n", "")
    check_trajectory(uri, s3, 2)
    assert not list(work.glob("cudanalyst-record-*"))  # a recording that succeeds leaves no folder behind

    # Ready as an AttributionRun's spec.trajectory.uri.
    from cudanalyst.api import parse_run
    from cudanalyst.planned_run import plan_run

    run = parse_run({
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": "over-rec"},
        "spec": {"trajectory": {"uri": uri, "generations": [1], "programsPerGeneration": 2},
                 "players": ["debugger", "analyzer", "profiler"], "models": {"planner": {"model": "x"}},
                 "sampling": {"rollouts": 1, "samplesPerCoalition": 1}, "output": {"uri": str(tmp_path / "runs")},
                 "s3": {"endpoint": s3_endpoint.url, "region": s3_endpoint.region}}})
    plan = plan_run(run)
    assert len(plan.programs) == 2 and len(plan.units) == 2 * 8


def test_a_killed_recording_resumes_from_its_last_complete_checkpoint(tmp_path: Path, vllm_server: Any) -> None:
    # The session's chat server (its context holds OpenEvolve's prompts), as a remote endpoint would be.
    model = {"serve": "endpoint", "endpoint": vllm_server.endpoint.base_url, "model": "tiny"}
    out = tmp_path / "recordings"
    total = 6
    path = recording(tmp_path, "rec-kill", model, str(out), total)
    progress_file = out / "rec-kill" / "progress" / "conv2d.json"

    def checkpoint() -> int:
        try:
            return int(json.loads(progress_file.read_text())["checkpoint"])
        except (OSError, ValueError, KeyError):
            return 0

    first = record(path, tmp_path / "work", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: checkpoint() >= 1, 900, 0.1), f"no checkpoint; exit status {first.poll()}"
        tree = descendants(first.pid)
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
    # The task process hears of its parent's death (SIGTERM) and stops: no writer is left behind.
    assert wait_for(lambda: not any(running(p) for p in tree), 300), [p for p in tree if running(p)]
    stopped_at = checkpoint()
    assert 1 <= stopped_at < total, "the recording finished before it was killed: nothing to resume"
    before = {p.name for p in (out / "rec-kill" / "openevolve" / "conv2d" / "checkpoints" /
                               f"checkpoint_{stopped_at}" / "programs").glob("*.json")}
    assert not (out / "rec-kill" / "done.json").exists()
    # What the killed pass evaluated is in the store, for a later pass to answer the same source from.
    killed = {p.name for p in (out / "rec-kill" / "openevolve" / "conv2d" / "evaluated").glob("*.json")}
    assert killed

    second = record(path, tmp_path / "work", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log, _ = second.communicate(timeout=1800)
    assert second.returncode == 0, log
    assert f"conv2d: resuming after iteration {stopped_at}" in log
    assert checkpoint() == total
    # Each pass kept its own evaluations' log: the resumed one did not overwrite the killed one's.
    passes = sorted(p.name for p in (out / "rec-kill" / "openevolve" / "conv2d" / "evaluations").glob("pass-*.jsonl"))
    assert [p.rsplit("-from-", 1)[1] for p in passes] == ["0.jsonl", f"{stopped_at}.jsonl"], passes
    programs = check_trajectory((out / "rec-kill" / "trajectory").as_uri() + "/", None, total)
    # The programs of the last checkpoint before the kill are kept, under the same ids, not evolved anew.
    assert {f"{p.program_id}.json" for p in programs} >= before
    assert killed <= {p.name for p in (out / "rec-kill" / "openevolve" / "conv2d" / "evaluated").glob("*.json")}
    after = open_store(out / "rec-kill").get_json("done.json")
    assert after["programs"] == len(programs)


def test_a_gated_recording_leaves_out_what_its_policy_withholds(tmp_path: Path, vllm_server: Any) -> None:
    """Issue 30: `cudanalyst record --policy FILE` against the tiny model. The policy withholds the analyzer and
    the profiler while the parent does not compile or cannot be checked (the baseline, here, without a GPU), shows
    the debugger's report summarised for an unchecked parent and raw for a broken one, and names a planner: each
    child's prompt shows the parent's debugger report (or its summary) and a plan, never the two others; the
    recorded feedback still holds all three; the log says per iteration what was shown and the tokens saved."""
    model = {"serve": "endpoint", "endpoint": vllm_server.endpoint.base_url, "model": "tiny"}
    out = tmp_path / "recordings"
    path = recording(tmp_path, "rec-gated", model, str(out), 2, planner=model)
    withhold = [{"component": c, "show": False, "reason": "test"} for c in ("analyzer", "profiler")]
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump({
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "FeedbackPolicy", "metadata": {"name": "withhold"},
        "spec": {"states": {"broken": {"components": withhold},
                            "unverified": {"components": [*withhold, {"component": "debugger", "form": "summary"}]}},
                 "models": {"planner": "tiny", "coder": "tiny"}}}))
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "cudanalyst", "record", str(path), "--policy", str(policy_file)],
                          text=True, capture_output=True, timeout=1800, env={**os.environ, "TMPDIR": str(work)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    console = " ".join((proc.stdout + proc.stderr).split())
    assert "plans by tiny" in console and "gating conv2d: " in console

    programs = load_trajectory((out / "rec-gated" / "trajectory").as_uri() + "/").programs
    by_id = {p.program_id: p for p in programs}
    children = [p for p in programs if p.parent_id]
    assert len(children) >= 2
    for p in programs:
        assert set(p.feedback) == PLAYERS, p.program_id  # what is recorded is not gated, only what is shown
    from cudanalyst.gating import program_state

    states = set()
    for child in children:
        parent = by_id[child.parent_id]
        prompt = child.context.prompt
        state = program_state(parent.metrics)[0]
        states.add(state)
        raw = raw_report(parent.feedback["debugger"], "debugger")
        assert "### debugger" in prompt
        assert (raw in prompt) == (state == "broken"), (child.program_id, state)  # unverified: the summary
        for withheld in ("analyzer", "profiler"):
            assert f"### {withheld}" not in prompt, (child.program_id, withheld)
            assert raw_report(parent.feedback[withheld], withheld) not in prompt, (child.program_id, withheld)
        assert "## Plan for this revision" in prompt

    log = [json.loads(line) for line in
           (out / "rec-gated" / "openevolve" / "conv2d" / "gating.jsonl").read_text().splitlines()]
    assert sorted(e["iteration"] for e in log) == [1, 2]
    assert "unverified" in states  # the baseline, the first child's parent: its debugger report summarised
    for e in log:
        assert e["state"] in ("broken", "unverified") and e["withheld"] == ["analyzer", "profiler"]
        forms = {d["artifact"]: d["form"] for d in e["decisions"] if d["shown"]}
        assert forms == {"debugger": "summary" if e["state"] == "unverified" else "raw"}
        assert e["shown"] == ["debugger"] and all("test" in d["reason"] for d in e["decisions"] if not d["shown"])
        # Counted by the server's own tokenizer (vLLM's /tokenize): exact, and what the two reports weigh.
        assert e["tokensExact"] and e["savedTokens"] > 0
        assert e["ungatedPromptTokens"] - e["promptTokens"] == e["savedTokens"]
        assert e["planner"] == "tiny" and e["plannerCompletionTokens"] > 0
    assert f"{sum(e['savedTokens'] for e in log)} prompt tokens saved" in console


def test_a_recording_that_runs_only_the_shown_tools_never_makes_the_withheld_reports(
        tmp_path: Path, vllm_server: Any) -> None:
    """Issue 30, `spec.runTools: shown`: the policy withholds the analyzer and the profiler from broken and unchecked
    parents (every program here: no GPU, and the tiny model writes no CUDA), so OpenEvolve's evaluator processes make
    only the debugger's report: the trajectory holds no other, no prompt shows another or a stand-in, each evaluation
    is logged with the reports it made, and the gate logs the two as never run."""
    model = {"serve": "endpoint", "endpoint": vllm_server.endpoint.base_url, "model": "tiny"}
    out = tmp_path / "recordings"
    path = recording(tmp_path, "rec-shown", model, str(out), 1, runTools="shown")
    withhold = [{"component": c, "show": False, "reason": "test"} for c in ("analyzer", "profiler")]
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump({
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "FeedbackPolicy", "metadata": {"name": "withhold"},
        "spec": {"states": {"broken": {"components": withhold}, "unverified": {"components": withhold}}}}))
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "cudanalyst", "record", str(path), "--policy", str(policy_file)],
                          text=True, capture_output=True, timeout=1800, env={**os.environ, "TMPDIR": str(work)})
    assert proc.returncode == 0, proc.stdout + proc.stderr

    programs = load_trajectory((out / "rec-shown" / "trajectory").as_uri() + "/").programs
    assert len(programs) >= 2 and any(p.parent_id for p in programs)
    for p in programs:
        assert set(p.feedback) == {"debugger"}, p.program_id  # the two others were never made
        if p.parent_id:
            assert "### debugger" in p.context.prompt
            assert "### analyzer" not in p.context.prompt and "### profiler" not in p.context.prompt
    task = out / "rec-shown" / "openevolve" / "conv2d"
    evaluations = [json.loads(x) for log in sorted((task / "evaluations").glob("*.jsonl"))
                   for x in log.read_text().splitlines() if x.strip()]
    assert evaluations and all(e["reports"] == ["debugger"] for e in evaluations)
    log = [json.loads(line) for line in (task / "gating.jsonl").read_text().splitlines()]
    assert log and all(e["notRun"] == ["analyzer", "profiler"] and e["shown"] == ["debugger"] for e in log)
    # An attribution over it would replay "no report" where no tool was asked: the plan refuses it, exit 2's error.
    from cudanalyst.api import parse_run
    from cudanalyst.planned_run import PlanError, plan_run

    uri = (out / "rec-shown" / "trajectory").as_uri() + "/"
    assert json.loads((out / "rec-shown" / "trajectory" / "trajectory.json").read_text())["source"]["runTools"] == "shown"
    run = parse_run({
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": "over-shown"},
        "spec": {"trajectory": {"uri": uri, "generations": [0], "programsPerGeneration": 1},
                 "players": ["debugger", "analyzer", "profiler"], "models": {"planner": {"model": "x"}},
                 "output": {"uri": str(tmp_path / "runs")}}})
    with pytest.raises(PlanError, match="runTools: shown"):
        plan_run(run)


def test_a_prompt_longer_than_the_served_context_stops_the_task_and_names_the_length_to_raise(
        tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """vLLM itself refuses a prompt longer than --max-model-len (a 400 answer, OpenEvolve's "LLM generation failed"
    after its retries). Not a server that is away: every pass would stop at the same prompt. The task stops before the
    iteration is counted, and the console names the setting that gets past it. Served here with a context of 1,024
    tokens; OpenEvolve's first prompt (the task's contract, the baseline, its reports) is about 2,700."""
    model = {"model": str(tiny_models["tiny-llama"]), "serve": "local", "maxModelLen": 1024, "dtype": "float32",
             "gpuMemoryUtilization": 0.1, "extraArgs": ["--distributed-executor-backend", "uni"]}
    out = tmp_path / "recordings"
    path = recording(tmp_path, "rec-long", model, str(out), 2)
    proc = record(path, tmp_path / "work", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    said, _ = proc.communicate(timeout=1800)
    flat = " ".join(said.split())  # the console wraps its lines
    assert proc.returncode == 1, said
    assert "refused an iteration's prompt as longer than its context window" in flat, said
    assert "give the model a longer context (spec.model.maxModelLen), then run again to resume" in flat, said
    task_log = next((tmp_path / "work").glob("cudanalyst-record-rec-long-*/task-conv2d.log")).read_text()
    assert "the prompt did not fit the model's context window" in task_log
    assert "maximum context length is 1024 tokens" in task_log  # the server's own words, kept for the user
    # Nothing past the baseline was counted: the next pass (with a longer context) starts from there.
    assert not (out / "rec-long" / "progress").exists()
    assert not list((out / "rec-long").glob("openevolve/conv2d/checkpoints/*"))
