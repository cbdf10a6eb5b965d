"""The task suite: definitions, contracts, and numpy references checked against plain loops."""

from __future__ import annotations

import numpy as np
import pytest

from cudanalyst.tasks import Role, UnknownTaskError, all_tasks, get_task
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
TASK_NAMES = [t.name for t in all_tasks()]


def test_suite_has_the_required_tasks() -> None:
    assert set(TASK_NAMES) >= REQUIRED
    assert len(TASK_NAMES) >= 14


def test_unknown_task_names_the_task_and_the_known_ones() -> None:
    with pytest.raises(KeyError) as info:
        get_task("gemmm")
    assert isinstance(info.value, UnknownTaskError)
    assert "gemmm" in str(info.value) and "gemm" in str(info.value) and "conv2d" in str(info.value)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_definition_is_complete(name: str) -> None:
    task = get_task(name)
    assert task.dtype == "float32" and task.outputs
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
        assert a[k].dtype == np.float32 and a[k].shape == task.shape(k)
        np.testing.assert_array_equal(a[k], b[k])
    assert any(not np.array_equal(a[k], c[k]) for k in a)
    ref = task.reference(a)
    assert set(ref) == set(task.outputs)
    assert all(ref[k].dtype == np.float32 and ref[k].shape == task.shape(k) for k in ref)


def small(task):  # noqa: ANN001, ANN201 - test helper
    """Small sizes keep the loop references quick; odd sizes catch transposed shapes."""
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
