"""How repeatable are our kernel timings, and do they agree with an independent measurement?

For five task baselines on the GPU, the single-launch ones (gemm, atax, conv2d) and the multi-launch ones
(jacobi-2d and fdtd-2d: 40 and 60 launches a run): our median (timing.py's `compare` request: inputs
restored, outputs poisoned and module variables reset before each trial, L2 flushed, CUDA events, a CUDA
graph for a launch sequence) repeated 5 times -> the CV of those medians and the mean within-run CV; and
triton's do_bench (its own events and L2 flush, median) on the very same launch (the same graph) in the
same process and context. Target: medians within 2 %. Then the A/A ratio: the baseline against an
identical copy of itself, interleaved in one request, as the kernel stage times a candidate against its
frozen program. Prints one table. Run on the GPU machine (scripts/device/run.sh full).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
from cudanalyst.runner.kernels.timing.trials import Program, TaskData, graph_api, handle_compare, speedup
from cudanalyst.runner.kernels.verify.checker import checker_cubin
from cudanalyst.runner.kernels.workers.requests import EvalSettings, TimedProgram, compare_request, seeds_for
from cudanalyst.runner.kernels.workers.worker import GpuSession
from cudanalyst.tasks import get_task

TASKS = ("gemm", "atax", "conv2d", "jacobi-2d", "fdtd-2d")
REPEATS = 5


class SharedContextSession(GpuSession):
    """A GpuSession on the device's primary context, which torch and triton use too."""

    def __init__(self) -> None:
        import pycuda.driver as cuda

        cuda.init()
        self._setup(cuda, cuda.Device(0))
        self.context = self.device.retain_primary_context()
        self.context.push()


class _LegacyStream:
    """The legacy default stream (handle 0), where torch's do_bench records its events."""

    handle = 0


def _ours(session: GpuSession, task: Any, cubins: dict[str, bytes]) -> dict[str, Any]:
    request = compare_request(task, [TimedProgram(n, c) for n, c in cubins.items()], EvalSettings())
    reply = handle_compare(session, request.wire())
    assert reply["ok"], reply
    return reply["programs"]


def main() -> int:
    import torch
    from triton.testing import do_bench

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # make torch's primary context current first
    session = SharedContextSession()
    cfg = EvalSettings()
    rows = []
    for name in TASKS:
        task = get_task(name)
        cubin = compile_task_source(task, task.baseline_source).cubin
        assert cubin is not None
        medians, cvs = [], []
        for _ in range(REPEATS):
            stats = _ours(session, task, {"baseline": cubin})["baseline"]["stats"]
            medians.append(stats["median_ms"])
            cvs.append(stats["cv"])
        ours = statistics.median(medians)
        data = TaskData(session, task, list(seeds_for(cfg).timing), session.auditor(checker_cubin()))
        program = Program(session, data, "baseline", cubin)
        stream = session.cuda.Stream()
        data.prepare_async(0, stream)
        api = graph_api()
        if program.launches > 1 and api is not None:
            program.capture(api, stream)
        stream.synchronize()
        graph = program.graphs.get(0)
        # do_bench records its events on torch's current stream, the legacy default stream.
        launch = (lambda g=graph: g.launch(_LegacyStream())) if graph else (lambda p=program: p._record(0, None))
        theirs = do_bench(launch, warmup=25, rep=200, return_mode="median")
        program.close()
        data.free()
        aa = _ours(session, task, {"original": cubin, "copy": cubin})
        ratio = speedup(aa["original"]["stats"]["median_ms"], aa["copy"]["stats"]["median_ms"])
        rows.append((name, task.repeat * len(task.kernels), bool(graph), ours,
                     statistics.pstdev(medians) / statistics.mean(medians), statistics.mean(cvs), theirs,
                     abs(ours - theirs) / theirs, ratio))
    print(f"{'kernel':10} {'launches':>8} {'graph':>5} {'our median ms':>14} {'CV of 5 medians':>16} "
          f"{'mean CV in run':>15} {'do_bench ms':>12} {'difference':>11} {'A/A ratio':>10}")
    for name, launches, graph, ours, cv_med, cv_in, theirs, diff, ratio in rows:
        print(f"{name:10} {launches:8d} {'yes' if graph else 'no':>5} {ours:14.4f} {cv_med:16.2%} {cv_in:15.2%} "
              f"{theirs:12.4f} {diff:11.2%} {ratio:10.3f}")
    worst = max(r[7] for r in rows)
    print(f"largest difference from do_bench: {worst:.2%} (target: within 2 %) -> {'OK' if worst <= 0.02 else 'MISSED'}")
    worst_aa = max(abs(r[8] - 1) for r in rows)
    print(f"largest A/A departure from 1.00x: {worst_aa:.2%}")
    session.context.pop()
    return 0


if __name__ == "__main__":
    # No options; --help says what the script measures before it takes the GPU.
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    sys.exit(main())
