"""A one-shot host program for the external tools (Nsight Compute, compute-sanitizer).

`python -m cudanalyst.runner.kernels.verify.launch_once --task gemm --cubin prog.cubin [--sizes JSON] [--runs N]`
loads the cubin, fills the task's inputs for one seed (outputs prefilled with NaN, as in verification),
launches the kernel sequence N times and synchronizes. A kernel declared without extern "C" is launched by
its mangled name (`cubin_globals.entry_symbol`): the tools then still check the kernel the program wrote, while
verification keeps refusing it.

Exit status (the callers tell a tool failure from the program's by it):
0 every launch succeeded; 1 a launched kernel failed (CUDA error); 2 bad arguments; 3 the program's kernels
could not be launched (not in the module, no launch configuration: the program's contract);
4 no CUDA context (no GPU, or no memory free for one: the machine's doing, not the program's).
Before launching it prints `launch_once: launched <kernel>[, ...]` on stderr, so a caller knows a kernel ran.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_OK, EXIT_RUN, EXIT_ARGS, EXIT_CONTRACT, EXIT_CONTEXT = 0, 1, 2, 3, 4
LAUNCHED = "launch_once: launched "


def launch_symbols(task_kernels: list[str], cubin: bytes) -> dict[str, str]:
    """The symbol to launch per contract kernel, where the cubin has it under another (mangled) name (pure)."""
    from cudanalyst.runner.kernels.compile.cubin_globals import CubinFormatError, entry_symbol

    out = {}
    for name in task_kernels:
        try:
            symbol = entry_symbol(cubin, name)
        except CubinFormatError:
            return {}
        if symbol is not None and symbol != name:
            out[name] = symbol
    return out


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
        return EXIT_ARGS
    from cudanalyst.runner.kernels.verify.correctness import (
        Buffers,
        ContractError,
        ContractLauncher,
        resolve_task,
    )

    task = resolve_task(args.task, sizes)
    import pycuda.driver as cuda

    try:
        cuda.init()
        ctx = cuda.Device(0).make_context()
    except cuda.Error as exc:
        print(f"launch_once: no CUDA context: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_CONTEXT
    try:
        try:
            symbols = launch_symbols([k.name for k in task.kernels], cubin)
            launcher = ContractLauncher(cuda, task, cuda.module_from_buffer(cubin), symbols)
        except (ContractError, cuda.Error) as exc:
            print(f"launch_once: {type(exc).__name__}: {exc}", file=sys.stderr)
            return EXIT_CONTRACT
        # The tools launch one program up to five times (four sanitizer tools, ncu): its caller shares the inputs
        # between them through CUDANALYST_REFERENCE_DIR (cg_spmv's take seconds to make).
        from cudanalyst.runner.kernels.workers.references import SharedArrays, task_inputs

        buffers = Buffers(cuda, task, task_inputs(SharedArrays.from_environment(), task, args.seed))
        buffers.reset()
        stream = cuda.Stream()
        names = [symbols.get(k.name, k.name) for k in task.kernels]
        print(LAUNCHED + ", ".join(names), file=sys.stderr, flush=True)
        for _ in range(max(1, args.runs)):
            launcher(stream, buffers)
        ctx.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported to the tool's caller through the exit status
        print(f"launch_once: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_RUN
    finally:
        ctx.pop()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
