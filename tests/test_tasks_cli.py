"""`cudanalyst tasks` and `cudanalyst tasks show NAME` through the real entry point."""

from __future__ import annotations

import subprocess
import sys

from cudanalyst.tasks import all_tasks, get_task


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cudanalyst", "tasks", *args], capture_output=True, text=True
    )


def test_list_shows_every_task_with_family_sizes_dtype_and_tolerance() -> None:
    out = cli()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["NAME", "FAMILY", "SIZES", "DTYPE", "TOLERANCE", "KERNELS"]
    for task in all_tasks():
        row = next(line for line in lines if line.split()[0] == task.name)
        assert row.split()[1] == task.family
        assert "float32" in row and all(f"{k}={v}" in row for k, v in task.sizes.items())
        tol = task.tolerance()
        assert f"rtol={tol.rtol:g},atol={tol.atol:g}" in row
        # a task without a tolerance of its own is held to the spec's evaluation.rtol/atol
        assert row.split()[-2].endswith("(spec)") == (task.tolerance_override is None)
    families = {line.split()[1] for line in lines[1:]}
    assert families == {"polybench", "dl", "xsbench", "npb"}
    assert "float32,int32" in next(line for line in lines if line.startswith("cg_spmv "))
    assert "rtol=1e-05,atol=0.005" in next(line for line in lines if line.startswith("sum_reduction "))


def test_show_prints_the_contract() -> None:
    out = cli("show", "2mm")
    assert out.returncode == 0
    assert out.stdout.strip() == get_task("2mm").contract().strip()


def test_show_unknown_task_exits_2_and_names_it() -> None:
    out = cli("show", "gemmm")
    assert out.returncode == 2 and out.stdout == ""
    assert "gemmm" in out.stderr and "known tasks" in out.stderr and "conv2d" in out.stderr
