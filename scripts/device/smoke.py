"""Smoke test of the kernel stage on the GPU machine: worker, verify, timing, restarts, ncu, sanitizer."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates
from cudanalyst.runner.kernels.workers.pool import WorkerPool
from cudanalyst.tasks import get_task

GEMM = get_task("gemm")
HANG = GEMM.baseline_source.replace("if (i < NI && j < NJ) {", "volatile int spin = 1; while (spin) { }\n    if (i < NI && j < NJ) {")
OOB = GEMM.baseline_source.replace("C[i * NJ + j] = alpha", "C[i * NJ + j + (1 << 28)] = alpha")
NOTHING = GEMM.baseline_source.replace("C[i * NJ + j] = alpha * acc + beta * C[i * NJ + j];", "")

jobs = [KernelJob("base", "gemm", GEMM.baseline_source, GEMM.baseline_source),
        KernelJob("hang", "gemm", HANG, GEMM.baseline_source),
        KernelJob("oob", "gemm", OOB, GEMM.baseline_source),
        KernelJob("nothing", "gemm", NOTHING, GEMM.baseline_source),
        KernelJob("atax", "atax", get_task("atax").baseline_source, get_task("atax").baseline_source),
        KernelJob("base2", "gemm", GEMM.baseline_source + "\n// again\n", GEMM.baseline_source)]
t0 = time.monotonic()
with WorkerPool(2) as pool:
    print("probe", pool.call({"op": "probe"}, 120))
    res = evaluate_candidates(jobs, EvalSettings(timeout_seconds=15), gpu=True, pool=pool)
    for r in res:
        print(r.key, r.label, r.evaluated_up_to, r.time_ms, r.speedup, "|", r.reason[:300])
    print("restarts", pool.restarts, "in", round(time.monotonic() - t0, 1), "s")

with tempfile.TemporaryDirectory() as d:
    for name, src in (("base", GEMM.baseline_source), ("oob", OOB)):
        c = compile_task_source(GEMM.with_sizes(NI=256, NJ=256, NK=256), src)
        path = Path(d) / f"{name}.cubin"
        path.write_bytes(c.cubin)
        launch = [sys.executable, "-m", "cudanalyst.runner.kernels.verify.launch_once", "--task", "gemm",
                  "--sizes", '{"NI":256,"NJ":256,"NK":256}', "--cubin", str(path)]
        for tool in (["compute-sanitizer", "--tool", "memcheck"], ["ncu", "--clock-control", "none"]):
            t = time.monotonic()
            p = subprocess.run(tool + launch, capture_output=True, text=True)
            print(f"--- {tool[0]} on {name}: rc={p.returncode} in {time.monotonic() - t:.1f} s")
            print((p.stdout + p.stderr)[-1500:])
