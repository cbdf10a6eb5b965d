"""Verification, timing and the feedback reports on the real GPU."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_support import gpu_only

from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates, feedback_reports
from cudanalyst.tasks import get_task

pytestmark = gpu_only
GEMM = get_task("gemm")
# The baseline with the thread mapping swapped: consecutive threads walk rows, so loads are uncoalesced.
SLOW_GEMM = (GEMM.baseline_source.replace("int j = blockIdx.x * blockDim.x + threadIdx.x;", "int i = blockIdx.x * blockDim.x + threadIdx.x;", 1)
             .replace("int i = blockIdx.y * blockDim.y + threadIdx.y;", "int j = blockIdx.y * blockDim.y + threadIdx.y;", 1)
             .replace("{(NJ + 15) / 16, (NI + 15) / 16, 1, 16, 16, 1}", "{(NI + 15) / 16, (NJ + 15) / 16, 1, 16, 16, 1}"))


def test_faster_candidate_is_fast_and_timings_are_tight():
    jobs = [KernelJob("fast", "gemm", GEMM.baseline_source, SLOW_GEMM),
            KernelJob("same", "gemm", SLOW_GEMM + "\n// same\n", SLOW_GEMM)]
    fast, same = evaluate_candidates(jobs, EvalSettings(), gpu=True)
    assert fast.label == "fast", fast.reason
    assert fast.speedup > 1.12 and fast.evaluated_up_to == "fast"
    assert fast.speedup_vs_baseline == pytest.approx(1.0, rel=0.05) and fast.reference == "frozen"
    assert "median of 30 trials" in fast.reason and "interleaved with the frozen program" in fast.reason
    assert same.label == "pass" and same.speedup == pytest.approx(1.0, rel=0.05) and same.unchanged
    # Faster than its (slow) frozen program, not than the baseline it is: fastVsFrozen, not fastVsBaseline.
    assert fast.fast_vs_baseline is False and same.fast_vs_baseline is False
    assert "against the task baseline" in fast.reason
    assert fast.gpu_seconds > 0


def test_a_correct_candidate_far_slower_than_its_references_is_left_untimed_after_its_warm_up():
    """Each thread of this gemm first spins for 200 M cycles (about 0.1 s a wave of blocks): correct, within
    verification's time limit, and hundreds of times slower than both references. The worker stops it after its
    warm-up instead of running its 30 trials, the record says `pass`, not fast against either reference, with no
    speedup; the candidate timed beside it in the same request is labelled as before."""
    crawl = GEMM.baseline_source.replace(
        "if (i < NI && j < NJ) {", "long long t0 = clock64(); while (clock64() - t0 < 200000000LL) { }\n    if (i < NI && j < NJ) {", 1)
    assert crawl != GEMM.baseline_source
    jobs = [KernelJob("crawl", "gemm", crawl, SLOW_GEMM), KernelJob("fast", "gemm", GEMM.baseline_source, SLOW_GEMM)]
    phases: dict = {}
    crawl_rec, fast = evaluate_candidates(jobs, EvalSettings(), gpu=True, phases=phases)
    assert (crawl_rec.label, crawl_rec.evaluated_up_to) == ("pass", "fast"), crawl_rec.reason
    assert crawl_rec.speedup is None and crawl_rec.fast_vs_baseline is False, crawl_rec.reason
    assert "not timed" in crawl_rec.reason and "cannot be fast" in crawl_rec.reason
    assert phases["tooSlowToTime"] == 1 and phases["timingRequests"] == 1
    assert fast.label == "fast" and fast.speedup > 1.12, fast.reason


def test_work_on_a_side_stream_is_caught():
    """A launch that leaves its kernel running on another stream: the readings after the launch stream's
    sync and after the device sync differ."""
    import pycuda.driver as cuda

    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.verify import correctness as verify
    from cudanalyst.runner.kernels.workers.worker import GpuSession

    task = get_task("atax")
    slow = task.baseline_source.replace("if (j < N) {", "long long t0 = clock64(); while (clock64() - t0 < 200000000) { }\n    if (j < N) {")
    compiled = compile_task_source(task, slow)
    session = GpuSession(0)
    try:
        module = cuda.module_from_buffer(compiled.cubin)
        honest = verify.ContractLauncher(cuda, task, module)
        side = cuda.Stream(flags=1)

        def on_side_stream(stream, buffers):
            honest(side, buffers)  # ignores the stream it was given

        ok, reason, _ = verify.verify_candidate(session, task, on_side_stream, [1], verify.tolerance_for(task))
        assert not ok and "another stream" in reason
        ok, reason, worst = verify.verify_candidate(session, task, honest, [1, 2], verify.tolerance_for(task))
        assert ok, reason
        assert np.isfinite(worst)
    finally:
        session.close()


def test_feedback_reports_of_a_frozen_program():
    atax = get_task("atax")
    reports = feedback_reports("atax", atax.baseline_source, EvalSettings(), gpu=True)
    assert set(reports) == {"debugger", "analyzer", "profiler"}
    assert "Run-time verification: correct" in reports["debugger"]
    assert "Event timings" in reports["profiler"] and "baseline" in reports["profiler"]
    # Nsight Compute either read counters or said why not, in its one plain line
    assert "Section:" in reports["profiler"] or "Nsight Compute could not" in reports["profiler"]
    # Every compiled program gets the sanitizer's checks of its launched kernels, a correct one too.
    assert "compute-sanitizer (memcheck, racecheck, initcheck, synccheck) on task atax, its kernels launched:" in \
        reports["debugger"], reports["debugger"]
    broken = atax.baseline_source.replace("y[j] = acc;", "y[j + (1 << 30)] = acc;")
    bad = feedback_reports("atax", broken, EvalSettings(timeout_seconds=20), gpu=True)
    assert "FAILED" in bad["debugger"] and "[memcheck]" in bad["debugger"]
    assert "Invalid __global__ write" in bad["debugger"]
