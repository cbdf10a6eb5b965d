"""The shard command without a model server: bad input (exit 2) and unreachable models (exit 1)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "vllm"))
from llm_support import closed_port, program, records, write_spec, write_trajectory  # noqa: E402
from nvcc_mark import needs_nvcc

from cudanalyst.runner.shard import main  # noqa: E402

RUN = "shard-test"


@pytest.fixture
def trajectory(tmp_path: Path) -> Path:
    return write_trajectory(tmp_path / "traj", [program("p1"), program("p2")])


def spec_for(tmp_path: Path, trajectory: Path, planner: dict, **kw) -> Path:
    return write_spec(tmp_path / "run.yaml", name=RUN, trajectory=trajectory, output=str(tmp_path / "out"),
                      planner=planner, **kw)


def test_invalid_input_exits_2_with_the_reason(tmp_path: Path, trajectory: Path, capsys) -> None:
    spec = spec_for(tmp_path, trajectory, {"endpoint": "http://127.0.0.1:1/v1", "model": "m"})
    assert main(["--spec", str(tmp_path / "missing.yaml"), "--shard", "0", "--of", "1"]) == 2
    assert "missing.yaml" in capsys.readouterr().err
    assert main(["--spec", str(spec), "--shard", "3", "--of", "1"]) == 2
    assert "--shard 3 is out of range" in capsys.readouterr().err
    assert main(["--spec", str(spec), "--shard", "0", "--of", "2"]) == 2
    assert "spec.resources.shards" in capsys.readouterr().err
    bad = write_trajectory(tmp_path / "bad", [program("q1").model_copy(update={"task": "no-such-task"})])
    spec2 = write_spec(tmp_path / "bad.yaml", name=RUN, trajectory=bad, output=str(tmp_path / "out"),
                       planner={"endpoint": "http://127.0.0.1:1/v1", "model": "m"})
    assert main(["--spec", str(spec2), "--shard", "0", "--of", "1"]) == 2
    assert "no-such-task" in capsys.readouterr().err
    assert not (tmp_path / "out" / RUN / "candidates").exists()  # nothing half-written


def test_shard_index_comes_from_the_indexed_job(tmp_path: Path, trajectory: Path, monkeypatch) -> None:
    spec = spec_for(tmp_path, trajectory, {"endpoint": f"http://127.0.0.1:{closed_port()}/v1", "model": "m"})
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "5")
    assert main(["--spec", str(spec), "--of", "1", "--stage", "llm"]) == 2


def test_refusing_endpoint_fails_the_shard_with_reasons_and_exit_1(tmp_path: Path, trajectory: Path) -> None:
    port = closed_port()
    spec = spec_for(tmp_path, trajectory, {"endpoint": f"http://127.0.0.1:{port}/v1", "model": "m"},
                    controls=("dummyPlan",))
    proc = subprocess.run(["cudanalyst-runner", "--spec", str(spec), "--shard", "0", "--of", "1", "--stage", "llm",
                           "--retries", "2"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "unreachable" in proc.stderr
    run = tmp_path / "out" / RUN
    assert records(run, "candidates") == {}
    errors = records(run, "errors")
    # 2 programs x (4 coalitions + dummyPlan) x 1 rollout x 2 samples
    assert len(errors) == 20
    assert all("unreachable" in e["error"] for e in errors.values())
    # dummyPlan needs no planner: those units fail at the coder, the others at the planner.
    phases = {e["arm"]: e["phase"] for e in errors.values()}
    assert phases == {"coalition": "planner", "dummyPlan": "coder"}
    progress = json.loads((run / "progress" / "shard-0.json").read_text())
    assert progress["state"] == "failed" and progress["total"] == 20 and progress["done"] == 0
    assert progress["failedUnits"] == 20 and progress["failures"]


def test_missing_model_path_fails_before_any_server_starts(tmp_path: Path, trajectory: Path) -> None:
    spec = spec_for(tmp_path, trajectory, {"model": str(tmp_path / "no-model"), "serve": "local"})
    assert main(["--spec", str(spec), "--shard", "0", "--of", "1", "--stage", "llm"]) == 1
    errors = records(tmp_path / "out" / RUN, "errors")
    assert len(errors) == 16  # 2 programs x 4 coalitions x 2 samples
    assert all("does not exist" in e["error"] and e["errorKind"] == "serving" for e in errors.values())


def test_kernel_stage_without_candidates_has_nothing_to_do(tmp_path: Path, trajectory: Path) -> None:
    spec = spec_for(tmp_path, trajectory, {"endpoint": "http://127.0.0.1:1/v1", "model": "m"})
    assert main(["--spec", str(spec), "--shard", "0", "--of", "1", "--stage", "kernels"]) == 0
    # a process with only the kernel stage writes its own object, so it never overwrites the LLM stage's counts
    progress = json.loads((tmp_path / "out" / RUN / "progress" / "shard-0.kernels.json").read_text())
    assert progress["state"] == "succeeded" and progress["stages"] == ["kernels"] and progress["done"] == 0
    assert not (tmp_path / "out" / RUN / "progress" / "shard-0.json").exists()


@needs_nvcc
def test_kernel_stage_turns_the_llm_stage_candidates_into_outcomes(tmp_path: Path, trajectory: Path) -> None:
    from cudanalyst.api import load_run
    from cudanalyst.outcomes import UnitCandidate
    from cudanalyst.plan import make_plan
    from cudanalyst.runner.kernels.stage import gpu_available
    from cudanalyst.runner.units import UnitStore
    from cudanalyst.store import open_store
    from cudanalyst.tasks import get_task
    from cudanalyst.trajectory import load_trajectory

    spec = spec_for(tmp_path, trajectory, {"endpoint": "http://127.0.0.1:1/v1", "model": "m"}, samples=1)
    run = load_run(spec)
    plan = make_plan(run, load_trajectory(str(trajectory)).programs)
    store = UnitStore(open_store(str(tmp_path / "out")).child(f"{RUN}/"))
    good = get_task("gemm").baseline_source
    gpu = gpu_available()
    for i, u in enumerate(plan.units):
        store.write_candidate(UnitCandidate(
            key=u.key, run=RUN, task=u.task, generation=u.generation, program_id=u.program_id,
            coalition=list(u.coalition), arm=u.arm, rollout=u.rollout, sample=u.sample,
            code=good if i % 2 == 0 else "__global__ void wrong() {}\n"))
    assert main(["--spec", str(spec), "--shard", "0", "--of", "1", "--stage", "kernels"]) == 0
    outcomes = records(tmp_path / "out" / RUN, "outcomes")
    assert len(outcomes) == len(plan.units) == 8
    for i, u in enumerate(plan.units):
        out = outcomes[u.key]
        if i % 2:  # breaks the contract: fail, whatever the machine
            assert (out["label"], out["evaluatedUpTo"]) == ("fail", "fast")
        elif gpu:  # correct; the frozen program (SOURCE) breaks gemm's contract: timed against the baseline
            assert (out["label"], out["evaluatedUpTo"], out["reference"]) == ("pass", "fast", "baseline")
            assert "frozen program could not be timed" in out["reason"]
        else:  # a correct kernel is established as compile only; pass and fast are not evaluated
            assert (out["label"], out["evaluatedUpTo"]) == ("compile", "compile")
        assert out["programId"] == u.program_id and out["coalition"] == list(u.coalition)
    progress = json.loads((tmp_path / "out" / RUN / "progress" / "shard-0.kernels.json").read_text())
    assert progress["done"] == 8 and progress["byStage"]["kernels"]["done"] == 8 and progress["state"] == "succeeded"


@needs_nvcc
def test_one_kernel_stage_process_serves_several_shards_each_with_its_progress(tmp_path: Path,
                                                                                trajectory: Path) -> None:
    from cudanalyst.api import load_run
    from cudanalyst.outcomes import UnitCandidate
    from cudanalyst.plan import make_plan, shard_units
    from cudanalyst.runner.units import UnitStore
    from cudanalyst.store import open_store
    from cudanalyst.tasks import get_task
    from cudanalyst.trajectory import load_trajectory

    spec = spec_for(tmp_path, trajectory, {"endpoint": "http://127.0.0.1:1/v1", "model": "m"}, samples=1, shards=2)
    plan = make_plan(load_run(spec), load_trajectory(str(trajectory)).programs)
    store = UnitStore(open_store(str(tmp_path / "out")).child(f"{RUN}/"))
    shard1 = {u.key for u in shard_units(plan, 1, 2)}
    for u in plan.units:  # shard 1 has one unit without a candidate: its LLM stage is unfinished
        if u.key == min(shard1):
            continue
        store.write_candidate(UnitCandidate(
            key=u.key, run=RUN, task=u.task, generation=u.generation, program_id=u.program_id,
            coalition=list(u.coalition), arm=u.arm, rollout=u.rollout, sample=u.sample,
            code=get_task("gemm").baseline_source))
    assert main(["--spec", str(spec), "--shard", "0,1", "--of", "2", "--stage", "kernels"]) == 0
    assert set(records(tmp_path / "out" / RUN, "outcomes")) == {u.key for u in plan.units} - {min(shard1)}
    for shard in (0, 1):
        progress = json.loads((tmp_path / "out" / RUN / "progress" / f"shard-{shard}.kernels.json").read_text())
        expected = len(shard_units(plan, shard, 2)) - (1 if shard == 1 else 0)
        assert (progress["shard"], progress["of"], progress["done"]) == (shard, 2, expected)
        assert progress["total"] == len(shard_units(plan, shard, 2)) and progress["state"] == "succeeded"


class _KernelWriter:
    """A loopback stand-in for an OpenAI server whose every answer is the gemm baseline in a cuda block."""

    def __init__(self) -> None:
        import json as _json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from cudanalyst.runner.llm.serving import free_port
        from cudanalyst.tasks import get_task

        answer = "Here it is.\n```cuda\n" + get_task("gemm").baseline_source + "\n```\n"
        self.bodies: list[dict] = []  # every request as it came
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = _json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                bodies.append(body)
                n, chat = body.get("n", 1), self.path.endswith("/chat/completions")
                choices = [{"index": i, "finish_reason": "stop",
                            **({"message": {"role": "assistant", "content": answer}} if chat else {"text": answer})}
                           for i in range(n)]
                payload = _json.dumps({"id": "x", "object": "chat.completion" if chat else "text_completion",
                                       "created": 0, "model": body["model"], "choices": choices,
                                       "usage": {"prompt_tokens": 5, "completion_tokens": 9 * n,
                                                 "total_tokens": 5 + 9 * n}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@needs_nvcc
def test_the_llm_stage_writes_candidates_and_says_where_its_time_went(tmp_path: Path, trajectory: Path,
                                                                        monkeypatch, capsys) -> None:
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path / "nvcc-cache"))
    server = _KernelWriter()
    try:
        spec = spec_for(tmp_path, trajectory, {"endpoint": server.url, "model": "m"}, samples=1)
        assert main(["--spec", str(spec), "--shard", "0", "--of", "1", "--stage", "llm"]) == 0
    finally:
        server.close()
    candidates = records(tmp_path / "out" / RUN, "candidates")
    assert candidates and all(c["code"] for c in candidates.values())
    line = next(x for x in capsys.readouterr().err.splitlines() if "LLM stage:" in x)  # where the time went
    assert f"{len(candidates)} candidates in" in line and "kernels back from" in line
    assert f"{2 * 9 * len(candidates)} tokens generated" in line  # a plan and a kernel per sample here
    assert not records(tmp_path / "out" / RUN, "outcomes")  # only the kernel stage writes outcomes


@needs_nvcc
@pytest.mark.parametrize("request_seeds", [True, False])
def test_requests_carry_their_seeds_unless_the_spec_says_not(tmp_path: Path, trajectory: Path, monkeypatch,
                                                              request_seeds: bool) -> None:
    # vLLM draws a seeded row's noise alone (one launch a row): sampling.requestSeeds false sends none.
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path / "nvcc-cache"))
    server = _KernelWriter()
    try:
        spec = spec_for(tmp_path, trajectory, {"endpoint": server.url, "model": "m"}, samples=1,
                        sampling={"requestSeeds": request_seeds})
        assert main(["--spec", str(spec), "--shard", "0", "--of", "1", "--stage", "llm"]) == 0
    finally:
        server.close()
    candidates = records(tmp_path / "out" / RUN, "candidates")
    assert candidates and server.bodies
    if request_seeds:
        seeds = [b["seed"] for b in server.bodies]
        assert all(isinstance(x, int) for x in seeds) and len(set(seeds)) == len(seeds)  # one seed a request
        assert all(isinstance(c["seed"], int) for c in candidates.values())
    else:
        assert not any("seed" in b for b in server.bodies)
        assert all(c["seed"] is None for c in candidates.values())


@pytest.mark.parametrize("shard, stage, message", [
    ("0,1", "llm", "only with --stage kernels"),
    ("0,1", "all", "only with --stage kernels"),
    ("0,0", "kernels", "distinct"),
    ("0,x", "kernels", "comma-separated"),
])
def test_several_shards_are_checked(tmp_path: Path, trajectory: Path, capsys, shard: str, stage: str,
                                    message: str) -> None:
    spec = spec_for(tmp_path, trajectory, {"endpoint": "http://127.0.0.1:1/v1", "model": "m"}, shards=2)
    with pytest.raises(SystemExit) as exc:
        main(["--spec", str(spec), "--shard", shard, "--of", "2", "--stage", stage])
    assert exc.value.code == 2 and message in capsys.readouterr().err


@needs_nvcc
def test_missing_reports_are_recomputed_by_the_tools_once_and_recorded_ones_win(tmp_path: Path) -> None:
    from cudanalyst.api import load_run
    from cudanalyst.runner.shard import fill_feedback
    from cudanalyst.runner.units import UnitStore
    from cudanalyst.store import open_store
    from cudanalyst.tasks import get_task

    source = get_task("gemm").baseline_source
    traj = write_trajectory(tmp_path / "traj", [program("p1", source=source, feedback={"debugger": "recorded"}),
                                                program("p2", source=source)])
    spec = spec_for(tmp_path, traj, {"endpoint": "http://127.0.0.1:1/v1", "model": "m"},
                    players=("debugger", "analyzer", "profiler"), feedback={"mode": "raw", "modes": {"profiler": "off"}})
    run = load_run(spec)
    store = UnitStore(open_store(str(tmp_path / "out")).child(f"{RUN}/"))
    programs = [program("p1", source=source, feedback={"debugger": "recorded"}), program("p2", source=source)]
    filled = fill_feedback(run, programs, {"p1"}, store)
    p1, p2 = filled
    assert p1.feedback["debugger"] == "recorded"  # recorded reports win
    assert "registers" in p1.feedback["analyzer"]  # the analyzer's real ptxas report fills the gap
    assert "profiler" not in p1.feedback  # off: never shown, so never computed
    assert p2 is programs[1]  # not needed by this shard: untouched
    cached = json.loads((tmp_path / "out" / RUN / "feedback" / "p1.json").read_text())
    assert cached["programId"] == "p1" and set(cached["reports"]) >= {"debugger", "analyzer"}
    # Computed once: a second shard reads the stored reports instead of running the tools.
    cached["reports"]["analyzer"] = "from the store"
    (tmp_path / "out" / RUN / "feedback" / "p1.json").write_text(json.dumps(cached))
    assert fill_feedback(run, programs, {"p1"}, store)[0].feedback["analyzer"] == "from the store"


@needs_nvcc
def test_a_kernel_stage_beside_the_llm_stage_takes_candidates_as_they_come(tmp_path: Path, trajectory: Path,
                                                                            monkeypatch, capsys) -> None:
    """--follow: outcomes appear while candidates still arrive; after the marker the rest is taken in once."""
    import threading

    from cudanalyst.api import load_run
    from cudanalyst.outcomes import UnitCandidate
    from cudanalyst.plan import make_plan
    from cudanalyst.runner.units import UnitStore
    from cudanalyst.store import open_store
    from cudanalyst.tasks import get_task
    from cudanalyst.trajectory import load_trajectory

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path / "nvcc-cache"))
    monkeypatch.setattr("cudanalyst.runner.kernels.stage.gpu_available", lambda: False)  # same on any machine
    spec = spec_for(tmp_path, trajectory, {"endpoint": "http://127.0.0.1:1/v1", "model": "m"}, samples=1)
    plan = make_plan(load_run(spec), load_trajectory(str(trajectory)).programs)
    store = UnitStore(open_store(str(tmp_path / "out")).child(f"{RUN}/"))
    marker = tmp_path / "llm-stage-over"

    def candidate(u, code):
        return UnitCandidate(key=u.key, run=RUN, task=u.task, generation=u.generation, program_id=u.program_id,
                               coalition=list(u.coalition), arm=u.arm, rollout=u.rollout, sample=u.sample, code=code)

    first, later, no_code = plan.units[:3], plan.units[3:6], plan.units[6]
    # Wrong results: settled at once (compile only, or failed verification with a GPU), where a correct
    # kernel would wait for timing after the LLM stage.
    wrong = get_task("gemm").baseline_source.replace("acc +=", "acc -=")
    for u in first:
        store.write_candidate(candidate(u, wrong))
    codes: list[int] = []
    stage = threading.Thread(target=lambda: codes.append(main(
        ["--spec", str(spec), "--shard", "0", "--of", "1", "--stage", "kernels", "--follow", str(marker)])),
        daemon=True)  # a failed assertion must not leave pytest waiting for it
    stage.start()
    outcomes = tmp_path / "out" / RUN / "outcomes"
    deadline = time.monotonic() + 60
    while len(list(outcomes.glob("*.json"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(list(outcomes.glob("*.json"))) == 3 and stage.is_alive()  # outcomes before the LLM stage ends
    for u in later:
        store.write_candidate(candidate(u, wrong + "\n// another\n"))
    store.write_candidate(candidate(no_code, None))  # only the kernel stage writes outcomes: this one too
    deadline = time.monotonic() + 60
    while len(list(outcomes.glob("*.json"))) < 7 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(list(outcomes.glob("*.json"))) == 7 and stage.is_alive()  # still following the LLM stage
    marker.touch()
    stage.join(timeout=60)
    assert codes == [0]
    assert len(list(outcomes.glob("*.json"))) == 7
    no_code_outcome = json.loads((outcomes / f"{no_code.key}.json").read_text())
    assert no_code_outcome["label"] == "fail" and no_code_outcome["programId"] == no_code.program_id
    line = next(x for x in capsys.readouterr().err.splitlines() if "kernel stage:" in x)
    assert "7 of 7 candidates" in line
