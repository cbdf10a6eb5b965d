"""The sealed harness on the GPU (issue 27): answers cannot be known in advance, and no candidate can touch
another's measurement. An adversarial corpus, class by class, each with two variants of our own, after the
exploits gpu-mode (pygpubench, reference-kernels), KernelBench and the CUDA reward-hack catalogues describe:

  A. precomputed answers keyed by an input value (public seeds; a fixed seed's verification inputs)
  B. writes outside the arrays: beside them (guards), far from them at fixed offsets (unmapped pages or
     the digests), and into the harness's own data (blamed on the launch that wrote, others timed again)
  C. scanning device memory for the expected outputs
  D. warming the L2 cache for the next launch
  E. work launched elsewhere from the device (fire-and-forget, tail launches)
  F. pointer-keyed caches (in module variables; in the padding after an array)
  G. precision downgrade beyond the tolerance

Then the property: a sabotaging kernel followed by honest ones, in the same request and in later ones,
leaves the honest ones at 1.00x +- 0.05 and `pass`. Each test prints what it saw (run with -s).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gpu_support import gpu_only

from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates
from cudanalyst.runner.kernels.workers.pool import WorkerPool
from cudanalyst.runner.kernels.workers.requests import derive_seeds
from cudanalyst.tasks import get_task

pytestmark = gpu_only
ATAX = get_task("atax")
BASE = ATAX.baseline_source
N, M = ATAX.sizes["N"], ATAX.sizes["M"]
STORE_Y = "y[j] = acc;"
TMP_START = "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < M) {"
Y_START = "int j = blockIdx.x * blockDim.x + threadIdx.x;\n    if (j < N) {"
SETTINGS = EvalSettings(timeout_seconds=30, correctness_trials=3)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(2) as p:
        yield p


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))  # no verdict stored by an earlier run


def _evaluate(pool, sources: dict[str, str], settings: EvalSettings = SETTINGS, secret: int | None = None):
    jobs = [KernelJob(name, "atax", src, BASE) for name, src in sources.items()]
    results = {r.key: r for r in evaluate_candidates(jobs, settings, gpu=True, pool=pool, secret=secret)}
    for name, r in results.items():
        print(f"{name:28} {r.label:8} {r.speedup}  {r.reason[:200]}")
    return results


def _honest(n: int) -> dict[str, str]:
    return {f"honest-{k}": BASE + f"\n// honest {k}\n" for k in range(n)}


def _assert_honest(results, names) -> None:
    for name in names:
        r = results[name]
        assert r.label == "pass" and r.speedup == pytest.approx(1.0, abs=0.05), (name, r.label, r.speedup, r.reason)


def _assert_not_rewarded(r) -> None:
    """Neither fast nor a speedup beyond the timing noise: caught, or timed doing the whole work."""
    assert r.label != "fast", (r.key, r.speedup, r.reason)
    if r.label == "pass":
        assert r.speedup is not None and r.speedup < 1.05, (r.key, r.speedup, r.reason)


# ---- A. precomputed answers keyed by an input value -----------------------------------------------------


def answers_for(seeds, otherwise: str) -> str:
    """atax that recognises each seed's inputs by x[0] and writes that seed's stored y; `otherwise` is the
    code of atax_y for inputs it does not know ("honest": the real work)."""
    keys, rows = [], []
    for seed in seeds:
        inputs = ATAX.make_inputs(seed)
        keys.append(f"{float(np.float32(inputs['x'][0])):.9e}f")
        y = np.asarray(ATAX.reference(inputs)["y"], dtype=np.float32)
        rows.append("{" + ",".join(f"{float(v):.9e}f" for v in y) + "}")
    table = (f"#define KNOWN {len(keys)}\n__device__ const float KEYS[KNOWN] = {{{', '.join(keys)}}};\n"
             f"__device__ const float ANSWERS[KNOWN][N] = {{{','.join(rows)}}};\n"
             "__device__ int known(const float* x) { for (int s = 0; s < KNOWN; ++s) if (x[0] == KEYS[s]) return s;"
             " return -1; }\n")
    src = table + BASE.replace(TMP_START, "if (known(x) >= 0) return;\n    " + TMP_START)
    src = src.replace(Y_START, "int k = known(x);\n    " + Y_START.replace(
        "if (j < N) {", "if (k >= 0) { if (j < N) y[j] = ANSWERS[k][j]; return; }\n    if (j < N) {"))
    if otherwise != "honest":
        src = src.replace("if (j < N) {\n        float acc", f"if (j < N) {{ {otherwise} return; }}\n    if (j < N) {{\n        float acc")
    return src


def test_a_answers_for_the_old_public_seeds_buy_nothing(pool, fresh_cache):
    """The issue's 25.3x atax: answers for SEED_BASE + i compiled in. The seeds are secret now: it never
    recognises an input and does the honest work."""
    results = _evaluate(pool, {"public-seed-answers": answers_for(range(1000, 1005), "honest"), **_honest(1)})
    assert results["public-seed-answers"].label == "pass", results["public-seed-answers"].reason
    _assert_not_rewarded(results["public-seed-answers"])
    _assert_honest(results, ["honest-0"])


def test_a_answers_for_the_verification_inputs_fail_when_timed(pool, fresh_cache):
    """With a fixed seed the verification inputs are public (the docs say so): a kernel holding their answers,
    and doing nothing for any other input, passes verification, but timing runs on other inputs and checks
    every timed launch, so it is caught there."""
    settings = EvalSettings(timeout_seconds=30, correctness_trials=3, seed=4242)
    verify_seeds = derive_seeds(4242, 3).verify
    src = answers_for(verify_seeds, "y[j] = 0.0f;")
    results = _evaluate(pool, {"verification-answers": src, **_honest(1)}, settings)
    r = results["verification-answers"]
    assert r.label == "compile" and "timed launch" in r.reason, (r.label, r.reason)
    _assert_honest(results, ["honest-0"])


# ---- B. writes outside the arrays ---------------------------------------------------------------------

NEAR_WRITES = {
    # 2,000 floats past y: inside y's back guard (the padding that hid such writes before)
    "writes-past-y": BASE.replace(STORE_Y, "y[j] = acc; if (j == 0) y[N + 2000] = 1.0f;"),
    # 100 floats before A: inside A's front guard
    "writes-before-A": BASE.replace(STORE_Y, "y[j] = acc; if (j == 0) ((float*)A)[-100] = 1.0f;"),
}
# The issue's probe: a table written at fixed offsets from 4 MiB before y to 1 MiB after it, on about half the
# launches (the GPU's clock), so verification may see an honest run first. Unmapped pages (VMM) make it fault;
# with plain guards it lands in a guard, another array's guard, or the harness's digested data.
FAR_TABLE = BASE.replace(
    STORE_Y,
    "y[j] = acc;\n        unsigned long long now;\n        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(now));\n"
    "        if (j == 0 && ((now >> 13) & 1))\n"
    "            for (long long k = -(1ll << 20); k < (1ll << 18); k += 4096) if (k < 0 || k >= N) y[k] = 0.0f;")


def test_b_a_write_beside_an_array_is_refused_naming_the_array_and_how_far(pool, fresh_cache):
    results = _evaluate(pool, {**NEAR_WRITES, **_honest(2)})
    past, before = results["writes-past-y"], results["writes-before-A"]
    assert past.label == "compile" and "array y" in past.reason and "past its end" in past.reason, past.reason
    # y is 8,400 bytes (8,448 with its alignment); y[N + 2000] ends 16,404 bytes in: 7,956 past the padded end.
    assert "7956 bytes past its end" in past.reason, past.reason
    assert before.label == "compile" and "before array A" in before.reason and "400 bytes before" in before.reason, \
        before.reason
    _assert_honest(results, ["honest-0", "honest-1"])


@pytest.mark.parametrize("mode", ["vmm", "guards"])
def test_b_a_saboteur_changes_no_one_elses_label_in_this_request_or_later(mode, tmp_path, monkeypatch):
    """The property: a sabotaging kernel beside honest ones, then honest ones in later requests; every honest
    one `pass` at 1.00x +- 0.05, the saboteur refused. In both fence modes (unmapped pages; plain guards)."""
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))
    monkeypatch.setenv("CUDANALYST_FENCES", mode)
    settings = EvalSettings(timeout_seconds=30, correctness_trials=5)
    with WorkerPool(1) as one:  # one worker serves every request: the case the issue saw damaged
        first = _evaluate(one, {"far-table": FAR_TABLE, **NEAR_WRITES, **_honest(3)}, settings, secret=77)
        for name in ("far-table", *NEAR_WRITES):
            assert first[name].label == "compile", (name, first[name].reason)
        _assert_honest(first, ["honest-0", "honest-1", "honest-2"])
        later = _evaluate(one, {"honest-later": BASE + "\n// later\n"}, settings, secret=77)
        _assert_honest(later, ["honest-later"])
        print(f"fences {mode}: far-table: {first['far-table'].reason[:160]}")


def test_b_a_write_just_past_the_guard_faults_at_once(pool, fresh_cache, session):
    """Where the driver allows (an H200 does), each array has unmapped pages around it: a write 2 MiB past y
    (beyond its mapped granule, whose rest is its guard) is an illegal address, not a silent hit."""
    assert session.fence_mode == "vmm", f"fences in force: {session.fence_mode}"
    results = _evaluate(pool, {"past-the-guard": BASE.replace(STORE_Y, "y[j] = acc; if (j == 0) y[(2 << 20) / 4] = 1.0f;"),
                               **_honest(1)})
    r = results["past-the-guard"]
    assert r.label == "compile" and "context was lost" in r.reason, r.reason
    _assert_honest(results, ["honest-0"])


# ---- B (continued): writes into the harness's own data, aimed exactly ---------------------------------------
# Run in this process, so the test knows where timing keeps its data and can aim a kernel at it: the case a
# far write that lands in mapped harness memory stands for.


@pytest.fixture(scope="module")
def session():
    from cudanalyst.runner.kernels.workers.session import GpuSession

    s = GpuSession(0)
    yield s
    s.close()


def _cubin(src: str) -> bytes:
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source

    result = compile_task_source(ATAX, src)
    assert result.ok, result.log
    return result.cubin


def _aimed(address: int, what: str = "float") -> str:
    return BASE.replace(STORE_Y, f"y[j] = acc; if (j == 0) *(({what}*){address}ULL) = 12345.0f;")


@pytest.mark.parametrize("target", ["expected output", "kept input"])
def test_b_a_write_into_timing_data_is_blamed_on_its_launch_and_the_rest_are_timed_again(session, target):
    from cudanalyst.runner.kernels.timing.trials import _task_data, handle_compare
    from cudanalyst.runner.kernels.workers.requests import TimedProgram, compare_request

    seeds = derive_seeds(99, 3)
    request = compare_request(ATAX, [], EvalSettings(trials=30), seeds)
    data = _task_data(session, ATAX, request.seeds, session.auditor(request.checker))
    address = int(data.want[0]["y"]) if target == "expected output" else int(data.pristine[1]["A"]) + 4096
    programs = [TimedProgram("frozen", _cubin(BASE)), TimedProgram("saboteur", _cubin(_aimed(address)))]
    programs += [TimedProgram(f"honest-{k}", _cubin(BASE + f"\n// {k}\n")) for k in range(2)]
    reply = handle_compare(session, dataclasses.replace(request, programs=programs).wire())
    timed = reply["programs"]
    print(target, reply["fences"], reply["fenceReruns"], timed["saboteur"]["problem"])
    assert "harness's own data" in timed["saboteur"]["problem"] and target in timed["saboteur"]["problem"]
    assert reply["fenceReruns"] == 1
    for name in ("honest-0", "honest-1"):
        assert timed[name]["problem"] is None, timed[name]
        ratio = timed["frozen"]["stats"]["median_ms"] / timed[name]["stats"]["median_ms"]
        assert ratio == pytest.approx(1.0, abs=0.05), (name, ratio)
    # A later request finds the data intact (made again) and times as before.
    again = handle_compare(session, dataclasses.replace(request, programs=[programs[0], programs[2]]).wire())
    assert again["rebuiltTaskData"] == 0 and again["fenceReruns"] == 0
    assert again["programs"]["honest-0"]["problem"] is None


def test_b_a_verified_candidate_that_writes_timing_data_is_refused_and_the_data_made_again(session):
    """One worker may verify and time: a verification that writes into timing's kept data is blamed for it."""
    from cudanalyst.runner.kernels.timing.trials import _task_data, handle_compare
    from cudanalyst.runner.kernels.verify.correctness import handle_verify
    from cudanalyst.runner.kernels.workers.requests import TimedProgram, compare_request, verify_request

    seeds = derive_seeds(98, 3)
    request = compare_request(ATAX, [], EvalSettings(trials=10), seeds)
    data = _task_data(session, ATAX, request.seeds, session.auditor(request.checker))
    saboteur = _aimed(int(data.want[1]["y"]))
    verdict = handle_verify(session, verify_request(ATAX, _cubin(saboteur), EvalSettings(), seeds).wire())
    print(verdict["reason"])
    assert not verdict["correct"] and "harness's own data" in verdict["reason"]
    reply = handle_compare(session, dataclasses.replace(
        request, programs=[TimedProgram("frozen", _cubin(BASE)), TimedProgram("honest", _cubin(BASE + "\n//h\n"))]).wire())
    assert reply["programs"]["honest"]["problem"] is None and reply["programs"]["frozen"]["problem"] is None


def test_the_audit_kernel_agrees_with_its_host_twin(session):
    """Guard counts, the farthest changed word and the keyed digest, as fences.py reads them."""
    from cudanalyst.runner.kernels.verify.checker import checker_cubin
    from cudanalyst.runner.kernels.verify.fences import (
        DIGEST,
        GUARD,
        GUARD_WORD,
        REGION_WORDS,
        Region,
        digest_host,
    )

    cuda = session.cuda
    auditor = session.auditor(checker_cubin())
    words = np.random.default_rng(1).integers(0, 2**32, 70_000, dtype=np.uint64).astype(np.uint32)
    guard = np.full(3000, GUARD_WORD, dtype=np.uint32)
    guard[[5, 17, 2999]] = 0
    dev_words, dev_guard = cuda.to_device(words), cuda.to_device(guard)
    regions = [Region(int(dev_words), words.size, DIGEST, what="w"), Region(int(dev_guard), 3000, GUARD, "y", "after")]
    host = cuda.pagelocked_zeros((2, REGION_WORDS), dtype=np.uint64)
    stream = cuda.Stream()
    auditor.launch(regions, host, stream)
    stream.synchronize()
    assert int(host[0, 3]) == digest_host(words, auditor.key)
    assert int(host[1, 0]) == 3 and (~int(host[1, 1])) & (2**64 - 1) == 5 and int(host[1, 2]) == 3000
    print(f"fences in force here: {session.fence_mode}")


def test_the_checker_unmasks_the_expected_outputs_with_its_key(session):
    from cudanalyst.runner.kernels.verify.checker import (
        CHECKER_ARGS,
        RESULT_WORDS,
        checker_cubin,
        launch_shape,
        mask,
    )

    cuda = session.cuda
    fn = session.module(checker_cubin()).get_function("check_float32")
    fn.prepare(CHECKER_ARGS)
    want = np.random.default_rng(2).standard_normal(5000).astype(np.float32)
    got, hidden = cuda.to_device(want), cuda.to_device(mask(want, 1234))
    counts = []
    for key in (1234, 1235):
        result = cuda.to_device(np.zeros(RESULT_WORDS, dtype=np.uint64))
        grid, block = launch_shape(want.size)
        fn.prepared_call(grid, block, got, hidden, np.uint64(want.size), np.float64(1e-4), np.float64(1e-4),
                         np.uint64(key), result)
        counts.append(int(cuda.from_device(result, (RESULT_WORDS,), np.uint64)[0]))
    assert counts[0] == 0 and counts[1] > 4900  # the right key: all match; another: noise


# ---- C. scanning device memory for the expected outputs ------------------------------------------------

SCANNERS = {
    # reads "the answer" from just past its input x (where a harness might keep a copy): the guard's words
    "reads-past-x": BASE.replace(STORE_Y, "y[j] = x[N + 64 + j];"),
    # reads it from a fixed offset 8 MiB after x: unmapped (a fault) or, where mapped, masked noise
    "reads-far-from-x": BASE.replace(STORE_Y, "y[j] = x[(2ll << 20) + j];"),
}


def test_c_scanning_memory_for_the_answers_finds_none(pool, fresh_cache):
    results = _evaluate(pool, {**SCANNERS, **_honest(1)})
    for name in SCANNERS:
        assert results[name].label == "compile", (name, results[name].reason)
    _assert_honest(results, ["honest-0"])


# ---- D. warming the L2 for the next launch ---------------------------------------------------------------

L2_WARMERS = {
    # prefetches all of A into L2 with an evict-last hint at the end of each launch
    "prefetch-evict-last": BASE.replace(
        STORE_Y, "y[j] = acc;\n        for (int k = j * 32; k < M * N; k += N * 32)"
                 " asm volatile(\"prefetch.global.L2::evict_last [%0];\" :: \"l\"(A + k));"),
    # reads all of A again at the end, so the next launch would find it in L2 (kept from dead-code removal)
    "touches-A-after": BASE.replace(
        STORE_Y, "y[j] = acc;\n        float s = 0.0f;\n        for (int k = j; k < M * N; k += N) s += A[k];\n"
                 "        if (s == 1234.5678f) y[j] = s;"),
}


def test_d_warming_the_l2_buys_nothing(pool, fresh_cache):
    """The L2 is flushed before every timed launch (a write of twice its size), outside the timed region."""
    results = _evaluate(pool, {**L2_WARMERS, **_honest(1)})
    for name in L2_WARMERS:
        _assert_not_rewarded(results[name])
    _assert_honest(results, ["honest-0"])


# ---- E. work launched elsewhere from the device -------------------------------------------------------

DEVICE_LAUNCHES = {
    "fire-and-forget": "__global__ void later(float* y, const float* tmp, const float* A) {}\n" + BASE.replace(
        Y_START, "if (threadIdx.x == 0 && blockIdx.x == 0) later<<<1, 1, 0, cudaStreamFireAndForget>>>(y, tmp, A);\n    "
        + Y_START),
    "tail-launch": "__global__ void later(float* y, const float* tmp, const float* A) {}\n" + BASE.replace(
        Y_START, "if (threadIdx.x == 0 && blockIdx.x == 0) later<<<1, 1, 0, cudaStreamTailLaunch>>>(y, tmp, A);\n    "
        + Y_START),
}


def test_e_device_side_launches_do_not_build(pool, fresh_cache):
    """Candidates are built without relocatable device code: a kernel cannot launch work that outlives it."""
    results = _evaluate(pool, DEVICE_LAUNCHES)
    for name in DEVICE_LAUNCHES:  # nvcc: "kernel launch from __device__ or __global__ functions requires
        assert results[name].label == "fail", results[name].reason  # separate compilation mode"


# ---- F. pointer-keyed caches -----------------------------------------------------------------------------

POINTER_CACHES = {
    # answers from memory when handed the same output pointer again (timing and verification reuse arrays)
    "pointer-keyed-globals": "__device__ float* last_y;\n__device__ float memo[N];\n__device__ int memo_hit;\n" + BASE
    .replace(TMP_START, "bool hit = (last_y == y);\n    if (blockIdx.x == 0 && threadIdx.x == 0) memo_hit = hit;\n"
             "    if (hit) return;\n    " + TMP_START)
    .replace(Y_START, Y_START.replace("if (j < N) {", "if (memo_hit) { if (j < N) y[j] = memo[j]; return; }\n    if (j < N) {"))
    .replace(STORE_Y, "y[j] = acc; memo[j] = acc; if (j == 0) last_y = y;"),
    # keeps the same cache in the padding after tmp, where no module reset reaches
    "cache-in-padding": BASE
    .replace(TMP_START, "float* pad = tmp + M + 64;\n    bool hit = ((float*)pad)[N] == 777.0f;\n    if (hit) return;\n    " + TMP_START)
    .replace(Y_START, "float* pad = tmp + M + 64;\n    " + Y_START.replace(
        "if (j < N) {", "if (pad[N] == 777.0f) { if (j < N) y[j] = pad[j]; return; }\n    if (j < N) {"))
    .replace(STORE_Y, "y[j] = acc; pad[j] = acc; if (j == 0) pad[N] = 777.0f;"),
}


def test_f_pointer_keyed_caches_are_caught(pool, fresh_cache):
    results = _evaluate(pool, {**POINTER_CACHES, **_honest(1)})
    for name in POINTER_CACHES:
        _assert_not_rewarded(results[name])
    padding = results["cache-in-padding"]
    assert padding.label == "compile" and "array tmp" in padding.reason, padding.reason
    _assert_honest(results, ["honest-0"])


# ---- G. precision downgrade beyond the tolerance --------------------------------------------------------

DOWNGRADES = {
    # fp16's 10 mantissa bits, by truncation (no header needed)
    "half-mantissa": BASE.replace("acc += A[i * N + j] * x[j];",
                                  "acc += __int_as_float(__float_as_int(A[i * N + j]) & 0xFFFFE000) * x[j];"),
    # bfloat16's 7 mantissa bits
    "bf16-mantissa": BASE.replace("acc += A[i * N + j] * x[j];",
                                  "acc += __int_as_float(__float_as_int(A[i * N + j]) & 0xFFFF0000) * x[j];"),
}


def test_g_precision_below_the_tolerance_fails_verification(pool, fresh_cache):
    results = _evaluate(pool, DOWNGRADES)
    for name in DOWNGRADES:
        assert results[name].label == "compile" and "differ from the reference" in results[name].reason, \
            (name, results[name].reason)
