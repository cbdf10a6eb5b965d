#!/usr/bin/env python3
"""Generate the bundled example trajectory (src/cudanalyst/data/trajectories/example/).

4 tasks (gemm, atax, jacobi-2d, conv2d) x 3 generations (0, 10, 20) x 4 programs. Sources follow
the task contracts; some carry planted problems (uncoalesced access, bank conflicts, divergence,
missing __restrict__) and a few do not compile. The debugger and analyzer reports come from the
real tools (nvcc + ptxas + the static checks). The profiler report is an estimate from a bytes/flops
model, said so in its text: no GPU at recording time (regenerate it on a GPU with the profiler).

Usage: python scripts/make_example_trajectory.py [--out DIR] [--check]
  --check: regenerate in memory and exit 1 if the bundled files differ (for CI).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from cudanalyst.runner.kernels.compile.nvcc import CompileResult, compile_task_source
from cudanalyst.runner.kernels.feedback.analyzer import AnalyzerReport, analyze
from cudanalyst.runner.kernels.feedback.debugger import compile_report
from cudanalyst.tasks import Task, get_task
from cudanalyst.tasks.conformance import contract_problems
from cudanalyst.trajectory import FrozenProgram, ProgramContext, dump_programs, manifest_for

OUT = Path(__file__).resolve().parent.parent / "src" / "cudanalyst" / "data" / "trajectories" / "example"
GENERATIONS = (0, 10, 20)
H200_BANDWIDTH = 4.8e12  # bytes/s, HBM3e
H200_FP32 = 67e12  # flop/s, fp32 without tensor cores

# ---- program sources, per task: name -> (source, what it tried) -----------------------------------

GEMM_TILED = r"""
#define TILE {T}
extern "C" __global__ void gemm(float* __restrict__ C, const float* __restrict__ A, const float* __restrict__ B,
                                float alpha, float beta)
{{
    __shared__ float As[TILE][TILE{PAD}];
    __shared__ float Bs[TILE][TILE{PAD}];
    int tx = threadIdx.x, ty = threadIdx.y;
    int j = blockIdx.x * TILE + tx;
    int i = blockIdx.y * TILE + ty;
    float acc = 0.0f;
    for (int k0 = 0; k0 < NK; k0 += TILE) {{
        As[ty][tx] = (i < NI && k0 + tx < NK) ? A[i * NK + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < NK && j < NJ) ? B[(k0 + ty) * NJ + j] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc += {AREAD} * Bs[k][tx];
        __syncthreads();
    }}
    if (i < NI && j < NJ)
        C[i * NJ + j] = alpha * acc + beta * C[i * NJ + j];
}}
extern "C" __constant__ int LAUNCH_gemm[6] = {{(NJ + TILE - 1) / TILE, (NI + TILE - 1) / TILE, 1, TILE, TILE, 1}};
"""

GEMM_SWAPPED = r"""
extern "C" __global__ void gemm(float* __restrict__ C, const float* __restrict__ A, const float* __restrict__ B,
                                float alpha, float beta)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;   // rows along x: neighbouring threads stride by NJ
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < NI && j < NJ) {
        float acc = 0.0f;
        for (int k = 0; k < NK; ++k)
            acc += A[i * NK + k] * B[k * NJ + j];
        C[i * NJ + j] = alpha * acc + beta * C[i * NJ + j];
    }
}
extern "C" __constant__ int LAUNCH_gemm[6] = {(NI + 15) / 16, (NJ + 15) / 16, 1, 16, 16, 1};
"""


def _restrict(src: str) -> str:
    return (
        src.replace("float* C,", "float* __restrict__ C,")
        .replace("float* A,", "float* __restrict__ A,")
        .replace("float* B,", "float* __restrict__ B,")
    )


def gemm_programs(base: str) -> dict[str, tuple[str, str]]:
    tiled_conflict = (
        GEMM_TILED.format(T=32, PAD="", AREAD="As[ty][k]")
        .replace("Bs[k][tx]", "Bs[tx][k]")
        .replace("Bs[ty][tx] = (k0 + ty", "Bs[tx][ty] = (k0 + ty")
    )
    return {
        "naive": (base, "one thread per C element, plain loop over k"),
        "swapped": (GEMM_SWAPPED, "swapped the thread mapping so threadIdx.x walks rows"),
        "restrict": (_restrict(base), "added __restrict__ to every pointer"),
        "tiled16": (GEMM_TILED.format(T=16, PAD="", AREAD="As[ty][k]"), "16x16 shared-memory tiles"),
        "tiled32-transposed": (tiled_conflict, "32x32 tiles with B stored transposed in shared memory"),
        "tiled32": (GEMM_TILED.format(T=32, PAD="", AREAD="As[ty][k]"), "32x32 shared-memory tiles"),
        "tiled32-broken": (
            GEMM_TILED.format(T=32, PAD="", AREAD="As[ty][k]").replace(
                "float acc = 0.0f;", "float acc = 0.0f"
            ),
            "32x32 tiles, edited by hand (a semicolon lost)",
        ),
        "tiled32-padded": (GEMM_TILED.format(T=32, PAD=" + 1", AREAD="As[ty][k]"), "padded the 32x32 tiles"),
    }


ATAX_WARP = r"""
extern "C" __global__ void atax_tmp(float* __restrict__ y, float* __restrict__ tmp, const float* __restrict__ A,
                                    const float* __restrict__ x)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;   // one warp per row of A
    int lane = threadIdx.x % 32;
    if (row >= M) return;
    float acc = 0.0f;
    for (int j = lane; j < N; j += 32)
        acc += A[row * N + j] * x[j];
    for (int off = 16; off > 0; off /= 2)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) tmp[row] = acc;
}
extern "C" __global__ void atax_y(float* __restrict__ y, float* __restrict__ tmp, const float* __restrict__ A,
                                  const float* __restrict__ x)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < N) {
        float acc = 0.0f;
        for (int i = 0; i < M; ++i)
            acc += A[i * N + j] * tmp[i];
        y[j] = acc;
    }
}
extern "C" __constant__ int LAUNCH_atax_tmp[6] = {(M + 7) / 8, 1, 1, 256, 1, 1};
extern "C" __constant__ int LAUNCH_atax_y[6] = {(N + 127) / 128, 1, 1, 128, 1, 1};
"""


def atax_programs(base: str) -> dict[str, tuple[str, str]]:
    divergent = base.replace(
        "        tmp[i] = acc;",
        "        if (threadIdx.x % 2 == 0) tmp[i] = acc;\n        else tmp[i] = acc + 0.0f;",
    )
    wrong_sig = base.replace(
        "float* y, float* tmp, const float* A, const float* x)\n{\n    int j",
        "float* y, const float* A, const float* x)\n{\n    float* tmp = y;\n    int j",
    )
    return {
        "naive": (base, "thread per row for A x, thread per column for A^T tmp"),
        "divergent": (divergent, "special-cased even threads when storing tmp"),
        "restrict": (_restrict_all(base), "added __restrict__"),
        "wrong-signature": (wrong_sig, "dropped the tmp parameter from atax_y"),
        "warp-rows": (ATAX_WARP, "one warp per row with a shuffle reduction for A x"),
        "warp-rows-broken": (
            ATAX_WARP.replace("__shfl_down_sync(0xffffffffu, acc, off)", "__shfl_down(acc, off)"),
            "used the pre-Volta shuffle intrinsic",
        ),
        "warp-rows-256": (
            ATAX_WARP.replace("(N + 127) / 128, 1, 1, 128", "(N + 255) / 256, 1, 1, 256"),
            "256-thread blocks for A^T tmp",
        ),
        "warp-rows-unrolled": (
            ATAX_WARP.replace(
                "    for (int j = lane; j < N; j += 32)",
                "    #pragma unroll 4\n    for (int j = lane; j < N; j += 32)",
            ),
            "unrolled the row loop by 4",
        ),
    }


def _restrict_all(src: str) -> str:
    out = []
    for line in src.splitlines():
        if "__global__" in line or line.strip().startswith(("float*", "const float*")):
            line = line.replace("float* ", "float* __restrict__ ")
        out.append(line)
    return "\n".join(out) + "\n"


JACOBI_SHARED = r"""
#define BX 32
#define BY 8
__device__ __forceinline__ void sweep(const float* __restrict__ src, float* __restrict__ dst)
{
    __shared__ float s[BY + 2][BX + 2];
    int j = blockIdx.x * BX + threadIdx.x;
    int i = blockIdx.y * BY + threadIdx.y;
    int li = threadIdx.y + 1, lj = threadIdx.x + 1;
    bool in = i < N && j < N;
    s[li][lj] = in ? src[i * N + j] : 0.0f;
    if (threadIdx.y == 0 && i > 0 && j < N) s[0][lj] = src[(i - 1) * N + j];
    if (threadIdx.y == BY - 1 && i + 1 < N && j < N) s[BY + 1][lj] = src[(i + 1) * N + j];
    if (threadIdx.x == 0 && j > 0 && i < N) s[li][0] = src[i * N + j - 1];
    if (threadIdx.x == BX - 1 && j + 1 < N && i < N) s[li][BX + 1] = src[i * N + j + 1];
    __syncthreads();
    if (i >= 1 && i < N - 1 && j >= 1 && j < N - 1)
        dst[i * N + j] = 0.2f * (s[li][lj] + s[li][lj - 1] + s[li][lj + 1] + s[li + 1][lj] + s[li - 1][lj]);
}
extern "C" __global__ void jacobi_2d_b(float* __restrict__ A, float* __restrict__ B) { sweep(A, B); }
extern "C" __global__ void jacobi_2d_a(float* __restrict__ A, float* __restrict__ B) { sweep(B, A); }
extern "C" __constant__ int LAUNCH_jacobi_2d_b[6] = {(N + BX - 1) / BX, (N + BY - 1) / BY, 1, BX, BY, 1};
extern "C" __constant__ int LAUNCH_jacobi_2d_a[6] = {(N + BX - 1) / BX, (N + BY - 1) / BY, 1, BX, BY, 1};
"""


def jacobi_programs(base: str) -> dict[str, tuple[str, str]]:
    wide = base.replace("16, 16, 1}", "32, 8, 1}").replace(
        "(N + 15) / 16, (N + 15) / 16", "(N + 31) / 32, (N + 7) / 8"
    )
    column = base.replace(
        "int j = blockIdx.x * blockDim.x + threadIdx.x;\n    int i = blockIdx.y * blockDim.y + threadIdx.y;",
        "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int j = blockIdx.y * blockDim.y + threadIdx.y;",
    )
    return {
        "naive": (base, "one thread per cell, 16x16 blocks"),
        "column-major": (column, "mapped threadIdx.x to rows"),
        "restrict": (_restrict_all(base), "added __restrict__"),
        "wide-blocks": (_restrict_all(wide), "32x8 blocks so a warp covers a full row segment"),
        "shared": (JACOBI_SHARED, "stage a tile plus halo in shared memory"),
        "shared-broken": (
            JACOBI_SHARED.replace("__syncthreads();", "__syncthreads()"),
            "shared tile, edited",
        ),
        "shared-wide": (
            JACOBI_SHARED.replace("#define BX 32\n#define BY 8", "#define BX 64\n#define BY 4"),
            "64x4 shared tiles",
        ),
        "shared-tall": (JACOBI_SHARED.replace("#define BY 8", "#define BY 16"), "32x16 shared tiles"),
    }


CONV_SHARED = r"""
#define T 32
#define R (KS / 2)
extern "C" __global__ void conv2d(float* __restrict__ B, const float* __restrict__ A, const float* __restrict__ W)
{
    __shared__ float tile[T + 2 * R][T + 2 * R{PAD}];
    __shared__ float w[KS][KS];
    int tx = threadIdx.x, ty = threadIdx.y;
    int j = blockIdx.x * T + tx, i = blockIdx.y * T + ty;
    if (ty < KS && tx < KS) w[ty][tx] = W[ty * KS + tx];
    for (int dy = ty; dy < T + 2 * R; dy += T)
        for (int dx = tx; dx < T + 2 * R; dx += T) {
            int y = blockIdx.y * T + dy - R, x = blockIdx.x * T + dx - R;
            tile[dy][dx] = (y >= 0 && y < NI && x >= 0 && x < NJ) ? A[y * NJ + x] : 0.0f;
        }
    __syncthreads();
    if (i < NI && j < NJ) {
        float acc = 0.0f;
        #pragma unroll
        for (int a = 0; a < KS; ++a)
            #pragma unroll
            for (int b = 0; b < KS; ++b)
                acc += w[a][b] * tile[{IDX}];
        B[i * NJ + j] = acc;
    }
}
extern "C" __constant__ int LAUNCH_conv2d[6] = {(NJ + T - 1) / T, (NI + T - 1) / T, 1, T, T, 1};
"""


def conv_programs(base: str) -> dict[str, tuple[str, str]]:
    return {
        "naive": (base, "one thread per output, bounds check per tap"),
        "restrict": (_restrict_all(base), "added __restrict__"),
        "rows-on-x": (
            base.replace(
                "int j = blockIdx.x * blockDim.x + threadIdx.x;\n    int i = blockIdx.y * blockDim.y + threadIdx.y;",
                "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int j = blockIdx.y * blockDim.y + threadIdx.y;",
            ).replace("(NJ + 15) / 16, (NI + 15) / 16", "(NI + 15) / 16, (NJ + 15) / 16"),
            "swapped the grid axes",
        ),
        "broken": (base.replace("B[i * NJ + j] = acc;", "B[i * NJ + j] = acc * scale;"), "scaled the output"),
        "shared": (
            CONV_SHARED.replace("{PAD}", "").replace("{IDX}", "ty + a][tx + b"),
            "shared tile with halo",
        ),
        "shared-transposed": (
            CONV_SHARED.replace("{PAD}", "").replace("{IDX}", "tx + b][ty + a"),
            "shared tile read transposed",
        ),
        "shared-const-w": (
            CONV_SHARED.replace("{PAD}", "")
            .replace("{IDX}", "ty + a][tx + b")
            .replace(
                "if (ty < KS && tx < KS) w[ty][tx] = W[ty * KS + tx];",
                "if (ty < KS && tx < KS) w[ty][tx] = __ldg(&W[ty * KS + tx]);",
            ),
            "filter loaded through the read-only cache",
        ),
        "shared-padded": (
            CONV_SHARED.replace("{PAD}", " + 1").replace("{IDX}", "ty + a][tx + b"),
            "padded the tile",
        ),
    }


# Which variants make up each generation (4 each), and each program's parent in the previous one.
LINEAGE: dict[str, list[list[str]]] = {
    "gemm": [
        ["naive", "swapped", "restrict", "tiled16"],
        ["restrict", "tiled16", "tiled32-transposed", "tiled32"],
        ["tiled32", "tiled32-broken", "tiled32-padded", "tiled16"],
    ],
    "atax": [
        ["naive", "divergent", "restrict", "wrong-signature"],
        ["restrict", "warp-rows", "warp-rows-broken", "divergent"],
        ["warp-rows", "warp-rows-256", "warp-rows-unrolled", "warp-rows-broken"],
    ],
    "jacobi-2d": [
        ["naive", "column-major", "restrict", "wide-blocks"],
        ["wide-blocks", "shared", "shared-broken", "restrict"],
        ["shared", "shared-wide", "shared-tall", "shared-broken"],
    ],
    "conv2d": [
        ["naive", "restrict", "rows-on-x", "broken"],
        ["restrict", "shared", "shared-transposed", "broken"],
        ["shared", "shared-const-w", "shared-padded", "shared-transposed"],
    ],
}
PROGRAMS = {
    "gemm": gemm_programs,
    "atax": atax_programs,
    "jacobi-2d": jacobi_programs,
    "conv2d": conv_programs,
}


# ---- the estimated profiler report ----------------------------------------------------------------


def work(task: Task) -> tuple[float, float]:
    """(flops, compulsory DRAM bytes) of one run of the task."""
    s = task.sizes
    nbytes = sum(
        4 * max(1, _count(task, p.name)) * (2 if p.role.value == "inout" else 1)
        for p in task.params
        if p.is_array
    )
    if task.name == "gemm":
        return 2.0 * s["NI"] * s["NJ"] * s["NK"], nbytes
    if task.name == "atax":
        return 4.0 * s["M"] * s["N"], nbytes + 4.0 * s["M"] * s["N"]  # A is read twice
    if task.name == "jacobi-2d":
        return 10.0 * s["N"] ** 2 * s["TSTEPS"], 4.0 * 4 * s["N"] ** 2 * s["TSTEPS"]
    if task.name == "conv2d":
        return 2.0 * s["KS"] ** 2 * s["NI"] * s["NJ"], nbytes
    raise KeyError(task.name)


def _count(task: Task, name: str) -> int:
    n = 1
    for d in task.shape(name):
        n *= d
    return n


@dataclass(frozen=True)
class Estimate:
    ms: float
    efficiency: float
    why: list[str]


def estimate(task: Task, report: AnalyzerReport, compiled: CompileResult) -> Estimate:
    """A roofline estimate with an efficiency lowered by what the static analysis found."""
    flops, nbytes = work(task)
    eff, why = 0.7, ["70% of peak as the starting point"]
    checks = {f.check for f in report.findings}
    if "uncoalesced" in checks:
        eff *= 0.25
        why.append("uncoalesced global access: x0.25")
    if "bank-conflict" in checks:
        eff *= 0.5
        why.append("shared-memory bank conflicts: x0.5")
    if "divergence" in checks:
        eff *= 0.8
        why.append("divergent branches: x0.8")
    uses_shared = any(k.shared_bytes > 0 for k in compiled.kernels.values())
    if task.name in ("gemm",) and not uses_shared:
        nbytes = flops  # no reuse through shared memory: about one 4-byte load per 2 flops from L2/DRAM
        why.append("no shared-memory reuse: operands streamed once per multiply-add")
    ms = 1e3 * max(flops / (H200_FP32 * eff), nbytes / (H200_BANDWIDTH * eff))
    return Estimate(ms=ms, efficiency=eff, why=why)


def profiler_text(task: Task, est: Estimate, baseline: Estimate) -> str:
    flops, nbytes = work(task)
    return "\n".join(
        [
            "Profiler report: ESTIMATED, no GPU at recording time (no event timings, no Nsight Compute).",
            f"Model: roofline on an H200 ({H200_BANDWIDTH / 1e12:.1f} TB/s, {H200_FP32 / 1e12:.0f} TFLOP/s fp32), "
            f"{flops / 1e9:.2f} GFLOP and {nbytes / 1e6:.1f} MB of compulsory traffic per run.",
            f"Efficiency assumed {est.efficiency:.0%}: " + "; ".join(est.why) + ".",
            f"Estimated time {est.ms:.3f} ms; task baseline {baseline.ms:.3f} ms; "
            f"estimated speedup over the baseline {baseline.ms / est.ms:.2f}x.",
            "Regenerate this report on a GPU with the profiler for measured timings and Nsight Compute rules.",
        ]
    )


# ---- assembling the trajectory ---------------------------------------------------------------------


def build() -> tuple[str, str]:
    programs: list[FrozenProgram] = []
    for name, lineage in LINEAGE.items():
        task = get_task(name)
        variants = PROGRAMS[name](task.baseline_source)
        base_compiled = compile_task_source(task, task.baseline_source)
        base_est = estimate(task, analyze(task.baseline_source, task, base_compiled), base_compiled)
        history: list[str] = []
        previous: list[str] = []
        for generation, chosen in zip(GENERATIONS, lineage, strict=True):
            ids: list[str] = []
            tried_now: list[str] = []
            for k, variant in enumerate(chosen):
                source, tried = variants[variant]
                source = source.lstrip("\n")
                pid = f"{name}-g{generation:02d}-{k}"
                ids.append(pid)
                compiled = compile_task_source(task, source)
                analysis = analyze(source, task, compiled)
                problems = contract_problems(task, source)
                ok = compiled.ok and not problems
                est = estimate(task, analysis, compiled) if ok else None
                metrics: dict[str, object] = {
                    "compiled": compiled.ok,
                    "correct": ok,  # by construction of the variant: not run, no GPU at recording time
                    "speedup": round(base_est.ms / est.ms, 3) if est else 0.0,
                    "estimated": True,
                }
                if est:
                    metrics["runtimeMs"] = round(est.ms, 4)
                feedback = {
                    "debugger": compile_report(source, task, compiled),
                    "analyzer": analysis.text,
                    "profiler": profiler_text(task, est, base_est)
                    if est
                    else "Profiler report: not profiled: the program did not build or breaks the contract "
                    "(see the debugger report).",
                }
                prompt = (
                    f"Improve the CUDA program for task {name} (generation {generation}). "
                    f"Follow the contract of `cudanalyst tasks show {name}`; keep it correct, make it faster."
                )
                programs.append(
                    FrozenProgram(
                        task=name,
                        generation=generation,
                        program_id=pid,
                        parent_id=previous[k % len(previous)] if previous else None,
                        source=source,
                        metrics=metrics,
                        feedback=feedback,
                        context=ProgramContext(history=list(history[-6:]), prompt=prompt),
                    )
                )
                tried_now.append(f"g{generation}: {tried}")
            history += tried_now  # later generations see what this one tried; siblings do not
            previous = ids
    manifest = manifest_for(
        programs,
        description=(
            "Example trajectory bundled for tests and the quickstart: 4 PolyBench tasks x generations 0/10/20 x 4 "
            "programs, written by hand to follow the task contracts, with planted problems and a few programs "
            "that do not compile. Debugger and analyzer reports come from nvcc/ptxas and the static checks; "
            "metrics and profiler reports are estimates (no GPU at recording time)."
        ),
        source={"generator": "scripts/make_example_trajectory.py", "gpu": None},
    )
    manifest_json = json.dumps(manifest.model_dump(by_alias=True), indent=2) + "\n"
    return dump_programs(programs), manifest_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if the files on disk differ")
    args = parser.parse_args(argv)
    programs, manifest = build()
    files = {"programs.jsonl": programs, "trajectory.json": manifest}
    if args.check:
        stale = [
            n
            for n, text in files.items()
            if not (args.out / n).is_file() or (args.out / n).read_text() != text
        ]
        if stale:
            print(
                f"stale: {', '.join(stale)} in {args.out}; run scripts/make_example_trajectory.py",
                file=sys.stderr,
            )
            return 1
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        tmp = args.out / f".{n}.tmp"
        tmp.write_text(text)
        tmp.replace(args.out / n)
    print(f"wrote {args.out}: {programs.count(chr(10))} programs, {len(programs) // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
