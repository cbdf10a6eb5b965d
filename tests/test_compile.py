"""Compiling with the real nvcc (from the CUDA toolkit or the PyPI wheels): baselines, diagnostics,
ptxas resources, the cache and the pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudanalyst.runner.kernels.compile.nvcc import (
    CompileCache,
    CompileOptions,
    CompilePool,
    CompileResult,
    compile_source,
    compile_task_source,
    task_translation_unit,
)
from cudanalyst.runner.kernels.compile.ptxas_report import parse_diagnostics, parse_ptxas
from cudanalyst.runner.kernels.compile.toolchain import ToolchainNotFoundError, find_toolchain
from cudanalyst.runner.kernels.feedback.debugger import compile_report
from cudanalyst.tasks import all_tasks, get_task

try:
    find_toolchain()
except ToolchainNotFoundError as exc:  # pragma: no cover - CI installs the wheels
    pytest.skip(f"no nvcc: {exc}", allow_module_level=True)


@pytest.fixture(scope="module")
def baselines() -> dict[str, CompileResult]:
    tasks = all_tasks()
    with CompilePool(workers=2) as pool:
        results = pool.map([task_translation_unit(t, t.baseline_source) for t in tasks])
    return {t.name: r for t, r in zip(tasks, results, strict=True)}


@pytest.mark.parametrize("name", [t.name for t in all_tasks()])
def test_every_baseline_compiles_and_reports_resources(
    baselines: dict[str, CompileResult], name: str
) -> None:
    task, result = get_task(name), baselines[name]
    assert result.ok, result.log
    assert result.cubin and result.cubin[:4] == b"\x7fELF"
    assert set(result.kernels) == set(task.kernel_names)
    for k in result.kernels.values():
        assert 0 < k.registers <= 255 and k.arch == "sm_90"
        assert k.spill_store_bytes == 0 and k.local_bytes == 0
    assert result.constant_bytes >= 24 * len(task.kernels)  # the LAUNCH_ arrays live in __constant__
    assert not result.errors


def test_broken_source_gives_diagnostics_with_candidate_line_numbers() -> None:
    task = get_task("gemm")
    lines = task.baseline_source.splitlines()
    acc_line = next(n for n, text in enumerate(lines) if "float acc = 0.0f;" in text) + 1  # 1-based
    use_line = next(n for n, text in enumerate(lines) if "acc += A[i * NK + k]" in text) + 1
    no_semicolon = task.baseline_source.replace("float acc = 0.0f;", "float acc = 0.0f")
    undefined = task.baseline_source.replace("A[i * NK + k]", "A[i * NK + kk]")

    # Lines count in the candidate's own source, not in the prelude + source that nvcc saw.
    result = compile_task_source(task, no_semicolon)
    assert not result.ok and result.cubin is None and not result.kernels
    assert [(d.file, d.line) for d in result.errors] == [("candidate.cu", acc_line + 1)]
    assert 'expected a ";"' in result.errors[0].message

    result = compile_task_source(task, undefined)
    assert not result.ok
    assert any(d.line == use_line and '"kk" is undefined' in d.message for d in result.errors)
    report = compile_report(undefined, task, compiled=result)
    assert (
        "FAILED to compile" in report and f"candidate.cu:{use_line}" in report and "A[i * NK + kk]" in report
    )


def test_warning_is_reported_but_compile_succeeds() -> None:
    src = get_task("gemm").baseline_source.replace("float acc = 0.0f;", "float acc = 0.0f; int unused = 3;")
    result = compile_task_source(get_task("gemm"), src)
    assert result.ok
    assert any(d.severity == "warning" and "unused" in d.message and d.line == 7 for d in result.warnings)


def test_ptxas_resource_limits_are_errors() -> None:
    src = (
        'extern "C" __global__ void k(float* y) { __shared__ float big[20000]; big[threadIdx.x] = 1;'
        " __syncthreads(); y[threadIdx.x] = big[threadIdx.x + 1]; }"
    )
    result = compile_source(src)
    assert not result.ok
    assert any(d.tool == "ptxas" and "too much shared data" in d.message for d in result.errors)


def test_spills_and_shared_memory_are_parsed_from_a_live_compile() -> None:
    src = r"""
extern "C" __global__ void heavy(float* y, const float* x, int n)
{
    __shared__ float tile[32][33];
    float a[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int j = 0; j < 256; j++) a[j] = x[(i + j * n) % n];
    tile[threadIdx.y][threadIdx.x] = a[(int)x[i] & 255];
    __syncthreads();
    y[i] = tile[threadIdx.x][threadIdx.y] + a[(i * 7) & 255];
}
"""
    result = compile_source(src, CompileOptions(extra_flags=("-maxrregcount=24",)))
    assert result.ok, result.log
    k = result.kernels["heavy"]
    assert k.shared_bytes == 32 * 33 * 4
    assert k.local_bytes >= 1024  # the indexed array lives in local memory
    assert k.barriers == 1 and k.registers <= 32


def test_parse_ptxas_on_recorded_output_old_and_new_formats() -> None:
    new = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 16 bytes cumulative stack size, 4224 bytes smem
"""
    old = """ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_80'
ptxas info    : Function properties for _Z3fooPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, 4096 bytes smem, 360 bytes cmem[0], 8 bytes cmem[2]
"""
    k = parse_ptxas(new)["k"]
    assert (k.registers, k.shared_bytes, k.local_bytes, k.spill_store_bytes, k.spill_load_bytes) == (
        40,
        4224,
        16,
        8,
        4,
    )
    f = parse_ptxas(old)["_Z3fooPf"]
    assert (f.registers, f.shared_bytes, f.cmem) == (24, 4096, {0: 360, 2: 8})


def test_parse_diagnostics_front_end_host_and_ptxas() -> None:
    text = """candidate.cu(12): error: identifier "foo" is undefined
      y[i] = foo;
             ^
candidate.cu(3): warning #177-D: variable "z" was declared but never referenced
candidate.cu:1:10: fatal error: missing.h: No such file or directory
ptxas error   : Entry function 'k' uses too much shared data (0x13880 bytes, 0xc000 max)
"""
    d = parse_diagnostics(text)
    assert [(x.tool, x.severity, x.line) for x in d] == [
        ("nvcc", "error", 12),
        ("nvcc", "warning", 3),
        ("host", "error", 1),
        ("ptxas", "error", None),
    ]
    assert d[0].excerpt.strip().startswith("y[i] = foo;") and d[1].code == "177-D" and d[2].column == 10


def test_include_outside_the_include_path_is_refused_before_nvcc() -> None:
    for bad in ('#include "/etc/passwd"\n', "#include <../../../etc/hostname>\n"):
        result = compile_source(bad)
        assert not result.ok and result.seconds == 0.0
        assert "refused" in result.errors[0].message and result.errors[0].line == 1


def test_cache_returns_the_same_result_without_compiling(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    task = get_task("atax")
    first = compile_task_source(task, task.baseline_source, cache=cache)
    again = compile_task_source(task, task.baseline_source, cache=cache)
    assert first.ok and not first.cached and again.cached
    assert again.cubin == first.cubin and again.kernels == first.kernels and again.key == first.key
    other = compile_task_source(
        task, task.baseline_source, CompileOptions(extra_flags=("-lineinfo",)), cache=cache
    )
    assert not other.cached and other.key != first.key
    # A torn entry (metadata without its cubin) is a miss, not a crash.
    next(iter((tmp_path / "cache").rglob("*.cubin"))).unlink()
    assert compile_task_source(task, task.baseline_source, cache=cache).cubin is not None


def test_failed_compiles_are_cached_too(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    first = compile_source("this is not cuda", cache=cache)
    again = compile_source("this is not cuda", cache=cache)
    assert (
        not first.ok
        and again.cached
        and [d.message for d in again.errors] == [d.message for d in first.errors]
    )


def test_pool_keeps_order_and_shares_identical_work() -> None:
    task = get_task("mvt")
    good, bad = task.baseline_source, "int broken = ;"
    with CompilePool(workers=2) as pool:
        results = pool.map([good, bad, good])
        assert [r.ok for r in results] == [False, False, False]  # without the prelude N is undefined
        results = pool.map([task_translation_unit(task, s) for s in (good, bad, good)])
    assert [r.ok for r in results] == [True, False, True]
    assert results[0].key == results[2].key


def test_compile_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sekret-value")
    from cudanalyst.runner.kernels.compile.nvcc import _scrubbed_env

    env = _scrubbed_env()
    assert "AWS_SECRET_ACCESS_KEY" not in env and "PATH" in env


def test_cuda_headers_compile_with_the_size_macros_defined() -> None:
    # The prelude defines short names (N, M, KS); the toolkit headers must still build after them.
    task = get_task("atax")
    src = (
        "#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n#include <math.h>\n" + task.baseline_source
    )
    result = compile_task_source(task, src)
    assert result.ok, result.log


def test_cuda_home_is_searched_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from cudanalyst.runner.kernels.compile import toolchain

    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert toolchain.candidates()[0][0] == tmp_path / "cuda" / "bin" / "nvcc"
