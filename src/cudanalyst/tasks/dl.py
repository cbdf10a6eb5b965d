"""Deep-learning operators in the style of KernelBench levels 1 and 2: softmax, layer norm, a linear layer
fused with bias and GELU, a 2-D convolution in NCHW with channels, and a sum reduction over a large axis.

KernelBench's baselines are PyTorch calls; here each baseline is the plain CUDA kernel a first attempt
would be. softmax and sum_reduction run one thread per row (a few thousand threads, each walking its row:
uncoalesced and far from filling the GPU), linear_bias_gelu one thread per output with no tiling: these
leave a large speedup available. layer_norm's baseline is already one block per row with shared-memory
reductions, and conv2d_nchw's one thread per output is coalesced along the width: both leave less.

References compute in float64 from the float32 inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from cudanalyst.tasks.base import Kernel, Param, Role, Task, Tolerance

Sizes = Mapping[str, int]
Arrays = Mapping[str, np.ndarray]

LAYER_NORM_EPS = 1e-5  # PyTorch's default, fixed by the contract

# ---- softmax --------------------------------------------------------------------------------------------


def softmax_inputs(s: Sizes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    # A shift per row of 110 to 200 either way: exp(x) without subtracting the row's maximum overflows to
    # inf (or underflows to 0, then 0/0) in float32 in every row, so only the numerically stable form passes.
    shift = rng.uniform(110.0, 200.0, (s["BATCH"], 1)) * rng.choice([-1.0, 1.0], (s["BATCH"], 1))
    return {"X": rng.standard_normal((s["BATCH"], s["DIM"])) + shift}


def softmax_reference(s: Sizes, x: Arrays) -> dict[str, np.ndarray]:
    e = x["X"] - x["X"].max(axis=1, keepdims=True)  # in place from here: 16 M elements, one temporary
    np.exp(e, out=e)
    e /= e.sum(axis=1, keepdims=True)
    return {"Y": e}


SOFTMAX_SRC = r"""
extern "C" __global__ void softmax(float* Y, const float* X)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < BATCH) {
        const float* x = X + (size_t)row * DIM;
        float* y = Y + (size_t)row * DIM;
        float m = x[0];
        for (int j = 1; j < DIM; ++j)
            m = fmaxf(m, x[j]);
        float sum = 0.0f;
        for (int j = 0; j < DIM; ++j)
            sum += expf(x[j] - m);
        for (int j = 0; j < DIM; ++j)
            y[j] = expf(x[j] - m) / sum;
    }
}
extern "C" __constant__ int LAUNCH_softmax[6] = {(BATCH + 127) / 128, 1, 1, 128, 1, 1};
"""

SOFTMAX = Task(
    name="softmax",
    family="dl",
    summary="Y = softmax(X) along each row, numerically stable: Y[b][j] = exp(X[b][j] - max_j X[b]) / sum.",
    sizes={"BATCH": 4096, "DIM": 4096},
    params=(Param("Y", Role.OUT, ("BATCH", "DIM")), Param("X", Role.IN, ("BATCH", "DIM"))),
    kernels=(
        Kernel(
            "softmax",
            "for each row b: m = max_j X[b][j]; Y[b][j] = exp(X[b][j] - m) / sum_k exp(X[b][k] - m) "
            "(every row is offset by 110 to 200 either way, so exp(X) itself overflows or underflows float32)",
        ),
    ),
    baseline_source=SOFTMAX_SRC,
    inputs_maker=softmax_inputs,
    reference_fn=softmax_reference,
    # Outputs lie in about [1e-6, 1e-2] (mean 1/DIM): the default atol of 1e-4 would pass a row that is
    # wrong in most of its elements. The relative error of a float32 kernel is that of its row sum,
    # 4096 terms: measured up to 4e-6 for a sequential sum, so rtol 1e-4 leaves 25x and still fails a
    # sum that misses one term (about 1/DIM = 2.4e-4 relative).
    tolerance_override=Tolerance(rtol=1e-4, atol=1e-8),
)

# ---- layer norm -------------------------------------------------------------------------------------------


def layer_norm_inputs(s: Sizes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    rows, cols = s["ROWS"], s["COLS"]
    offset = rng.uniform(-3.0, 3.0, (rows, 1))  # a mean and spread of its own per row
    scale = rng.uniform(0.5, 3.0, (rows, 1))
    return {
        "X": offset + scale * rng.standard_normal((rows, cols)),
        "gamma": rng.uniform(0.5, 1.5, cols),
        "beta": rng.uniform(-0.5, 0.5, cols),
    }


def layer_norm_reference(s: Sizes, x: Arrays) -> dict[str, np.ndarray]:
    d = x["X"] - x["X"].mean(axis=1, keepdims=True)  # in place from here: 32 M elements, one temporary
    var = np.einsum("ij,ij->i", d, d) / s["COLS"]  # biased, as PyTorch's LayerNorm
    d *= (1.0 / np.sqrt(var + LAYER_NORM_EPS))[:, None]
    d *= x["gamma"]
    d += x["beta"]
    return {"Y": d}


LAYER_NORM_SRC = r"""
// One block of 256 threads per row: two passes for the mean and the variance around it, each reduced
// in shared memory, then the normalisation.
__device__ float layer_norm_block_sum(float v, float* buf)
{
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            buf[threadIdx.x] += buf[threadIdx.x + half];
        __syncthreads();
    }
    float total = buf[0];
    __syncthreads();
    return total;
}
extern "C" __global__ void layer_norm(float* Y, const float* X, const float* gamma, const float* beta)
{
    __shared__ float buf[256];
    const float* x = X + (size_t)blockIdx.x * COLS;
    float* y = Y + (size_t)blockIdx.x * COLS;
    float s = 0.0f;
    for (int j = threadIdx.x; j < COLS; j += blockDim.x)
        s += x[j];
    float mean = layer_norm_block_sum(s, buf) / COLS;
    float q = 0.0f;
    for (int j = threadIdx.x; j < COLS; j += blockDim.x) {
        float d = x[j] - mean;
        q += d * d;
    }
    float var = layer_norm_block_sum(q, buf) / COLS;
    float rstd = rsqrtf(var + 1e-5f);
    for (int j = threadIdx.x; j < COLS; j += blockDim.x)
        y[j] = (x[j] - mean) * rstd * gamma[j] + beta[j];
}
extern "C" __constant__ int LAUNCH_layer_norm[6] = {ROWS, 1, 1, 256, 1, 1};
"""

LAYER_NORM = Task(
    name="layer_norm",
    family="dl",
    summary="Y = LayerNorm(X) over each row, with gamma and beta: (X - mean) / sqrt(var + 1e-5) * gamma + beta.",
    sizes={"ROWS": 8192, "COLS": 4096},
    params=(
        Param("Y", Role.OUT, ("ROWS", "COLS")),
        Param("X", Role.IN, ("ROWS", "COLS")),
        Param("gamma", Role.IN, ("COLS",)),
        Param("beta", Role.IN, ("COLS",)),
    ),
    kernels=(
        Kernel(
            "layer_norm",
            "for each row r: mean = sum_j X[r][j] / COLS; var = sum_j (X[r][j] - mean)^2 / COLS (biased); "
            "Y[r][j] = (X[r][j] - mean) / sqrt(var + 1e-5) * gamma[j] + beta[j]",
        ),
    ),
    baseline_source=LAYER_NORM_SRC,
    inputs_maker=layer_norm_inputs,
    reference_fn=layer_norm_reference,
    # The default (rtol = atol = 1e-4) fits: float32 one-pass (E[x^2] - mean^2) and two-pass kernels over
    # 4096 columns stay within it, and a kernel that divides by COLS - 1 (unbiased) fails it.
)

# ---- linear + bias + GELU --------------------------------------------------------------------------------


def linear_inputs(s: Sizes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    bound = 1.0 / np.sqrt(s["IN_FEATURES"])  # nn.Linear's initialisation
    return {
        "X": rng.standard_normal((s["BATCH"], s["IN_FEATURES"])),
        "weight": rng.uniform(-bound, bound, (s["OUT_FEATURES"], s["IN_FEATURES"])),
        "bias": rng.uniform(-bound, bound, s["OUT_FEATURES"]),
    }


def _erf(z: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf  # a core dependency, but the GPU machine's image may lack it
    except ImportError:
        return np.frompyfunc(math.erf, 1, 1)(z).astype(np.float64)
    return erf(z)


def gelu(z: np.ndarray) -> np.ndarray:
    """The exact GELU (PyTorch's default, not the tanh approximation)."""
    return 0.5 * z * (1.0 + _erf(z / np.sqrt(2.0)))


def linear_reference(s: Sizes, x: Arrays) -> dict[str, np.ndarray]:
    return {"Y": gelu(x["X"] @ x["weight"].T + x["bias"])}


LINEAR_SRC = r"""
extern "C" __global__ void linear_bias_gelu(float* Y, const float* X, const float* weight, const float* bias)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y * blockDim.y + threadIdx.y;
    if (b < BATCH && o < OUT_FEATURES) {
        float acc = 0.0f;
        for (int k = 0; k < IN_FEATURES; ++k)
            acc += X[b * IN_FEATURES + k] * weight[o * IN_FEATURES + k];
        float z = acc + bias[o];
        Y[b * OUT_FEATURES + o] = 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    }
}
extern "C" __constant__ int LAUNCH_linear_bias_gelu[6] = {(OUT_FEATURES + 15) / 16, (BATCH + 15) / 16, 1, 16, 16, 1};
"""

LINEAR_BIAS_GELU = Task(
    name="linear_bias_gelu",
    family="dl",
    summary="Y = GELU(X @ weight^T + bias): a linear layer fused with its bias and the exact (erf) GELU.",
    sizes={"BATCH": 1024, "IN_FEATURES": 1024, "OUT_FEATURES": 2048},
    params=(
        Param("Y", Role.OUT, ("BATCH", "OUT_FEATURES")),
        Param("X", Role.IN, ("BATCH", "IN_FEATURES")),
        Param("weight", Role.IN, ("OUT_FEATURES", "IN_FEATURES")),
        Param("bias", Role.IN, ("OUT_FEATURES",)),
    ),
    kernels=(
        Kernel(
            "linear_bias_gelu",
            "z = sum_k X[b][k] * weight[o][k] + bias[o]; Y[b][o] = 0.5 * z * (1 + erf(z / sqrt(2))) "
            "(the exact GELU; the tanh approximation differs by up to 4e-4 and fails)",
        ),
    ),
    baseline_source=LINEAR_SRC,
    inputs_maker=linear_inputs,
    reference_fn=linear_reference,
    # The default fits: a sequential float32 dot product of 1024 terms is off by at most a few 1e-6 here.
)

# ---- conv2d, NCHW -----------------------------------------------------------------------------------------


def conv_inputs(s: Sizes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    fan_in = s["C_IN"] * s["KSIZE"] * s["KSIZE"]
    bound = 1.0 / np.sqrt(fan_in)  # nn.Conv2d's initialisation
    return {
        "X": rng.standard_normal((s["BATCH"], s["C_IN"], s["HEIGHT"], s["WIDTH"])),
        "weight": rng.uniform(-bound, bound, (s["C_OUT"], s["C_IN"], s["KSIZE"], s["KSIZE"])),
        "bias": rng.uniform(-bound, bound, s["C_OUT"]),
    }


def conv_reference(s: Sizes, x: Arrays) -> dict[str, np.ndarray]:
    ks, h, w = s["KSIZE"], s["HEIGHT"], s["WIDTH"]
    if ks % 2 != 1:
        raise ValueError(f"conv2d_nchw: KSIZE must be odd (a centred filter), got {ks}")
    pad = ks // 2
    xp = np.pad(x["X"], ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((s["C_OUT"], s["BATCH"], h, w))
    for r in range(ks):
        for c in range(ks):
            # [C_OUT, C_IN] x [BATCH, C_IN, H, W] over C_IN -> [C_OUT, BATCH, H, W] (one BLAS call per tap)
            out += np.tensordot(x["weight"][:, :, r, c], xp[:, :, r : r + h, c : c + w], axes=([1], [1]))
    return {"Y": out.transpose(1, 0, 2, 3) + x["bias"][None, :, None, None]}


CONV_SRC = r"""
extern "C" __global__ void conv2d_nchw(float* Y, const float* X, const float* weight, const float* bias)
{
    int w = blockIdx.x * blockDim.x + threadIdx.x;
    int h = blockIdx.y * blockDim.y + threadIdx.y;
    int n = blockIdx.z / C_OUT;
    int k = blockIdx.z % C_OUT;
    if (h < HEIGHT && w < WIDTH) {
        float acc = bias[k];
        for (int c = 0; c < C_IN; ++c) {
            for (int r = 0; r < KSIZE; ++r) {
                for (int s = 0; s < KSIZE; ++s) {
                    int y = h + r - KSIZE / 2;
                    int x = w + s - KSIZE / 2;
                    if (y >= 0 && y < HEIGHT && x >= 0 && x < WIDTH)
                        acc += weight[((k * C_IN + c) * KSIZE + r) * KSIZE + s]
                             * X[((n * C_IN + c) * HEIGHT + y) * WIDTH + x];
                }
            }
        }
        Y[((n * C_OUT + k) * HEIGHT + h) * WIDTH + w] = acc;
    }
}
extern "C" __constant__ int LAUNCH_conv2d_nchw[6] = {(WIDTH + 15) / 16, (HEIGHT + 15) / 16, BATCH * C_OUT, 16, 16, 1};
"""

CONV2D_NCHW = Task(
    name="conv2d_nchw",
    family="dl",
    summary="Y = conv2d(X, weight) + bias in NCHW: KSIZE x KSIZE filters, stride 1, zero padding KSIZE/2 "
    "(same size), C_IN -> C_OUT channels, BATCH images.",
    sizes={"BATCH": 8, "C_IN": 32, "C_OUT": 64, "HEIGHT": 128, "WIDTH": 128, "KSIZE": 3},
    params=(
        Param("Y", Role.OUT, ("BATCH", "C_OUT", "HEIGHT", "WIDTH")),
        Param("X", Role.IN, ("BATCH", "C_IN", "HEIGHT", "WIDTH")),
        Param("weight", Role.IN, ("C_OUT", "C_IN", "KSIZE", "KSIZE")),
        Param("bias", Role.IN, ("C_OUT",)),
    ),
    kernels=(
        Kernel(
            "conv2d_nchw",
            "Y[n][k][h][w] = bias[k] + sum_{c < C_IN, r, s < KSIZE} weight[k][c][r][s] * "
            "X[n][c][h + r - KSIZE/2][w + s - KSIZE/2], X read as 0 outside [0,HEIGHT) x [0,WIDTH)",
        ),
    ),
    baseline_source=CONV_SRC,
    inputs_maker=conv_inputs,
    reference_fn=conv_reference,
    layout_note="arrays are dense and row-major (NCHW): element [n][c][h][w] of X is "
    "X[((n * C_IN + c) * HEIGHT + h) * WIDTH + w]",
    # The default fits: 288 products per output (C_IN * KSIZE^2).
)

# ---- sum reduction ---------------------------------------------------------------------------------------

SUM_SRC = r"""
extern "C" __global__ void sum_reduction(float* y, const float* X)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < ROWS) {
        float acc = 0.0f;
        for (int j = 0; j < COLS; ++j)
            acc += X[(size_t)row * COLS + j];
        y[row] = acc;
    }
}
extern "C" __constant__ int LAUNCH_sum_reduction[6] = {(ROWS + 127) / 128, 1, 1, 128, 1, 1};
"""

SUM_REDUCTION = Task(
    name="sum_reduction",
    family="dl",
    summary="y[r] = sum_j X[r][j]: a sum over the large last axis (COLS) of each row.",
    sizes={"ROWS": 1024, "COLS": 16384},
    params=(Param("y", Role.OUT, ("ROWS",)), Param("X", Role.IN, ("ROWS", "COLS"))),
    kernels=(Kernel("sum_reduction", "y[r] = sum_{j < COLS} X[r][j]"),),
    baseline_source=SUM_SRC,
    # Centred values, so the sums are small (|y| up to ~250) and a dropped term shows.
    inputs_maker=lambda s, rng: {"X": rng.uniform(-1.0, 1.0, (s["ROWS"], s["COLS"]))},
    reference_fn=lambda s, x: {"y": x["X"].sum(axis=1)},
    # A float32 sum of 16384 terms of size <= 1 carries an absolute error set by its partial sums, not by
    # the result: a sequential sum (the baseline) was measured up to 1.1e-3 off over 5 seeds x 1024 rows,
    # beyond the default atol of 1e-4. atol 5e-3 leaves ~5x; a dropped term (|x| > 5e-3 in 99.5% of cases)
    # still fails.
    tolerance_override=Tolerance(rtol=1e-5, atol=5e-3),
)

DL_TASKS: tuple[Task, ...] = (SOFTMAX, LAYER_NORM, LINEAR_BIAS_GELU, CONV2D_NCHW, SUM_REDUCTION)
