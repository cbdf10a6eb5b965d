"""Candidates evaluated per hour: the compile pool + persistent workers against one at a time.

Both modes evaluate unique candidates (a comment makes each source distinct, and the compile cache
starts empty) of one task through `evaluate_candidates`, the stage's real interface, on the GPU:
- one at a time: one nvcc at a time, and a fresh worker process (a new CUDA context) per candidate;
- pooled: all candidates in one call, COMPILE_WORKERS nvcc processes and GPU_WORKERS persistent workers.
Prints one table with the ratio, measured side by side in one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates
from cudanalyst.runner.kernels.workers.pool import WorkerPool
from cudanalyst.tasks import get_task

TASK = "atax"
SERIAL_N = int(os.environ.get("BENCH_SERIAL_N", "8"))
POOLED_N = int(os.environ.get("BENCH_POOLED_N", "64"))
COMPILE_WORKERS = int(os.environ.get("BENCH_COMPILE_WORKERS", str(os.cpu_count() or 4)))
GPU_WORKERS = int(os.environ.get("BENCH_GPU_WORKERS", "4"))


def jobs(prefix: str, n: int) -> list[KernelJob]:
    base = get_task(TASK).baseline_source
    return [KernelJob(f"{prefix}-{i}", TASK, f"{base}\n// candidate {prefix} {i} {time.time_ns()}\n", base)
            for i in range(n)]


def main() -> int:
    os.environ["CUDANALYST_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="bench-cache-")
    serial_cfg = EvalSettings(compile_workers=1, gpu_workers=1)
    pooled_cfg = EvalSettings(compile_workers=COMPILE_WORKERS, gpu_workers=GPU_WORKERS)
    # Warm the frozen/baseline compile into the cache so both modes pay only for candidates.
    evaluate_candidates(jobs("warm", 1), serial_cfg, gpu=True)

    t0 = time.perf_counter()
    serial = [evaluate_candidates([j], serial_cfg, gpu=True)[0] for j in jobs("serial", SERIAL_N)]
    serial_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    with WorkerPool(GPU_WORKERS) as pool:
        pooled = evaluate_candidates(jobs("pooled", POOLED_N), pooled_cfg, gpu=True, pool=pool)
    pooled_s = time.perf_counter() - t0

    bad = [r for r in serial + pooled if r.label not in ("pass", "fast")]
    per_hour_serial = SERIAL_N / serial_s * 3600
    per_hour_pooled = POOLED_N / pooled_s * 3600
    print(f"{'mode':34} {'candidates':>10} {'seconds':>8} {'s/candidate':>12} {'per hour':>9}")
    print(f"{'one at a time (1 nvcc, new process)':34} {SERIAL_N:10d} {serial_s:8.1f} {serial_s / SERIAL_N:12.3f} {per_hour_serial:9.0f}")
    print(f"{f'pooled ({COMPILE_WORKERS} nvcc, {GPU_WORKERS} workers)':34} {POOLED_N:10d} {pooled_s:8.1f} {pooled_s / POOLED_N:12.3f} {per_hour_pooled:9.0f}")
    print(f"pooled / one at a time: {per_hour_pooled / per_hour_serial:.1f}x; candidates not correct: {len(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    # No options; --help says what the script measures before it takes the GPU.
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    sys.exit(main())
