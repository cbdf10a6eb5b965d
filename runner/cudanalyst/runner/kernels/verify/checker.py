"""A trusted CUDA kernel that compares an output with its expected values on the GPU.

Timing checks the outputs of some timed launches (timing.py). On the host that check costs tens of
milliseconds for a large output (a float64 pass over 4 M elements); on the GPU it costs microseconds and
needs no copy. The rule is numpy.isclose's with equal_nan, the one verification applies on the host
(verify.check_output): |got - want| <= atol + rtol * |want|, NaN only where NaN is expected, an infinity
only where the same one is expected. It counts the elements that break it, how many of those are still
the NaN the harness prefilled (never written), and the first such index.

The expected outputs sit on the device masked (`mask`), unmasked only inside this kernel with a key it gets
as an argument: a candidate that scans device memory for them finds noise.
The same module holds the fences' audit kernel (fences.py): one cubin of trusted code per request.
The source is compiled by the kernel stage with the same nvcc as the candidates (cached), and travels
as a cubin in each `compare` request, so the worker never compiles.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from cudanalyst.runner.kernels.verify.fences import AUDIT_SOURCE

CHECKER_SOURCE = r"""
__device__ __forceinline__ unsigned long long mask64(unsigned long long key, unsigned long long i) {
    unsigned long long z = key ^ (i * 0x9E3779B97F4A7C15ULL);  // splitmix64's finalizer
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float unmask(float v, unsigned long long key, unsigned long long i) {
    return __int_as_float(__float_as_int(v) ^ (int)(unsigned int)mask64(key, i));
}
__device__ __forceinline__ double unmask(double v, unsigned long long key, unsigned long long i) {
    return __longlong_as_double(__double_as_longlong(v) ^ (long long)mask64(key, i));
}
__device__ __forceinline__ int unmask(int v, unsigned long long key, unsigned long long i) {
    return v ^ (int)(unsigned int)mask64(key, i);
}

// `want` is stored masked (each word XOR mask64(key, index): checker.mask on the host), so a kernel that
// finds it in device memory reads noise; the key travels only as this kernel's argument.
template <typename T>
__device__ void check(const T* got, const T* want, unsigned long long n, double rtol, double atol,
                      unsigned long long key, unsigned long long* result) {
    // result[0]: elements that break the rule; result[1]: of those, NaN where a number was expected;
    // result[2]: ~(the first such index), so a slot zeroed by one memset is ready (0: none).
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double g = (double)got[i], w = (double)unmask(want[i], key, i);
        bool ok;
        if (isnan(w)) ok = isnan(g);
        else if (isinf(w)) ok = (g == w);
        else ok = fabs(g - w) <= atol + rtol * fabs(w);  // false when g is NaN or infinite
        if (!ok) {
            atomicAdd(&result[0], 1ULL);
            if (isnan(g)) atomicAdd(&result[1], 1ULL);
            atomicMax(&result[2], ~i);
        }
    }
}

extern "C" __global__ void check_float32(const float* got, const float* want, unsigned long long n,
                                         double rtol, double atol, unsigned long long key,
                                         unsigned long long* result) {
    check<float>(got, want, n, rtol, atol, key, result);
}

extern "C" __global__ void check_float64(const double* got, const double* want, unsigned long long n,
                                         double rtol, double atol, unsigned long long key,
                                         unsigned long long* result) {
    check<double>(got, want, n, rtol, atol, key, result);
}

extern "C" __global__ void check_int32(const int* got, const int* want, unsigned long long n,
                                       double rtol, double atol, unsigned long long key,
                                       unsigned long long* result) {
    check<int>(got, want, n, rtol, atol, key, result);
}
""" + AUDIT_SOURCE

RESULT_WORDS = 3  # unsigned 64-bit words per check: bad, bad that are NaN, ~first bad index (0: none)


def first_index(stored: int) -> int:
    """The first bad index from the checker's third word (stored complemented, so zero means none; pure)."""
    return (~int(stored)) & ((1 << 64) - 1)
THREADS = 256
MAX_BLOCKS = 1024


CHECKER_ARGS = "PPQddQP"  # got, want (masked), n, rtol, atol, mask key, result


def mask(want: np.ndarray, key: int) -> np.ndarray:
    """`want` as the checker reads it: each element's bits XOR mask64(key, index) (its low 32 bits for 4-byte
    elements), so expected outputs kept on the device are noise to a kernel that finds them (pure)."""
    flat = np.ascontiguousarray(want).reshape(-1)
    i = np.arange(flat.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(key) ^ (i * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    if flat.dtype.itemsize == 8:
        bits = flat.view(np.uint64) ^ z
    elif flat.dtype.itemsize == 4:
        bits = flat.view(np.uint32) ^ (z & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    else:
        raise ValueError(f"cannot mask {flat.dtype} outputs (4- or 8-byte elements only)")
    return bits.view(flat.dtype).reshape(want.shape)


def checker_function(dtype: str) -> str:
    return f"check_{dtype}"


def launch_shape(n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) for n elements: a grid-stride loop, at most MAX_BLOCKS blocks (pure)."""
    blocks = max(1, min(MAX_BLOCKS, (n + THREADS - 1) // THREADS))
    return (blocks, 1, 1), (THREADS, 1, 1)


@cache
def checker_cubin() -> bytes:
    """The checker compiled for the GPU (through the shared compile cache: once per machine)."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_source, shared_cache

    result = compile_source(CHECKER_SOURCE, cache=shared_cache())
    if not result.ok or result.cubin is None:
        raise RuntimeError(f"the output checker did not compile: {result.log.strip()[-2000:]}")
    return result.cubin
