"""The kernel stage without a GPU: labels stop at `compile`, bad input becomes a reason, and the
pure parts of verification, timing and the worker protocol behave (real nvcc, real worker processes)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from nvcc_mark import needs_nvcc

from cudanalyst.api.spec import EvaluationSpec
from cudanalyst.runner.kernels.feedback.profiler import clean_ncu_output, ncu_failure, timing_lines
from cudanalyst.runner.kernels.feedback.sanitizer import clean_tool_output
from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates, label_for
from cudanalyst.runner.kernels.timing.trials import speedup, timing_stats
from cudanalyst.runner.kernels.verify import correctness as verify
from cudanalyst.runner.kernels.workers.pool import GpuGate
from cudanalyst.runner.kernels.workers.worker import WorkerHandle, scrubbed_environment
from cudanalyst.tasks import Tolerance, get_task

GEMM = get_task("gemm")
GEMM_LAUNCH = "{(NJ + 15) / 16, (NI + 15) / 16, 1, 16, 16, 1}"


def variant(x: int, y: int) -> str:
    """gemm's baseline with another block shape: the same work, another cubin."""
    return GEMM.baseline_source.replace(GEMM_LAUNCH, f"{{(NJ + {x - 1}) / {x}, (NI + {y - 1}) / {y}, 1, {x}, {y}, 1}}")


# ---- the no-GPU path of evaluate_candidates ------------------------------------------------------------

@needs_nvcc
def test_without_gpu_labels_stop_at_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    jobs = [
        KernelJob("good", "gemm", GEMM.baseline_source, GEMM.baseline_source),
        KernelJob("broken", "gemm", GEMM.baseline_source.replace("acc +=", "acc +== "), GEMM.baseline_source),
        KernelJob("none", "gemm", None, GEMM.baseline_source),
        KernelJob("unknown", "no-such-task", "int x;", None),
        KernelJob("signature", "gemm", GEMM.baseline_source.replace("float beta", "int beta"), None),
        KernelJob("nolaunch", "gemm", GEMM.baseline_source.replace("LAUNCH_gemm", "LAUNCH_other"), None),
    ]
    results = evaluate_candidates(jobs, EvaluationSpec(), gpu=False)
    by = {r.key: r for r in results}
    assert [r.key for r in results] == [j.key for j in jobs]  # input order kept
    # what the GPU could add is not evaluated; a fail is established for every metric
    assert all(r.evaluated_up_to == ("compile" if r.label == "compile" else "fast") for r in results)
    assert by["good"].label == "compile" and "not evaluated" in by["good"].reason and "no GPU was given" in by["good"].reason
    assert by["good"].unchanged and not by["broken"].unchanged  # the frozen program, returned as it was
    assert by["good"].resources["gemm"]["registers"] > 0
    assert by["good"].speedup is None and by["good"].time_ms is None
    assert by["broken"].label == "fail" and "candidate.cu:" in by["broken"].reason
    assert by["none"].label == "fail" and "no kernel source" in by["none"].reason
    assert by["unknown"].label == "fail" and "no-such-task" in by["unknown"].reason and "gemm" in by["unknown"].reason
    assert by["signature"].label == "fail" and "int" in by["signature"].reason
    assert by["nolaunch"].label == "fail" and "LAUNCH_gemm" in by["nolaunch"].reason


@needs_nvcc
def test_results_stream_to_the_callback_once_each_as_they_are_final(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    jobs = [KernelJob("none", "gemm", None, None),
            KernelJob("good", "gemm", GEMM.baseline_source, GEMM.baseline_source),
            KernelJob("broken", "gemm", GEMM.baseline_source.replace("acc +=", "acc +== "), None)]
    seen: list[str] = []
    results = evaluate_candidates(jobs, EvaluationSpec(), gpu=False, on_result=lambda r: seen.append(r.key))
    assert sorted(seen) == sorted(j.key for j in jobs)  # every job reported once
    assert seen[0] == "none"  # a job that needs no compile is reported before any compile ends
    assert [r.key for r in results] == [j.key for j in jobs]


def test_settings_from_the_spec_and_from_a_dict():
    spec = EvaluationSpec(fastTolerance=0.2, correctnessTrials=3)
    cfg = EvalSettings.of(spec)
    assert cfg.fast_tolerance == 0.2 and cfg.correctness_trials == 3 and cfg.trials == 30
    assert EvalSettings.of({"timeout_seconds": 5, "unrelated": 1}).timeout_seconds == 5


def test_label_rule():
    assert label_for(False, 3.0, 0.12) == "compile"
    assert label_for(True, None, 0.12) == "pass"
    assert label_for(True, 1.12, 0.12) == "pass"  # strictly greater than 1 + tol
    assert label_for(True, 1.13, 0.12) == "fast"


# ---- pure checks of verification ---------------------------------------------------------------------

TOL = Tolerance(rtol=1e-4, atol=1e-4)


def test_compare_output_reports_unwritten_elements():
    want = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = want.copy()
    got[1, 2] = np.nan
    why = verify.compare_output("y", got, want, TOL)
    assert why is not None and "1 of 6" in why and "never written" in why and "[1, 2]" in why


def test_compare_output_shape_and_values():
    want = np.ones((2, 3), np.float32)
    assert "shape" in verify.compare_output("y", np.ones((3, 2), np.float32), want, TOL)
    bad = want.copy()
    bad[0, 1] = 1.01
    why = verify.compare_output("y", bad, want, TOL)
    assert why is not None and "[0, 1]" in why and "1.01" in why
    assert verify.compare_output("y", want + 5e-5, want, TOL) is None


def test_inputs_runs_and_late_writes():
    a = np.ones(4, np.float32)
    b = a.copy()
    b[2] = 0
    assert "input A was modified" in verify.modified_inputs({"A": a}, {"A": b})
    assert verify.modified_inputs({"A": a}, {"A": a.copy()}) is None
    assert "second run" in verify.compare_runs({"y": a}, {"y": b}, TOL)
    assert "another stream" in verify.late_writes({"y": a}, {"y": b})
    nan = np.full(3, np.nan, np.float32)
    assert verify.late_writes({"y": nan}, {"y": nan.copy()}) is None


def test_launch_config_limits():
    assert verify.check_launch_config("k", [1, 1, 1, 256, 1, 1]) is None
    assert "1024 threads" in verify.check_launch_config("k", [1, 1, 1, 64, 32, 1])
    assert ">= 1" in verify.check_launch_config("k", [0, 1, 1, 32, 1, 1])
    assert "grid" in verify.check_launch_config("k", [1, 70000, 1, 32, 1, 1])


def test_spec_tolerance_applies_to_float32_only():
    assert verify.tolerance_for(GEMM, 1e-3, 1e-3) == Tolerance(1e-3, 1e-3)


# ---- timing statistics -----------------------------------------------------------------------------------

def test_timing_stats_and_speedup():
    stats = timing_stats([1.0] * 10 + [2.0] * 10 + [1.5] * 10)
    assert stats.median_ms == 1.5 and stats.trials == 30
    assert stats.q1_ms == 1.0 and stats.q3_ms == 2.0 and stats.iqr_over_median == pytest.approx(2 / 3)
    assert timing_stats([2.0] * 30).cv == 0.0
    assert speedup(2.0, 1.0) == 2.0 and speedup(None, 1.0) is None and speedup(1.0, 0.0) is None
    with pytest.raises(ValueError):
        timing_stats([])


# ---- the worker process, without touching CUDA ---------------------------------------------------------

def test_scrubbed_environment_drops_credentials():
    env = scrubbed_environment({
        "PATH": "/usr/bin", "AWS_ACCESS_KEY_ID": "x", "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/eks/token",
        "MY_TOKEN": "t", "TOKEN_PATH": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "CUDA_VISIBLE_DEVICES": "0", "SA": "/var/run/secrets/kubernetes.io/serviceaccount",
    })
    assert env == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0"}


def test_worker_sees_no_credentials_and_survives_timeouts_and_crashes(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("CUDANALYST_KEEP_ME", "1")
    worker = WorkerHandle(name="cpu-test")
    try:
        names = worker.call({"op": "environ"}, 60)["names"]
        assert "AWS_SECRET_ACCESS_KEY" not in names and "CUDANALYST_KEEP_ME" in names
        first = worker.pid
        hung = worker.call({"op": "ping", "sleep_s": 30}, 1.0)
        assert hung["ok"] is False and hung["kind"] == "timeout" and worker.restarts == 1
        assert "no result within 1 s" in hung["error"]  # a request that announces nothing: its limit from the start
        assert worker.call({"op": "ping"}, 60)["ok"] and worker.pid != first
        os.kill(worker.pid, 9)
        time.sleep(0.2)
        again = worker.call({"op": "ping"}, 60)  # a dead worker is restarted before the next request
        assert again["ok"] and worker.restarts == 2
        assert worker.call({"op": "nonsense"}, 60)["ok"] is False
    finally:
        worker.close()
    assert not worker.alive


def test_a_time_limit_counts_from_the_candidate_s_own_runs_not_from_the_references():
    """A verification announces when its candidate's runs begin (after the task's references are ready); the
    limit counts from there. `ping`'s `ready_s` stands for making references, `sleep_s` for the runs."""
    worker = WorkerHandle(name="limits")
    try:
        slow_references = worker.call({"op": "ping", "ready_s": 1.5, "sleep_s": 0.1}, 1.0, ready_s=30)
        assert slow_references["ok"] and worker.restarts == 0  # 1.6 s in all, but only 0.1 s of its own
        began = time.monotonic()
        hung = worker.call({"op": "ping", "ready_s": 0.1, "sleep_s": 30}, 1.0, ready_s=30)
        assert hung["kind"] == "timeout" and "of its own runs" in hung["error"] and worker.restarts == 1
        assert time.monotonic() - began < 10  # killed about 1 s after its runs began
        stuck = worker.call({"op": "ping", "ready_s": 30}, 60, ready_s=1.0)
        assert stuck["kind"] == "timeout" and "references were not ready within 1 s" in stuck["error"]
        assert worker.restarts == 2
        assert worker.call({"op": "ping"}, 1.0, ready_s=30)["ok"]  # the replacement serves
    finally:
        worker.close()


def test_the_limit_s_base_is_the_baseline_s_own_runs():
    from cudanalyst.runner.kernels.limits import LIMIT_FLOOR_S, LIMIT_MULTIPLE, own_seconds, time_limit

    # The worker that verifies a task's baseline first also makes the task's float64 references (seconds on a
    # CPU for the large tasks): the harness's seconds, which must not multiply into every candidate's limit
    made_references = {"correct": True, "seconds": 6.4, "referenceSeconds": 5.6}
    assert own_seconds(made_references) == pytest.approx(0.8)
    assert time_limit(own_seconds(made_references), 60) == pytest.approx(0.8 * LIMIT_MULTIPLE)
    assert time_limit(own_seconds({"correct": True, "seconds": 0.2, "referenceSeconds": 0.1}), 60) == LIMIT_FLOOR_S
    assert own_seconds({"correct": True, "seconds": 3.0}) == 3.0  # a verdict stored before the split
    assert own_seconds({"correct": False, "seconds": 3.0, "referenceSeconds": 1.0}) is None
    assert own_seconds(None) is None and time_limit(own_seconds(None), 60) == 60


def test_side_job_workers_and_nvcc_run_at_a_lower_priority():
    from cudanalyst.runner.kernels.compile.nvcc import niced

    assert niced(["nvcc", "-c"], 0) == ["nvcc", "-c"]
    assert niced(["nvcc", "-c"], 10)[1:] == ["-n", "10", "nvcc", "-c"]
    base = os.getpriority(os.PRIO_PROCESS, 0)
    worker = WorkerHandle(name="niced", nice=7)
    try:
        assert worker.call({"op": "ping"}, 60)["ok"]
        assert os.getpriority(os.PRIO_PROCESS, worker.pid) == min(19, base + 7)
    finally:
        worker.close()


def test_gpu_gate_gives_timing_the_gpu_alone():
    gate = GpuGate()
    events: list[str] = []
    started = threading.Event()

    def reader() -> None:
        with gate.shared():
            events.append("verify-start")
            started.set()
            time.sleep(0.2)
            events.append("verify-end")

    def writer() -> None:
        started.wait()
        with gate.exclusive():
            events.append("time")

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert events == ["verify-start", "verify-end", "time"]


# ---- the tools' text, as recorded on the H200 -----------------------------------------------------------

SANITIZER_OUT = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at gemm+0x2d0 in candidate.cu:10
=========     by thread (0,0,0) in block (0,0,0)
=========         Host Frame: main in launch_once.py:44
=========
========= ERROR SUMMARY: 27329 errors
"""


def test_sanitizer_output_is_cleaned():
    lines, count = clean_tool_output(SANITIZER_OUT)
    assert count == 27329
    assert lines[0] == "Invalid __global__ write of size 4 bytes" and not any("Host Frame" in x for x in lines)


def test_profiler_text():
    assert clean_ncu_output("==PROF== Connected\n  Section: Occupancy   \n\n") == ["  Section: Occupancy"]
    stats = timing_stats([1.0] * 30).to_dict()
    base = timing_stats([2.0] * 30).to_dict()
    text = "\n".join(timing_lines(stats, base))
    assert "1.0000 ms" in text and "2.00x" in text


# ---- records, time limits and the timing schedule (pure) -----------------------------------------------

def test_a_completion_without_code_is_a_fail_record_of_its_unit(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    unit = {"key": "u1", "run": "r", "task": "gemm", "generation": 10, "program_id": "p1",
            "coalition": ["debugger"], "arm": "coalition", "rollout": 2, "sample": 3}
    [record] = evaluate_candidates([KernelJob("u1", "gemm", None, GEMM.baseline_source, unit=unit)],
                                   EvaluationSpec(), gpu=False)
    assert record.label == "fail" and record.evaluated_up_to == "fast"  # nothing a GPU shows changes it
    assert (record.program_id, record.generation, record.rollout, record.sample) == ("p1", 10, 2, 3)
    assert record.reference is None and not record.unchanged


def test_time_limit_follows_the_reference_under_the_cap():
    from cudanalyst.runner.kernels.limits import LIMIT_FLOOR_S, LIMIT_MULTIPLE, time_limit

    assert time_limit(None, 60) == 60  # nothing measured yet: the spec's cap
    assert time_limit(0.05, 60) == LIMIT_FLOOR_S  # a fast reference: the floor
    assert time_limit(2.0, 60) == 2.0 * LIMIT_MULTIPLE
    assert time_limit(10.0, 60) == 60  # never above the cap


def test_timing_schedule_interleaves_and_checks_every_trial():
    import random

    from cudanalyst.runner.kernels.timing.trials import EXTRA_WARMUP, make_schedule

    names = ["frozen", "a", "b"]
    schedules = [make_schedule(names, trials=30, warmup=3, rng=random.Random(seed)) for seed in range(40)]
    for s in schedules:
        assert all(sorted(order) == sorted(names) for order in s.rounds) and len(s.rounds) == 30
        # every timed launch: a program that skips its work at random is caught on the first skip
        assert all(s.checked[n] == frozenset(range(30)) for n in names)
        assert all(3 <= s.warmups[n] <= 3 + EXTRA_WARMUP for n in names)
    # nothing a program could count on: the order and the warm-up count vary
    assert len({tuple(s.rounds[0]) for s in schedules}) > 1
    assert len({s.warmups["a"] for s in schedules}) > 1
    assert make_schedule(["x"], trials=1, warmup=0, rng=random.Random(0)).checked["x"] == frozenset({0})
    with pytest.raises(ValueError, match="at least one trial"):
        make_schedule(names, trials=0, warmup=3, rng=random.Random(0))


def test_only_a_candidate_far_slower_than_every_reference_in_its_warm_up_is_left_untimed():
    from cudanalyst.runner.kernels.timing.trials import too_slow

    refs = ["frozen", "baseline"]
    # ms per warm-up launch; each reference's first launch (lazy module loading) is left out of its ceiling
    warm = {"frozen": [40.0, 1.0, 1.1], "baseline": [2.0, 2.0, 1.9], "near": [1.5, 1.2, 1.3],
            "slow": [30.0, 25.0, 26.0], "edge": [20.0, 20.0], "once": [500.0]}
    dropped = too_slow(warm, refs, 10.0)
    # ceiling: the baseline's 2.0 ms; 10x that is 20 ms, which "edge" does not exceed (its fastest is 20.0)
    assert set(dropped) == {"slow"}
    assert dropped["slow"] == {"warmupMs": 25.0, "referenceMs": 2.0, "factor": 10.0, "launches": 3}
    assert too_slow(warm, refs, 0.0) == {} and too_slow(warm, [], 10.0) == {}  # off, or nothing to compare with
    # A reference with a single warm-up launch gives no ceiling: every program is timed.
    assert too_slow({"frozen": [1.0], "slow": [900.0, 900.0]}, ["frozen"], 10.0) == {}
    # A slow reference is never dropped, however slow; a candidate faster than the references never is either.
    assert too_slow({"frozen": [1.0, 1.0], "baseline": [99.0, 99.0], "c": [0.1, 0.1]}, refs, 10.0) == {}


@needs_nvcc
def test_every_writable_module_variable_is_found_in_the_cubin():
    from cudanalyst.runner.kernels.compile.cubin_globals import CubinFormatError, writable_variables
    from cudanalyst.runner.kernels.compile.nvcc import compile_source

    source = """
    __device__ float cache_y[1024];
    __device__ int calls;
    __device__ int seeded = 7;
    static __device__ int hidden;
    extern "C" __constant__ int LAUNCH_k[6] = {1, 1, 1, 32, 1, 1};
    extern "C" __global__ void k(float* y) {
        static __device__ int local_count;
        local_count++; hidden++;
        y[threadIdx.x] = cache_y[threadIdx.x] + calls++ + seeded + local_count;
    }
    """
    result = compile_source(source)
    assert result.ok, result.log
    found = {v.name: v for v in writable_variables(result.cubin)}
    assert {"cache_y", "calls", "seeded", "hidden"} <= set(found)
    assert any("local_count" in name for name in found)  # a function's static, by its mangled name
    assert found["cache_y"].size == 4096 and found["seeded"].section == ".nv.global.init"
    assert "LAUNCH_k" not in found  # constant memory: kernels cannot write it
    with pytest.raises(CubinFormatError):
        writable_variables(b"not a cubin at all, nowhere near 64 bytes long enough to hold a header....")


HEAP_CALLS = {  # each keeps memory past the launch; the cubin names the call however the source spells it
    "malloc and free": ("float* p = (float*)malloc(64); if (p) { p[0] = acc; free(p); }", ["free", "malloc"]),
    "new and delete": ("float* p = new float[16]; p[0] = acc; delete[] p;", ["free", "malloc"]),
    "aligned malloc": ("void* p = __nv_aligned_device_malloc(64, 64); if (p) free(p);",
                       ["__cuda_syscall_aligned_malloc", "free"]),
}


@needs_nvcc
def test_calls_to_the_device_heap_are_found_in_the_cubin():
    from cudanalyst.runner.kernels.compile.cubin_globals import heap_calls
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source

    assert heap_calls(compile_task_source(GEMM, GEMM.baseline_source).cubin) == []
    for name, (code, calls) in HEAP_CALLS.items():
        source = GEMM.baseline_source.replace("C[i * NJ + j] = alpha", code + "\n        C[i * NJ + j] = alpha")
        result = compile_task_source(GEMM, source)
        assert result.ok, (name, result.log)
        assert set(calls) <= set(heap_calls(result.cubin)), (name, heap_calls(result.cubin))


@needs_nvcc
def test_a_kernel_that_calls_the_device_heap_is_refused_before_it_runs(tmp_path, monkeypatch):
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    base = GEMM.baseline_source
    heap = base.replace("C[i * NJ + j] = alpha", HEAP_CALLS["malloc and free"][0] + "\n        C[i * NJ + j] = alpha")
    jobs = [KernelJob("heap", "gemm", heap, base), KernelJob("honest", "gemm", base + "// copy\n", base)]
    heap_cubin = compile_task_source(GEMM, heap).cubin
    for gpu in (False, True):
        pool = _StandInPool(wrong=set(), medians={}, problems={})
        by = {r.key: r for r in evaluate_candidates(jobs, EvalSettings(), gpu=gpu, pool=pool)}
        r = by["heap"]
        assert (r.label, r.evaluated_up_to) == ("compile", "fast"), r
        assert "device heap (free, malloc)" in r.reason and "outlives a launch" in r.reason
        assert r.resources["gemm"]["registers"] > 0  # it built: the analyzer's figures stay
        assert by["honest"].label == ("pass" if gpu else "compile")
        assert heap_cubin not in pool.verified and all("heap" not in c for c in pool.compares)  # never ran


def test_copies_are_found_up_to_whitespace_and_comments():
    from cudanalyst.tasks.source_text import same_code

    base = GEMM.baseline_source
    assert same_code(base, "// returned as it was\n" + base.replace("\n", "\n\n  "))
    assert same_code("int a=b+c;", "int a = b + c; /* spaced */")
    assert not same_code("unsigned int a;", "unsignedint a;")  # spaces between words still count
    assert not same_code(base, base.replace("acc +=", "acc -="))
    assert not same_code('char* s = "//";', 'char* s = "";')  # a comment marker inside a string is code
    assert not same_code(None, base)


# ---- the stage's GPU path, with a stand-in pool (the real one runs in tests/gpu on the H200) -------------

class _StandInPool:
    """Answers like a WorkerPool: `verify` from a table of sources, `compare` with given medians. A unit-test
    double for the stage's own logic (grouping, references, labels); the GPU tests run the real pool."""

    def __init__(self, wrong: set[bytes], medians: dict[bytes, float], problems: dict[bytes, str],
                 slow: set[bytes] | None = None) -> None:
        self.workers = [object(), object()]
        self.wrong, self.medians, self.problems, self.slow = wrong, medians, problems, slow or set()
        self.requests: list = []
        self.compares: list[list[str]] = []
        self.verified: list[bytes] = []
        self.verify_seeds: list[list[int]] = []
        self.calls: list[dict] = []
        self.restarts, self.restart_seconds = 0, 0.0

    def call(self, request, timeout_s):
        self.calls.append(request)
        return {"ok": True}

    def verify(self, request, timeout_s, ready_s=None):
        self.verified.append(request.cubin)
        self.verify_seeds.append(list(request.seeds))
        correct = request.cubin not in self.wrong
        return {"ok": True, "correct": correct, "reason": "correct" if correct else "seed 1000: wrong", "seconds": 0.01}

    def compare(self, request, timeout_s):
        self.compares.append([p.name for p in request.programs])
        self.compare_seeds = list(request.seeds)
        self.requests.append(request)
        out = {}
        for p in request.programs:
            if p.cubin in self.slow and request.slow_factor > 0 and p.name not in request.references:
                why = {"warmupMs": 40.0, "referenceMs": 1.0, "factor": request.slow_factor, "launches": 4}
                out[p.name] = {"ok": True, "slow": why, "problem": None}
                continue
            median = self.medians.get(p.cubin, 1.0)
            stats = {"median_ms": median, "trials": request.trials, "iqr_over_median": 0.01}
            out[p.name] = {"ok": True, "stats": stats, "problem": self.problems.get(p.cubin)}
        return {"ok": True, "programs": out, "seconds": 0.1}


@needs_nvcc
def test_groups_are_timed_beside_their_references_with_the_right_labels(tmp_path, monkeypatch):
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    frozen_ok, frozen_bad, fast, cheat = variant(32, 8), variant(8, 32), variant(64, 4), variant(4, 64)

    def cubin(src):
        return compile_task_source(GEMM, src).cubin

    pool = _StandInPool(wrong={cubin(frozen_bad)}, medians={cubin(fast): 0.5},
                        problems={cubin(cheat): "the outputs of timed launch 7 of 30 differ from the reference"})
    jobs = [KernelJob("copy", "gemm", frozen_ok + "// copy\n", frozen_ok),
            KernelJob("fast", "gemm", fast, frozen_ok),
            KernelJob("cheat", "gemm", cheat, frozen_ok),
            KernelJob("orphan", "gemm", fast, frozen_bad)]
    phases: dict = {}
    by = {r.key: r for r in evaluate_candidates(jobs, EvalSettings(), gpu=True, pool=pool, phases=phases)}
    assert (by["copy"].label, by["copy"].speedup, by["copy"].reference, by["copy"].unchanged) == ("pass", 1.0, "frozen", True)
    assert (by["fast"].label, by["fast"].speedup, by["fast"].reference) == ("fast", 2.0, "frozen")
    assert by["fast"].speedup_vs_baseline == 2.0
    assert by["cheat"].label == "compile" and "fails verification" in by["cheat"].reason
    # the frozen program is wrong: the baseline is the reference, and the record says so
    assert (by["orphan"].label, by["orphan"].reference) == ("fast", "baseline")
    assert "task baseline" in by["orphan"].reason
    assert phases["references"] == {"frozen": 2, "baseline": 1}  # timed units per reference (cheat failed)
    # What compile and verification cost: 3 distinct candidate sources, so 3 nvcc runs ("fast" and "orphan" share
    # one). Each candidate ran in the workers (the stand-in reports 0.01 s each) or found the verdict of its cubin
    # stored ("orphan" shares "fast"'s, "copy" the frozen program's), whichever came first: never both, never neither.
    assert phases["compiles"] == 3 and phases["compileSeconds"] > 0
    assert phases.get("verifications", 0) + phases.get("verifiedBefore", 0) == 4 and phases["verifications"] >= 2
    assert phases["verifySeconds"] == pytest.approx(0.01 * phases["verifications"])
    assert phases["gpuWorkers"] == len(pool.workers)
    # one request per group, each beside its references: the correct frozen program and the baseline
    assert sorted(map(sorted, pool.compares)) == sorted([sorted(["frozen", "baseline", "copy", "fast", "cheat"]),
                                                         sorted(["baseline", "orphan"])])



@needs_nvcc
def test_candidates_with_the_same_cubin_are_timed_once_and_share_the_measurement(tmp_path, monkeypatch):
    """Sources that differ in comments, spacing or not at all build the same cubin: the same GPU work. One of them
    is timed beside the references; the others get its median, its label and a share of its GPU time, and
    their records say which unit was timed. Different cubins are still timed apart, and a shared measurement whose
    timed launches went wrong fails every unit that shares it."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    base = GEMM.baseline_source
    fast, cheat = variant(64, 4), variant(4, 64)
    pool = _StandInPool(wrong=set(), medians={compile_task_source(GEMM, fast).cubin: 0.5},
                        problems={compile_task_source(GEMM, cheat).cubin: "timed launch 3 of 30 differs"})
    jobs = [KernelJob("fast-1", "gemm", fast, base),
            KernelJob("copy-1", "gemm", base + "// returned as it was\n", base),
            KernelJob("fast-2", "gemm", "/* spaced */\n" + fast, base),
            KernelJob("cheat-1", "gemm", cheat, base),
            KernelJob("copy-2", "gemm", base, base),
            KernelJob("cheat-2", "gemm", cheat + "\n", base),
            KernelJob("fast-3", "gemm", fast, base)]
    phases: dict = {}
    by = {r.key: r for r in evaluate_candidates(jobs, EvalSettings(), gpu=True, pool=pool, phases=phases)}
    # One request (3 distinct cubins, the baseline is the frozen program): each cubin timed once.
    assert pool.compares == [["frozen", "fast-1", "copy-1", "cheat-1"]]
    assert phases["timedCopies"] == 4
    assert {k: (by[k].label, by[k].speedup) for k in ("fast-1", "fast-2", "fast-3")} == dict.fromkeys(
        ("fast-1", "fast-2", "fast-3"), ("fast", 2.0))
    assert (by["copy-2"].label, by["copy-2"].speedup, by["copy-2"].unchanged) == ("pass", 1.0, True)
    assert "the same cubin as unit fast-1" in by["fast-3"].reason and "same cubin" not in by["fast-1"].reason
    assert "the same cubin as unit copy-1" in by["copy-2"].reason
    assert all(by[k].label == "compile" and "fails verification" in by[k].reason for k in ("cheat-1", "cheat-2"))
    assert "the same cubin as unit cheat-1" in by["cheat-2"].reason
    # The request's GPU time (0.1 s over 4 programs) is split among the units that share a measurement; a unit's
    # own verification (0.01 s in the stand-in, none when its verdict was read from the store) comes on top.
    for keys in (("fast-1", "fast-2", "fast-3"), ("copy-1", "copy-2")):
        for k in keys:
            assert any(by[k].gpu_seconds == pytest.approx(0.025 / len(keys) + own) for own in (0.0, 0.01)), k


@needs_nvcc
def test_a_correct_candidate_too_slow_after_its_warm_up_is_pass_and_not_fast_without_a_speedup(tmp_path, monkeypatch):
    """The worker leaves a program untimed when its warm-up shows it far slower than every reference (too_slow):
    the stage asks for that beside the group's references, records `pass` with fast evaluated and false against
    both references, gives no speedup (a warm-up is no measurement), says why, and counts it; its copies share it.
    The other candidates of the request are timed as before."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.stage import SLOW_FACTOR

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    frozen, fast, crawl = variant(32, 8), variant(64, 4), variant(4, 64)
    pool = _StandInPool(wrong=set(), problems={}, medians={compile_task_source(GEMM, fast).cubin: 0.5},
                        slow={compile_task_source(GEMM, crawl).cubin})
    jobs = [KernelJob("fast", "gemm", fast, frozen), KernelJob("crawl", "gemm", crawl, frozen),
            KernelJob("crawl-again", "gemm", crawl + "// again\n", frozen)]
    phases: dict = {}
    by = {r.key: r for r in evaluate_candidates(jobs, EvalSettings(), gpu=True, pool=pool, phases=phases)}
    (request,) = pool.requests
    assert sorted(request.references) == ["baseline", "frozen"] and request.slow_factor == SLOW_FACTOR
    crawl_rec = by["crawl"]
    assert (crawl_rec.label, crawl_rec.evaluated_up_to, crawl_rec.speedup, crawl_rec.time_ms) == ("pass", "fast", None, None)
    assert crawl_rec.fast_vs_baseline is False and crawl_rec.reference == "frozen"
    assert "not timed" in crawl_rec.reason and "cannot be fast" in crawl_rec.reason and "40 ms" in crawl_rec.reason
    assert by["crawl-again"].label == "pass" and "warmed up once for both" in by["crawl-again"].reason
    assert phases["tooSlowToTime"] == 2 and phases["timedCopies"] == 1
    assert (by["fast"].label, by["fast"].speedup) == ("fast", 2.0)
    # Outcomes read it as not fast under both metrics, with both evaluated.
    assert crawl_rec.baseline_label() == "pass" and crawl_rec.baseline_evaluated_up_to() == "fast"


@needs_nvcc
def test_the_stage_judges_on_the_runs_secret_inputs_and_times_on_others(tmp_path, monkeypatch):
    """Every verification of a stage uses the seeds of its secret; timing uses the secret's timing seeds, none of
    them a verification seed; a worker is asked once per task to make the timing references ahead of time."""
    from cudanalyst.runner.kernels.workers.requests import derive_seeds

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    pool = _StandInPool(wrong=set(), medians={}, problems={})
    base = GEMM.baseline_source
    jobs = [KernelJob(f"c{k}", "gemm", base + f"// {k}\n", base) for k in range(3)]
    evaluate_candidates(jobs, EvalSettings(), gpu=True, pool=pool, secret=31)
    seeds = derive_seeds(31, EvalSettings().correctness_trials)
    assert pool.verify_seeds and all(s == list(seeds.verify) for s in pool.verify_seeds)
    assert pool.compare_seeds == list(seeds.timing) and not set(pool.compare_seeds) & set(seeds.verify)
    assert [(c["op"], c["task"], c["seeds"]) for c in pool.calls] == [("references", "gemm", list(seeds.timing))]


@needs_nvcc
def test_each_record_says_both_fast_faster_than_the_baseline_and_than_the_frozen_program(tmp_path, monkeypatch):
    """fastVsFrozen is the label, fastVsBaseline the record's flag: a kernel faster than the baseline but not its
    (already fast) frozen program is pass and fastVsBaseline; the reverse is fast and not fastVsBaseline."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    frozen_good, frozen_slow, cand_a, cand_b = variant(32, 8), variant(8, 32), variant(64, 4), variant(4, 64)
    cubins = {src: compile_task_source(GEMM, src).cubin for src in (frozen_good, frozen_slow, cand_a, cand_b)}
    # Medians in ms; the baseline's is 1.0 (the stand-in's default).
    pool = _StandInPool(wrong=set(), problems={}, medians={cubins[frozen_good]: 0.5, cubins[frozen_slow]: 2.0,
                                                           cubins[cand_a]: 0.8, cubins[cand_b]: 1.0})
    jobs = [KernelJob("a", "gemm", cand_a, frozen_good),  # 1.25x the baseline, 0.625x its frozen program
            KernelJob("b", "gemm", cand_b, frozen_slow),  # 1.0x the baseline, 2x its frozen program
            KernelJob("copy", "gemm", frozen_good + "// copy\n", frozen_good)]  # 2x the baseline, 1x frozen
    by = {r.key: r for r in evaluate_candidates(jobs, EvalSettings(), gpu=True, pool=pool)}
    assert (by["a"].label, by["a"].fast_vs_baseline, by["a"].speedup_vs_baseline) == ("pass", True, 1.25)
    assert (by["b"].label, by["b"].fast_vs_baseline, by["b"].speedup) == ("fast", False, 2.0)
    assert (by["copy"].label, by["copy"].fast_vs_baseline, by["copy"].unchanged) == ("pass", True, True)
    assert "1.250x against the task baseline" in by["a"].reason
    wire = by["a"].model_dump(by_alias=True, mode="json")
    assert wire["fastVsBaseline"] is True and wire["reference"] == "frozen"


def test_a_worker_dies_with_the_runner_however_the_runner_dies(tmp_path):
    """A runner killed with SIGKILL (out of memory, a closed terminal) leaves no GPU worker behind."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "runner.py"
    script.write_text(
        "import sys, time\n"
        "from cudanalyst.runner.kernels.workers.worker import WorkerHandle\n"
        "w = WorkerHandle(name='orphan-check')\n"
        "print(w.call({'op': 'ping'}, 60)['pid'], flush=True)\n"
        "time.sleep(600)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the killed runner's worker folder and log stay in tmp_path
    runner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        worker = int(runner.stdout.readline())
        os.kill(worker, 0)  # alive while the runner is
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        with pytest.raises(ProcessLookupError):
            os.kill(worker, 0)
    finally:
        runner.kill()


class _SlowVerifyPool(_StandInPool):
    """A stand-in pool whose verifications take time (longer for some cubins) and that notes, at every timing
    request, how many verifications were running."""

    def __init__(self, slow: set[bytes]) -> None:
        super().__init__(wrong=set(), medians={}, problems={})
        self.slow = slow
        self.running = 0
        self.lock = threading.Lock()
        self.running_at_compare: list[int] = []

    def verify(self, request, timeout_s, ready_s=None):
        with self.lock:
            self.running += 1
        try:
            time.sleep(1.5 if request.cubin in self.slow else 0.01)
            return super().verify(request, timeout_s)
        finally:
            with self.lock:
                self.running -= 1

    def compare(self, request, timeout_s):
        with self.lock:
            self.running_at_compare.append(self.running)
        return super().compare(request, timeout_s)


@needs_nvcc
def test_timing_waits_for_running_verifications_instead_of_queueing_behind_them(tmp_path, monkeypatch):
    """Timing needs the GPU alone: a group is timed only when no verification runs, even when it was settled
    while another group's candidates were still being verified (the convoy seen on the H200)."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.verify.checker import checker_cubin

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    frozen_a, frozen_b = variant(32, 8), variant(8, 32)
    quick, slow = variant(64, 4), variant(4, 64)
    # Compiled beforehand (the stage finds them in the cache), so the verifications start together: b1's
    # first, and group a is settled while b1 is still being verified.
    cubins = {src: compile_task_source(GEMM, src).cubin for src in (frozen_a, frozen_b, quick, slow)}
    checker_cubin()  # the timing requests' checker kernel, compiled once before the clock matters
    pool = _SlowVerifyPool(slow={cubins[slow]})
    jobs = [KernelJob("b1", "gemm", slow, frozen_b), KernelJob("a1", "gemm", quick, frozen_a),
            KernelJob("a2", "gemm", quick, frozen_a)]
    by = {r.key: r for r in evaluate_candidates(jobs, EvalSettings(), gpu=True, pool=pool)}
    assert {k: r.label for k, r in by.items()} == {"a1": "pass", "a2": "pass", "b1": "pass"}
    assert len(pool.running_at_compare) == 2  # one request per group
    assert pool.running_at_compare == [0, 0]


def test_the_profiler_report_says_why_nsight_compute_gave_no_sections() -> None:
    # The program failed under ncu (an H200 recording met this 77 times): its own error, not "counters refused".
    launch = ("==PROF== Connected to process 10057\nlaunch_once: ContractError: kernel 'gemm' is not in the module\n"
              "==ERROR== The application returned an error code (3).\n")
    cause, said = ncu_failure(3, launch)
    assert cause == "program-failed" and "ContractError: kernel 'gemm' is not in the module" in said
    assert "performance counters" not in said
    refused = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    assert ncu_failure(1, refused)[0] == "counters-denied"
    other = ncu_failure(9, "launch_once: launched gemm\n==ERROR== Something else broke\n")
    assert other[0] == "tool-error" and "Something else broke" not in other[1]  # the tool's words stay out


@needs_nvcc
def test_the_stage_says_what_its_tail_was_made_of(tmp_path, monkeypatch):
    """Issue 32: a run's tail after the LLM stage is the kernel stage's finish(): the compiles and verifications
    still running, then timing, which waits for every verification. The phases say how long finish() took, the
    longest verification that ended in it, and the verifications that ran to their time limit (a hung candidate
    among the last holds all timing back by its limit)."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.stage import KernelStage, tail_summary

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    base = GEMM.baseline_source
    early, hung, late = variant(64, 4), variant(4, 64), variant(32, 8)
    seconds = {compile_task_source(GEMM, early).cubin: 3.0, compile_task_source(GEMM, late).cubin: 0.7}
    hung_cubin = compile_task_source(GEMM, hung).cubin

    class Pool(_StandInPool):
        def verify(self, request, timeout_s, ready_s=None):
            if request.cubin == hung_cubin:  # what a worker answers for a kernel that never returned
                return {"ok": False, "kind": "timeout", "seconds": 2.5, "error": "no answer within 2.5 s"}
            return {**super().verify(request, timeout_s), "seconds": seconds.get(request.cubin, 0.01)}

    phases: dict = {}
    with KernelStage(EvalSettings(), gpu=True, pool=Pool(set(), {}, {}), phases=phases) as stage:
        stage.add([KernelJob("early", "gemm", early, base)])
        while "early" not in stage.results and "early" not in stage.verdicts:
            stage.poll(timeout=0.05)  # settled before the last jobs come in
        assert "afterLastInLongestVerify" not in phases
        stage.add([KernelJob("hung", "gemm", hung, base), KernelJob("late", "gemm", late, base)])
        results = stage.finish()
    assert results["hung"].label == "compile" and "timeout" in results["hung"].reason
    assert results["late"].label == "pass"
    assert phases["verifyTimeouts"] == 1 and phases["verifyTimeoutSeconds"] == pytest.approx(2.5)
    # Only verifications that ended after the last job came in count: the hung one's 2.5 s, not early's 3.0 s.
    assert phases["afterLastInLongestVerify"] == pytest.approx(2.5)
    assert phases["timing"] <= phases["afterLastIn"] <= time.monotonic() - stage.started
    line = tail_summary(phases)
    assert f"after the last candidate came in {phases['afterLastIn']:.1f} s" in line
    assert "the longest verification then 2.5 s" in line and "1 verifications ran to their time limit (2.5 s, " in line
    # Its verdict came after finish() began: only the part of its 2.5 s before then counts as beside the LLM stage.
    assert 0.0 <= phases["verifyTimeoutSecondsBeforeLastIn"] <= 2.5
    assert f"{phases['verifyTimeoutSecondsBeforeLastIn']:.1f} s of it while candidates still came in; limits" in line


@needs_nvcc
def test_a_hung_candidate_s_spin_while_candidates_still_come_in_is_counted_apart(tmp_path, monkeypatch):
    """Issue 32: a hung candidate spins on the GPU until its limit; while candidates still come in (a whole run's
    LLM stage) it spins beside the model server. The seconds of timeouts that ended before the last job came in count
    whole; the line says them."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.stage import KernelStage, tail_summary

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    base = GEMM.baseline_source
    hung = variant(4, 64)
    hung_cubin = compile_task_source(GEMM, hung).cubin

    class Pool(_StandInPool):
        def verify(self, request, timeout_s, ready_s=None):
            if request.cubin == hung_cubin:
                return {"ok": False, "kind": "timeout", "seconds": 4.0, "error": "no answer within 4.0 s"}
            return super().verify(request, timeout_s)

    phases: dict = {}
    with KernelStage(EvalSettings(), gpu=True, pool=Pool(set(), {}, {}), phases=phases) as stage:
        stage.add([KernelJob("hung", "gemm", hung, base)])
        while "hung" not in stage.results:
            stage.poll(timeout=0.05)  # settled before the last job comes in
        stage.add([KernelJob("late", "gemm", variant(32, 8), base)])
        results = stage.finish()
    assert "timeout" in results["hung"].reason and results["late"].label == "pass"
    assert phases["verifyTimeoutSeconds"] == phases["verifyTimeoutSecondsBeforeLastIn"] == pytest.approx(4.0)
    assert "1 verifications ran to their time limit (4.0 s, 4.0 s of it while candidates still came in" in (
        tail_summary(phases))
    # No timeout, no such clause.
    assert "while candidates" not in tail_summary({"verifyTimeouts": 0, "verifyTimeoutSecondsBeforeLastIn": 0.0})


def test_the_part_of_a_span_before_a_mark():
    from cudanalyst.runner.kernels.stage import spent_before

    assert spent_before(10.0, 100.0, None) == 10.0  # no mark yet: all of it
    assert spent_before(10.0, 100.0, 95.0) == 5.0  # began at 90, the mark at 95
    assert spent_before(10.0, 100.0, 89.0) == 0.0  # began after the mark
    assert spent_before(10.0, 100.0, 200.0) == 10.0  # the mark after its end


@needs_nvcc
def test_candidates_get_a_limit_from_the_baseline_s_own_runs_and_the_cap_for_references(tmp_path, monkeypatch):
    """Issue 32: the baseline's verification made the task's references first (4.5 of its 5 s). Its candidates'
    limit is 20 times its own 0.5 s, floored at 10 s, not the 60 s cap that 20 x 5 s would give; the references
    a candidate's worker may still have to make get the spec's cap, before the limit starts."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.limits import LIMIT_FLOOR_S
    from cudanalyst.runner.kernels.stage import KernelStage, tail_summary

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    base = GEMM.baseline_source
    base_cubin = compile_task_source(GEMM, base).cubin
    asked: list[tuple[float, float | None]] = []

    class Pool(_StandInPool):
        def verify(self, request, timeout_s, ready_s=None):
            if request.cubin == base_cubin:
                return {"ok": True, "correct": True, "reason": "correct", "seconds": 5.0, "referenceSeconds": 4.5}
            asked.append((timeout_s, ready_s))
            return super().verify(request, timeout_s)

    phases: dict = {}
    settings = EvalSettings(timeout_seconds=60)
    with KernelStage(settings, gpu=True, pool=Pool(set(), {}, {}), phases=phases) as stage:
        stage.add([KernelJob("a", "gemm", variant(32, 8), base), KernelJob("b", "gemm", variant(8, 32), base)])
        results = stage.finish()
    assert {r.label for r in results.values()} <= {"pass", "fast"}
    assert asked == [(LIMIT_FLOOR_S, 60.0)] * 2
    assert phases["verifyLimits"] == {"gemm": LIMIT_FLOOR_S}
    assert f"limits {LIMIT_FLOOR_S:.1f}-{LIMIT_FLOOR_S:.1f} s over 1 tasks" in tail_summary(phases)


def test_the_next_group_to_time_keeps_to_the_task_timed_last():
    from cudanalyst.runner.kernels.stage import next_group

    ready = [("gemm", "f1"), ("atax", "f1"), ("gemm", "f2"), ("atax", "f2")]
    assert next_group(ready, None) == ("gemm", "f1")  # nothing timed yet: arrival order
    assert next_group(ready, "atax") == ("atax", "f1")
    assert next_group(ready[1:], "gemm") == ("gemm", "f2")  # the same task before an earlier arrival of another
    assert next_group([("atax", "f2")], "gemm") == ("atax", "f2")


@needs_nvcc
def test_groups_of_one_task_are_timed_together_whatever_order_they_came_in(tmp_path, monkeypatch):
    """Issue 32: groups come ready in arrival order, which goes round the tasks; the timing worker keeps a few
    tasks' data, so they are timed task by task (each task's data loaded once, not once per request)."""
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    atax = get_task("atax")
    jobs = []
    for k in range(3):  # gemm f0, atax f0, gemm f1, atax f1, ...: three frozen programs of each task, interleaved
        for task, base in (("gemm", GEMM.baseline_source), ("atax", atax.baseline_source)):
            frozen = base + f"\n// frozen {k}\n"
            jobs.append(KernelJob(f"{task}-{k}", task, base + f"\n// candidate {k}\n", frozen))
    pool = _StandInPool(wrong=set(), medians={}, problems={})
    results = evaluate_candidates(jobs, EvalSettings(), gpu=True, pool=pool)
    assert {r.label for r in results} <= {"pass", "fast"}
    order = [r.task for r in pool.requests]
    assert len(order) == 6
    assert order in (["gemm"] * 3 + ["atax"] * 3, ["atax"] * 3 + ["gemm"] * 3), order


def test_the_first_attempt_s_setting_and_the_limit_a_verification_gets():
    """Issue 32: the brief first attempt beside the model server is off unless the environment sets it; a bad value
    names the variable; a verification started while candidates still come in gets it only when it is shorter."""
    from cudanalyst.runner.kernels.limits import FIRST_ATTEMPT_ENV, attempt_limit, first_attempt_seconds

    assert first_attempt_seconds({}) is None
    for off in ("", " ", "0", "off", "OFF"):
        assert first_attempt_seconds({FIRST_ATTEMPT_ENV: off}) is None
    assert first_attempt_seconds({FIRST_ATTEMPT_ENV: "2.5"}) == 2.5
    for bad in ("-1", "two", "nan", "inf"):
        with pytest.raises(ValueError, match=f"{FIRST_ATTEMPT_ENV}='{bad}': expected a positive number"):
            first_attempt_seconds({FIRST_ATTEMPT_ENV: bad})
    assert attempt_limit(10.0, 2.0, all_in=False) == (2.0, True)
    assert attempt_limit(10.0, 2.0, all_in=True) == (10.0, False)  # every candidate in: the server has stopped
    assert attempt_limit(1.5, 2.0, all_in=False) == (1.5, False)  # the full limit is the briefer one
    assert attempt_limit(10.0, None, all_in=False) == (10.0, False)  # off


class _NeedsSecondsPool(_StandInPool):
    """A stand-in whose candidates need given seconds of their own runs: under the limit asked they are correct,
    over it the worker answers as for a kernel that has not returned (a timeout of the limit's seconds)."""

    def __init__(self, needs: dict[bytes, float], finishing=None) -> None:
        super().__init__(set(), {}, {})
        self.needs, self.finishing = needs, finishing
        self.asked: list[tuple[bytes, float]] = []
        self.lock = threading.Lock()

    def verify(self, request, timeout_s, ready_s=None):
        need = self.needs.get(request.cubin)
        if need is None:  # a reference
            return super().verify(request, timeout_s)
        with self.lock:
            self.asked.append((request.cubin, timeout_s))
        if need > timeout_s:
            if self.finishing is not None:
                self.finishing()  # hold the answer until the stage's finish() has begun
            return {"ok": False, "kind": "timeout", "seconds": timeout_s, "error": f"no answer within {timeout_s} s"}
        return {**super().verify(request, timeout_s), "seconds": need}


@needs_nvcc
def test_a_first_attempt_that_runs_out_is_verified_again_with_the_full_limit_once_every_candidate_is_in(
        tmp_path, monkeypatch):
    """Issue 32: beside the model server a verification gets a brief first attempt. One that runs out of it is no
    verdict: once every candidate is in (the server stopped) it runs again with its full limit, so a slow but correct
    candidate still passes and a hung one is a timeout at its full limit, as without first attempts. A verification
    that starts once every candidate is in gets its full limit at once."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.limits import LIMIT_FLOOR_S
    from cudanalyst.runner.kernels.stage import KernelStage, tail_summary

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    base = GEMM.baseline_source
    quick, slow, hung, late = variant(32, 8), variant(8, 32), variant(4, 64), variant(64, 4)
    cubin = {src: compile_task_source(GEMM, src).cubin for src in (quick, slow, hung, late)}
    pool = _NeedsSecondsPool({cubin[quick]: 0.5, cubin[slow]: 4.0, cubin[hung]: 1e9, cubin[late]: 3.0})
    phases: dict = {}
    with KernelStage(EvalSettings(), gpu=True, pool=pool, phases=phases, first_attempt_s=2.0) as stage:
        stage.add([KernelJob(k, "gemm", src, base) for k, src in (("quick", quick), ("slow", slow), ("hung", hung))])
        deadline = time.monotonic() + 120
        while phases.get("verifyDeferred", 0) < 2 or "quick" not in stage.verdicts:  # every first attempt over
            assert time.monotonic() < deadline, "the first attempts never ended"
            stage.poll(timeout=0.05)
        assert "slow" not in stage.results and "hung" not in stage.results  # ran out: no verdict, no record
        stage.add([KernelJob("late", "gemm", late, base)])
        results = stage.finish()
    assert results["quick"].label in ("pass", "fast") and results["slow"].label in ("pass", "fast")
    assert results["late"].label in ("pass", "fast")
    assert results["hung"].label == "compile" and "timeout" in results["hung"].reason
    asked = {src: [t for c, t in pool.asked if c == cubin[src]] for src in (quick, slow, hung, late)}
    assert asked[quick] == [2.0]
    assert asked[slow] == asked[hung] == [2.0, LIMIT_FLOOR_S]  # the first attempt, then the full limit
    assert asked[late] == [LIMIT_FLOOR_S]  # began once every candidate was in
    assert phases["verifyDeferred"] == 2 and phases["verifyDeferredSeconds"] == pytest.approx(4.0)
    assert phases["verifyTimeouts"] == 1 and phases["verifyTimeoutSeconds"] == pytest.approx(LIMIT_FLOOR_S)
    assert phases["verifications"] == 6  # the first attempts are worker time too
    line = tail_summary(phases)
    assert "1 verifications ran to their time limit (10.0 s" in line
    assert ("2 first attempts of 2.0 s ran out while candidates still came in (4.0 s) and were verified again with "
            "their full limit") in line


@needs_nvcc
def test_a_first_attempt_that_runs_out_after_every_candidate_is_in_runs_again_at_once(tmp_path, monkeypatch):
    """Issue 32: a first attempt began while candidates still came in, and its answer came after finish() began:
    it is verified again at once with its full limit, not held for a later flush that never comes."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.limits import LIMIT_FLOOR_S
    from cudanalyst.runner.kernels.stage import KernelStage

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    base = GEMM.baseline_source
    slow = variant(8, 32)
    slow_cubin = compile_task_source(GEMM, slow).cubin
    stage_box: list = []

    def until_finishing() -> None:
        deadline = time.monotonic() + 60
        while stage_box[0]._finishing is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)

    pool = _NeedsSecondsPool({slow_cubin: 4.0}, finishing=until_finishing)
    phases: dict = {}
    with KernelStage(EvalSettings(), gpu=True, pool=pool, phases=phases, first_attempt_s=2.0) as stage:
        stage_box.append(stage)
        stage.add([KernelJob("slow", "gemm", slow, base)])
        deadline = time.monotonic() + 120
        while not pool.asked:  # its first attempt has begun, before finish()
            assert time.monotonic() < deadline, "the first attempt never began"
            stage.poll(timeout=0.05)
        results = stage.finish()
    assert results["slow"].label in ("pass", "fast")
    assert [t for _, t in pool.asked] == [2.0, LIMIT_FLOOR_S]
    assert phases["verifyDeferred"] == 1 and "verifyTimeouts" not in phases


@needs_nvcc
def test_with_first_attempts_every_job_gets_one_record_however_the_jobs_and_polls_interleave(tmp_path, monkeypatch):
    """Issue 32, at more than a handful: 40 jobs over 8 cubins (copies share a compile), two that never end and two
    slow, added in batches between polls as a whole run's LLM stage writes them. Every job ends with exactly one
    record, once; the hung copies are timeouts at the full limit and the slow ones pass; no first attempt is lost."""
    import random

    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.limits import LIMIT_FLOOR_S
    from cudanalyst.runner.kernels.stage import KernelStage

    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    base = GEMM.baseline_source
    shapes = [(32, 8), (8, 32), (4, 64), (64, 4), (128, 2), (2, 128), (32, 16), (16, 32)]
    sources = [variant(x, y) for x, y in shapes]
    cubins = [compile_task_source(GEMM, src).cubin for src in sources]
    compile_task_source(GEMM, base)  # in the cache: the limit's base comes while the first jobs are verified
    needs = dict(zip(cubins, [1e9, 1e9, 4.0, 5.0, 0.1, 0.2, 0.3, 0.4], strict=True))  # hung, hung, slow, slow, quick
    pool = _NeedsSecondsPool(needs)
    rng = random.Random(7)
    jobs = [KernelJob(f"j{i}", "gemm", sources[i % 8], base) for i in range(40)]
    rng.shuffle(jobs)
    seen: list[str] = []
    phases: dict = {}
    with KernelStage(EvalSettings(), gpu=True, pool=pool, phases=phases, first_attempt_s=2.0,
                     on_outcome=lambda r: seen.append(r.key)) as stage:
        while jobs:  # as the LLM stage writes them: a few at a time, polled between
            n = rng.randint(1, 7)
            stage.add(jobs[:n])
            jobs = jobs[n:]
            stage.poll(timeout=rng.choice([0.0, 0.05, 0.2]))
        deadline = time.monotonic() + 120
        while stage.poll(timeout=0.05):  # the first attempts settle before the last job comes in
            assert time.monotonic() < deadline
        results = stage.finish()
    assert sorted(seen) == sorted(f"j{i}" for i in range(40))  # one record each, once
    hung = {f"j{i}" for i in range(40) if i % 8 in (0, 1)}
    assert {k for k, r in results.items() if r.label == "compile"} == hung
    assert all("timeout" in results[k].reason for k in hung)
    assert all(r.label in ("pass", "fast") for k, r in results.items() if k not in hung)
    # Every hung copy's last try had the full limit; a first attempt that ran out was tried again, never left.
    by_cubin = {c: [t for cc, t in pool.asked if cc == c] for c in cubins}
    for c in cubins[:2]:
        assert by_cubin[c].count(LIMIT_FLOOR_S) == 5 and set(by_cubin[c]) <= {2.0, LIMIT_FLOOR_S}
    assert phases["verifyTimeouts"] == 10
    deferred = sum(1 for c, t in pool.asked if t == 2.0 and needs[c] > 2.0)
    assert phases["verifyDeferred"] == deferred >= 10  # every hung copy ran out of its first attempt
