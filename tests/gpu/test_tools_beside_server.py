"""Issue 28 on the GPU: compute-sanitizer checks the kernel it was given (launched, even when the program forgot
extern "C"), and Nsight Compute collects its counters or says precisely why not, while another process holds GPU
memory as the recorder's model server does (TOOLS_SHARE_CAP of it). The CPU side is tests/test_tool_reports.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from gpu_support import gpu_only

from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
from cudanalyst.runner.kernels.feedback.profiler import ncu_report
from cudanalyst.runner.kernels.feedback.sanitizer import find_sanitizer, sanitizer_report
from cudanalyst.runner.local.record import TOOLS_SHARE_CAP
from cudanalyst.tasks import get_task
from cudanalyst.trajectory import toolruns as T

pytestmark = gpu_only

HOLDER = """
import sys, pycuda.driver as cuda
cuda.init(); ctx = cuda.Device(0).make_context()
free, total = cuda.mem_get_info()
share, keep = float(sys.argv[1]), int(sys.argv[2])
held = []
if share > 0:  # a model server at its cap
    held = [cuda.mem_alloc(1 << 30) for _ in range(int(total * share) >> 30)]
else:  # everything but `keep` bytes
    for chunk in (1 << 30, 16 << 20):
        while cuda.mem_get_info()[0] > keep + chunk:
            try:
                held.append(cuda.mem_alloc(chunk))
            except cuda.MemoryError:
                break
print(len(held), flush=True)
sys.stdin.read()
ctx.pop()
"""


@pytest.fixture
def memory_held(request: pytest.FixtureRequest) -> Iterator[int]:
    """A process holding GPU memory as a model server does (the allocations it holds), for the test's duration."""
    share, keep = request.param
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(share), str(keep)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        held = int(proc.stdout.readline() or 0)  # type: ignore[union-attr]
        yield held
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(timeout=60)


def _cubin(source: str) -> bytes:
    built = compile_task_source(get_task("gemm"), source)
    assert built.ok and built.cubin, built.errors
    return built.cubin


@pytest.mark.parametrize("memory_held", [(TOOLS_SHARE_CAP, 0)], indirect=True)
def test_the_sanitizer_launches_the_kernel_beside_a_server(memory_held: int) -> None:
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed here (the CUDA toolkit's)")
    assert memory_held > 0
    gemm = get_task("gemm")
    out = sanitizer_report(gemm, _cubin(gemm.baseline_source))
    assert out.run.status == "ok", (out.run, out.text)
    assert "its kernels launched:" in out.text and "[memcheck] no errors" in out.text, out.text
    # Without extern "C" verification refuses the program, but the tools still check the kernel it wrote.
    mangled = gemm.baseline_source.replace('extern "C" __global__', "__global__")
    checked = sanitizer_report(gemm, _cubin(mangled))
    assert checked.run.status == "ok" and "[memcheck] no errors" in checked.text, (checked.run, checked.text)
    # Every thread writes one whole C past C's end: outside C's allocation, into whatever follows it (A, when the
    # driver puts the arrays back to back, as it did on 2026-12-01: memcheck said "no errors" before --padding).
    bad = mangled.replace("C[i * NJ + j] = alpha", "C[i * NJ + j + NI * NJ] = alpha")
    assert bad != mangled
    checked = sanitizer_report(gemm, _cubin(bad))
    assert checked.run.status == "ok", (checked.run, checked.text)
    assert "Invalid __global__ write" in checked.text, checked.text


@pytest.mark.parametrize("memory_held", [(TOOLS_SHARE_CAP, 0)], indirect=True)
def test_nsight_compute_collects_counters_or_says_why_beside_a_server(memory_held: int) -> None:
    assert memory_held > 0
    gemm = get_task("gemm")
    ok, lines, run = ncu_report(gemm, _cubin(gemm.baseline_source))
    if ok:
        assert run.status == "ok" and any("Section:" in x for x in lines), lines
        assert run.passes is not None and run.passes >= 1, run  # ncu's own count, for where its seconds go
    else:  # the one acceptable reason for a correct program: the driver denies the counters (or no ncu at all)
        assert run.cause in ("counters-denied", "not-installed"), (run, lines)
        assert lines == [x for x in lines if "could not run here" in x]
    crashing = gemm.baseline_source.replace("C[i * NJ + j] = alpha", "C[i * NJ + j + (1 << 30)] = alpha")
    assert crashing != gemm.baseline_source
    ok, lines, run = ncu_report(gemm, _cubin(crashing))
    if run.cause not in ("counters-denied", "not-installed"):
        # The program's own failure is named as such, with its error: never "counters" and never out of memory.
        # (ncu stops a faulting kernel's process before it speaks; the program then runs alone, profiler.py.)
        assert ok or run.cause == "program-failed", (run, lines)
        assert ok or re.search(r"failed under it: \w+Error: ", lines[0]), (run, lines)


@pytest.mark.skipif(os.environ.get("CUDANALYST_GPU_ALONE") != "1",
                    reason="fills the GPU's memory: only where no other job shares the GPU (CUDANALYST_GPU_ALONE=1)")
@pytest.mark.parametrize("memory_held", [(0, 64 << 20)], indirect=True)
def test_a_gpu_without_memory_is_named_as_such(memory_held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDANALYST_GPU_TOOL_RETRIES", "1")
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer is not installed here (the CUDA toolkit's)")
    gemm = get_task("gemm")
    out = sanitizer_report(gemm, _cubin(gemm.baseline_source))
    assert out.run == T.ToolRun(status="failed", cause="gpu-memory", detail=out.run.detail), out
    assert out.text == T.statement(T.SANITIZER, "gpu-memory")
