"""The feedback tools' reports of one frozen program (raw text), one function per tool.

They describe the program being improved, so they are computed once per frozen program (Nsight Compute
costs seconds), never per candidate. What every tool reads (the build, and on a GPU the verdict and the
timings) is gathered once into `ProgramFacts`; each tool in `cudanalyst.players.TOOLS` then turns the facts
into its text. On a GPU the program is also verified: when it fails, the debugger report gets the
compute-sanitizer part.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cudanalyst import players
from cudanalyst.runner.kernels.compile.nvcc import CompileResult, compile_task_source, shared_cache
from cudanalyst.runner.kernels.feedback.analyzer import analyze
from cudanalyst.runner.kernels.feedback.debugger import compile_report
from cudanalyst.runner.kernels.feedback.profiler import profiler_report
from cudanalyst.runner.kernels.feedback.sanitizer import sanitizer_report
from cudanalyst.runner.kernels.workers.pool import WorkerPool
from cudanalyst.runner.kernels.workers.requests import TimedProgram, compare_request, verify_request
from cudanalyst.tasks import Task, UnknownTaskError, get_task


@dataclass
class ProgramFacts:
    """What the tools know of one frozen program. `verdict` is None when it was not run (no GPU, or no binary)."""

    task: Task
    source: str
    compiled: CompileResult
    gpu: bool
    use_ncu: bool = True
    verdict: dict[str, Any] | None = None
    program_stats: dict[str, Any] | None = None
    baseline_stats: dict[str, Any] | None = None

    @property
    def correct(self) -> bool:
        return bool(self.verdict and self.verdict.get("ok") and self.verdict.get("correct"))


def debugger_report(f: ProgramFacts) -> str:
    text = compile_report(f.source, f.task, f.compiled)
    if f.verdict is None:
        return text + ("" if f.compiled.ok else "\nRun-time checks: not run (no binary).")
    why = f.verdict.get("reason") or f.verdict.get("error")
    text += f"\nRun-time verification: {'correct' if f.correct else 'FAILED'}: {why}"
    if not f.correct:
        text += "\n" + sanitizer_report(f.task, f.compiled.cubin or b"")
    return text


def analyzer_report(f: ProgramFacts) -> str:
    return analyze(f.source, f.task, f.compiled).text


def profiler_report_of(f: ProgramFacts) -> str:
    if f.verdict is None:
        return profiler_report(f.task, f.compiled.cubin if f.compiled.ok else None, None, None, gpu=f.gpu)
    return profiler_report(f.task, f.compiled.cubin, f.program_stats, f.baseline_stats, gpu=True,
                           use_ncu=f.use_ncu)


def program_facts(task: Task, source: str, cfg: Any, *, gpu: bool, pool: Any | None = None,
                  use_ncu: bool = True) -> ProgramFacts:
    cache = shared_cache()
    facts = ProgramFacts(task, source, compile_task_source(task, source, cache=cache), gpu, use_ncu)
    if not gpu or not facts.compiled.ok:
        return facts
    own = pool is None
    pool = pool or WorkerPool(1)
    try:
        base = compile_task_source(task, task.baseline_source, cache=cache)
        facts.verdict = pool.verify(verify_request(task, facts.compiled.cubin or b"", cfg), cfg.timeout_seconds)
        # Program and baseline in interleaved trials of one request, as candidates are timed (timing.py);
        # a wrong program's times still describe it, but one that crashed the GPU is not run again.
        crashed = facts.verdict.get("stage") == "run" or not facts.verdict.get("ok")
        programs = [] if crashed else [TimedProgram("program", facts.compiled.cubin or b"")]
        programs += [TimedProgram("baseline", base.cubin)] if base.ok and base.cubin else []
        reply = pool.compare(compare_request(task, programs, cfg), max(cfg.timeout_seconds, 60)) if programs else {}
        timed = reply.get("programs", {}) if reply.get("ok") else {}
    finally:
        if own:
            pool.close()

    def stats(name: str) -> dict[str, Any] | None:
        entry = timed.get(name, {})
        return entry.get("stats") if entry.get("ok") else None

    facts.program_stats, facts.baseline_stats = stats("program"), stats("baseline")
    return facts


def reporter(tool: players.FeedbackTool) -> Callable[[ProgramFacts], str]:
    """The function a registry entry names (`module:function`)."""
    module, _, attr = tool.report.partition(":")
    return getattr(importlib.import_module(module), attr)


def frozen_program_reports(task_name: str, source: str, cfg: Any, *, gpu: bool, pool: Any | None = None,
                           use_ncu: bool = True) -> dict[str, str]:
    """Every registered tool's report of one frozen program, by tool name."""
    tools = players.TOOLS
    try:
        task = get_task(task_name)
    except UnknownTaskError as exc:
        return {t.name: f"No report: {exc}" for t in tools}
    facts = program_facts(task, source, cfg, gpu=gpu, pool=pool, use_ncu=use_ncu)
    return {t.name: reporter(t)(facts) for t in tools}
