"""The task suite: definitions, contracts, and numpy references checked against plain loops."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from cudanalyst.tasks import Param, Role, Tolerance, UnknownTaskError, all_tasks, get_task
from cudanalyst.tasks.base import FAMILIES
from cudanalyst.tasks.conformance import contract_problems

REQUIRED = {
    "gemm",
    "2mm",
    "3mm",
    "atax",
    "bicg",
    "mvt",
    "gesummv",
    "syrk",
    "syr2k",
    "covariance",
    "correlation",
    "jacobi-2d",
    "fdtd-2d",
    "conv2d",
}
# The paper's other kinds of workload (issue 28), by family; other code and the recording spec name them.
NEW_FAMILIES = {
    "dl": {"softmax", "layer_norm", "linear_bias_gelu", "conv2d_nchw", "sum_reduction"},
    "xsbench": {"xs_lookup", "xs_lookup_unionized"},
    "npb": {"cg_spmv", "mg_resid"},
}
TASK_NAMES = [t.name for t in all_tasks()]


def test_suite_has_the_required_tasks() -> None:
    assert set(TASK_NAMES) >= REQUIRED
    assert len(TASK_NAMES) >= 14


def test_every_task_has_its_family() -> None:
    families = {t.name: t.family for t in all_tasks()}
    assert {n for n, f in families.items() if f == "polybench"} == REQUIRED
    for family, names in NEW_FAMILIES.items():
        assert {n for n, f in families.items() if f == family} == names
    assert set(families.values()) == set(FAMILIES)


def test_an_unknown_family_or_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="family 'hpc'"):
        dataclasses.replace(get_task("gemm"), family="hpc")
    bad = (*get_task("cg_spmv").params[:1], Param("row_ptr", Role.IN, ("NCOLS+1",), "int32"))
    with pytest.raises(ValueError, match="row_ptr uses unknown sizes"):
        dataclasses.replace(get_task("cg_spmv"), params=bad)


def test_unknown_task_names_the_task_and_the_known_ones() -> None:
    with pytest.raises(KeyError) as info:
        get_task("gemmm")
    assert isinstance(info.value, UnknownTaskError)
    assert "gemmm" in str(info.value) and "gemm" in str(info.value) and "conv2d" in str(info.value)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_definition_is_complete(name: str) -> None:
    task = get_task(name)
    assert task.dtype == "float32" and task.outputs
    assert all(task.param(o).dtype == "float32" for o in task.outputs)  # the GPU checker compares float32
    if task.family == "polybench":
        assert all(512 <= v <= 2200 for k, v in task.sizes.items() if k not in ("TSTEPS", "TMAX", "KS"))
    contract = task.contract()
    for kernel in task.kernel_names:
        assert task.signature(kernel) in contract
        assert f"LAUNCH_{kernel}[6]" in contract
    for k, v in task.sizes.items():
        assert f"#define {k} {v}" in task.prelude()
    assert task.prelude().rstrip().endswith('#line 1 "candidate.cu"')
    assert contract_problems(task, task.baseline_source) == []


@pytest.mark.parametrize("name", TASK_NAMES)
def test_inputs_are_seeded_typed_and_shaped(name: str) -> None:
    task = small(get_task(name))
    a, b, c = task.make_inputs(1), task.make_inputs(1), task.make_inputs(2)
    needed = {p.name for p in task.params if p.role in (Role.IN, Role.INOUT, Role.SCALAR)}
    assert set(a) == needed
    for k in a:
        assert a[k].dtype == np.dtype(task.param(k).dtype) and a[k].shape == task.shape(k)
        np.testing.assert_array_equal(a[k], b[k])
    assert any(not np.array_equal(a[k], c[k]) for k in a)
    ref = task.reference(a)
    assert set(ref) == set(task.outputs)
    assert all(ref[k].dtype == np.float32 and ref[k].shape == task.shape(k) for k in ref)


# Sizes that tie to each other (UNION = NUCLIDES * GRIDPOINTS, NNZ = NROWS * (1 + 2d), a material's
# nuclides <= NUCLIDES) or must stay as they are (the XS channels, the filter size) are given per task.
SMALL_SIZES = {
    "softmax": {"BATCH": 5, "DIM": 7},
    "layer_norm": {"ROWS": 5, "COLS": 7},
    "linear_bias_gelu": {"BATCH": 5, "IN_FEATURES": 6, "OUT_FEATURES": 7},
    "conv2d_nchw": {"BATCH": 2, "C_IN": 3, "C_OUT": 4, "HEIGHT": 5, "WIDTH": 6, "KSIZE": 3},
    "sum_reduction": {"ROWS": 5, "COLS": 9},
    "xs_lookup": {"LOOKUPS": 40, "NUCLIDES": 9, "GRIDPOINTS": 6, "MATERIALS": 4, "MAX_NUCS": 7},
    "xs_lookup_unionized": {"LOOKUPS": 40, "NUCLIDES": 5, "GRIDPOINTS": 4, "UNION": 20, "MATERIALS": 3,
                            "MAX_NUCS": 4},
    "cg_spmv": {"NROWS": 11, "NNZ": 55},
    "mg_resid": {"NZ": 3, "NY": 4, "NX": 5},
}


def small(task):  # noqa: ANN001, ANN201 - test helper
    """Small sizes keep the loop references quick; odd sizes catch transposed shapes."""
    if task.name in SMALL_SIZES:
        return task.with_sizes(**SMALL_SIZES[task.name])
    smaller = {
        k: 3 if k == "KS" else 4 if k in ("TSTEPS", "TMAX") else 5 + i for i, k in enumerate(task.sizes)
    }
    return task.with_sizes(**smaller)


# ---- straightforward loop implementations (PolyBench/C order of operations) -----------------------


def loops(name: str, s: dict[str, int], x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # noqa: C901
    x = {k: np.array(v, dtype=np.float64) for k, v in x.items()}
    if name == "gemm":
        C = x["C"].copy()
        for i in range(s["NI"]):
            for j in range(s["NJ"]):
                C[i, j] *= x["beta"]
                for k in range(s["NK"]):
                    C[i, j] += x["alpha"] * x["A"][i, k] * x["B"][k, j]
        return {"C": C}
    if name == "2mm":
        tmp = np.zeros((s["NI"], s["NJ"]))
        D = x["D"].copy()
        for i in range(s["NI"]):
            for j in range(s["NJ"]):
                for k in range(s["NK"]):
                    tmp[i, j] += x["alpha"] * x["A"][i, k] * x["B"][k, j]
        for i in range(s["NI"]):
            for j in range(s["NL"]):
                D[i, j] *= x["beta"]
                for k in range(s["NJ"]):
                    D[i, j] += tmp[i, k] * x["C"][k, j]
        return {"D": D}
    if name == "3mm":

        def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            out = np.zeros((a.shape[0], b.shape[1]))
            for i in range(a.shape[0]):
                for j in range(b.shape[1]):
                    for k in range(a.shape[1]):
                        out[i, j] += a[i, k] * b[k, j]
            return out

        return {"G": mm(mm(x["A"], x["B"]), mm(x["C"], x["D"]))}
    if name == "atax":
        y, tmp = np.zeros(s["N"]), np.zeros(s["M"])
        for i in range(s["M"]):
            for j in range(s["N"]):
                tmp[i] += x["A"][i, j] * x["x"][j]
            for j in range(s["N"]):
                y[j] += x["A"][i, j] * tmp[i]
        return {"y": y}
    if name == "bicg":
        sv, q = np.zeros(s["M"]), np.zeros(s["N"])
        for i in range(s["N"]):
            for j in range(s["M"]):
                sv[j] += x["r"][i] * x["A"][i, j]
                q[i] += x["A"][i, j] * x["p"][j]
        return {"s": sv, "q": q}
    if name == "mvt":
        x1, x2 = x["x1"].copy(), x["x2"].copy()
        for i in range(s["N"]):
            for j in range(s["N"]):
                x1[i] += x["A"][i, j] * x["y1"][j]
                x2[i] += x["A"][j, i] * x["y2"][j]
        return {"x1": x1, "x2": x2}
    if name == "gesummv":
        y = np.zeros(s["N"])
        for i in range(s["N"]):
            tmp = yy = 0.0
            for j in range(s["N"]):
                tmp += x["A"][i, j] * x["x"][j]
                yy += x["B"][i, j] * x["x"][j]
            y[i] = x["alpha"] * tmp + x["beta"] * yy
        return {"y": y}
    if name in ("syrk", "syr2k"):
        C = x["C"].copy()
        for i in range(s["N"]):
            for j in range(i + 1):
                C[i, j] *= x["beta"]
            for k in range(s["M"]):
                for j in range(i + 1):
                    if name == "syrk":
                        C[i, j] += x["alpha"] * x["A"][i, k] * x["A"][j, k]
                    else:
                        C[i, j] += (
                            x["A"][j, k] * x["alpha"] * x["B"][i, k]
                            + x["B"][j, k] * x["alpha"] * x["A"][i, k]
                        )
        return {"C": C}
    if name in ("covariance", "correlation"):
        data = x["data"].copy()
        n, m = s["N"], s["M"]
        mean = np.zeros(m)
        for j in range(m):
            for i in range(n):
                mean[j] += data[i, j]
            mean[j] /= n
        if name == "covariance":
            for i in range(n):
                for j in range(m):
                    data[i, j] -= mean[j]
            cov = np.zeros((m, m))
            for i in range(m):
                for j in range(i, m):
                    for k in range(n):
                        cov[i, j] += data[k, i] * data[k, j]
                    cov[i, j] /= n - 1.0
                    cov[j, i] = cov[i, j]
            return {"cov": cov}
        std = np.zeros(m)
        for j in range(m):
            for i in range(n):
                std[j] += (data[i, j] - mean[j]) ** 2
            std[j] = np.sqrt(std[j] / n)
            std[j] = 1.0 if std[j] <= 0.1 else std[j]
        for i in range(n):
            for j in range(m):
                data[i, j] = (data[i, j] - mean[j]) / (np.sqrt(n) * std[j])
        corr = np.zeros((m, m))
        for i in range(m):
            corr[i, i] = 1.0
            for j in range(i + 1, m):
                for k in range(n):
                    corr[i, j] += data[k, i] * data[k, j]
                corr[j, i] = corr[i, j]
        return {"corr": corr}
    if name == "jacobi-2d":
        A, B, n = x["A"].copy(), x["B"].copy(), s["N"]
        for _ in range(s["TSTEPS"]):
            for i in range(1, n - 1):
                for j in range(1, n - 1):
                    B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1] + A[i + 1, j] + A[i - 1, j])
            for i in range(1, n - 1):
                for j in range(1, n - 1):
                    A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1] + B[i + 1, j] + B[i - 1, j])
        return {"A": A, "B": B}
    if name == "fdtd-2d":
        ex, ey, hz = x["ex"].copy(), x["ey"].copy(), x["hz"].copy()
        nx, ny = s["NX"], s["NY"]
        for t in range(s["TMAX"]):
            for j in range(ny):
                ey[0, j] = x["fict"][t]
            for i in range(1, nx):
                for j in range(ny):
                    ey[i, j] -= 0.5 * (hz[i, j] - hz[i - 1, j])
            for i in range(nx):
                for j in range(1, ny):
                    ex[i, j] -= 0.5 * (hz[i, j] - hz[i, j - 1])
            for i in range(nx - 1):
                for j in range(ny - 1):
                    hz[i, j] -= 0.7 * (ex[i, j + 1] - ex[i, j] + ey[i + 1, j] - ey[i, j])
        return {"ex": ex, "ey": ey, "hz": hz}
    if name == "conv2d":
        ni, nj, ks = s["NI"], s["NJ"], s["KS"]
        B = np.zeros((ni, nj))
        for i in range(ni):
            for j in range(nj):
                for a in range(ks):
                    for b in range(ks):
                        y, xx = i + a - ks // 2, j + b - ks // 2
                        if 0 <= y < ni and 0 <= xx < nj:
                            B[i, j] += x["W"][a, b] * x["A"][y, xx]
        return {"B": B}
    if name in NEW_LOOPS:
        return NEW_LOOPS[name](s, x)
    raise AssertionError(f"no loop implementation for {name}")


@pytest.mark.parametrize("name", TASK_NAMES)
def test_reference_matches_plain_loops(name: str) -> None:
    task = small(get_task(name))
    inputs = task.make_inputs(7)
    got = task.reference(inputs)
    want = loops(name, dict(task.sizes), inputs)
    for out in task.outputs:
        np.testing.assert_allclose(got[out], want[out].astype(np.float32), rtol=1e-5, atol=1e-6, err_msg=out)


def test_reference_changes_when_an_input_changes() -> None:
    task = small(get_task("gemm"))
    x = task.make_inputs(0)
    before = task.reference(x)["C"]
    x["A"][0, 0] += 1.0
    assert not np.allclose(task.reference(x)["C"], before)


def test_with_sizes_rejects_unknown_or_bad_sizes() -> None:
    with pytest.raises(KeyError, match="NQ"):
        get_task("gemm").with_sizes(NQ=4)
    with pytest.raises(ValueError, match="NI"):
        get_task("gemm").with_sizes(NI=0)


def test_contract_problems_name_what_is_wrong() -> None:
    task = get_task("2mm")
    src = task.baseline_source.replace("const float* B", "const double* B", 1).replace(
        "LAUNCH_mm2_d", "LAUNCH_x"
    )
    problems = contract_problems(task, src)
    assert any("mm2_tmp" in p and "double*" in p for p in problems)
    assert any("mm2_d" in p and "launch configuration" in p for p in problems)
    assert contract_problems(task, "") == ["the source is empty"]
    only_one = task.baseline_source.split('extern "C" __global__ void mm2_d')[0]
    assert any("mm2_d: not defined" in p for p in contract_problems(task, only_one))


def test_restrict_and_const_are_allowed_in_signatures() -> None:
    task = get_task("gemm")
    src = task.baseline_source.replace("float* C", "float* __restrict__ C").replace(
        "const float* A", "const float* __restrict__ A"
    )
    assert contract_problems(task, src) == []


# ---- plain loops for the dl, xsbench and npb families --------------------------------------------------


def _softmax(s: dict[str, int], x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    Y = np.zeros((s["BATCH"], s["DIM"]))
    for b in range(s["BATCH"]):
        m = max(x["X"][b, j] for j in range(s["DIM"]))
        total = sum(math.exp(x["X"][b, j] - m) for j in range(s["DIM"]))
        for j in range(s["DIM"]):
            Y[b, j] = math.exp(x["X"][b, j] - m) / total
    return {"Y": Y}


def _layer_norm(s: dict[str, int], x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    rows, cols = s["ROWS"], s["COLS"]
    Y = np.zeros((rows, cols))
    for r in range(rows):
        mean = sum(x["X"][r, j] for j in range(cols)) / cols
        var = sum((x["X"][r, j] - mean) ** 2 for j in range(cols)) / cols
        for j in range(cols):
            Y[r, j] = (x["X"][r, j] - mean) / math.sqrt(var + 1e-5) * x["gamma"][j] + x["beta"][j]
    return {"Y": Y}


def _linear_bias_gelu(s: dict[str, int], x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    Y = np.zeros((s["BATCH"], s["OUT_FEATURES"]))
    for b in range(s["BATCH"]):
        for o in range(s["OUT_FEATURES"]):
            z = x["bias"][o] + sum(x["X"][b, k] * x["weight"][o, k] for k in range(s["IN_FEATURES"]))
            Y[b, o] = 0.5 * z * (1.0 + math.erf(z / math.sqrt(2.0)))
    return {"Y": Y}


def _conv2d_nchw(s: dict[str, int], x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ks, hh, ww = s["KSIZE"], s["HEIGHT"], s["WIDTH"]
    Y = np.zeros((s["BATCH"], s["C_OUT"], hh, ww))
    for n in range(s["BATCH"]):
        for k in range(s["C_OUT"]):
            for h in range(hh):
                for w in range(ww):
                    acc = x["bias"][k]
                    for c in range(s["C_IN"]):
                        for r in range(ks):
                            for q in range(ks):
                                yy, xx = h + r - ks // 2, w + q - ks // 2
                                if 0 <= yy < hh and 0 <= xx < ww:
                                    acc += x["weight"][k, c, r, q] * x["X"][n, c, yy, xx]
                    Y[n, k, h, w] = acc
    return {"Y": Y}


def _sum_reduction(s: dict[str, int], x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    y = np.zeros(s["ROWS"])
    for r in range(s["ROWS"]):
        for j in range(s["COLS"]):
            y[r] += x["X"][r, j]
    return {"y": y}


def _interpolated(x: dict[str, np.ndarray], n: int, lo: int, e: float) -> list[float]:
    e_lo, e_hi = x["egrid"][n, lo], x["egrid"][n, lo + 1]
    f = (e_hi - e) / (e_hi - e_lo)
    return [x["xs"][n, lo + 1, c] - f * (x["xs"][n, lo + 1, c] - x["xs"][n, lo, c]) for c in range(x["xs"].shape[2])]


def _xs(s: dict[str, int], x: dict[str, np.ndarray], unionized: bool) -> dict[str, np.ndarray]:
    out = np.zeros((s["LOOKUPS"], s["NXS"]))
    g = s["GRIDPOINTS"]
    for lookup in range(s["LOOKUPS"]):
        e, m = x["energy"][lookup], int(x["mat"][lookup])
        # unionized: a linear scan of the union grid, then the index table (not a per-nuclide search)
        u = max(i for i in range(s["UNION"]) if x["union_energy"][i] <= e) if unionized else None
        for j in range(int(x["num_nucs"][m])):
            n = int(x["mat_nucs"][m, j])
            if unionized:
                lo = int(x["index_grid"][u, n])
            else:  # a linear scan for the interval holding e
                lo = max(i for i in range(g - 1) if x["egrid"][n, i] <= e)
            micro = _interpolated(x, n, lo, e)
            for c in range(s["NXS"]):
                out[lookup, c] += x["concs"][m, j] * micro[c]
    return {"macro_xs": out}


def _cg_spmv(s: dict[str, int], x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    y = np.zeros(s["NROWS"])
    for i in range(s["NROWS"]):
        for k in range(int(x["row_ptr"][i]), int(x["row_ptr"][i + 1])):
            y[i] += x["vals"][k] * x["x"][int(x["col_idx"][k])]
    return {"y": y}


def _mg_resid(s: dict[str, int], x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    a = (-8.0 / 3.0, 0.0, 1.0 / 6.0, 1.0 / 12.0)
    nz, ny, nx = s["NZ"], s["NY"], s["NX"]
    r = np.zeros((nz, ny, nx))
    for k in range(nz):
        for j in range(ny):
            for i in range(nx):
                acc = 0.0
                for dz in (-1, 0, 1):
                    for dy in (-1, 0, 1):
                        for dx in (-1, 0, 1):
                            acc += a[abs(dx) + abs(dy) + abs(dz)] * x["u"][(k + dz) % nz, (j + dy) % ny, (i + dx) % nx]
                r[k, j, i] = x["v"][k, j, i] - acc
    return {"r": r}


NEW_LOOPS = {
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "linear_bias_gelu": _linear_bias_gelu,
    "conv2d_nchw": _conv2d_nchw,
    "sum_reduction": _sum_reduction,
    "xs_lookup": lambda s, x: _xs(s, x, unionized=False),
    "xs_lookup_unionized": lambda s, x: _xs(s, x, unionized=True),
    "cg_spmv": _cg_spmv,
    "mg_resid": _mg_resid,
}


def test_softmax_inputs_overflow_without_the_row_maximum() -> None:
    x = small(get_task("softmax")).make_inputs(3)["X"]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        naive = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)  # float32, as a kernel would
    assert (~np.isfinite(naive)).any(axis=1).all()  # every row: inf / inf or 0 / 0


def test_xs_grids_and_materials_are_what_the_contract_says() -> None:
    task = small(get_task("xs_lookup_unionized"))
    x = task.make_inputs(5)
    g = task.sizes["GRIDPOINTS"]
    assert (x["egrid"][:, 0] == 0).all() and (x["egrid"][:, -1] == 1).all()
    assert (np.diff(x["egrid"], axis=1) > 0).all() and (x["energy"] >= 0).all() and (x["energy"] < 1).all()
    assert (np.diff(x["union_energy"]) >= 0).all()
    assert sorted(x["union_energy"].tolist()) == sorted(x["egrid"].reshape(-1).tolist())
    for u in range(task.sizes["UNION"]):
        for n in range(task.sizes["NUCLIDES"]):
            want = max(i for i in range(g - 1) if x["egrid"][n, i] <= x["union_energy"][u])
            assert x["index_grid"][u, n] == want
    for m in range(task.sizes["MATERIALS"]):
        count = int(x["num_nucs"][m])
        nucs = x["mat_nucs"][m, :count]
        assert 1 <= count <= task.sizes["MAX_NUCS"] and len(set(nucs.tolist())) == count
        assert ((nucs >= 0) & (nucs < task.sizes["NUCLIDES"])).all()
    assert x["num_nucs"][0] == task.sizes["MAX_NUCS"]  # the fuel has the most
    assert ((x["mat"] >= 0) & (x["mat"] < task.sizes["MATERIALS"])).all()


def test_cg_matrix_is_symmetric_positive_definite_csr_with_exactly_nnz() -> None:
    task = get_task("cg_spmv").with_sizes(NROWS=64, NNZ=64 * 9)
    x = task.make_inputs(2)
    n, rp, cols = 64, x["row_ptr"], x["col_idx"]
    assert rp[0] == 0 and rp[-1] == 64 * 9 and (np.diff(rp) >= 1).all()
    dense = np.zeros((n, n))
    for i in range(n):
        row = cols[rp[i] : rp[i + 1]]
        assert (np.diff(row) > 0).all()  # ascending, no duplicates
        dense[i, row] = x["vals"][rp[i] : rp[i + 1]]
    assert np.array_equal(dense, dense.T)
    off = np.abs(dense).sum(axis=1) - np.abs(np.diag(dense))
    assert (np.diag(dense) > off).all() and np.linalg.eigvalsh(dense).min() > 0
    assert len(set(np.diff(rp).tolist())) > 1  # row lengths vary


def test_sizes_that_do_not_fit_together_are_named() -> None:
    with pytest.raises(ValueError, match=r"UNION \(21\) must be NUCLIDES \* GRIDPOINTS"):
        small(get_task("xs_lookup_unionized")).with_sizes(UNION=21).make_inputs(0)
    with pytest.raises(ValueError, match=r"NNZ \(50\) must be NROWS \(11\) times an odd number"):
        get_task("cg_spmv").with_sizes(NROWS=11, NNZ=50).make_inputs(0)
    with pytest.raises(ValueError, match=r"MAX_NUCS \(10\) must not exceed NUCLIDES \(9\)"):
        small(get_task("xs_lookup")).with_sizes(MAX_NUCS=10).make_inputs(0)


def test_a_tasks_own_tolerance_wins_over_the_specs_default() -> None:
    from cudanalyst.runner.kernels.verify.correctness import tolerance_for

    own = {t.name: t.tolerance_override for t in all_tasks() if t.tolerance_override is not None}
    assert set(own) == {"softmax", "sum_reduction", "cg_spmv"}
    assert tolerance_for(get_task("sum_reduction"), 1e-4, 1e-4) == Tolerance(rtol=1e-5, atol=5e-3)
    assert tolerance_for(get_task("layer_norm"), 1e-3, 1e-3) == Tolerance(rtol=1e-3, atol=1e-3)
    assert tolerance_for(get_task("gemm"), 1e-4, 1e-4) == Tolerance(rtol=1e-4, atol=1e-4)


def test_each_family_names_a_baseline_that_leaves_a_large_speedup() -> None:
    """The docs' table says which baseline leaves a large speedup in each family; the GPU test times a
    faster kernel of each (tests/gpu/test_task_suite.py)."""
    from pathlib import Path

    docs = (Path(__file__).parents[1] / "docs" / "tasks.md").read_text()
    for task in all_tasks():
        assert f"| {task.name} | {task.family} |" in docs, task.name
    for family in NEW_FAMILIES:
        rows = [line for line in docs.splitlines() if f"| {family} |" in line]
        assert any("large speedup" in line for line in rows), family


def test_gelu_without_scipy_is_the_same(monkeypatch) -> None:  # noqa: ANN001 - pytest fixture
    from cudanalyst.tasks import dl

    z = np.linspace(-6.0, 6.0, 241)
    with_scipy = dl.gelu(z)
    monkeypatch.setitem(__import__("sys").modules, "scipy.special", None)  # `from scipy.special import` fails
    np.testing.assert_allclose(dl.gelu(z), with_scipy, rtol=1e-15, atol=1e-15)
