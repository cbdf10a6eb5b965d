"""Faster kernels for a task of each new family, written the way a first optimisation would go: the proof,
on the GPU (tests/gpu/test_task_suite.py), that each family's naive baseline leaves a large speedup, so
that `fast` can happen there. Here (tests/test_task_sources.py) they compile and follow the contract."""

from __future__ import annotations

# A warp per row instead of a thread per row: coalesced loads, shuffles for the max and the sum.
SOFTMAX = r"""
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
extern "C" __global__ void softmax(float* __restrict__ Y, const float* __restrict__ X)
{
    int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= BATCH)
        return;  // the whole warp: a row is one warp's
    const float* x = X + (size_t)row * DIM;
    float* y = Y + (size_t)row * DIM;
    float m = -3.402823466e38f;
    for (int j = threadIdx.x; j < DIM; j += 32)
        m = fmaxf(m, x[j]);
    m = warp_max(m);
    float s = 0.0f;
    for (int j = threadIdx.x; j < DIM; j += 32)
        s += expf(x[j] - m);
    float inv = 1.0f / warp_sum(s);
    for (int j = threadIdx.x; j < DIM; j += 32)
        y[j] = expf(x[j] - m) * inv;
}
extern "C" __constant__ int LAUNCH_softmax[6] = {(BATCH + 7) / 8, 1, 1, 32, 8, 1};
"""

# A block per row instead of a thread per row, reduced in shared memory.
SUM_REDUCTION = r"""
extern "C" __global__ void sum_reduction(float* __restrict__ y, const float* __restrict__ X)
{
    __shared__ float buf[256];
    const float* x = X + (size_t)blockIdx.x * COLS;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < COLS; j += 256)
        acc += x[j];
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int half = 128; half > 0; half >>= 1) {
        if (threadIdx.x < half)
            buf[threadIdx.x] += buf[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        y[blockIdx.x] = buf[0];
}
extern "C" __constant__ int LAUNCH_sum_reduction[6] = {ROWS, 1, 1, 256, 1, 1};
"""

# A warp per lookup, its lanes taking the material's nuclides in turn (the fuel's 321 searches are
# spread over 32 lanes), the five sums reduced by shuffles.
XS_LOOKUP = r"""
extern "C" __global__ void xs_lookup(float* __restrict__ macro_xs, const float* __restrict__ energy,
                                     const int* __restrict__ mat, const float* __restrict__ egrid,
                                     const float* __restrict__ xs, const int* __restrict__ num_nucs,
                                     const int* __restrict__ mat_nucs, const float* __restrict__ concs)
{
    int l = blockIdx.x * blockDim.y + threadIdx.y;
    if (l >= LOOKUPS)
        return;  // the whole warp: a lookup is one warp's
    float e = energy[l];
    int m = mat[l];
    int count = num_nucs[m];
    float acc[NXS];
#pragma unroll
    for (int c = 0; c < NXS; ++c)
        acc[c] = 0.0f;
    for (int j = threadIdx.x; j < count; j += 32) {
        int n = mat_nucs[m * MAX_NUCS + j];
        const float* grid = egrid + (size_t)n * GRIDPOINTS;
        int lo = 0, hi = GRIDPOINTS - 1;
        while (hi - lo > 1) {
            int mid = lo + (hi - lo) / 2;
            if (grid[mid] > e)
                hi = mid;
            else
                lo = mid;
        }
        float f = (grid[lo + 1] - e) / (grid[lo + 1] - grid[lo]);
        const float* low = xs + ((size_t)n * GRIDPOINTS + lo) * NXS;
        const float* high = low + NXS;
        float conc = concs[m * MAX_NUCS + j];
#pragma unroll
        for (int c = 0; c < NXS; ++c)
            acc[c] += conc * (high[c] - f * (high[c] - low[c]));
    }
#pragma unroll
    for (int c = 0; c < NXS; ++c) {
        float v = acc[c];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, o);
        acc[c] = v;
    }
    if (threadIdx.x == 0) {
#pragma unroll
        for (int c = 0; c < NXS; ++c)
            macro_xs[(size_t)l * NXS + c] = acc[c];
    }
}
extern "C" __constant__ int LAUNCH_xs_lookup[6] = {(LOOKUPS + 7) / 8, 1, 1, 32, 8, 1};
"""

# A warp per row (vector CSR) instead of a thread per row (scalar CSR): each row's nonzeros are read
# coalesced.
CG_SPMV = r"""
extern "C" __global__ void cg_spmv(float* __restrict__ y, const int* __restrict__ row_ptr,
                                   const int* __restrict__ col_idx, const float* __restrict__ vals,
                                   const float* __restrict__ x)
{
    int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= NROWS)
        return;  // the whole warp: a row is one warp's
    int end = row_ptr[row + 1];
    float acc = 0.0f;
    for (int k = row_ptr[row] + threadIdx.x; k < end; k += 32)
        acc += vals[k] * x[col_idx[k]];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (threadIdx.x == 0)
        y[row] = acc;
}
extern "C" __constant__ int LAUNCH_cg_spmv[6] = {(NROWS + 7) / 8, 1, 1, 32, 8, 1};
"""

FASTER = {"softmax": SOFTMAX, "sum_reduction": SUM_REDUCTION, "xs_lookup": XS_LOOKUP, "cg_spmv": CG_SPMV}


# ---- adversaries any task's baseline can be turned into (the GPU test expects each to fail verification)

import re  # noqa: E402 - kept beside the helpers that use it

from cudanalyst.tasks import Role, Task  # noqa: E402

_KERNEL_OPEN = re.compile(r'(extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\([^)]*\)\s*\{)')


def writes_nothing(task: Task) -> str:
    """The baseline with every kernel returning at once: outputs keep the harness's NaN (or, for in/out
    arrays, their inputs)."""
    src, count = _KERNEL_OPEN.subn(r"\1\n    return;", task.baseline_source)
    assert count == len(task.kernels), (task.name, count)
    return src


def first_input(task: Task) -> str | None:
    return next((p.name for p in task.params if p.role is Role.IN), None)


def edits_an_input(task: Task) -> str:
    """The baseline whose first kernel flips the lowest bit of its first read-only array's first element
    (once per launch, in one thread; the outputs may still come out right)."""
    name = first_input(task)
    assert name is not None, task.name
    edit = (r"\1\n    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 && "
            f"threadIdx.y == 0 && threadIdx.z == 0)\n        ((unsigned char*){name})[0] ^= 1u;")
    src, count = _KERNEL_OPEN.subn(edit, task.baseline_source, count=1)
    assert count == 1, task.name
    return src
