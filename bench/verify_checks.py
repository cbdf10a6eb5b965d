#!/usr/bin/env python
"""The host-side checks of one verification: the plain numpy checks against the ones the worker uses.

  python bench/verify_checks.py [--tasks gemm,atax,jacobi-2d,conv2d] [--repeats 5]

Per seed, a GPU worker reads each output twice (after the launch stream, after the device) and the
inputs once, for two runs, then checks them (late writes, modified inputs, outputs against the
reference, run against run) and takes the largest error. `plain_checks` below does that as the
worker did before (float64 copies and NaN masks over every array); `runner.kernels.verify.correctness` does it
with one float64 pass and bitwise fast paths, falling back to the plain checks only for elements
that fail. Both sides check the same arrays (a correct candidate: the reference itself), so the
ratio is the saving per seed of a correct kernel; tests/test_verify_checks.py checks that both give
the same verdicts and messages. No GPU needed: this is the part of verification that runs on the CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from cudanalyst.runner.kernels.verify import correctness as verify
from cudanalyst.tasks import Task, Tolerance, get_task
from cudanalyst.tasks.base import Role


# ---- the plain checks (the worker's before this change; the tests' oracle) --------------------------
def plain_compare_output(name: str, got: np.ndarray, want: np.ndarray, tol: Tolerance) -> str | None:
    if got.shape != want.shape:
        return f"output {name}: shape {got.shape}, expected {want.shape}"
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    unwritten = np.isnan(got64) & ~np.isnan(want64)
    if unwritten.any():
        first = verify._index(int(np.flatnonzero(unwritten)[0]), got.shape)
        return (f"output {name}: {int(unwritten.sum())} of {got.size} elements were never written "
                f"(still the NaN the harness prefilled), first at {list(first)}")
    close = np.isclose(got64, want64, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    if not close.all():
        bad = np.flatnonzero(~close)
        first = int(bad[0])
        err = np.abs(got64 - want64)
        return (f"output {name}: {bad.size} of {got.size} elements differ from the reference beyond "
                f"rtol={tol.rtol:g}, atol={tol.atol:g}; first at {list(verify._index(first, got.shape))}: got "
                f"{got64.flat[first]:.6g}, expected {want64.flat[first]:.6g}; max abs error {np.nanmax(err):.3g}")
    return None


def plain_compare_runs(first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray], tol: Tolerance) -> str | None:
    for name, a in first.items():
        if not np.allclose(a.astype(np.float64), second[name].astype(np.float64), rtol=tol.rtol, atol=tol.atol,
                           equal_nan=True):
            return f"output {name}: the second run of the candidate differs from the first (state kept between calls?)"
    return None


def plain_modified_inputs(before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray]) -> str | None:
    for name, a in before.items():
        b = after[name]
        if not np.array_equal(a, b, equal_nan=True):
            changed = int(np.sum(~((a == b) | (np.isnan(a) & np.isnan(b)))))
            return f"input {name} was modified by the candidate ({changed} of {a.size} elements changed)"
    return None


def plain_late_writes(early: Mapping[str, np.ndarray], late: Mapping[str, np.ndarray]) -> str | None:
    for name, a in early.items():
        if not np.array_equal(a, late[name], equal_nan=True):
            return (f"output {name} changed after the launch stream had finished: work was left running on "
                    "another stream or after the launch returned")
    return None


Readings = tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]


def plain_seed(task: Task, ins: dict[str, np.ndarray], want: dict[str, np.ndarray], runs: Sequence[Readings],
               tol: Tolerance) -> tuple[str | None, float]:
    for early, late, inputs_after in runs:
        problem = (plain_late_writes(early, late) or plain_modified_inputs(ins, inputs_after)
                   or next((why for n in task.outputs if (why := plain_compare_output(n, early[n], want[n], tol))), None))
        if problem:
            return problem, 0.0
    if (problem := plain_compare_runs(runs[0][0], runs[1][0], tol)) is not None:
        return problem, 0.0
    worst = max((float(np.nanmax(np.abs(runs[0][0][n].astype(np.float64) - want[n]), initial=0)) for n in task.outputs),
                default=0.0)
    return None, worst


def fast_seed(task: Task, ins: dict[str, np.ndarray], want: dict[str, np.ndarray], runs: Sequence[Readings],
              tol: Tolerance) -> tuple[str | None, float]:
    """What verify_candidate does per seed with the same readings."""
    bounds = {n: verify.threshold(want[n], tol) for n in task.outputs}
    worst = 0.0
    for i, (early, late, inputs_after) in enumerate(runs):
        problem = verify.late_writes(early, late) or verify.modified_inputs(ins, inputs_after)
        for n in task.outputs:
            if problem:
                break
            problem, err = verify.check_output(n, early[n], want[n], tol, bounds[n])
            if i == 0:
                worst = max(worst, err)
        if problem:
            return problem, 0.0
    if (problem := verify.compare_runs(runs[0][0], runs[1][0], tol)) is not None:
        return problem, 0.0
    return None, worst


def readings(task: Task, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[Readings]]:
    inputs = task.make_inputs(seed)
    want = task.reference(inputs)
    ins = {p.name: inputs[p.name] for p in task.params if p.role is Role.IN}
    # What the worker reads back from a correct kernel: fresh host copies, as from the device.
    runs = [({k: v.copy() for k, v in want.items()}, {k: v.copy() for k, v in want.items()},
             {k: v.copy() for k, v in ins.items()}) for _ in range(2)]
    return ins, want, runs


def seconds(check: Callable[..., object], *args: object) -> float:
    t0 = time.perf_counter()
    check(*args)
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="gemm,atax,jacobi-2d,conv2d")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    tol = Tolerance(rtol=1e-4, atol=1e-4)
    print(f"{'task':<10} {'plain ms':>9} {'fast ms':>8} {'ratio':>6}   (one seed of a correct candidate, best of "
          f"{args.repeats}, interleaved)")
    plain_total = fast_total = 0.0
    for name in args.tasks.split(","):
        task = get_task(name)
        ins, want, runs = readings(task, 1000)
        assert plain_seed(task, ins, want, runs, tol)[0] is None and fast_seed(task, ins, want, runs, tol)[0] is None
        plains, fasts = [], []
        for _ in range(args.repeats):  # interleaved, so load on the machine hits both sides alike
            plains.append(seconds(plain_seed, task, ins, want, runs, tol))
            fasts.append(seconds(fast_seed, task, ins, want, runs, tol))
        plain, fast = min(plains), min(fasts)
        plain_total, fast_total = plain_total + plain, fast_total + fast
        print(f"{name:<10} {plain * 1e3:9.1f} {fast * 1e3:8.1f} {plain / fast:5.1f}x")
    print(f"{'all':<10} {plain_total * 1e3:9.1f} {fast_total * 1e3:8.1f} {plain_total / fast_total:5.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
