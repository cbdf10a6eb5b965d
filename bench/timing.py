"""How repeatable are our kernel timings, and do they agree with an independent measurement?

For 3 task baselines (gemm, atax, conv2d) on the GPU: our median (CUDA events, L2 flushed, 30 trials)
repeated 5 times -> the CV of those medians and the mean within-run CV; and triton's do_bench (its own
events and L2 flush, median) on the very same launch in the same process and context. Target: medians
within 2 %. Prints one table. Run on the GPU machine (scripts/device/run.sh full).
"""

from __future__ import annotations

import statistics
import sys

from cudanalyst.runner.kernels.compile import compile_task_source
from cudanalyst.runner.kernels.timing import summarize, time_launches
from cudanalyst.runner.kernels.verify import Buffers, ContractLauncher
from cudanalyst.runner.kernels.worker import GpuSession
from cudanalyst.tasks import get_task

TASKS = ("gemm", "atax", "conv2d")
REPEATS = 5


class SharedContextSession(GpuSession):
    """A GpuSession on the device's primary context, which torch and triton use too."""

    def __init__(self) -> None:
        import pycuda.driver as cuda

        cuda.init()
        self._setup(cuda, cuda.Device(0))
        self.context = self.device.retain_primary_context()
        self.context.push()


def main() -> int:
    import torch
    from triton.testing import do_bench

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # make torch's primary context current first
    session = SharedContextSession()
    rows = []
    for name in TASKS:
        task = get_task(name)
        compiled = compile_task_source(task, task.baseline_source)
        launcher = ContractLauncher(session.cuda, task, session.cuda.module_from_buffer(compiled.cubin))
        buffers = Buffers(session.cuda, task, task.make_inputs(0))
        medians, cvs = [], []
        for _ in range(REPEATS):
            stats = summarize(time_launches(session, launcher, buffers, warmup=3, trials=30))
            medians.append(stats.median_ms)
            cvs.append(stats.cv)
        ours = statistics.median(medians)
        # do_bench records its events on torch's current stream, the legacy default stream (None here).
        theirs = do_bench(lambda la=launcher, bu=buffers: la(None, bu), warmup=25, rep=200, return_mode="median")
        rows.append((name, ours, statistics.pstdev(medians) / statistics.mean(medians), statistics.mean(cvs),
                     theirs, abs(ours - theirs) / theirs))
        buffers.free()
    print(f"{'kernel':10} {'our median ms':>14} {'CV of 5 medians':>16} {'mean CV in run':>15} "
          f"{'do_bench ms':>12} {'difference':>11}")
    for name, ours, cv_med, cv_in, theirs, diff in rows:
        print(f"{name:10} {ours:14.4f} {cv_med:16.2%} {cv_in:15.2%} {theirs:12.4f} {diff:11.2%}")
    worst = max(r[5] for r in rows)
    print(f"largest difference from do_bench: {worst:.2%} (target: within 2 %) -> {'OK' if worst <= 0.02 else 'MISSED'}")
    session.context.pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
