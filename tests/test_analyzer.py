"""The analyzer: each planted problem is flagged on its line, a clean kernel is not; occupancy maths."""

from __future__ import annotations

import pytest
from nvcc_mark import needs_nvcc

from cudanalyst.runner.kernels.compile.source_checks import run_checks
from cudanalyst.runner.kernels.feedback.analyzer import analyze, parse_launches
from cudanalyst.runner.kernels.feedback.occupancy import theoretical_occupancy
from cudanalyst.tasks import get_task

CLEAN = r"""
#define TILE 32
extern "C" __global__ void transpose(float* __restrict__ out, const float* __restrict__ in)
{
    __shared__ float tile[TILE][TILE + 1];          // padded: column reads are conflict-free
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    if (x < 1024 && y < 1024)                       // a bounds guard is not divergence worth a word
        tile[threadIdx.y][threadIdx.x] = in[y * 1024 + x];
    __syncthreads();
    int tx = blockIdx.y * TILE + threadIdx.x;
    int ty = blockIdx.x * TILE + threadIdx.y;
    if (tx < 1024 && ty < 1024)
        out[ty * 1024 + tx] = tile[threadIdx.x][threadIdx.y];
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int row = idx / 1024;                           // slow-varying: row * stride is coalesced
    if (idx < 1024 && (threadIdx.x / 32) % 2 == 0)  // warp-uniform branch
        out[row * 1024 + idx % 1024] += 0.0f;
}
"""

PLANTED = {
    "uncoalesced": (
        "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    out[i] = in[i * 1024];",
        2,
    ),
    "bank-conflict": (
        "__shared__ float t[32][32];\n    t[threadIdx.y][threadIdx.x] = in[threadIdx.x];\n"
        "    __syncthreads();\n    out[threadIdx.x] = t[threadIdx.x][threadIdx.y];",
        4,
    ),
    "divergence": ("if (threadIdx.x % 2 == 0)\n        out[threadIdx.x] = in[threadIdx.x];", 1),
}


def planted_kernel(body: str) -> str:
    return (
        'extern "C" __global__ void k(float* __restrict__ out, const float* __restrict__ in)\n{\n    '
        + body
        + "\n}\n"
    )


def test_clean_kernel_has_no_finding() -> None:
    assert run_checks(CLEAN) == []


@pytest.mark.parametrize("check", sorted(PLANTED))
def test_each_planted_problem_is_flagged_on_its_line(check: str) -> None:
    body, offset = PLANTED[check]
    findings = run_checks(planted_kernel(body))
    assert [f.check for f in findings] == [check]
    assert findings[0].line == 2 + offset  # signature on line 1, brace on 2, body from 3


def test_missing_restrict_names_the_pointers() -> None:
    src = 'extern "C" __global__ void k(float* out, const float* __restrict__ in, int n) { out[0] = in[0]; }'
    findings = run_checks(src)
    assert [f.check for f in findings] == ["restrict"]
    assert "out" in findings[0].message and "in," not in findings[0].message


def test_variables_do_not_leak_between_kernels() -> None:
    # `j` is the fast index in the first kernel and a loop counter in the second.
    src = r"""
__global__ void a(float* __restrict__ y) { int j = blockIdx.x * blockDim.x + threadIdx.x; y[j] = 0; }
__global__ void b(float* __restrict__ y, const float* __restrict__ c)
{
    int l = blockIdx.x * blockDim.x + threadIdx.x;
    for (int j = 0; j < 64; ++j) y[l] += c[j * 64 + l];
}
"""
    assert run_checks(src) == []


def test_comments_do_not_trigger_checks() -> None:
    src = planted_kernel(
        "// out[threadIdx.x * 64] = 0;  if (threadIdx.x % 2) {}\n    out[threadIdx.x] = in[threadIdx.x];"
    )
    assert run_checks(src) == []


@pytest.mark.parametrize(
    ("regs", "smem", "threads", "warps", "limiter"),
    [
        (32, 0, 256, 64, "warps"),
        (64, 0, 256, 32, "registers"),
        (40, 0, 128, 48, "registers"),  # 1280 registers per warp -> 51 warps -> 12 blocks of 4
        (32, 40000, 256, 40, "shared memory"),  # (40000 + 1024) rounded to 128 -> 5 blocks
        (16, 0, 32, 32, "blocks"),  # 32 blocks of one warp
    ],
)
def test_theoretical_occupancy_sm90(regs: int, smem: int, threads: int, warps: int, limiter: str) -> None:
    occ = theoretical_occupancy(regs, smem, threads)
    assert (occ.active_warps, occ.limiter) == (warps, limiter)


def test_occupancy_of_impossible_launches() -> None:
    assert theoretical_occupancy(32, 0, 2048).limiter.startswith("invalid launch")
    assert theoretical_occupancy(255, 0, 1024).active_blocks == 0


def test_launch_arrays_are_evaluated_with_sizes_and_source_macros() -> None:
    src = '#define BS 128\nextern "C" __constant__ int LAUNCH_k[6] = {(N + BS - 1) / BS, 1, 1, BS, 1, 1};\n'
    launch = parse_launches(src, {"N": 1000})["k"]
    assert launch.grid == (8, 1, 1) and launch.block == (128, 1, 1)
    assert isinstance(parse_launches("__constant__ int LAUNCH_k[6] = {f(), 1, 1, 1, 1, 1};")["k"], str)




@needs_nvcc
def test_report_of_a_baseline() -> None:
    task = get_task("atax")
    report = analyze(task.baseline_source, task)
    assert report.compiled
    text = report.text
    assert "atax_tmp:" in text and "registers/thread" in text and "theoretical occupancy" in text
    assert "only 8 blocks" in text  # 1900 rows / 256 threads: most of the 132 SMs idle
    assert any(f.check == "uncoalesced" and "A[i * N + j]" in f.message for f in report.findings)
    assert report.occupancy["atax_tmp"].active_warps == 64


@needs_nvcc
def test_report_flags_spills_and_bank_conflicts_from_a_real_compile() -> None:
    src = r"""
extern "C" __global__ void k(float* __restrict__ y, const float* __restrict__ x)
{
    __shared__ float t[32][32];
    float a[128];
    for (int j = 0; j < 128; j++) a[j] = x[j * 32 + threadIdx.x];
    t[threadIdx.y][threadIdx.x] = a[(int)x[threadIdx.x] & 127];
    __syncthreads();
    y[threadIdx.y * 32 + threadIdx.x] = t[threadIdx.x][threadIdx.y];
}
extern "C" __constant__ int LAUNCH_k[6] = {1, 1, 1, 32, 32, 1};
"""
    report = analyze(src)
    assert "32, 32, 1) = 1024 threads" in report.text
    assert "local (stack)/thread" in report.text
    assert [f.check for f in report.findings] == ["bank-conflict"]


@needs_nvcc
def test_report_of_a_source_that_does_not_compile_still_has_static_checks() -> None:
    report = analyze(planted_kernel("out[threadIdx.x * 64] = in[0]\n"), get_task("gemm"))
    assert not report.compiled and "Not compiled" in report.text
    assert [f.check for f in report.findings] == ["uncoalesced"]


def test_several_declarators_on_one_line_are_separate_variables() -> None:
    src = planted_kernel(
        "int ty = threadIdx.y, tx = threadIdx.x;\n"
        "    int y = blockIdx.y * 32 + ty, x = blockIdx.x * 32 + tx;\n"
        "    out[y * 1024 + x] = in[tx * 1024];"
    )
    findings = run_checks(src)
    assert [(f.check, f.line) for f in findings] == [("uncoalesced", 5)]
    assert "in[tx * 1024]" in findings[0].message
