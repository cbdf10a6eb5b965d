"""Candidates verified during the LLM stage (precompile.py) are not verified again by the kernel stage."""

from __future__ import annotations

import time
from typing import Any

from gpu_support import gpu_only

from cudanalyst.runner.kernels.pool import WorkerPool
from cudanalyst.runner.kernels.precompile import Precompiler
from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates
from cudanalyst.tasks import get_task

pytestmark = gpu_only
GEMM = get_task("gemm")
WRONG = GEMM.baseline_source.replace("acc += A[i * NK + k] * B[k * NJ + j];", "acc += A[i * NK + k];")


def test_verdicts_from_the_llm_stage_are_used_and_only_timing_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    assert GEMM.baseline_source != WRONG
    early = Precompiler(2, verify_workers=1, settings=EvalSettings())
    try:
        early.submit("gemm", GEMM.baseline_source)
        early.submit("gemm", WRONG)
        deadline = time.monotonic() + 180
        while early.verified < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        early.close()
    assert early.verified == 2 and len(list((tmp_path / "verdicts").rglob("*.json"))) == 2

    pool = WorkerPool(1)

    def no_verification(request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        raise AssertionError("verified again although the verdict was stored")

    monkeypatch.setattr(pool, "verify", no_verification)
    try:
        good, wrong = evaluate_candidates([KernelJob("good", "gemm", GEMM.baseline_source, GEMM.baseline_source),
                                           KernelJob("wrong", "gemm", WRONG, GEMM.baseline_source)],
                                          EvalSettings(), gpu=True, pool=pool)
    finally:
        pool.close()
    assert good.label == "pass" and good.time_ms and good.gpu_seconds > 0, good.reason
    assert wrong.label == "compile" and "differ from the reference" in wrong.reason
