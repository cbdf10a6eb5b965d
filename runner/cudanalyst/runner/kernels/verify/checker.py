"""A trusted CUDA kernel that compares an output with its expected values on the GPU.

Timing checks the outputs of some timed launches (timing.py). On the host that check costs tens of
milliseconds for a large output (a float64 pass over 4 M elements); on the GPU it costs microseconds and
needs no copy. The rule is numpy.isclose's with equal_nan, the one verification applies on the host
(verify.check_output): |got - want| <= atol + rtol * |want|, NaN only where NaN is expected, an infinity
only where the same one is expected. It counts the elements that break it, how many of those are still
the NaN the harness prefilled (never written), and the first such index.

The same module holds the fences' audit kernel (fences.py): one cubin of trusted code per request.
The source is compiled by the kernel stage with the same nvcc as the candidates (cached), and travels
as a cubin in each `compare` request, so the worker never compiles.
"""

from __future__ import annotations

from functools import cache

from cudanalyst.runner.kernels.verify.fences import AUDIT_SOURCE

CHECKER_SOURCE = r"""
template <typename T>
__device__ void check(const T* got, const T* want, unsigned long long n, double rtol, double atol,
                      unsigned long long* result) {
    // result[0]: elements that break the rule; result[1]: of those, NaN where a number was expected;
    // result[2]: ~(the first such index), so a slot zeroed by one memset is ready (0: none).
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double g = (double)got[i], w = (double)want[i];
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
                                         double rtol, double atol, unsigned long long* result) {
    check<float>(got, want, n, rtol, atol, result);
}

extern "C" __global__ void check_float64(const double* got, const double* want, unsigned long long n,
                                         double rtol, double atol, unsigned long long* result) {
    check<double>(got, want, n, rtol, atol, result);
}

extern "C" __global__ void check_int32(const int* got, const int* want, unsigned long long n,
                                       double rtol, double atol, unsigned long long* result) {
    check<int>(got, want, n, rtol, atol, result);
}
""" + AUDIT_SOURCE

RESULT_WORDS = 3  # unsigned 64-bit words per check: bad, bad that are NaN, ~first bad index (0: none)


def first_index(stored: int) -> int:
    """The first bad index from the checker's third word (stored complemented, so zero means none; pure)."""
    return (~int(stored)) & ((1 << 64) - 1)
THREADS = 256
MAX_BLOCKS = 1024


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
