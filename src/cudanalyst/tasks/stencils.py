"""Stencil kernels: jacobi-2d and fdtd-2d (PolyBench, time-stepped) and conv2d (PolyBench/GPU style)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cudanalyst.tasks.base import Kernel, Param, Role, Task


def jacobi_2d_reference(sizes: Mapping[str, int], x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    a, b = x["A"].copy(), x["B"].copy()

    def sweep(src: np.ndarray, dst: np.ndarray) -> None:
        dst[1:-1, 1:-1] = 0.2 * (
            src[1:-1, 1:-1] + src[1:-1, :-2] + src[1:-1, 2:] + src[2:, 1:-1] + src[:-2, 1:-1]
        )

    for _ in range(sizes["TSTEPS"]):
        sweep(a, b)
        sweep(b, a)
    return {"A": a, "B": b}


JACOBI_2D_SRC = r"""
extern "C" __global__ void jacobi_2d_b(float* A, float* B)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= 1 && i < N - 1 && j >= 1 && j < N - 1)
        B[i * N + j] = 0.2f * (A[i * N + j] + A[i * N + j - 1] + A[i * N + j + 1]
                               + A[(i + 1) * N + j] + A[(i - 1) * N + j]);
}
extern "C" __global__ void jacobi_2d_a(float* A, float* B)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= 1 && i < N - 1 && j >= 1 && j < N - 1)
        A[i * N + j] = 0.2f * (B[i * N + j] + B[i * N + j - 1] + B[i * N + j + 1]
                               + B[(i + 1) * N + j] + B[(i - 1) * N + j]);
}
extern "C" __constant__ int LAUNCH_jacobi_2d_b[6] = {(N + 15) / 16, (N + 15) / 16, 1, 16, 16, 1};
extern "C" __constant__ int LAUNCH_jacobi_2d_a[6] = {(N + 15) / 16, (N + 15) / 16, 1, 16, 16, 1};
"""

_FIVE_POINT = "0.2 * (X[i][j] + X[i][j-1] + X[i][j+1] + X[i+1][j] + X[i-1][j])"

JACOBI_2D = Task(
    name="jacobi-2d",
    family="polybench",
    summary="TSTEPS Jacobi sweeps of a 5-point stencil, A -> B then B -> A; border cells never change.",
    sizes={"N": 1300, "TSTEPS": 20},
    params=(Param("A", Role.INOUT, ("N", "N")), Param("B", Role.INOUT, ("N", "N"))),
    kernels=(
        Kernel("jacobi_2d_b", "for 1 <= i, j < N-1: B[i][j] = " + _FIVE_POINT.replace("X", "A")),
        Kernel("jacobi_2d_a", "for 1 <= i, j < N-1: A[i][j] = " + _FIVE_POINT.replace("X", "B")),
    ),
    baseline_source=JACOBI_2D_SRC,
    inputs_maker=lambda s, rng: {"A": rng.random((s["N"], s["N"])), "B": rng.random((s["N"], s["N"]))},
    reference_fn=jacobi_2d_reference,
    repeat_size="TSTEPS",
)


def fdtd_2d_reference(sizes: Mapping[str, int], x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    ex, ey, hz, fict = x["ex"].copy(), x["ey"].copy(), x["hz"].copy(), x["fict"]
    for t in range(sizes["TMAX"]):
        ey[0, :] = fict[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    return {"ex": ex, "ey": ey, "hz": hz}


FDTD_2D_SRC = r"""
extern "C" __global__ void fdtd_2d_ey(float* ex, float* ey, float* hz, const float* fict, int t)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < NX && j < NY) {
        if (i == 0)
            ey[j] = fict[t];
        else
            ey[i * NY + j] -= 0.5f * (hz[i * NY + j] - hz[(i - 1) * NY + j]);
    }
}
extern "C" __global__ void fdtd_2d_ex(float* ex, float* ey, float* hz, const float* fict, int t)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < NX && j >= 1 && j < NY)
        ex[i * NY + j] -= 0.5f * (hz[i * NY + j] - hz[i * NY + j - 1]);
}
extern "C" __global__ void fdtd_2d_hz(float* ex, float* ey, float* hz, const float* fict, int t)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < NX - 1 && j < NY - 1)
        hz[i * NY + j] -= 0.7f * (ex[i * NY + j + 1] - ex[i * NY + j] + ey[(i + 1) * NY + j] - ey[i * NY + j]);
}
extern "C" __constant__ int LAUNCH_fdtd_2d_ey[6] = {(NY + 15) / 16, (NX + 15) / 16, 1, 16, 16, 1};
extern "C" __constant__ int LAUNCH_fdtd_2d_ex[6] = {(NY + 15) / 16, (NX + 15) / 16, 1, 16, 16, 1};
extern "C" __constant__ int LAUNCH_fdtd_2d_hz[6] = {(NY + 15) / 16, (NX + 15) / 16, 1, 16, 16, 1};
"""

FDTD_2D = Task(
    name="fdtd-2d",
    family="polybench",
    summary="TMAX steps of a 2-D finite-difference time-domain (Yee) update of the fields ex, ey, hz.",
    sizes={"NX": 1000, "NY": 1200, "TMAX": 20},
    params=(
        Param("ex", Role.INOUT, ("NX", "NY")),
        Param("ey", Role.INOUT, ("NX", "NY")),
        Param("hz", Role.INOUT, ("NX", "NY")),
        Param("fict", Role.IN, ("TMAX",)),
        Param("t", Role.STEP),
    ),
    kernels=(
        Kernel("fdtd_2d_ey", "ey[0][j] = fict[t]; for i >= 1: ey[i][j] -= 0.5 * (hz[i][j] - hz[i-1][j])"),
        Kernel("fdtd_2d_ex", "for j >= 1: ex[i][j] -= 0.5 * (hz[i][j] - hz[i][j-1])"),
        Kernel(
            "fdtd_2d_hz",
            "for i < NX-1, j < NY-1: hz[i][j] -= 0.7 * (ex[i][j+1] - ex[i][j] + ey[i+1][j] - ey[i][j])",
        ),
    ),
    baseline_source=FDTD_2D_SRC,
    inputs_maker=lambda s, rng: {
        "ex": rng.random((s["NX"], s["NY"])),
        "ey": rng.random((s["NX"], s["NY"])),
        "hz": rng.random((s["NX"], s["NY"])),
        "fict": rng.random(s["TMAX"]),
    },
    reference_fn=fdtd_2d_reference,
    repeat_size="TMAX",
)


def conv2d_reference(sizes: Mapping[str, int], x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    a, w = x["A"], x["W"]
    ks = sizes["KS"]
    if ks % 2 != 1:
        raise ValueError(f"conv2d: KS must be odd (a centred filter), got {ks}")
    r = ks // 2
    padded = np.pad(a, r)  # zeros outside A
    ni, nj = a.shape
    out = np.zeros_like(a)
    for di in range(ks):
        for dj in range(ks):
            out += w[di, dj] * padded[di : di + ni, dj : dj + nj]
    return {"B": out}


CONV2D_SRC = r"""
extern "C" __global__ void conv2d(float* B, const float* A, const float* W)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < NI && j < NJ) {
        float acc = 0.0f;
        for (int a = 0; a < KS; ++a) {
            for (int b = 0; b < KS; ++b) {
                int y = i + a - KS / 2;
                int x = j + b - KS / 2;
                if (y >= 0 && y < NI && x >= 0 && x < NJ)
                    acc += W[a * KS + b] * A[y * NJ + x];
            }
        }
        B[i * NJ + j] = acc;
    }
}
extern "C" __constant__ int LAUNCH_conv2d[6] = {(NJ + 15) / 16, (NI + 15) / 16, 1, 16, 16, 1};
"""

CONV2D = Task(
    name="conv2d",
    family="polybench",
    summary="B = A cross-correlated with the KS x KS filter W, same size, zeros outside A (KS odd).",
    sizes={"NI": 2048, "NJ": 2048, "KS": 3},
    params=(
        Param("B", Role.OUT, ("NI", "NJ")),
        Param("A", Role.IN, ("NI", "NJ")),
        Param("W", Role.IN, ("KS", "KS")),
    ),
    kernels=(
        Kernel(
            "conv2d",
            "B[i][j] = sum_{a,b < KS} W[a][b] * A[i + a - KS/2][j + b - KS/2], "
            "A read as 0 outside [0,NI) x [0,NJ)",
        ),
    ),
    baseline_source=CONV2D_SRC,
    inputs_maker=lambda s, rng: {
        "A": rng.random((s["NI"], s["NJ"])),
        "W": rng.uniform(-1.0, 1.0, (s["KS"], s["KS"])),
    },
    reference_fn=conv2d_reference,
)

STENCIL_TASKS: tuple[Task, ...] = (JACOBI_2D, FDTD_2D, CONV2D)
