"""A one-shot host program for the external tools (Nsight Compute, compute-sanitizer).

`python -m cudanalyst.runner.kernels.verify.launch_once --task gemm --cubin prog.cubin [--sizes JSON] [--runs N]`
loads the cubin, fills the task's inputs for one seed (outputs prefilled with NaN, as in verification),
launches the kernel sequence N times and synchronizes. Exit status: 0 when every launch succeeded,
1 on a CUDA error (message on stderr), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True)
    p.add_argument("--cubin", required=True, type=Path)
    p.add_argument("--sizes", default="{}", help="JSON object of size overrides")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        sizes = json.loads(args.sizes)
        cubin = args.cubin.read_bytes()
    except (ValueError, OSError) as exc:
        print(f"launch_once: {exc}", file=sys.stderr)
        return 2
    from cudanalyst.runner.kernels.verify.correctness import Buffers, ContractLauncher, resolve_task

    task = resolve_task(args.task, sizes)
    import pycuda.driver as cuda

    cuda.init()
    ctx = cuda.Device(0).make_context()
    try:
        launcher = ContractLauncher(cuda, task, cuda.module_from_buffer(cubin))
        buffers = Buffers(cuda, task, task.make_inputs(args.seed))
        buffers.reset()
        stream = cuda.Stream()
        for _ in range(max(1, args.runs)):
            launcher(stream, buffers)
        ctx.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported to the tool's caller through the exit status
        print(f"launch_once: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        ctx.pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
