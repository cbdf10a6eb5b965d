"""The recording's evaluator on the GPU (issue 14): what OpenEvolve selects by and the three reports it puts into
the next prompt, from a real compile, verification, timing and Nsight Compute (or event timings where the GPU
refuses counters). The compile-only evaluation without a GPU is tests/test_record.py's."""

from __future__ import annotations

import re

import pytest
from gpu_support import gpu_only

from cudanalyst.tasks import get_task

pytestmark = gpu_only
evaluator = pytest.importorskip("cudanalyst.runner.record.evaluator", reason="needs openevolve (the record extra)")
SETTINGS = {"correctness_trials": 2, "trials": 10}


def test_the_baseline_is_correct_timed_against_itself_and_profiled() -> None:
    res = evaluator.evaluate_source(get_task("gemm").baseline_source, "gemm", SETTINGS, gpu=True)
    m = res.metrics
    assert (m["compiled"], m["contract"], m["gpu_evaluated"], m["correct"]) == (1.0, 1.0, 1.0, 1.0), m
    assert 0.5 < m["speedup"] < 2.0, m  # the baseline timed against itself, interleaved
    assert evaluator.CORRECT < m["combined_score"] < 1.0, m
    assert set(res.artifacts) == {"debugger", "analyzer", "profiler"}
    profiler = res.artifacts["profiler"]
    assert "Event timings (CUDA events" in profiler and "the baseline's speed" in profiler, profiler
    # Nsight Compute's sections, or why there are none (profiler.ncu_failure). Never silently absent.
    assert "Section:" in profiler or "Nsight Compute could not run here (counters-denied)" in profiler, profiler
    assert "registers/thread" in res.artifacts["analyzer"]


def test_a_program_that_builds_but_computes_nothing_scores_built_only() -> None:
    source = get_task("gemm").baseline_source
    # Every kernel returns at once: it compiles and keeps the contract, and leaves the output unwritten.
    broken = re.sub(r"(__global__[^{]*\{)", r"\1 return;", source, count=0)
    assert broken != source
    res = evaluator.evaluate_source(broken, "gemm", SETTINGS, gpu=True)
    m = res.metrics
    assert (m["compiled"], m["contract"], m["correct"]) == (1.0, 1.0, 0.0), m
    assert m["combined_score"] == evaluator.BUILT, m
    assert "Status: compiled" in res.artifacts["debugger"]
