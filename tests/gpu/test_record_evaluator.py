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


def test_under_run_tools_shown_a_withheld_report_s_gpu_tool_does_not_run(tmp_path, monkeypatch) -> None:
    # A policy that withholds the profiler from correct programs and the debugger from wrong ones: the correct
    # baseline's evaluation runs compute-sanitizer and not Nsight Compute; the wrong program's the reverse.
    import json

    from gate_support import shown_tools_only

    shown_tools_only(monkeypatch, tmp_path, {"correct": ["profiler"], "fast": ["profiler"], "wrong": ["debugger"]})
    monkeypatch.setenv(evaluator.EVALUATIONS_ENV, str(tmp_path / "log.jsonl"))
    monkeypatch.delenv(evaluator.SHARED_ENV, raising=False)
    monkeypatch.delenv(evaluator.EVALUATED_ENV, raising=False)
    source = get_task("gemm").baseline_source
    good = evaluator.evaluate_source(source, "gemm", SETTINGS, gpu=True)
    assert good.metrics["correct"] == 1.0 and set(good.artifacts) == {"debugger", "analyzer"}
    wrong = evaluator.evaluate_source(re.sub(r"(__global__[^{]*\{)", r"\1 return;", source), "gemm", SETTINGS,
                                      gpu=True)
    assert wrong.metrics["correct"] == 0.0 and set(wrong.artifacts) == {"analyzer", "profiler"}
    first, second = [json.loads(x)["tools"] for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert first["nsight-compute"]["status"] == "not-run" and first["compute-sanitizer"]["status"] != "not-run"
    assert second["compute-sanitizer"]["status"] == "not-run" and second["nsight-compute"]["status"] != "not-run"
