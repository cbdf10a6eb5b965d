"""XSBench-style macroscopic cross-section lookups (the Monte Carlo neutron transport proxy app).

A lookup is a particle's (energy, material). For each nuclide of the material, the nuclide's energy grid
is searched for the interval holding the energy, its five microscopic cross sections (total, elastic,
absorption, fission, nu-fission) are interpolated linearly, and the concentration-weighted sum over the
material's nuclides is the lookup's macroscopic cross section. Memory access is irregular: the grids are
searched at random energies, for the nuclides of random materials.

- `xs_lookup` searches each nuclide's own grid (XSBench's "nuclide grid" method) with the large problem's
  355 nuclides and 11303 points per grid, and the fuel's 321 nuclides. Its baseline runs one thread per
  lookup, serial over the material's nuclides (XSBench's event-based kernel): with 65536 lookups the GPU
  holds few threads, and a fuel lookup's thread does 321 binary searches in a row. Spreading the
  nuclides of a lookup over a warp (or the lookup-nuclide pairs over threads) leaves a large speedup.
- `xs_lookup_unionized` is the same physics through XSBench's unionized grid: one binary search over the
  sorted union of all grids, then an index table gives each nuclide's interval. With the small problem's
  68 nuclides at 2048 points (XSBench's small problem has 11303; fewer keep the UNION x NUCLIDES index
  table at 38 MB); its baseline is the same one thread per lookup.

Materials follow XSBench: 12 of them, the fuel (material 0) with the most nuclides, the others with 5, 4,
4, 27, 21, 21, 21, 21, 21, 9, 9, and a lookup's material drawn with XSBench's probabilities. Grids,
cross sections, concentrations and the materials' nuclides are drawn per seed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cudanalyst.tasks.base import Kernel, Param, Role, Task

Sizes = Mapping[str, int]
Arrays = Mapping[str, np.ndarray]

# XSBench's materials: nuclides per material after the fuel (the fuel has MAX_NUCS), and how often a
# lookup falls in each (fuel, cladding, cold and hot borated water, RPV, reflectors, plates, nozzles, ...).
OTHER_MATERIAL_NUCLIDES = (5, 4, 4, 27, 21, 21, 21, 21, 21, 9, 9)
MATERIAL_ODDS = (0.140, 0.052, 0.275, 0.134, 0.154, 0.064, 0.066, 0.055, 0.008, 0.015, 0.025, 0.013)


def _material_table(s: Sizes) -> tuple[np.ndarray, np.ndarray]:
    """(nuclides per material, probability of each material) for any MATERIALS / MAX_NUCS / NUCLIDES."""
    mats, max_nucs, nuclides = s["MATERIALS"], s["MAX_NUCS"], s["NUCLIDES"]
    if max_nucs > nuclides:
        raise ValueError(f"MAX_NUCS ({max_nucs}) must not exceed NUCLIDES ({nuclides}): a material's nuclides differ")
    counts = [max_nucs] + [OTHER_MATERIAL_NUCLIDES[i % len(OTHER_MATERIAL_NUCLIDES)] for i in range(mats - 1)]
    odds = np.array([MATERIAL_ODDS[i % len(MATERIAL_ODDS)] for i in range(mats)])
    return np.minimum(np.array(counts), max_nucs), odds / odds.sum()


def _grids(s: Sizes, rng: np.random.Generator) -> np.ndarray:
    """Each nuclide's energy grid: strictly increasing from exactly 0 to exactly 1 (so every energy in
    [0, 1) lies in one interval), with gaps far above float32's resolution (no two points equal)."""
    nuclides, points = s["NUCLIDES"], s["GRIDPOINTS"]
    if points < 2:
        raise ValueError(f"GRIDPOINTS must be >= 2 (an interval to interpolate in), got {points}")
    steps = np.cumsum(rng.uniform(0.2, 1.8, (nuclides, points - 1)), axis=1)
    grid = np.zeros((nuclides, points), dtype=np.float32)
    grid[:, 1:] = (steps / steps[:, -1:]).astype(np.float32)
    grid[:, -1] = 1.0
    if not (np.diff(grid, axis=1) > 0).all():  # cannot happen at these gaps; a wrong grid must not pass silently
        raise ValueError("an energy grid is not strictly increasing in float32")
    return grid


def lookup_inputs(s: Sizes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    counts, odds = _material_table(s)
    mats, max_nucs = s["MATERIALS"], s["MAX_NUCS"]
    mat_nucs = np.zeros((mats, max_nucs), dtype=np.int32)  # entries past a material's count are 0, never read
    concs = np.zeros((mats, max_nucs), dtype=np.float32)
    for m, count in enumerate(counts):
        mat_nucs[m, :count] = rng.choice(s["NUCLIDES"], size=count, replace=False)
        concs[m, :count] = rng.random(count, dtype=np.float32)
    return {
        "energy": rng.random(s["LOOKUPS"], dtype=np.float32),  # in [0, 1)
        "mat": rng.choice(mats, size=s["LOOKUPS"], p=odds).astype(np.int32),
        "egrid": _grids(s, rng),
        "xs": rng.random((s["NUCLIDES"], s["GRIDPOINTS"], s["NXS"]), dtype=np.float32),
        "num_nucs": counts.astype(np.int32),
        "mat_nucs": mat_nucs,
        "concs": concs,
    }


def union_inputs(s: Sizes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    if s["UNION"] != s["NUCLIDES"] * s["GRIDPOINTS"]:
        raise ValueError(f"UNION ({s['UNION']}) must be NUCLIDES * GRIDPOINTS "
                         f"({s['NUCLIDES']} * {s['GRIDPOINTS']} = {s['NUCLIDES'] * s['GRIDPOINTS']})")
    x = lookup_inputs(s, rng)
    union = np.sort(x["egrid"].reshape(-1))  # every grid's points, duplicates kept (as XSBench)
    index = np.empty((s["UNION"], s["NUCLIDES"]), dtype=np.int32)
    for n in range(s["NUCLIDES"]):
        index[:, n] = lower_point(x["egrid"][n], union)
    return {**x, "union_energy": union, "index_grid": index}


def lower_point(grid: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """The largest i in [0, len(grid) - 2] with grid[i] <= energy: the interval's lower point."""
    return np.clip(np.searchsorted(grid, energy, side="right") - 1, 0, len(grid) - 2)


def macro_xs_reference(s: Sizes, x: Arrays) -> dict[str, np.ndarray]:
    """Per material, per nuclide of it: search, interpolate, weight by the concentration and add up."""
    energy, mat = x["energy"], x["mat"].astype(np.int64)
    egrid, xs, concs = x["egrid"], x["xs"], x["concs"]
    counts, mat_nucs = x["num_nucs"].astype(np.int64), x["mat_nucs"].astype(np.int64)
    out = np.zeros((s["LOOKUPS"], s["NXS"]))
    for m in range(s["MATERIALS"]):
        rows = np.flatnonzero(mat == m)
        if rows.size == 0:
            continue
        e = energy[rows]
        total = np.zeros((rows.size, s["NXS"]))
        for j in range(counts[m]):
            n = mat_nucs[m, j]
            lo = lower_point(egrid[n], e)
            e_lo, e_hi = egrid[n, lo], egrid[n, lo + 1]
            f = ((e_hi - e) / (e_hi - e_lo))[:, None]
            high = xs[n, lo + 1]
            total += concs[m, j] * (high - f * (high - xs[n, lo]))
        out[rows] = total
    return {"macro_xs": out}


_MATERIAL_PARAMS = (
    Param("num_nucs", Role.IN, ("MATERIALS",), "int32"),
    Param("mat_nucs", Role.IN, ("MATERIALS", "MAX_NUCS"), "int32"),
    Param("concs", Role.IN, ("MATERIALS", "MAX_NUCS")),
)
_LOOKUP_PARAMS = (
    Param("macro_xs", Role.OUT, ("LOOKUPS", "NXS")),
    Param("energy", Role.IN, ("LOOKUPS",)),
    Param("mat", Role.IN, ("LOOKUPS",), "int32"),
    Param("egrid", Role.IN, ("NUCLIDES", "GRIDPOINTS")),
    Param("xs", Role.IN, ("NUCLIDES", "GRIDPOINTS", "NXS")),
)

_INTERPOLATE = (
    "f = (egrid[n][lo+1] - e) / (egrid[n][lo+1] - egrid[n][lo]); for c < NXS: "
    "micro[c] = xs[n][lo+1][c] - f * (xs[n][lo+1][c] - xs[n][lo][c]); "
    "macro_xs[l][c] = sum_j concs[m][j] * micro[c]"
)
_GRID_NOTE = (
    "each egrid[n] rises strictly from exactly 0 to exactly 1 and energies lie in [0, 1); entries of "
    "mat_nucs[m] and concs[m] past num_nucs[m] are unused"
)

XS_LOOKUP_SRC = r"""
extern "C" __global__ void xs_lookup(float* macro_xs, const float* energy, const int* mat, const float* egrid,
                                     const float* xs, const int* num_nucs, const int* mat_nucs, const float* concs)
{
    int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= LOOKUPS)
        return;
    float e = energy[l];
    int m = mat[l];
    float acc[NXS];
#pragma unroll
    for (int c = 0; c < NXS; ++c)
        acc[c] = 0.0f;
    for (int j = 0; j < num_nucs[m]; ++j) {
        int n = mat_nucs[m * MAX_NUCS + j];
        const float* grid = egrid + (size_t)n * GRIDPOINTS;
        int lo = 0, hi = GRIDPOINTS - 1;  // XSBench's search: the largest lo <= GRIDPOINTS-2 with grid[lo] <= e
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
    for (int c = 0; c < NXS; ++c)
        macro_xs[(size_t)l * NXS + c] = acc[c];
}
extern "C" __constant__ int LAUNCH_xs_lookup[6] = {(LOOKUPS + 255) / 256, 1, 1, 256, 1, 1};
"""

XS_LOOKUP = Task(
    name="xs_lookup",
    family="xsbench",
    summary="XSBench macroscopic cross-section lookup on per-nuclide energy grids: for each lookup (energy, "
    "material), binary-search each of the material's nuclides' grids, interpolate, and sum weighted by concentration.",
    sizes={"LOOKUPS": 65536, "NUCLIDES": 355, "GRIDPOINTS": 11303, "NXS": 5, "MATERIALS": 12, "MAX_NUCS": 321},
    params=(*_LOOKUP_PARAMS, *_MATERIAL_PARAMS),
    kernels=(
        Kernel(
            "xs_lookup",
            "for each lookup l: e = energy[l], m = mat[l]; for each j < num_nucs[m]: n = mat_nucs[m][j]; "
            "lo = the largest i <= GRIDPOINTS-2 with egrid[n][i] <= e (binary search); " + _INTERPOLATE
            + "; " + _GRID_NOTE,
        ),
    ),
    baseline_source=XS_LOOKUP_SRC,
    inputs_maker=lookup_inputs,
    reference_fn=macro_xs_reference,
    # The default fits: sums of at most 321 positive terms, interpolated between float32 grid points.
)

XS_UNION_SRC = r"""
extern "C" __global__ void xs_lookup_unionized(float* macro_xs, const float* energy, const int* mat,
                                               const float* egrid, const float* xs, const int* num_nucs,
                                               const int* mat_nucs, const float* concs,
                                               const float* union_energy, const int* index_grid)
{
    int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= LOOKUPS)
        return;
    float e = energy[l];
    int m = mat[l];
    int u = 0, top = UNION - 1;  // the largest u with union_energy[u] <= e
    while (top - u > 1) {
        int mid = u + (top - u) / 2;
        if (union_energy[mid] > e)
            top = mid;
        else
            u = mid;
    }
    float acc[NXS];
#pragma unroll
    for (int c = 0; c < NXS; ++c)
        acc[c] = 0.0f;
    for (int j = 0; j < num_nucs[m]; ++j) {
        int n = mat_nucs[m * MAX_NUCS + j];
        int lo = index_grid[(size_t)u * NUCLIDES + n];
        const float* grid = egrid + (size_t)n * GRIDPOINTS;
        float f = (grid[lo + 1] - e) / (grid[lo + 1] - grid[lo]);
        const float* low = xs + ((size_t)n * GRIDPOINTS + lo) * NXS;
        const float* high = low + NXS;
        float conc = concs[m * MAX_NUCS + j];
#pragma unroll
        for (int c = 0; c < NXS; ++c)
            acc[c] += conc * (high[c] - f * (high[c] - low[c]));
    }
#pragma unroll
    for (int c = 0; c < NXS; ++c)
        macro_xs[(size_t)l * NXS + c] = acc[c];
}
extern "C" __constant__ int LAUNCH_xs_lookup_unionized[6] = {(LOOKUPS + 255) / 256, 1, 1, 256, 1, 1};
"""

XS_LOOKUP_UNIONIZED = Task(
    name="xs_lookup_unionized",
    family="xsbench",
    summary="XSBench macroscopic cross-section lookup on a unionized energy grid: one binary search over the "
    "union of all nuclides' grids, an index table for each nuclide's interval, interpolate, sum by concentration.",
    sizes={"LOOKUPS": 524288, "NUCLIDES": 68, "GRIDPOINTS": 2048, "UNION": 68 * 2048, "NXS": 5, "MATERIALS": 12,
           "MAX_NUCS": 34},
    params=(
        *_LOOKUP_PARAMS,
        *_MATERIAL_PARAMS,
        Param("union_energy", Role.IN, ("UNION",)),
        Param("index_grid", Role.IN, ("UNION", "NUCLIDES"), "int32"),
    ),
    kernels=(
        Kernel(
            "xs_lookup_unionized",
            "for each lookup l: e = energy[l], m = mat[l]; u = the largest index with union_energy[u] <= e "
            "(binary search; union_energy is every egrid point, sorted, UNION = NUCLIDES * GRIDPOINTS); "
            "for each j < num_nucs[m]: n = mat_nucs[m][j]; lo = index_grid[u][n] (the largest i <= "
            "GRIDPOINTS-2 with egrid[n][i] <= union_energy[u]); " + _INTERPOLATE + "; " + _GRID_NOTE,
        ),
    ),
    baseline_source=XS_UNION_SRC,
    inputs_maker=union_inputs,
    reference_fn=macro_xs_reference,  # the same physics: the index table only saves the searches
)

XSBENCH_TASKS: tuple[Task, ...] = (XS_LOOKUP, XS_LOOKUP_UNIONIZED)
