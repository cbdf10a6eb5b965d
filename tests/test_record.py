"""`cudanalyst record` without a model server: bad input (exit 2, the field named, nothing written), the
evaluator that OpenEvolve calls, and OpenEvolve's configuration. The real recordings are in
tests/vllm/test_record_vllm.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from nvcc_mark import needs_nvcc

from cudanalyst.api.recording import load_recording, parse_recording
from cudanalyst.store import open_store


def spec(tmp_path: Path, **edits: object) -> dict:
    data = {
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "TrajectoryRecording", "metadata": {"name": "rec"},
        "spec": {"tasks": ["conv2d"], "model": {"model": "tiny-llama", "serve": "local", "maxModelLen": 4096},
                 "iterations": 2, "output": {"uri": str(tmp_path / "out")}},
    }
    data["spec"].update(edits)
    return data


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "rec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def record(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudanalyst", "record", *args], capture_output=True, text=True,
                          timeout=300)


def test_the_examples_are_valid_recordings_of_known_tasks() -> None:
    from cudanalyst.tasks import get_task

    rec = load_recording(Path(__file__).parents[1] / "examples" / "recording-quick.yaml")
    assert rec.spec.tasks == ["conv2d"] and rec.spec.iterations == 2
    h200 = load_recording(Path(__file__).parents[1] / "examples" / "h200-recording.yaml")
    assert len(h200.spec.tasks) == 8 and h200.spec.model.model == "qwen2.5-coder-1.5b-instruct"
    for task in h200.spec.tasks:
        get_task(task)


def test_an_invalid_field_is_named_with_exit_2(tmp_path: Path) -> None:
    p = record(str(write(tmp_path, spec(tmp_path, iterations=0, tasks=["gemm", "gemm"]))))
    assert p.returncode == 2
    assert "spec.iterations" in p.stderr and "invalid TrajectoryRecording" in p.stderr
    assert not (tmp_path / "out").exists()


def test_a_repeated_task_is_refused() -> None:
    with pytest.raises(ValueError, match="tasks must be unique; repeated: gemm"):
        parse_recording(spec(Path("/x"), tasks=["gemm", "gemm"]))


def test_an_unknown_task_is_named_with_exit_2_and_nothing_written(tmp_path: Path) -> None:
    p = record(str(write(tmp_path, spec(tmp_path, tasks=["conv2d", "no-such-task"]))))
    assert p.returncode == 2
    assert "spec.tasks[1]" in p.stderr and "no-such-task" in p.stderr
    assert not (tmp_path / "out").exists()


def test_a_model_that_cannot_be_served_is_named_with_exit_2(tmp_path: Path) -> None:
    p = record(str(write(tmp_path, spec(tmp_path, model={"model": str(tmp_path / "nowhere"), "serve": "local"}))))
    assert p.returncode == 2
    assert "spec.model.model" in p.stderr and "nowhere" in p.stderr
    assert not (tmp_path / "out").exists()


def test_a_completion_model_is_refused_because_openevolve_speaks_chat(tmp_path: Path) -> None:
    p = record(str(write(tmp_path, spec(tmp_path, model={"model": "tiny-llama-base", "api": "completion"}))))
    assert p.returncode == 2 and "spec.model.api" in p.stderr


def test_an_unreachable_store_is_named_with_exit_2(tmp_path: Path) -> None:
    from cudanalyst.runner.llm.serving import free_port

    data = spec(tmp_path, output={"uri": "s3://bucket/recordings/"},
                s3={"endpoint": f"http://127.0.0.1:{free_port()}", "region": "us-east-1"})
    p = subprocess.run([sys.executable, "-m", "cudanalyst", "record", str(write(tmp_path, data))],
                       capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"})
    assert p.returncode == 2
    assert "spec.output.uri" in p.stderr


def test_a_finished_recording_moved_elsewhere_is_imported_again_without_a_model(tmp_path: Path) -> None:
    """Every task has its iterations: the pass only imports (here with other generation windows), so it needs no
    model or vLLM, and a folder brought back from another machine (another output.uri) is still ours."""
    from cudanalyst.recording import prepare_store, progress_key

    nowhere = {"model": str(tmp_path / "no-weights-here"), "serve": "local"}  # could not be served here
    store = prepare_store(parse_recording(spec(tmp_path, model=nowhere, output={"uri": str(tmp_path / "elsewhere")})))
    oe = Path(__file__).parent / "data" / "openevolve" / "gemm" / "checkpoints" / "checkpoint_20"
    for path in sorted(oe.rglob("*.json")):
        store.put_bytes(f"openevolve/conv2d/checkpoints/checkpoint_2/{path.relative_to(oe).as_posix()}",
                        path.read_bytes())
    store.put_json(progress_key("conv2d"), {"task": "conv2d", "checkpoint": 2, "iterations": 2, "gpu": False})
    shutil.move(str(tmp_path / "elsewhere"), str(tmp_path / "out"))

    p = record(str(write(tmp_path, spec(tmp_path, model=nowhere, iterationsPerGeneration=5))))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "every task has all its iterations: importing" in p.stderr
    assert "the window of 5 iteration(s) a program was found in, by its first): 0: 1, 5: 2" in " ".join(p.stderr.split())
    assert "evaluation:" not in p.stderr  # nothing is evaluated in an import-only pass
    programs = [json.loads(x) for x in (tmp_path / "out" / "rec" / "trajectory" / "programs.jsonl").read_text()
                .splitlines()]
    assert sorted(x["generation"] for x in programs) == [0, 5, 5]


def test_a_folder_of_another_recording_is_refused(tmp_path: Path) -> None:
    from cudanalyst.recording import RecordInputError, prepare_store

    prepare_store(parse_recording(spec(tmp_path)))
    with pytest.raises(RecordInputError, match=r"another spec \(differs in spec.seed\)"):
        prepare_store(parse_recording(spec(tmp_path, seed=7)))
    with pytest.raises(RecordInputError, match=r"another spec \(differs in spec.maxTokens, spec.seed\)"):
        prepare_store(parse_recording(spec(tmp_path, seed=7, maxTokens=99, iterations=5)))
    # resources may change between passes (a pod's size is not what is recorded), and so may how often it
    # checkpoints (the resume granularity)
    prepare_store(parse_recording(spec(tmp_path, resources={"gpusPerShard": 0})))
    prepare_store(parse_recording(spec(tmp_path, checkpointInterval=2)))


def test_iterations_may_be_raised_and_the_folder_resumes_but_not_lowered(tmp_path: Path) -> None:
    from cudanalyst.recording import RecordInputError, prepare_store, progress_key, unfinished_tasks

    store = prepare_store(parse_recording(spec(tmp_path, iterations=2)))
    store.put_json(progress_key("conv2d"), {"task": "conv2d", "checkpoint": 2, "iterations": 2})
    assert unfinished_tasks(parse_recording(spec(tmp_path, iterations=2))) == []
    store.put_json("done.json", {"trajectoryUri": "of 2 iterations", "programs": 2, "gpu": False})
    more = parse_recording(spec(tmp_path, iterations=5))
    prepare_store(more)
    assert unfinished_tasks(more) == ["conv2d"]  # the task evolves on from its checkpoint at 2
    assert not store.exists("done.json")
    saved = json.loads((tmp_path / "out" / "rec" / "spec.json").read_text())
    assert saved["spec"]["iterations"] == 5 and saved["iterationsBefore"] == [2]
    with pytest.raises(RecordInputError, match=r"spec.iterations: 3 is fewer than the 5 .* not lowered"):
        prepare_store(parse_recording(spec(tmp_path, iterations=3)))
    assert json.loads((tmp_path / "out" / "rec" / "spec.json").read_text()) == saved  # nothing written


def test_tasks_may_be_added_and_the_folder_resumes_them_but_not_removed(tmp_path: Path) -> None:
    # More tasks for the study's task level: each task evolves alone with the recording's seed, so the ones recorded
    # stay as a recording of every task would have made them.
    from cudanalyst.recording import RecordInputError, prepare_store, progress_key, unfinished_tasks

    store = prepare_store(parse_recording(spec(tmp_path, tasks=["conv2d", "gemm"])))
    for task in ("conv2d", "gemm"):
        store.put_json(progress_key(task), {"task": task, "checkpoint": 2, "iterations": 2})
    store.put_json("done.json", {"trajectoryUri": "of two tasks", "programs": 4, "gpu": False})  # it had finished
    more = parse_recording(spec(tmp_path, tasks=["conv2d", "gemm", "atax"]))
    prepare_store(more)
    assert unfinished_tasks(more) == ["atax"]  # only the new task evolves; the others stay as recorded
    assert not store.exists("done.json")  # no longer finished: nothing may take the old trajectory for the new one
    saved = json.loads((tmp_path / "out" / "rec" / "spec.json").read_text())
    assert saved["spec"]["tasks"] == ["conv2d", "gemm", "atax"] and saved["tasksBefore"] == [["conv2d", "gemm"]]
    assert "iterationsBefore" not in saved
    with pytest.raises(RecordInputError, match=r"spec.tasks: gemm is recorded in .* not removed"):
        prepare_store(parse_recording(spec(tmp_path, tasks=["conv2d", "atax"])))
    assert json.loads((tmp_path / "out" / "rec" / "spec.json").read_text()) == saved  # nothing written
    # Another change beside the tasks is still another recording.
    with pytest.raises(RecordInputError, match=r"another spec \(differs in spec.seed\)"):
        prepare_store(parse_recording(spec(tmp_path, tasks=["conv2d", "gemm", "atax", "mvt"], seed=7)))


@needs_nvcc
def test_the_evaluator_returns_metrics_and_the_three_reports(tmp_path: Path) -> None:
    from cudanalyst.runner.record.evaluator import evaluate
    from cudanalyst.tasks import get_task

    program = tmp_path / "p.cu"
    program.write_text(get_task("conv2d").baseline_source)
    good = evaluate(str(program), task="conv2d", gpu=False)
    assert good.metrics["compiled"] == 1.0 and good.metrics["contract"] == 1.0
    assert good.metrics["gpu_evaluated"] == 0.0 and "correct" not in good.metrics and "speedup" not in good.metrics
    assert good.metrics["combined_score"] > 0
    assert set(good.artifacts) == {"debugger", "analyzer", "profiler"}
    assert "Status: compiled" in good.artifacts["debugger"]
    assert "registers/thread" in good.artifacts["analyzer"]
    assert "no GPU" in good.artifacts["profiler"]

    program.write_text("this is not CUDA")
    bad = evaluate(str(program), task="conv2d", gpu=False)
    assert bad.metrics["compiled"] == 0.0 and bad.metrics["combined_score"] == 0.0
    assert "FAILED to compile" in bad.artifacts["debugger"]


@needs_nvcc
def test_a_program_that_builds_the_baselines_cubin_is_measured_as_the_baseline_not_timed_apart() -> None:
    # The first study recording's one `fast` program was linear_bias_gelu's baseline with `erf` for `erff` and the
    # sizes defined again: the same cubin, recorded 1.135x. A stand-in pool (the real one runs in tests/gpu) says
    # what it was asked to time.
    from cudanalyst.runner.kernels.feedback.reports import program_facts
    from cudanalyst.runner.kernels.workers.requests import EvalSettings
    from cudanalyst.tasks import get_task

    class Pool:
        def __init__(self) -> None:
            self.timed: list[list[str]] = []

        def verify(self, request: object, timeout: float, ready_s: float | None = None) -> dict:
            return {"ok": True, "stage": "done"}

        def compare(self, request: object, timeout: float) -> dict:
            names = [p.name for p in request.programs]  # type: ignore[attr-defined]
            self.timed.append(names)
            return {"ok": True, "programs": {n: {"ok": True, "stats": {"median_ms": 1.0 + i}}
                                             for i, n in enumerate(names)}}

    task = get_task("linear_bias_gelu")
    rewrite = ("#define BATCH 1024\n#define IN_FEATURES 1024\n#define OUT_FEATURES 2048\n"
               + task.baseline_source.replace("erff(", "erf(") + "\n")
    assert rewrite != task.baseline_source and "erf(z" in rewrite
    pool = Pool()
    facts = program_facts(task, rewrite, EvalSettings(), gpu=True, pool=pool)
    assert pool.timed == [["baseline"]]  # one binary, one measurement
    assert facts.program_stats == facts.baseline_stats == {"median_ms": 1.0}
    changed = program_facts(task, task.baseline_source.replace("1.0f + erff", "1.0f - erff"), EvalSettings(), gpu=True,
                            pool=pool)
    assert pool.timed[-1] == ["program", "baseline"] and changed.program_stats != changed.baseline_stats


def test_each_evaluation_is_logged_with_its_time_and_nothing_of_it_reaches_the_agent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The recorder names a log per task and pass (evolve.py); the evaluator appends a line per evaluation: its wall
    # time and each GPU tool's run. Metrics and artifacts, which OpenEvolve renders into prompts, stay as they were.
    from cudanalyst.runner.record.evaluator import EVALUATED_ENV, EVALUATIONS_ENV, evaluate
    from cudanalyst.tasks import get_task

    log = tmp_path / "evaluations" / "pass.jsonl"
    log.parent.mkdir()
    monkeypatch.setenv(EVALUATIONS_ENV, str(log))
    monkeypatch.setenv(EVALUATED_ENV, str(tmp_path / "evaluated"))
    (tmp_path / "evaluated").mkdir()
    program = tmp_path / "p.cu"
    results = []
    baseline = get_task("conv2d").baseline_source
    for source in (baseline, "this is not CUDA", baseline):
        program.write_text(source)
        res = evaluate(str(program), task="conv2d", gpu=False)
        assert set(res.metrics) <= {"compiled", "contract", "gpu_evaluated", "combined_score"}
        assert not any("seconds" in text.lower() for text in res.artifacts.values())
        results.append(res)
    # Other settings are another evaluation, not a repeat.
    program.write_text(baseline)
    evaluate(str(program), task="conv2d", evaluation={"trials": 7}, gpu=False)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["task"], x["compiled"], x["repeat"]) for x in lines] == [
        ("conv2d", True, False), ("conv2d", False, False), ("conv2d", True, True), ("conv2d", True, False)]
    # A repeat of the same source is answered with its first evaluation's metrics and reports.
    assert (results[2].metrics, results[2].artifacts) == (results[0].metrics, results[0].artifacts)
    assert len(list((tmp_path / "evaluated").glob("*.json"))) == 3 and not list((tmp_path / "evaluated").glob("*.part"))
    assert all(x["seconds"] >= 0 and len(x["sha256"]) == 16 for x in lines)
    # No GPU here: no tool ran, so none has seconds (left out: "not measured", never 0).
    assert lines[0]["tools"] == {t: {"status": "not-run", "cause": None, "timings": False}
                                 for t in ("compute-sanitizer", "nsight-compute")}


def test_a_later_pass_answers_what_an_earlier_pass_evaluated_even_when_that_pass_never_checkpointed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # On the H200 a pass cut short before its first checkpoint lost its evaluations, and the next pass ran the
    # baselines' tools again: finished evaluations now reach the store as they finish (a thread), and a later pass,
    # on this machine or another, answers the same source from them.
    import time

    from cudanalyst.runner.record.evaluator import EVALUATED_ENV, EVALUATIONS_ENV, evaluate
    from cudanalyst.runner.record.evolve import EVALUATED_PREFIX, EvaluationSync, restore_evaluated
    from cudanalyst.tasks import get_task

    store = open_store(tmp_path / "store")
    program = tmp_path / "p.cu"
    program.write_text(get_task("conv2d").baseline_source)
    first = tmp_path / "pass-1"
    (first / "evaluated").mkdir(parents=True)
    monkeypatch.setenv(EVALUATED_ENV, str(first / "evaluated"))
    monkeypatch.setenv(EVALUATIONS_ENV, str(first / "log.jsonl"))
    with EvaluationSync(store, first / "evaluated", first / "log.jsonl", "evaluations/pass-1.jsonl", every_s=0.05):
        before = evaluate(str(program), task="conv2d", gpu=False)
        (first / "evaluated" / "half.123.part").write_text("{")  # a file being written is never copied
        deadline = time.monotonic() + 30
        while not list(store.list(EVALUATED_PREFIX)) and time.monotonic() < deadline:
            time.sleep(0.05)
        copied = list(store.list(EVALUATED_PREFIX))  # by the thread, before the pass ended
    assert len(copied) == 1 and copied[0].endswith(".json")
    assert len(store.get_text("evaluations/pass-1.jsonl").splitlines()) == 1

    second = tmp_path / "pass-2"  # another machine: nothing local
    assert restore_evaluated(store, second / "evaluated") == 1
    monkeypatch.setenv(EVALUATED_ENV, str(second / "evaluated"))
    monkeypatch.setenv(EVALUATIONS_ENV, str(second / "log.jsonl"))
    after = evaluate(str(program), task="conv2d", gpu=False)
    assert (after.metrics, after.artifacts) == (before.metrics, before.artifacts)
    assert json.loads((second / "log.jsonl").read_text())["repeat"] is True
    # Another source is evaluated as before.
    program.write_text("this is not CUDA")
    assert evaluate(str(program), task="conv2d", gpu=False).metrics["combined_score"] == 0.0
    assert [json.loads(x)["repeat"] for x in (second / "log.jsonl").read_text().splitlines()] == [True, False]


def test_recordings_on_one_machine_evaluate_a_source_once_even_at_the_same_moment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two recordings of the same tasks (the study's two agents, the policy comparison's arms and seeds) start from the
    # same baselines: with a shared folder the tools run once per source, and an evaluator that asks while another
    # is evaluating that source waits for its result.
    import threading
    import time

    from cudanalyst.runner.record import evaluator
    from cudanalyst.tasks import get_task

    monkeypatch.setenv(evaluator.SHARED_ENV, str(tmp_path / "shared"))
    monkeypatch.delenv(evaluator.EVALUATED_ENV, raising=False)
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(evaluator.EVALUATIONS_ENV, str(log))
    baseline = get_task("conv2d").baseline_source
    real, started = evaluator._evaluate, threading.Barrier(2)

    def slow(*args: object, **kwargs: object) -> object:  # the tools take a while: the other evaluator asks meanwhile
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluator, "_evaluate", slow)
    results: list[object] = []

    def one() -> None:
        started.wait(10)
        results.append(evaluator.evaluate_source(baseline, "conv2d"))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert sorted(x["repeat"] for x in lines) == [False, True]
    assert results[0].metrics == results[1].metrics and results[0].artifacts == results[1].artifacts
    # Another recording's pass folder gets the shared result too, so its store keeps it with its own evaluations.
    monkeypatch.setenv(evaluator.EVALUATED_ENV, str(tmp_path / "other-pass"))
    evaluator.evaluate_source(baseline, "conv2d")
    assert len(list((tmp_path / "other-pass").glob("*.json"))) == 1
    assert json.loads(log.read_text().splitlines()[-1])["repeat"] is True
    # Other settings are another evaluation.
    evaluator.evaluate_source(baseline, "conv2d", evaluation={"trials": 7})
    assert json.loads(log.read_text().splitlines()[-1])["repeat"] is False
    assert len(list((tmp_path / "shared").glob("*.json"))) == 2


@needs_nvcc
def test_under_run_tools_shown_only_the_reports_a_state_shows_are_made_and_a_shared_evaluation_is_completed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A policy arm's recorder (runTools: shown) makes only the reports its program's state shows: no stand-in for the
    # others, and the log says which it answered with. The `all` arm on the same machine, asking for the same source,
    # gets the missing reports made and kept beside the first ones; the policy arm asking again is a repeat answered
    # from them, still without what it withholds.
    from gate_support import shown_tools_only

    from cudanalyst.runner.record import evaluator, gate
    from cudanalyst.tasks import get_task

    settings = shown_tools_only(monkeypatch, tmp_path, {"broken": ["debugger", "profiler"], "unverified": ["analyzer"]})
    monkeypatch.setenv(evaluator.SHARED_ENV, str(tmp_path / "shared"))
    monkeypatch.delenv(evaluator.EVALUATED_ENV, raising=False)
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(evaluator.EVALUATIONS_ENV, str(log))
    baseline = get_task("conv2d").baseline_source

    broken = evaluator.evaluate_source("this is not CUDA", "conv2d")
    assert set(broken.artifacts) == {"analyzer"} and broken.metrics["compiled"] == 0.0
    gated = evaluator.evaluate_source(baseline, "conv2d")  # compiles, no GPU: unverified
    assert set(gated.artifacts) == {"debugger", "profiler"}
    assert not any("not run" in text.lower() and "policy" in text.lower() for text in gated.artifacts.values())

    monkeypatch.delenv(gate.ENV)  # the `all` arm: no policy
    full = evaluator.evaluate_source(baseline, "conv2d")
    assert set(full.artifacts) == {"debugger", "analyzer", "profiler"} and full.metrics == gated.metrics
    assert full.artifacts["debugger"] == gated.artifacts["debugger"]  # the first evaluation's reports are kept
    monkeypatch.setenv(gate.ENV, str(settings))
    again = evaluator.evaluate_source(baseline, "conv2d")
    assert (again.metrics, again.artifacts) == (gated.metrics, gated.artifacts)

    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["compiled"], x["repeat"], x["reports"]) for x in lines] == [
        (False, False, ["analyzer"]), (True, False, ["debugger", "profiler"]),
        (True, False, ["analyzer", "debugger", "profiler"]), (True, True, ["debugger", "profiler"])]
    stored = [json.loads(f.read_text()) for f in (tmp_path / "shared").glob("*.json")]
    assert sorted(tuple(d["reports"]) for d in stored) == [("analyzer",), ("analyzer", "debugger", "profiler")]


def test_the_fitness_orders_fail_built_correct_and_faster() -> None:
    from cudanalyst.runner.record.evaluator import combined_score

    scores = [combined_score(False, None, None), combined_score(True, None, None), combined_score(True, False, 3.0),
              combined_score(True, True, 0.5), combined_score(True, True, 1.0), combined_score(True, True, 4.0)]
    assert scores[1] == scores[2]  # built but not shown correct, with or without a GPU to tell
    assert scores[0] < scores[1] < scores[3] < scores[4] < scores[5] < 1.0


def test_openevolve_gets_the_reports_unfiltered_in_prompts_and_the_task_in_the_system_message(tmp_path) -> None:
    from openevolve.config import Config

    from cudanalyst.runner.record.evolve import openevolve_config

    rec = parse_recording(spec(tmp_path, islands=2, population=12, seed=7, parallel=2))
    raw = openevolve_config(rec, "conv2d", "http://127.0.0.1:9/v1", "tiny", gpu=False)
    config = Config.from_dict(raw)  # OpenEvolve itself accepts it
    assert config.prompt.include_artifacts and not config.prompt.artifact_security_filter
    assert config.database.num_islands == 2 and config.database.population_size == 12
    assert config.random_seed == 7 and config.evaluator.parallel_evaluations == 2
    assert config.evaluator.evaluator_args["task"] == "conv2d" and config.evaluator.evaluator_args["gpu"] is False
    assert config.llm.models[0].name == "tiny" and config.llm.api_base == "http://127.0.0.1:9/v1"
    assert "conv2d" in config.prompt.system_message and "```cuda" in config.prompt.system_message
    assert not config.diff_based_evolution and not config.evaluator.cascade_evaluation


def test_checkpoints_past_the_last_complete_one_are_dropped_before_resuming(tmp_path: Path) -> None:
    from cudanalyst.runner.record.evolve import download_checkpoint, drop_checkpoints_after, upload_checkpoint

    local = tmp_path / "checkpoints"
    for n in (1, 2):
        (local / f"checkpoint_{n}" / "programs").mkdir(parents=True)
        (local / f"checkpoint_{n}" / "programs" / f"p{n}.json").write_text(json.dumps({"id": f"p{n}"}))
        (local / f"checkpoint_{n}" / "metadata.json").write_text("{}")
    store = open_store(tmp_path / "store")
    assert upload_checkpoint(local, store, 1) == 1 and upload_checkpoint(local, store, 2) == 1
    drop_checkpoints_after(store, 1)
    assert sorted(store.list()) == ["checkpoints/checkpoint_1/metadata.json", "checkpoints/checkpoint_1/programs/p1.json"]
    shutil.rmtree(local)
    folder = download_checkpoint(store, 1, tmp_path / "resume")
    assert json.loads((folder / "programs" / "p1.json").read_text()) == {"id": "p1"}


def test_the_store_takes_a_checkpoint_once_the_interval_has_passed_whatever_the_iteration_number(tmp_path: Path) -> None:
    # OpenEvolve checkpoints only after an iteration that gave a program; with diff-based search most give none,
    # so waiting for a multiple of the interval could wait for ever (8 of 16 tasks on the H200, 2026-12-02).
    from cudanalyst.runner.record.evolve import checkpoint_due, openevolve_config

    program_giving = [1, 3, 5, 7, 8, 13, 30]
    stored, last = [], 0
    for i in program_giving:
        if checkpoint_due(i, last, 5, 30):
            stored.append(i)
            last = i
    assert stored == [5, 13, 30]  # 5 past 0, then the first 5 past 5, then the last iteration whatever the gap
    assert not checkpoint_due(29, 26, 5, 30) and checkpoint_due(30, 29, 5, 30)
    config = openevolve_config(parse_recording(spec(tmp_path, iterations=30, checkpointInterval=5)), "conv2d", "http://h/v1", "m", False)
    assert config["checkpoint_interval"] == 1  # OpenEvolve's every checkpoint reaches checkpoint_due


def test_a_prompt_too_long_for_the_context_names_the_served_models_length_to_raise(tmp_path: Path) -> None:
    from cudanalyst.runner.local.record import failure_line
    from cudanalyst.runner.record.evolve import EXIT_CONTEXT, EXIT_MODEL

    folder = tmp_path / "work"
    served = parse_recording(spec(tmp_path))
    line = failure_line(served, "conv2d", EXIT_CONTEXT, "http://127.0.0.1:9/v1", folder)
    assert "refused an iteration's prompt as longer than its context window" in line
    assert "a pass with the same settings stops again" in line
    assert "longer context (spec.model.maxModelLen), then run again to resume" in line
    assert f"{folder}/task-conv2d.log" in line and "planner" not in line
    # A model at an endpoint has no length of ours to raise: its server's is named.
    remote = parse_recording(spec(tmp_path, model={"model": "m", "serve": "endpoint", "endpoint": "http://h/v1"}))
    assert "(its server: vLLM --max-model-len)" in failure_line(remote, "conv2d", EXIT_CONTEXT, "http://h/v1", folder)
    # A policy's planner served here: either model's prompt may be the one refused.
    split = parse_recording(spec(
        tmp_path, policy={"players": ["debugger", "analyzer", "profiler"],
                          "models": {"planner": "big", "coder": "tiny-llama", "reason": "a test"}},
        planner={"model": "big", "serve": "local", "maxModelLen": 8192}))
    line = failure_line(split, "conv2d", EXIT_CONTEXT, "http://127.0.0.1:9/v1", folder)
    assert "or the planner's" in line and "(spec.model.maxModelLen or spec.planner.maxModelLen)" in line
    # A server away is another cause, and a rerun alone is the remedy.
    away = failure_line(served, "conv2d", EXIT_MODEL, "http://127.0.0.1:9/v1", folder)
    assert "did not answer an iteration" in away and away.endswith("; run again to resume")
