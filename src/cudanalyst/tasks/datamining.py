"""PolyBench data-mining kernels: covariance and correlation.

Unlike PolyBench/C, the data matrix is an input and stays unmodified: the centred (or normalised)
copy lives in a scratch buffer, so the harness can check that inputs are untouched.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cudanalyst.tasks.base import Kernel, Param, Role, Task

CORRELATION_EPS = 0.1  # PolyBench: a column whose stddev is <= eps is treated as stddev 1


def covariance_reference(sizes: Mapping[str, int], x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    data = x["data"]
    centred = data - data.mean(axis=0)
    return {"cov": centred.T @ centred / (sizes["N"] - 1.0)}


def correlation_reference(sizes: Mapping[str, int], x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    data = x["data"]
    n = float(sizes["N"])
    mean = data.mean(axis=0)
    std = np.sqrt(((data - mean) ** 2).mean(axis=0))
    std = np.where(std <= CORRELATION_EPS, 1.0, std)
    normalised = (data - mean) / (np.sqrt(n) * std)
    corr = normalised.T @ normalised
    np.fill_diagonal(corr, 1.0)
    return {"corr": corr}


COVARIANCE_SRC = r"""
extern "C" __global__ void covariance_mean(float* cov, float* mean, float* centred, const float* data)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < M) {
        float acc = 0.0f;
        for (int i = 0; i < N; ++i)
            acc += data[i * M + j];
        mean[j] = acc / (float)N;
    }
}
extern "C" __global__ void covariance_center(float* cov, float* mean, float* centred, const float* data)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < N && j < M)
        centred[i * M + j] = data[i * M + j] - mean[j];
}
extern "C" __global__ void covariance_cov(float* cov, float* mean, float* centred, const float* data)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < M && j < M) {
        float acc = 0.0f;
        for (int k = 0; k < N; ++k)
            acc += centred[k * M + i] * centred[k * M + j];
        cov[i * M + j] = acc / (float)(N - 1);
    }
}
extern "C" __constant__ int LAUNCH_covariance_mean[6] = {(M + 255) / 256, 1, 1, 256, 1, 1};
extern "C" __constant__ int LAUNCH_covariance_center[6] = {(M + 15) / 16, (N + 15) / 16, 1, 16, 16, 1};
extern "C" __constant__ int LAUNCH_covariance_cov[6] = {(M + 15) / 16, (M + 15) / 16, 1, 16, 16, 1};
"""

COVARIANCE = Task(
    name="covariance",
    family="polybench",
    summary="cov = sample covariance of the M columns (features) of data over its N rows (samples).",
    sizes={"M": 1200, "N": 1400},
    params=(
        Param("cov", Role.OUT, ("M", "M")),
        Param("mean", Role.TEMP, ("M",)),
        Param("centred", Role.TEMP, ("N", "M")),
        Param("data", Role.IN, ("N", "M")),
    ),
    kernels=(
        Kernel("covariance_mean", "mean[j] = sum_i data[i][j] / N"),
        Kernel("covariance_center", "centred[i][j] = data[i][j] - mean[j]"),
        Kernel("covariance_cov", "cov[i][j] = sum_k centred[k][i] * centred[k][j] / (N - 1), all i, j"),
    ),
    baseline_source=COVARIANCE_SRC,
    inputs_maker=lambda s, rng: {"data": rng.random((s["N"], s["M"]))},
    reference_fn=covariance_reference,
)

CORRELATION_SRC = r"""
extern "C" __global__ void correlation_mean(float* corr, float* mean, float* stddev, float* normalised,
                                            const float* data)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < M) {
        float acc = 0.0f;
        for (int i = 0; i < N; ++i)
            acc += data[i * M + j];
        mean[j] = acc / (float)N;
    }
}
extern "C" __global__ void correlation_std(float* corr, float* mean, float* stddev, float* normalised,
                                           const float* data)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < M) {
        float acc = 0.0f;
        for (int i = 0; i < N; ++i) {
            float d = data[i * M + j] - mean[j];
            acc += d * d;
        }
        float s = sqrtf(acc / (float)N);
        stddev[j] = s <= 0.1f ? 1.0f : s;
    }
}
extern "C" __global__ void correlation_normalize(float* corr, float* mean, float* stddev, float* normalised,
                                                 const float* data)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < N && j < M)
        normalised[i * M + j] = (data[i * M + j] - mean[j]) / (sqrtf((float)N) * stddev[j]);
}
extern "C" __global__ void correlation_corr(float* corr, float* mean, float* stddev, float* normalised,
                                            const float* data)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < M && j < M) {
        float acc = 0.0f;
        for (int k = 0; k < N; ++k)
            acc += normalised[k * M + i] * normalised[k * M + j];
        corr[i * M + j] = (i == j) ? 1.0f : acc;
    }
}
extern "C" __constant__ int LAUNCH_correlation_mean[6] = {(M + 255) / 256, 1, 1, 256, 1, 1};
extern "C" __constant__ int LAUNCH_correlation_std[6] = {(M + 255) / 256, 1, 1, 256, 1, 1};
extern "C" __constant__ int LAUNCH_correlation_normalize[6] = {(M + 15) / 16, (N + 15) / 16, 1, 16, 16, 1};
extern "C" __constant__ int LAUNCH_correlation_corr[6] = {(M + 15) / 16, (M + 15) / 16, 1, 16, 16, 1};
"""

CORRELATION = Task(
    name="correlation",
    family="polybench",
    summary=(
        "corr = Pearson correlation matrix of the M columns of data over its N rows "
        f"(a column with stddev <= {CORRELATION_EPS} uses stddev 1; the diagonal is exactly 1)."
    ),
    sizes={"M": 1200, "N": 1400},
    params=(
        Param("corr", Role.OUT, ("M", "M")),
        Param("mean", Role.TEMP, ("M",)),
        Param("stddev", Role.TEMP, ("M",)),
        Param("normalised", Role.TEMP, ("N", "M")),
        Param("data", Role.IN, ("N", "M")),
    ),
    kernels=(
        Kernel("correlation_mean", "mean[j] = sum_i data[i][j] / N"),
        Kernel(
            "correlation_std",
            f"stddev[j] = sqrt(sum_i (data[i][j] - mean[j])^2 / N), replaced by 1 if <= {CORRELATION_EPS}",
        ),
        Kernel("correlation_normalize", "normalised[i][j] = (data[i][j] - mean[j]) / (sqrt(N) * stddev[j])"),
        Kernel("correlation_corr", "corr[i][j] = sum_k normalised[k][i] * normalised[k][j]; corr[i][i] = 1"),
    ),
    baseline_source=CORRELATION_SRC,
    inputs_maker=lambda s, rng: {"data": rng.random((s["N"], s["M"]))},
    reference_fn=correlation_reference,
)

DATAMINING_TASKS: tuple[Task, ...] = (COVARIANCE, CORRELATION)
