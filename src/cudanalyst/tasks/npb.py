"""NAS Parallel Benchmarks kernels: CG's sparse matrix-vector product and MG's residual.

- `cg_spmv`: y = A x with A in CSR, the product at the heart of NPB CG's conjugate-gradient iterations.
  A is a random sparse symmetric matrix, strictly diagonally dominant with a positive diagonal (so
  symmetric positive definite, as CG needs), about 97 nonzeros per row at 65536 rows (NPB's class A matrix
  has 14000 rows of the order of a hundred nonzeros). Its baseline runs one thread per row (scalar CSR): a warp's threads
  walk 32 different rows, so no load is coalesced. A warp (or a few lanes) per row leaves a large speedup.
- `mg_resid`: r = v - A u on a periodic 3-D grid, with A NPB MG's 27-point operator (its `resid`). The
  baseline runs one thread per point reading its 27 neighbours from global memory.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cudanalyst.tasks.base import Kernel, Param, Role, Task, Tolerance

Sizes = Mapping[str, int]
Arrays = Mapping[str, np.ndarray]

# NPB MG's coefficients of A (resid): centre, 6 faces, 12 edges, 8 corners.
MG_A = (-8.0 / 3.0, 0.0, 1.0 / 6.0, 1.0 / 12.0)

# ---- CG: sparse matrix-vector product ---------------------------------------------------------------------


def spd_csr(n: int, nnz: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row_ptr, col_idx, vals) of a random symmetric, strictly diagonally dominant n x n matrix with exactly
    nnz nonzeros, columns ascending in each row.

    Each row i draws d = (nnz - n) / (2n) distinct offsets o in [1, (n-1)//2]; the pair {i, (i + o) mod n}
    gets one value in both of its entries. Offsets below n/2 make every pair distinct (a pair reached from
    both of its ends would need two offsets summing to n), so the count is exact."""
    if nnz < n or (nnz - n) % (2 * n):
        raise ValueError(f"NNZ ({nnz}) must be NROWS ({n}) times an odd number: the diagonal plus d mirrored "
                         "pairs per row (NNZ = NROWS * (1 + 2d))")
    d = (nnz - n) // (2 * n)
    half = (n - 1) // 2
    if d > half:
        raise ValueError(f"NNZ ({nnz}) asks for {d} pairs per row; NROWS ({n}) allows at most {half}")
    rows_own = np.repeat(np.arange(n), d)
    if d:
        gaps = rng.integers(1, half // d + 1, (n, d))
        cols_own = (rows_own + np.cumsum(gaps, axis=1).reshape(-1)) % n
    else:
        cols_own = rows_own
    off = -rng.random(n * d)  # in (-1, 0]
    strength = np.bincount(rows_own, np.abs(off), n) + np.bincount(cols_own, np.abs(off), n)
    rows = np.concatenate([rows_own, cols_own, np.arange(n)])
    cols = np.concatenate([cols_own, rows_own, np.arange(n)])
    vals = np.concatenate([off, off, strength + 1.0 + rng.random(n)])  # diagonal > the row's |off-diagonal|
    order = np.argsort(rows * n + cols)  # the keys are distinct
    row_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=row_ptr[1:])
    return row_ptr, cols[order], vals[order]


def cg_inputs(s: Sizes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    row_ptr, col_idx, vals = spd_csr(s["NROWS"], s["NNZ"], rng)
    return {"row_ptr": row_ptr, "col_idx": col_idx, "vals": vals, "x": rng.random(s["NROWS"])}


def cg_reference(s: Sizes, x: Arrays) -> dict[str, np.ndarray]:
    row_ptr = x["row_ptr"].astype(np.int64)
    row_of = np.repeat(np.arange(s["NROWS"]), np.diff(row_ptr))
    products = x["vals"] * x["x"][x["col_idx"].astype(np.int64)]
    return {"y": np.bincount(row_of, products, s["NROWS"])}


CG_SRC = r"""
extern "C" __global__ void cg_spmv(float* y, const int* row_ptr, const int* col_idx, const float* vals,
                                   const float* x)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < NROWS) {
        float acc = 0.0f;
        for (int k = row_ptr[i]; k < row_ptr[i + 1]; ++k)
            acc += vals[k] * x[col_idx[k]];
        y[i] = acc;
    }
}
extern "C" __constant__ int LAUNCH_cg_spmv[6] = {(NROWS + 255) / 256, 1, 1, 256, 1, 1};
"""

CG_SPMV = Task(
    name="cg_spmv",
    family="npb",
    summary="y = A x for a sparse symmetric positive definite A in CSR (NPB CG's matrix-vector product).",
    sizes={"NROWS": 65536, "NNZ": 65536 * 97},
    params=(
        Param("y", Role.OUT, ("NROWS",)),
        Param("row_ptr", Role.IN, ("NROWS+1",), "int32"),
        Param("col_idx", Role.IN, ("NNZ",), "int32"),
        Param("vals", Role.IN, ("NNZ",)),
        Param("x", Role.IN, ("NROWS",)),
    ),
    kernels=(
        Kernel(
            "cg_spmv",
            "y[i] = sum_{row_ptr[i] <= k < row_ptr[i+1]} vals[k] * x[col_idx[k]] (CSR: row i's nonzeros are "
            "k in [row_ptr[i], row_ptr[i+1]), columns ascending, about 97 per row; row_ptr[NROWS] = NNZ)",
        ),
    ),
    baseline_source=CG_SRC,
    inputs_maker=cg_inputs,
    reference_fn=cg_reference,
    # y mixes a large diagonal term with about 96 negative ones, so |y| can be near 0 while the terms sum
    # to ~50 in size: a sequential float32 sum of a row (the baseline) was measured up to 3e-5 off over
    # 3 seeds x 8192 rows, too close to the default atol of 1e-4. atol 1e-3 leaves ~30x and stays below
    # a typical single term (~0.25), so a dropped nonzero still fails.
    tolerance_override=Tolerance(rtol=1e-4, atol=1e-3),
)

# ---- MG: residual ----------------------------------------------------------------------------------------


def mg_reference(s: Sizes, x: Arrays) -> dict[str, np.ndarray]:
    # Neighbour sums by separable pair sums on the periodically padded grid (axes 0, 1, 2 = z, y, x): with
    # Pa the sum of the two neighbours along axis a, edges = PxPy + PxPz + PyPz and corners = PxPyPz,
    # each applied to u; faces (Px + Py + Pz) have NPB's coefficient a1 = 0.
    a0, a1, a2, a3 = MG_A
    u = x["u"]
    up = np.pad(u, 1, mode="wrap")
    pz = up[:-2] + up[2:]  # [NZ, NY+2, NX+2]
    pypz = pz[:, :-2] + pz[:, 2:]  # [NZ, NY, NX+2]
    py_pz = up[1:-1, :-2] + up[1:-1, 2:]  # Py, then + Pz: [NZ, NY, NX+2]
    py_pz += pz[:, 1:-1]
    acc = pypz[:, :, :-2] + pypz[:, :, 2:]  # corners
    acc *= a3
    edges = py_pz[:, :, :-2] + py_pz[:, :, 2:]
    edges += pypz[:, :, 1:-1]
    edges *= a2
    acc += edges
    if a1:
        acc += a1 * (up[1:-1, 1:-1, :-2] + up[1:-1, 1:-1, 2:] + py_pz[:, :, 1:-1])
    acc += a0 * u
    return {"r": x["v"] - acc}


MG_SRC = r"""
extern "C" __global__ void mg_resid(float* r, const float* u, const float* v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    int k = blockIdx.z;
    if (i < NX && j < NY && k < NZ) {
        const float a[4] = {-8.0f / 3.0f, 0.0f, 1.0f / 6.0f, 1.0f / 12.0f};
        float acc = 0.0f;
#pragma unroll
        for (int dz = -1; dz <= 1; ++dz) {
            int z = (k + dz + NZ) % NZ;
#pragma unroll
            for (int dy = -1; dy <= 1; ++dy) {
                int y = (j + dy + NY) % NY;
#pragma unroll
                for (int dx = -1; dx <= 1; ++dx) {
                    int x = (i + dx + NX) % NX;
                    acc += a[abs(dx) + abs(dy) + abs(dz)] * u[((size_t)z * NY + y) * NX + x];
                }
            }
        }
        size_t c = ((size_t)k * NY + j) * NX + i;
        r[c] = v[c] - acc;
    }
}
extern "C" __constant__ int LAUNCH_mg_resid[6] = {(NX + 31) / 32, (NY + 7) / 8, NZ, 32, 8, 1};
"""

MG_RESID = Task(
    name="mg_resid",
    family="npb",
    summary="r = v - A u on a periodic NZ x NY x NX grid, A NPB MG's 27-point operator (MG's resid).",
    sizes={"NZ": 256, "NY": 256, "NX": 256},
    params=(
        Param("r", Role.OUT, ("NZ", "NY", "NX")),
        Param("u", Role.IN, ("NZ", "NY", "NX")),
        Param("v", Role.IN, ("NZ", "NY", "NX")),
    ),
    kernels=(
        Kernel(
            "mg_resid",
            "r[k][j][i] = v[k][j][i] - sum over the 27 points (k+dz, j+dy, i+dx), dx, dy, dz in {-1, 0, 1}, "
            "indices wrapping around (periodic), of a[|dx|+|dy|+|dz|] * u[..], with NPB's "
            "a = {-8/3, 0, 1/6, 1/12} (centre, 6 faces, 12 edges, 8 corners)",
        ),
    ),
    baseline_source=MG_SRC,
    inputs_maker=lambda s, rng: {
        "u": rng.uniform(-1.0, 1.0, (s["NZ"], s["NY"], s["NX"])),
        "v": rng.uniform(-1.0, 1.0, (s["NZ"], s["NY"], s["NX"])),
    },
    reference_fn=mg_reference,
    layout_note="arrays are dense and row-major, x fastest: element [k][j][i] of u is u[(k * NY + j) * NX + i]",
    # The default fits: 27 terms of size <= 8/3.
)

NPB_TASKS: tuple[Task, ...] = (CG_SPMV, MG_RESID)
