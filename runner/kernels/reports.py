"""The three feedback reports of one frozen program: debugger, analyzer, profiler (raw text).

They describe the program being improved, so they are computed once per frozen program (Nsight Compute
costs seconds), never per candidate. On a GPU the program is also verified: when it fails, the
debugger report gets the compute-sanitizer part.
"""

from __future__ import annotations

import os
from typing import Any

from cudanalyst.runner.kernels.analyzer import analyze
from cudanalyst.runner.kernels.compile import CompileCache, compile_task_source, default_cache_dir
from cudanalyst.runner.kernels.debugger import compile_report
from cudanalyst.runner.kernels.pool import WorkerPool
from cudanalyst.runner.kernels.profiler import profiler_report
from cudanalyst.runner.kernels.requests import TimedProgram, compare_request, verify_request
from cudanalyst.runner.kernels.sanitizer import sanitizer_report
from cudanalyst.tasks import UnknownTaskError, get_task

PLAYERS = ("debugger", "analyzer", "profiler")


def frozen_program_reports(task_name: str, source: str, cfg: Any, *, gpu: bool, pool: Any | None = None,
                           use_ncu: bool = True) -> dict[str, str]:
    try:
        task = get_task(task_name)
    except UnknownTaskError as exc:
        return dict.fromkeys(PLAYERS, f"No report: {exc}")
    cache = CompileCache(os.environ.get("CUDANALYST_COMPILE_CACHE") or default_cache_dir())
    compiled = compile_task_source(task, source, cache=cache)
    debugger = compile_report(source, task, compiled)
    analyzer = analyze(source, task, compiled).text
    if not gpu or not compiled.ok:
        return {"debugger": debugger + ("" if compiled.ok else "\nRun-time checks: not run (no binary)."),
                "analyzer": analyzer,
                "profiler": profiler_report(task, compiled.cubin if compiled.ok else None, None, None, gpu=gpu)}
    own = pool is None
    pool = pool or WorkerPool(1)
    try:
        base = compile_task_source(task, task.baseline_source, cache=cache)
        verdict = pool.verify(verify_request(task, compiled.cubin or b"", cfg), cfg.timeout_seconds)
        correct = bool(verdict.get("ok") and verdict.get("correct"))
        why = verdict.get("reason") or verdict.get("error")
        debugger += f"\nRun-time verification: {'correct' if correct else 'FAILED'}: {why}"
        if not correct:
            debugger += "\n" + sanitizer_report(task, compiled.cubin or b"")
        # Program and baseline in interleaved trials of one request, as candidates are timed (timing.py);
        # a wrong program's times still describe it, but one that crashed the GPU is not run again.
        crashed = verdict.get("stage") == "run" or not verdict.get("ok")
        programs = [] if crashed else [TimedProgram("program", compiled.cubin or b"")]
        programs += [TimedProgram("baseline", base.cubin)] if base.ok and base.cubin else []
        reply = pool.compare(compare_request(task, programs, cfg), max(cfg.timeout_seconds, 60)) if programs else {}
        timed = reply.get("programs", {}) if reply.get("ok") else {}

        def stats(name: str) -> dict[str, Any] | None:
            entry = timed.get(name, {})
            return entry.get("stats") if entry.get("ok") else None

        profiler = profiler_report(task, compiled.cubin, stats("program"), stats("baseline"), gpu=True,
                                   use_ncu=use_ncu)
    finally:
        if own:
            pool.close()
    return {"debugger": debugger, "analyzer": analyzer, "profiler": profiler}
