"""Kernels that try to pass without doing the work, or that break the worker: each is classified right,
and one worker pool survives all of them in one run (a correct kernel passes at the end)."""

from __future__ import annotations

import pytest
from gpu_support import gpu_only

from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates
from cudanalyst.runner.kernels.workers.pool import WorkerPool
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


def test_every_adversary_is_caught_and_the_pool_survives(pool, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))  # no verdict stored by an earlier run
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
    # What a restart costs: the replacement starts in the background (Python, pycuda, a CUDA context).
    print(f"worker restarts: {pool.restarts}, {pool.restart_seconds / pool.restarts:.2f} s each to start")
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


# ---- kernels that do the work when verified and less when timed -----------------------------------------
# Each one is correct whenever verification runs it (fresh module, NaN-prefilled outputs, new inputs per
# seed) and does less, or nothing, once state survives from launch to launch. Timing must measure the
# work verification checked: each is either timed doing the whole work (about 1.0x the honest kernel, so
# `pass`) or fails verification with a reason that says what a timed launch got wrong. None is `fast`.
ATAX_Y_START = "int j = blockIdx.x * blockDim.x + threadIdx.x;\n    if (j < N) {"
ATAX_TMP_START = "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < M) {"


def y_first(code: str) -> str:
    """`code` at the start of atax_y, once its index j is known."""
    return ATAX_Y_START.replace("\n    if", f"\n    {code}\n    if")

TIMING_ADVERSARIES = {
    # Skips both kernels when the output already holds a number: what the last launch left.
    "persisting-outputs": BASE
    .replace(ATAX_TMP_START, "if (y[0] == y[0]) return;\n    " + ATAX_TMP_START)
    .replace(ATAX_Y_START, "if (y[0] == y[0] && tmp[0] != tmp[0]) return;\n    " + ATAX_Y_START),
    # Counts its launches in a module variable; past the launches verification makes, it writes zeros.
    "launch-counting": "__device__ unsigned launches;\n" + BASE
    .replace(ATAX_TMP_START, "if (launches > 12) return;\n    " + ATAX_TMP_START)
    .replace(ATAX_Y_START, y_first("if (launches > 12) { if (j < N) y[j] = 0.0f; return; }"))
    .replace(STORE_Y, "y[j] = acc; if (j == 0) atomicAdd(&launches, 1u);"),
    # Remembers its result by the input values: a repeat of the same inputs is answered from memory,
    # correct outputs included, so no check of the outputs alone can catch it.
    "remembers-results": "__device__ float memo_y[N];\n__device__ float memo_key[3];\n__device__ int memo_valid, memo_hit;\n"
    + BASE
    # atax_tmp decides once per launch (the key only changes in atax_y, which runs after it) ...
    .replace(ATAX_TMP_START, "bool hit = memo_valid && memo_key[0] == A[0] && memo_key[1] == A[M * N - 1]"
             " && memo_key[2] == x[N - 1];\n    if (blockIdx.x == 0 && threadIdx.x == 0) memo_hit = hit;\n"
             "    if (hit) return;\n    " + ATAX_TMP_START)
    # ... and atax_y answers from memory on a hit, or computes and remembers.
    .replace(ATAX_Y_START, y_first("if (memo_hit) { if (j < N) y[j] = memo_y[j]; return; }"))
    .replace(STORE_Y, "y[j] = acc; memo_y[j] = acc;\n        if (j == 0) { memo_key[0] = A[0]; memo_key[1] = A[M * N - 1];"
             " memo_key[2] = x[N - 1]; memo_valid = 1; }"),
    # Counts in a function's static variable (a mangled name in the cubin); past 12 launches it does nothing.
    "static-counter": BASE
    .replace(ATAX_Y_START, "static __device__ int calls;\n    if (calls > 12) return;\n    " + ATAX_Y_START)
    .replace(STORE_Y, "y[j] = acc; if (j == 0) atomicAdd(&calls, 1);"),
}


def test_state_kept_between_launches_buys_no_speed(pool):
    settings = EvalSettings(timeout_seconds=30)
    jobs = [KernelJob(name, "atax", src, BASE) for name, src in TIMING_ADVERSARIES.items()]
    jobs.append(KernelJob("honest", "atax", BASE + "\n// honest\n", BASE))
    results = {r.key: r for r in evaluate_candidates(jobs, settings, gpu=True, pool=pool)}
    for name, r in results.items():
        print(f"{name:20} {r.label:8} {r.speedup}  {r.reason[:160]}")
    honest = results["honest"]
    assert honest.label == "pass" and honest.speedup == pytest.approx(1.0, abs=0.1), honest.reason
    assert honest.reference == "frozen"
    for name in TIMING_ADVERSARIES:
        r = results[name]
        assert r.label != "fast", (name, r.speedup, r.reason)
        if r.label == "pass":  # timed doing the whole work
            assert r.speedup == pytest.approx(1.0, abs=0.1), (name, r.speedup, r.reason)
        else:  # or caught: it did not do in a timed launch what was verified
            assert r.label == "compile" and "timed launch" in r.reason, (name, r.label, r.reason)


def test_the_outputs_of_timed_launches_are_checked(pool):
    """A program timed without verification first (here: straight to `compare`): its timed outputs are
    compared with the reference on the GPU, and the reply says which launch and what was wrong."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.workers.requests import TimedProgram, compare_request

    programs = {"honest": BASE, "writes-nothing": ADVERSARIES["writes-nothing"][0],
                "off-by-half": BASE.replace(STORE_Y, "y[j] = 1.5f * acc;")}
    cubins = [TimedProgram(n, compile_task_source(ATAX, src).cubin) for n, src in programs.items()]
    reply = pool.compare(compare_request(ATAX, cubins, EvalSettings(trials=10)), 60)
    assert reply["ok"], reply
    timed = reply["programs"]
    assert timed["honest"]["problem"] is None and timed["honest"]["stats"]["trials"] == 10
    assert timed["honest"]["checked"] == list(range(1, 11))  # every timed launch
    assert "timed launch" in timed["writes-nothing"]["problem"] and "never written" in timed["writes-nothing"]["problem"]
    assert "of 2100 elements beyond" in timed["off-by-half"]["problem"]
    assert "never written" not in timed["off-by-half"]["problem"]


def test_a_frozen_program_that_is_wrong_gives_way_to_the_baseline(pool):
    wrong_frozen = BASE.replace(STORE_Y, "y[j] = 2.0f * acc;")
    [r] = evaluate_candidates([KernelJob("c", "atax", BASE + "\n// candidate\n", wrong_frozen)], EvalSettings(),
                              gpu=True, pool=pool)
    assert r.label == "pass" and r.reference == "baseline", r.reason
    assert r.speedup == pytest.approx(1.0, abs=0.1) and "task baseline" in r.reason


# ---- state beyond every reset, and work skipped at random ------------------------------------------------

# Remembers its results on the device heap, keyed by the input values: a table malloc'ed at the start of each
# launch and freed at its end comes back from the next launch's malloc with its contents. Neither the module
# reset nor a fresh module reaches it (the heap belongs to the context), and its outputs are right.
HEAP_MEMO = (
    "#define SLOTS 8\nstruct Memo { int used; float key[3]; float y[N]; };\n"
    "__device__ Memo* memo_table;\n__device__ int memo_hit, memo_write;\n__device__ unsigned y_blocks;\n" + BASE
    .replace(ATAX_TMP_START,
             "if (blockIdx.x == 0 && threadIdx.x == 0) {\n"
             "        Memo* t = (Memo*)malloc(SLOTS * sizeof(Memo));\n"
             "        int hit = -1, write = 0;\n"
             "        for (int s = SLOTS - 1; t && s >= 0; --s) {\n"
             "            if (t[s].used != 0x5eed) write = s;\n"
             "            else if (t[s].key[0] == A[0] && t[s].key[1] == A[M * N - 1] && t[s].key[2] == x[N - 1]) hit = s;\n"
             "        }\n"
             "        memo_table = t; memo_hit = hit; memo_write = write;\n"
             "    }\n    " + ATAX_TMP_START)
    .replace(ATAX_Y_START,
             "Memo* t = memo_table;\n    int j = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "    if (t && memo_hit >= 0) { if (j < N) y[j] = t[memo_hit].y[j]; }\n"
             "    else if (j < N) {")
    .replace(STORE_Y, "y[j] = acc; if (t) t[memo_write].y[j] = acc;")
    .replace("        y[j] = acc; if (t) t[memo_write].y[j] = acc;\n    }\n}",
             "        y[j] = acc; if (t) t[memo_write].y[j] = acc;\n    }\n"
             "    __syncthreads();\n"
             "    if (threadIdx.x == 0) {\n"
             "        __threadfence();\n"
             "        if ((atomicAdd(&y_blocks, 1u) + 1) % gridDim.x == 0 && t) {  // the launch's last block\n"
             "            if (memo_hit < 0) { Memo* m = &t[memo_write]; m->key[0] = A[0]; m->key[1] = A[M * N - 1];"
             " m->key[2] = x[N - 1]; m->used = 0x5eed; }\n"
             "            free(t);\n"
             "        }\n"
             "    }\n}")
)
# Skips its work on about half its launches, at random (the GPU's clock): no count or state to reset.
SKIPS_AT_RANDOM = BASE.replace(
    ATAX_Y_START,
    'unsigned long long now;\n    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));\n'
    "    if ((now >> 13) & 1) return;\n    " + ATAX_Y_START)


def test_a_kernel_that_keeps_results_on_the_device_heap_is_refused(pool, tmp_path, monkeypatch):
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.workers.requests import TimedProgram, compare_request

    assert "free(t);" in HEAP_MEMO and "t[memo_hit].y[j]" in HEAP_MEMO  # the replacements took
    # Timed directly (no stage): its timed outputs are right, so checking them cannot catch it ...
    cubins = [TimedProgram(n, compile_task_source(ATAX, src).cubin) for n, src in
              (("honest", BASE), ("heap-memo", HEAP_MEMO))]
    reply = pool.compare(compare_request(ATAX, cubins, EvalSettings(trials=20)), 60)
    assert reply["ok"], reply
    timed = reply["programs"]
    assert timed["heap-memo"]["problem"] is None, timed["heap-memo"]["problem"]
    ratio = timed["honest"]["stats"]["median_ms"] / timed["heap-memo"]["stats"]["median_ms"]
    print(f"heap-memo timed directly: {ratio:.2f}x the honest kernel, outputs right in every timed launch")
    # ... so the stage refuses it before it runs.
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    [r] = evaluate_candidates([KernelJob("heap-memo", "atax", HEAP_MEMO, BASE)], EvalSettings(), gpu=True, pool=pool)
    assert r.label == "compile" and "device heap (free, malloc)" in r.reason, (r.label, r.reason)
    assert r.speedup is None


def test_a_kernel_that_skips_its_work_at_random_is_caught_in_timing(pool):
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.workers.requests import TimedProgram, compare_request

    cubins = [TimedProgram(n, compile_task_source(ATAX, src).cubin) for n, src in
              (("honest", BASE), ("skips-at-random", SKIPS_AT_RANDOM))]
    reply = pool.compare(compare_request(ATAX, cubins, EvalSettings(trials=20)), 60)
    assert reply["ok"], reply
    timed = reply["programs"]
    assert timed["honest"]["problem"] is None
    # Every timed launch is checked: with half of 20 launches skipped, some checked one is.
    assert "timed launch" in timed["skips-at-random"]["problem"], timed["skips-at-random"]


def test_a_hung_kernel_s_limit_counts_from_its_own_runs_not_from_the_task_s_references():
    """mg_resid's float64 references take seconds a seed on a CPU; the worker makes them before the
    candidate runs and says so, and the time limit counts only the candidate's own runs (issue 32)."""
    import time

    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.workers.requests import verify_request

    task = get_task("mg_resid")
    hung_src = task.baseline_source.replace(
        "if (i < NX && j < NY && k < NZ) {", "volatile const float* w = u;\n    while (w[0] == w[0]) { }\n"
        "    if (i < NX && j < NY && k < NZ) {")
    assert hung_src != task.baseline_source
    honest, hung = (compile_task_source(task, src) for src in (task.baseline_source, hung_src))
    assert honest.ok and hung.ok, (honest.log, hung.log)
    cfg = EvalSettings(correctness_trials=3)
    limit = 5.0
    with WorkerPool(1) as fresh:  # its own reference folder: nothing made yet
        base = fresh.verify(verify_request(task, honest.cubin, cfg), limit, ready_s=120)
        assert base.get("correct") is True, base
        made, own = base["referenceSeconds"], base["seconds"] - base["referenceSeconds"]
        assert made > 0 and own < limit
        began = time.monotonic()
        reply = fresh.verify(verify_request(task, hung.cubin, cfg), limit, ready_s=120)  # new seeds: made again
        took = time.monotonic() - began
        assert reply["kind"] == "timeout" and "of its own runs" in reply["error"], reply
        assert limit <= took < limit + 60, took  # the limit, its references, a worker's replacement at most
    print(f"mg_resid: references {made:.2f} s, the baseline's own runs {own:.2f} s; the hung candidate "
          f"killed after {took:.2f} s (limit {limit:g} s from its own first step)")


def test_a_first_attempt_beside_the_server_changes_no_verdict():
    """Issue 32: while candidates still come in (a whole run's LLM stage), a verification gets a brief first attempt
    (kernels/limits.py). A hung candidate and a slow but correct one (each launch spins about 0.4 s) both run out
    of a 0.5 s first attempt; once every candidate is in they are verified again with their full limit: the slow
    one passes, the hung one is a timeout, as without first attempts, and one pool serves it all."""
    import time

    from cudanalyst.runner.kernels.stage import KernelStage

    hung = ADVERSARIES["never-terminates"][0]
    slow = BASE.replace("if (j < N) {", "long long t0 = clock64(); while (clock64() - t0 < 800000000LL) { }\n"
                        "    if (j < N) {")
    assert slow != BASE
    phases: dict = {}
    began = time.monotonic()
    with KernelStage(EvalSettings(correctness_trials=3), gpu=True, phases=phases, first_attempt_s=0.5) as stage:
        stage.add([KernelJob("hung", "atax", hung, BASE), KernelJob("slow", "atax", slow, BASE)])
        while phases.get("verifyDeferred", 0) < 2:  # both first attempts over, before the last candidate comes in
            assert time.monotonic() - began < 300, phases
            stage.poll(timeout=0.1)
        stage.add([KernelJob("honest", "atax", BASE + "\n// a copy\n", BASE)])
        results = stage.finish()
    assert results["slow"].label == "pass", results["slow"].reason
    assert results["honest"].label in ("pass", "fast"), results["honest"].reason
    assert results["hung"].label == "compile" and "no result within" in results["hung"].reason, results["hung"].reason
    assert phases["verifyDeferred"] == 2 and phases["verifyTimeouts"] == 1
    assert phases["verifyTimeoutSeconds"] >= phases["verifyLimits"]["atax"] > 0.5  # the full limit, not the brief one
    print(f"first attempts {phases['verifyDeferredSeconds']:.2f} s; the hung candidate's full limit "
          f"{phases['verifyLimits']['atax']:.1f} s ({phases['verifyTimeoutSeconds']:.1f} s)")
