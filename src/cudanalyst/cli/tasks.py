"""`cudanalyst tasks`: list the bundled kernel tasks; `cudanalyst tasks show NAME` prints a contract."""

from __future__ import annotations

import argparse

from cudanalyst.cli.common import die
from cudanalyst.tasks import Role, Task, UnknownTaskError, all_tasks, get_task


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tasks", help="list the kernel tasks, or show one task's contract", description=__doc__
    )
    inner = p.add_subparsers(dest="tasks_command", metavar="ACTION")
    show = inner.add_parser("show", help="print the contract quoted to the model")
    show.add_argument("name", help="task name, e.g. gemm")
    show.add_argument("--baseline", action="store_true", help="also print the baseline kernel source")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "tasks_command", None) == "show":
        try:
            task = get_task(args.name)
        except UnknownTaskError as exc:
            die(str(exc))
        print(task.contract())
        if args.baseline:
            print("\nBaseline kernel:\n" + task.baseline_source.strip())
        return 0
    rows = [
        (t.name, t.family, ", ".join(f"{k}={v}" for k, v in t.sizes.items()), _dtypes(t), _tolerance(t),
         str(len(t.kernels)))
        for t in all_tasks()
    ]
    head = ("NAME", "FAMILY", "SIZES", "DTYPE", "TOLERANCE", "KERNELS")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _tolerance(task: Task) -> str:
    """`rtol=1e-05,atol=0.005`, or with `(spec)` where the AttributionRun's evaluation.rtol/atol (whose
    defaults these are) apply instead: tasks without a tolerance of their own."""
    tol = task.tolerance()
    text = f"rtol={tol.rtol:g},atol={tol.atol:g}"
    return text if task.tolerance_override is not None else f"{text}(spec)"


def _dtypes(task: Task) -> str:
    """The data dtype, then any other dtype a parameter has (int32 index arrays): `float32,int32`."""
    others = sorted({p.dtype for p in task.params if p.role is not Role.STEP} - {task.dtype})
    return ",".join([task.dtype, *others])
