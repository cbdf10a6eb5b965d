"""The comparison's `measure` on the GPU (issue 30): a recorded program re-verified and re-timed against the task's
baseline by the kernel stage's own verify and compare, on fresh inputs (scripts/policy_comparison.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from gpu_support import gpu_only

from cudanalyst.tasks import get_task

pytestmark = gpu_only
spec = importlib.util.spec_from_file_location(
    "policy_comparison", Path(__file__).resolve().parents[2] / "scripts" / "policy_comparison.py")
assert spec is not None and spec.loader is not None
pc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pc)


@pytest.fixture(scope="module")
def pool():  # type: ignore[no-untyped-def]
    from cudanalyst.runner.kernels.workers.pool import WorkerPool

    with WorkerPool(1) as p:
        yield p


def settings():  # type: ignore[no-untyped-def]
    from cudanalyst.runner.kernels.workers.requests import EvalSettings, fresh_secret, seeds_for

    cfg = EvalSettings.of({"correctness_trials": 2, "trials": 10})
    return cfg, seeds_for(cfg, fresh_secret())


def test_the_baseline_measures_correct_at_about_its_own_speed(pool) -> None:  # type: ignore[no-untyped-def]
    cfg, seeds = settings()
    got = pc.measure_program(get_task("gemm"), get_task("gemm").baseline_source, cfg, seeds, pool)
    assert got["compiled"] and got["correct"], got
    assert 0.5 < got["speedup"] < 2.0, got


def test_a_program_that_computes_nothing_is_not_correct_and_has_no_speedup(pool) -> None:  # type: ignore[no-untyped-def]
    cfg, seeds = settings()
    source = re.sub(r"(__global__[^{]*\{)", r"\1 return;", get_task("gemm").baseline_source)
    got = pc.measure_program(get_task("gemm"), source, cfg, seeds, pool)
    assert got == {"compiled": True, "correct": False, "speedup": None}
    assert pc.measure_program(get_task("gemm"), "not cuda", cfg, seeds, pool)["compiled"] is False
