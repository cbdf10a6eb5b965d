"""Kernels that try to pass without doing the work, or that break the worker: each is classified right,
and one worker pool survives all of them in one run (a correct kernel passes at the end)."""

from __future__ import annotations

import pytest
from gpu_support import gpu_only

from cudanalyst.runner.kernels.pool import WorkerPool
from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates
from cudanalyst.tasks import get_task

pytestmark = gpu_only
ATAX = get_task("atax")
BASE = ATAX.baseline_source
STORE_Y = "y[j] = acc;"

ADVERSARIES = {
    # writes nothing: y keeps the NaN the harness prefilled
    "writes-nothing": (BASE.replace(STORE_Y, ""), "never written"),
    # computes once, then returns its cached output: fails on the next seed's fresh inputs
    "cached-output": (
        "__device__ float cache_y[N];\n__device__ int calls;\n"
        + BASE.replace("tmp[i] = acc;", "tmp[i] = acc;\n        if (i == 0) calls++;")
        .replace("if (j < N) {", "if (j < N) {\n        if (calls > 1) { y[j] = cache_y[j]; return; }")
        .replace(STORE_Y, "y[j] = acc; cache_y[j] = acc;"),
        "differ from the reference",
    ),
    # edits an input (and reads it back, so the output can still be right)
    "edits-inputs": (BASE.replace("tmp[i] = acc;", "tmp[i] = acc;\n        ((float*)x)[i % N] = x[i % N] + 0.0f * acc;"
                                  " if (i == 0) ((float*)A)[0] = -1.0f;"), "input A was modified"),
    # never terminates (a volatile load keeps the loop from being optimised away)
    "never-terminates": (BASE.replace("if (j < N) {", "volatile const float* a = A;\n    while (a[0] == a[0]) { }\n    if (j < N) {"),
                         "no result within"),
    # writes far out of bounds: an illegal address poisons the context, the worker restarts
    "out-of-bounds": (BASE.replace(STORE_Y, "y[j + (1 << 30)] = acc;"), "context was lost"),
    # a 512 GiB static device array: the module cannot be loaded
    "exhausts-memory": ("__device__ float hog[1ull << 37];\n" + BASE.replace(STORE_Y, "y[j] = acc + 0.0f * hog[j];"),
                        "out of memory"),
}


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(2) as p:
        yield p


def test_every_adversary_is_caught_and_the_pool_survives(pool):
    jobs = [KernelJob(name, "atax", src, BASE) for name, (src, _) in ADVERSARIES.items()]
    jobs.append(KernelJob("honest", "atax", BASE + "\n// honest\n", BASE))
    settings = EvalSettings(timeout_seconds=20, correctness_trials=3)
    results = {r.key: r for r in evaluate_candidates(jobs, settings, gpu=True, pool=pool)}
    for name, (_, expected) in ADVERSARIES.items():
        r = results[name]
        assert r.label == "compile", (name, r.label, r.reason)
        assert expected in r.reason, (name, r.reason)
        assert r.speedup is None
    assert results["honest"].label in ("pass", "fast"), results["honest"].reason
    assert results["honest"].speedup == pytest.approx(1.0, rel=0.1)
    assert pool.restarts >= 2  # the hang and the illegal address each cost one restart
    # and the same pool still serves: a second honest run after all of it
    again = evaluate_candidates([KernelJob("after", "atax", BASE + "\n// after\n", BASE)], settings, gpu=True, pool=pool)
    assert again[0].label in ("pass", "fast"), again[0].reason


def test_no_kernel_and_wrong_signature_are_reasons_not_exceptions(pool):
    jobs = [KernelJob("none", "atax", None, BASE),
            KernelJob("sig", "atax", BASE.replace("const float* x", "const double* x"), BASE),
            KernelJob("task", "atax-typo", BASE, BASE)]
    results = evaluate_candidates(jobs, EvalSettings(), gpu=True, pool=pool)
    assert [r.label for r in results] == ["fail", "fail", "fail"]
    assert "double" in results[1].reason and "atax-typo" in results[2].reason
