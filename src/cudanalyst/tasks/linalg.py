"""PolyBench linear-algebra kernels: gemm, 2mm, 3mm, atax, bicg, mvt, gesummv, syrk, syr2k.

References compute in float64 (the inputs arrive widened) and follow PolyBench/C 4.2 semantics;
baselines are the plain one-thread-per-output CUDA versions, correct for any sizes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cudanalyst.tasks.base import Kernel, Param, Role, Task

Sizes = Mapping[str, int]
Arrays = Mapping[str, np.ndarray]


def _mat(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.random(shape)


def _scalars(rng: np.random.Generator) -> dict[str, float]:
    # Varied per seed, so a kernel that hard-codes PolyBench's 1.5 / 1.2 fails.
    return {"alpha": float(rng.uniform(0.5, 2.0)), "beta": float(rng.uniform(0.5, 2.0))}


def _arr(name: str, role: Role, *shape: str) -> Param:
    return Param(name, role, tuple(shape))


ALPHA = Param("alpha", Role.SCALAR)
BETA = Param("beta", Role.SCALAR)

# ---- gemm -----------------------------------------------------------------------------------

GEMM_SRC = r"""
extern "C" __global__ void gemm(float* C, const float* A, const float* B, float alpha, float beta)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < NI && j < NJ) {
        float acc = 0.0f;
        for (int k = 0; k < NK; ++k)
            acc += A[i * NK + k] * B[k * NJ + j];
        C[i * NJ + j] = alpha * acc + beta * C[i * NJ + j];
    }
}
extern "C" __constant__ int LAUNCH_gemm[6] = {(NJ + 15) / 16, (NI + 15) / 16, 1, 16, 16, 1};
"""

GEMM = Task(
    name="gemm",
    family="polybench",
    summary="C = alpha * A @ B + beta * C (matrix multiply and accumulate).",
    sizes={"NI": 1024, "NJ": 1024, "NK": 1024},
    params=(
        _arr("C", Role.INOUT, "NI", "NJ"),
        _arr("A", Role.IN, "NI", "NK"),
        _arr("B", Role.IN, "NK", "NJ"),
        ALPHA,
        BETA,
    ),
    kernels=(Kernel("gemm", "C[i][j] = alpha * sum_k A[i][k] * B[k][j] + beta * C[i][j]"),),
    baseline_source=GEMM_SRC,
    inputs_maker=lambda s, rng: {
        "C": _mat(rng, s["NI"], s["NJ"]),
        "A": _mat(rng, s["NI"], s["NK"]),
        "B": _mat(rng, s["NK"], s["NJ"]),
        **_scalars(rng),
    },
    reference_fn=lambda s, x: {"C": x["alpha"] * (x["A"] @ x["B"]) + x["beta"] * x["C"]},
)

# ---- 2mm ------------------------------------------------------------------------------------

MM2_SRC = r"""
extern "C" __global__ void mm2_tmp(float* D, float* tmp, const float* A, const float* B, const float* C,
                                   float alpha, float beta)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < NI && j < NJ) {
        float acc = 0.0f;
        for (int k = 0; k < NK; ++k)
            acc += A[i * NK + k] * B[k * NJ + j];
        tmp[i * NJ + j] = alpha * acc;
    }
}
extern "C" __global__ void mm2_d(float* D, float* tmp, const float* A, const float* B, const float* C,
                                 float alpha, float beta)
{
    int l = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < NI && l < NL) {
        float acc = 0.0f;
        for (int j = 0; j < NJ; ++j)
            acc += tmp[i * NJ + j] * C[j * NL + l];
        D[i * NL + l] = beta * D[i * NL + l] + acc;
    }
}
extern "C" __constant__ int LAUNCH_mm2_tmp[6] = {(NJ + 15) / 16, (NI + 15) / 16, 1, 16, 16, 1};
extern "C" __constant__ int LAUNCH_mm2_d[6] = {(NL + 15) / 16, (NI + 15) / 16, 1, 16, 16, 1};
"""

MM2 = Task(
    name="2mm",
    family="polybench",
    summary="D = alpha * A @ B @ C + beta * D (two matrix multiplies).",
    sizes={"NI": 1024, "NJ": 1024, "NK": 1024, "NL": 1024},
    params=(
        _arr("D", Role.INOUT, "NI", "NL"),
        _arr("tmp", Role.TEMP, "NI", "NJ"),
        _arr("A", Role.IN, "NI", "NK"),
        _arr("B", Role.IN, "NK", "NJ"),
        _arr("C", Role.IN, "NJ", "NL"),
        ALPHA,
        BETA,
    ),
    kernels=(
        Kernel("mm2_tmp", "tmp[i][j] = alpha * sum_k A[i][k] * B[k][j]"),
        Kernel("mm2_d", "D[i][l] = beta * D[i][l] + sum_j tmp[i][j] * C[j][l]"),
    ),
    baseline_source=MM2_SRC,
    inputs_maker=lambda s, rng: {
        "D": _mat(rng, s["NI"], s["NL"]),
        "A": _mat(rng, s["NI"], s["NK"]),
        "B": _mat(rng, s["NK"], s["NJ"]),
        "C": _mat(rng, s["NJ"], s["NL"]),
        **_scalars(rng),
    },
    reference_fn=lambda s, x: {"D": x["beta"] * x["D"] + (x["alpha"] * (x["A"] @ x["B"])) @ x["C"]},
)

# ---- 3mm ------------------------------------------------------------------------------------

MM3_SRC = r"""
__device__ void mm3_product(float* out, const float* X, const float* Y, int rows, int inner, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        float acc = 0.0f;
        for (int k = 0; k < inner; ++k)
            acc += X[r * inner + k] * Y[k * cols + c];
        out[r * cols + c] = acc;
    }
}
extern "C" __global__ void mm3_e(float* G, float* E, float* F, const float* A, const float* B,
                                 const float* C, const float* D)
{
    mm3_product(E, A, B, NI, NK, NJ);
}
extern "C" __global__ void mm3_f(float* G, float* E, float* F, const float* A, const float* B,
                                 const float* C, const float* D)
{
    mm3_product(F, C, D, NJ, NM, NL);
}
extern "C" __global__ void mm3_g(float* G, float* E, float* F, const float* A, const float* B,
                                 const float* C, const float* D)
{
    mm3_product(G, E, F, NI, NJ, NL);
}
extern "C" __constant__ int LAUNCH_mm3_e[6] = {(NJ + 15) / 16, (NI + 15) / 16, 1, 16, 16, 1};
extern "C" __constant__ int LAUNCH_mm3_f[6] = {(NL + 15) / 16, (NJ + 15) / 16, 1, 16, 16, 1};
extern "C" __constant__ int LAUNCH_mm3_g[6] = {(NL + 15) / 16, (NI + 15) / 16, 1, 16, 16, 1};
"""

MM3 = Task(
    name="3mm",
    family="polybench",
    summary="G = (A @ B) @ (C @ D) (three matrix multiplies).",
    sizes={"NI": 1024, "NJ": 1024, "NK": 1024, "NL": 1024, "NM": 1024},
    params=(
        _arr("G", Role.OUT, "NI", "NL"),
        _arr("E", Role.TEMP, "NI", "NJ"),
        _arr("F", Role.TEMP, "NJ", "NL"),
        _arr("A", Role.IN, "NI", "NK"),
        _arr("B", Role.IN, "NK", "NJ"),
        _arr("C", Role.IN, "NJ", "NM"),
        _arr("D", Role.IN, "NM", "NL"),
    ),
    kernels=(
        Kernel("mm3_e", "E = A @ B"),
        Kernel("mm3_f", "F = C @ D"),
        Kernel("mm3_g", "G = E @ F"),
    ),
    baseline_source=MM3_SRC,
    inputs_maker=lambda s, rng: {
        "A": _mat(rng, s["NI"], s["NK"]),
        "B": _mat(rng, s["NK"], s["NJ"]),
        "C": _mat(rng, s["NJ"], s["NM"]),
        "D": _mat(rng, s["NM"], s["NL"]),
    },
    reference_fn=lambda s, x: {"G": (x["A"] @ x["B"]) @ (x["C"] @ x["D"])},
)

# ---- atax -----------------------------------------------------------------------------------

ATAX_SRC = r"""
extern "C" __global__ void atax_tmp(float* y, float* tmp, const float* A, const float* x)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) {
        float acc = 0.0f;
        for (int j = 0; j < N; ++j)
            acc += A[i * N + j] * x[j];
        tmp[i] = acc;
    }
}
extern "C" __global__ void atax_y(float* y, float* tmp, const float* A, const float* x)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < N) {
        float acc = 0.0f;
        for (int i = 0; i < M; ++i)
            acc += A[i * N + j] * tmp[i];
        y[j] = acc;
    }
}
extern "C" __constant__ int LAUNCH_atax_tmp[6] = {(M + 255) / 256, 1, 1, 256, 1, 1};
extern "C" __constant__ int LAUNCH_atax_y[6] = {(N + 255) / 256, 1, 1, 256, 1, 1};
"""

ATAX = Task(
    name="atax",
    family="polybench",
    summary="y = A^T @ (A @ x) (matrix transpose and vector multiply).",
    sizes={"M": 1900, "N": 2100},
    params=(
        _arr("y", Role.OUT, "N"),
        _arr("tmp", Role.TEMP, "M"),
        _arr("A", Role.IN, "M", "N"),
        _arr("x", Role.IN, "N"),
    ),
    kernels=(
        Kernel("atax_tmp", "tmp[i] = sum_j A[i][j] * x[j]"),
        Kernel("atax_y", "y[j] = sum_i A[i][j] * tmp[i]"),
    ),
    baseline_source=ATAX_SRC,
    inputs_maker=lambda s, rng: {"A": _mat(rng, s["M"], s["N"]), "x": _mat(rng, s["N"])},
    reference_fn=lambda s, x: {"y": x["A"].T @ (x["A"] @ x["x"])},
)

# ---- bicg -----------------------------------------------------------------------------------

BICG_SRC = r"""
extern "C" __global__ void bicg_s(float* s, float* q, const float* A, const float* p, const float* r)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < M) {
        float acc = 0.0f;
        for (int i = 0; i < N; ++i)
            acc += r[i] * A[i * M + j];
        s[j] = acc;
    }
}
extern "C" __global__ void bicg_q(float* s, float* q, const float* A, const float* p, const float* r)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float acc = 0.0f;
        for (int j = 0; j < M; ++j)
            acc += A[i * M + j] * p[j];
        q[i] = acc;
    }
}
extern "C" __constant__ int LAUNCH_bicg_s[6] = {(M + 255) / 256, 1, 1, 256, 1, 1};
extern "C" __constant__ int LAUNCH_bicg_q[6] = {(N + 255) / 256, 1, 1, 256, 1, 1};
"""

BICG = Task(
    name="bicg",
    family="polybench",
    summary="s = A^T @ r and q = A @ p (BiCG sub-kernel).",
    sizes={"M": 1900, "N": 2100},
    params=(
        _arr("s", Role.OUT, "M"),
        _arr("q", Role.OUT, "N"),
        _arr("A", Role.IN, "N", "M"),
        _arr("p", Role.IN, "M"),
        _arr("r", Role.IN, "N"),
    ),
    kernels=(
        Kernel("bicg_s", "s[j] = sum_i r[i] * A[i][j]"),
        Kernel("bicg_q", "q[i] = sum_j A[i][j] * p[j]"),
    ),
    baseline_source=BICG_SRC,
    inputs_maker=lambda s, rng: {
        "A": _mat(rng, s["N"], s["M"]),
        "p": _mat(rng, s["M"]),
        "r": _mat(rng, s["N"]),
    },
    reference_fn=lambda s, x: {"s": x["A"].T @ x["r"], "q": x["A"] @ x["p"]},
)

# ---- mvt ------------------------------------------------------------------------------------

MVT_SRC = r"""
extern "C" __global__ void mvt_x1(float* x1, float* x2, const float* A, const float* y1, const float* y2)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float acc = x1[i];
        for (int j = 0; j < N; ++j)
            acc += A[i * N + j] * y1[j];
        x1[i] = acc;
    }
}
extern "C" __global__ void mvt_x2(float* x1, float* x2, const float* A, const float* y1, const float* y2)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float acc = x2[i];
        for (int j = 0; j < N; ++j)
            acc += A[j * N + i] * y2[j];
        x2[i] = acc;
    }
}
extern "C" __constant__ int LAUNCH_mvt_x1[6] = {(N + 255) / 256, 1, 1, 256, 1, 1};
extern "C" __constant__ int LAUNCH_mvt_x2[6] = {(N + 255) / 256, 1, 1, 256, 1, 1};
"""

MVT = Task(
    name="mvt",
    family="polybench",
    summary="x1 += A @ y1 and x2 += A^T @ y2 (matrix vector product and transpose).",
    sizes={"N": 2000},
    params=(
        _arr("x1", Role.INOUT, "N"),
        _arr("x2", Role.INOUT, "N"),
        _arr("A", Role.IN, "N", "N"),
        _arr("y1", Role.IN, "N"),
        _arr("y2", Role.IN, "N"),
    ),
    kernels=(
        Kernel("mvt_x1", "x1[i] += sum_j A[i][j] * y1[j]"),
        Kernel("mvt_x2", "x2[i] += sum_j A[j][i] * y2[j]"),
    ),
    baseline_source=MVT_SRC,
    inputs_maker=lambda s, rng: {
        "x1": _mat(rng, s["N"]),
        "x2": _mat(rng, s["N"]),
        "A": _mat(rng, s["N"], s["N"]),
        "y1": _mat(rng, s["N"]),
        "y2": _mat(rng, s["N"]),
    },
    reference_fn=lambda s, x: {"x1": x["x1"] + x["A"] @ x["y1"], "x2": x["x2"] + x["A"].T @ x["y2"]},
)

# ---- gesummv --------------------------------------------------------------------------------

GESUMMV_SRC = r"""
extern "C" __global__ void gesummv(float* y, const float* A, const float* B, const float* x,
                                   float alpha, float beta)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float a = 0.0f, b = 0.0f;
        for (int j = 0; j < N; ++j) {
            a += A[i * N + j] * x[j];
            b += B[i * N + j] * x[j];
        }
        y[i] = alpha * a + beta * b;
    }
}
extern "C" __constant__ int LAUNCH_gesummv[6] = {(N + 255) / 256, 1, 1, 256, 1, 1};
"""

GESUMMV = Task(
    name="gesummv",
    family="polybench",
    summary="y = alpha * A @ x + beta * B @ x (scalar, vector and matrix multiplication).",
    sizes={"N": 2048},
    params=(
        _arr("y", Role.OUT, "N"),
        _arr("A", Role.IN, "N", "N"),
        _arr("B", Role.IN, "N", "N"),
        _arr("x", Role.IN, "N"),
        ALPHA,
        BETA,
    ),
    kernels=(Kernel("gesummv", "y[i] = alpha * sum_j A[i][j] * x[j] + beta * sum_j B[i][j] * x[j]"),),
    baseline_source=GESUMMV_SRC,
    inputs_maker=lambda s, rng: {
        "A": _mat(rng, s["N"], s["N"]),
        "B": _mat(rng, s["N"], s["N"]),
        "x": _mat(rng, s["N"]),
        **_scalars(rng),
    },
    reference_fn=lambda s, x: {"y": x["alpha"] * (x["A"] @ x["x"]) + x["beta"] * (x["B"] @ x["x"])},
)

# ---- syrk / syr2k ---------------------------------------------------------------------------


def _lower(full: np.ndarray, old: np.ndarray) -> np.ndarray:
    """PolyBench's syrk/syr2k update only the lower triangle (j <= i); the rest keeps its old value."""
    return np.where(np.tri(*full.shape, dtype=bool), full, old)


SYRK_SRC = r"""
extern "C" __global__ void syrk(float* C, const float* A, float alpha, float beta)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < N && j <= i) {
        float acc = 0.0f;
        for (int k = 0; k < M; ++k)
            acc += A[i * M + k] * A[j * M + k];
        C[i * N + j] = alpha * acc + beta * C[i * N + j];
    }
}
extern "C" __constant__ int LAUNCH_syrk[6] = {(N + 15) / 16, (N + 15) / 16, 1, 16, 16, 1};
"""

SYRK = Task(
    name="syrk",
    family="polybench",
    summary="C = alpha * A @ A^T + beta * C on the lower triangle (j <= i); the upper triangle is unchanged.",
    sizes={"N": 1200, "M": 1000},
    params=(_arr("C", Role.INOUT, "N", "N"), _arr("A", Role.IN, "N", "M"), ALPHA, BETA),
    kernels=(Kernel("syrk", "for j <= i: C[i][j] = alpha * sum_k A[i][k] * A[j][k] + beta * C[i][j]"),),
    baseline_source=SYRK_SRC,
    inputs_maker=lambda s, rng: {
        "C": _mat(rng, s["N"], s["N"]),
        "A": _mat(rng, s["N"], s["M"]),
        **_scalars(rng),
    },
    reference_fn=lambda s, x: {
        "C": _lower(x["alpha"] * (x["A"] @ x["A"].T) + x["beta"] * x["C"], x["C"]),
    },
)

SYR2K_SRC = r"""
extern "C" __global__ void syr2k(float* C, const float* A, const float* B, float alpha, float beta)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < N && j <= i) {
        float acc = 0.0f;
        for (int k = 0; k < M; ++k)
            acc += A[j * M + k] * B[i * M + k] + B[j * M + k] * A[i * M + k];
        C[i * N + j] = alpha * acc + beta * C[i * N + j];
    }
}
extern "C" __constant__ int LAUNCH_syr2k[6] = {(N + 15) / 16, (N + 15) / 16, 1, 16, 16, 1};
"""

SYR2K = Task(
    name="syr2k",
    family="polybench",
    summary=(
        "C = alpha * (A @ B^T + B @ A^T) + beta * C on the lower triangle (j <= i); "
        "the upper triangle is unchanged."
    ),
    sizes={"N": 1200, "M": 1000},
    params=(
        _arr("C", Role.INOUT, "N", "N"),
        _arr("A", Role.IN, "N", "M"),
        _arr("B", Role.IN, "N", "M"),
        ALPHA,
        BETA,
    ),
    kernels=(
        Kernel(
            "syr2k",
            "for j <= i: C[i][j] = alpha * sum_k (A[j][k] * B[i][k] + B[j][k] * A[i][k]) + beta * C[i][j]",
        ),
    ),
    baseline_source=SYR2K_SRC,
    inputs_maker=lambda s, rng: {
        "C": _mat(rng, s["N"], s["N"]),
        "A": _mat(rng, s["N"], s["M"]),
        "B": _mat(rng, s["N"], s["M"]),
        **_scalars(rng),
    },
    reference_fn=lambda s, x: {
        "C": _lower(x["alpha"] * (x["A"] @ x["B"].T + x["B"] @ x["A"].T) + x["beta"] * x["C"], x["C"]),
    },
)

LINALG_TASKS: tuple[Task, ...] = (GEMM, MM2, MM3, ATAX, BICG, MVT, GESUMMV, SYRK, SYR2K)
