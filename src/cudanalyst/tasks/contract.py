"""The contract text of a task: short and exact, because prompts quote it to the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cudanalyst.tasks.base import Task

from cudanalyst.tasks.base import Role


def _shape_text(task: Task, name: str) -> str:
    p = task.param(name)
    if not p.shape:
        return ""
    return "[" + "][".join(p.shape) + "]"


def _param_lines(task: Task) -> list[str]:
    roles = {
        Role.IN: "input, read only",
        Role.OUT: "output, filled with NaN before the run; write every element",
        Role.INOUT: "input and output",
        Role.TEMP: "scratch buffer for your own use, filled with NaN before the run",
        Role.SCALAR: "scalar",
        Role.STEP: f"time step index 0..{task.repeat_size}-1 of this launch",
    }
    return [f"  {p.name}{_shape_text(task, p.name)} {p.dtype}: {roles[p.role]}" for p in task.params]


def render_contract(task: Task) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in task.sizes.items())
    kernels = "\n".join(f"  {i}. {k.name}: {k.does}" for i, k in enumerate(task.kernels, start=1))
    sig = "\n".join(f"  {task.signature(k)}" for k in task.kernel_names)
    launch = "\n".join(
        f'  extern "C" __constant__ int LAUNCH_{k}[6] = {{gridX, gridY, gridZ, blockX, blockY, blockZ}};'
        for k in task.kernel_names
    )
    if task.repeat_size is None:
        order = "The harness launches the kernels once each, in this order, on the default stream:"
    else:
        order = (
            f"The harness launches the kernels in this order on the default stream, and repeats the whole "
            f"sequence {task.repeat_size} times:"
        )
    return "\n".join(
        [
            f"Task {task.name}: {task.summary}",
            f"Sizes (prepended as #define lines; use the names, not the numbers): {sizes}.",
            f"Parameters ({task.dtype}; {task.layout_note}):",
            *_param_lines(task),
            order,
            kernels,
            "Your source must define exactly these kernels, each with this exact parameter list "
            "(you may add __restrict__ to pointers):",
            sig,
            "and each kernel's launch configuration as a constant array:",
            launch,
            "Grid and block sizes may use the size macros. Use static __shared__ arrays only (no dynamic "
            "shared memory), no streams, no host code, no main(). The source is compiled as is with nvcc "
            "for sm_90; you may write helper __device__ functions.",
        ]
    )
