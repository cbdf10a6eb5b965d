"""The worker's fast host-side checks give the verdicts and messages of the plain numpy checks.

The plain checks live in bench/verify_checks.py (the benchmark's "before" side) and are the oracle
here: every case below goes through both, per seed, as verify_candidate runs them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from script_support import load_script

from cudanalyst.runner.kernels.verify import correctness as verify
from cudanalyst.tasks import Tolerance, get_task

ROOT = Path(__file__).resolve().parents[1]
TOL = Tolerance(rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def bench():
    return load_script(ROOT / "bench" / "verify_checks.py", "bench_verify_checks")


def _both(bench, task, ins, want, runs):
    plain = bench.plain_seed(task, ins, want, runs, TOL)
    fast = bench.fast_seed(task, ins, want, runs, TOL)
    assert fast[0] == plain[0]
    assert fast[1] == pytest.approx(plain[1], rel=1e-12, abs=0)
    return fast[0]


def _case(bench, name="jacobi-2d", **sizes):
    task = get_task(name).with_sizes(**sizes) if sizes else get_task(name)
    ins, want, runs = bench.readings(task, 1000)
    return task, ins, want, runs


def test_a_correct_kernel_passes_both_with_the_same_largest_error(bench):
    task, ins, want, runs = _case(bench, "gemm", NI=40, NJ=30, NK=20)
    for early, late, _ in runs:
        early["C"] += np.float32(3e-5)  # inside the tolerance: max error is what both report
        late["C"][...] = early["C"]
    assert _both(bench, task, ins, want, runs) is None


@pytest.mark.parametrize("edit, expect", [
    (lambda out: out.__setitem__((3, 4), np.nan), "never written"),
    (lambda out: out.__setitem__((slice(None), 7), np.nan), "never written"),
    (lambda out: out.__setitem__((5, 5), out[5, 5] + 1.0), "differ from the reference"),
    (lambda out: out.__setitem__((0, 0), np.inf), "differ from the reference"),
    (lambda out: out.__imul__(np.float32(1.001)), "differ from the reference"),
])
def test_wrong_outputs_give_the_same_message(bench, edit, expect):
    task, ins, want, runs = _case(bench, N=24, TSTEPS=3)
    edit(runs[0][0]["B"])
    runs[0][1]["B"][...] = runs[0][0]["B"]  # the second reading agrees: no late write
    why = _both(bench, task, ins, want, runs)
    assert why is not None and expect in why


def test_nan_and_inf_in_the_reference_count_as_equal_where_the_output_matches(bench):
    task, ins, want, runs = _case(bench, N=24, TSTEPS=3)
    for arr in (want["B"], *(r[0]["B"] for r in runs), *(r[1]["B"] for r in runs)):
        arr[2, 2], arr[3, 3] = np.nan, np.inf
    assert _both(bench, task, ins, want, runs) is None


def test_second_run_late_writes_and_modified_inputs(bench):
    task, ins, want, runs = _case(bench, "atax", M=30, N=20)
    runs[1][0]["y"][0] += 1.0  # beyond tolerance in run 2 only
    runs[1][1]["y"][0] = runs[1][0]["y"][0]
    assert "1 of 20 elements differ" in _both(bench, task, ins, want, runs)

    task, ins, want, runs = _case(bench, "atax", M=30, N=20)
    runs[0][1]["y"][1] += 1.0  # changed after the stream sync
    assert "another stream" in _both(bench, task, ins, want, runs)

    task, ins, want, runs = _case(bench, "atax", M=30, N=20)
    runs[1][2]["A"][2, 3] = -1.0
    assert "input A was modified by the candidate (1 of 600 elements" in _both(bench, task, ins, want, runs)


def test_bitwise_differences_that_compare_equal_are_not_changes(bench):
    """-0.0 for 0.0 and a NaN with another payload: the fast path sees different bits, the verdict stays."""
    task, ins, want, runs = _case(bench, "atax", M=30, N=20)
    quiet = np.array([0x7FC00001], dtype=np.uint32).view(np.float32)[0]
    want["y"][0] = np.nan
    for early, late, _ in runs:
        early["y"][0], late["y"][0] = np.nan, quiet
    ins["x"][0] = runs[1][2]["x"][0] = 0.0
    runs[0][2]["x"][0] = -0.0
    assert _both(bench, task, ins, want, runs) is None


def test_runs_that_differ_within_tolerance_pass_and_beyond_it_fail(bench):
    task, ins, want, runs = _case(bench, "atax", M=30, N=20)
    runs[1][0]["y"][4] += np.float32(1e-3)
    runs[1][1]["y"][4] = runs[1][0]["y"][4]
    assert _both(bench, task, ins, want, runs) is None


def test_threshold_is_isclose_bound():
    want = np.array([0.0, -2.0, 1e6], np.float32)
    assert verify.threshold(want, TOL).tolist() == pytest.approx([1e-4, 1e-4 + 2e-4, 1e-4 + 100.0])
    assert verify.compare_output("y", np.array([1.0], np.float32), np.array([[1.0]], np.float32), TOL).startswith(
        "output y: shape")
