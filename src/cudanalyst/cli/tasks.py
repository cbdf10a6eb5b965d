"""`cudanalyst tasks`: list the bundled kernel tasks; `cudanalyst tasks show NAME` prints a contract."""

from __future__ import annotations

import argparse

from cudanalyst.cli.common import die
from cudanalyst.tasks import UnknownTaskError, all_tasks, get_task


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
        (t.name, ", ".join(f"{k}={v}" for k, v in t.sizes.items()), t.dtype, str(len(t.kernels)))
        for t in all_tasks()
    ]
    head = ("NAME", "SIZES", "DTYPE", "KERNELS")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0
