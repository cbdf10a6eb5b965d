"""The feedback tools' reports of one frozen program (raw text), one function per tool.

They describe the program being improved, so they are computed once per frozen program (Nsight Compute
costs seconds), never per candidate. What every tool reads (the build, and on a GPU the verdict and the
timings) is gathered once into `ProgramFacts`; each tool in `cudanalyst.players.TOOLS` then turns the facts
into its text. On a GPU the program is also verified, and every program that compiled gets the compute-sanitizer
part in its debugger report. Whether the GPU tools (compute-sanitizer, Nsight Compute) really ran on the program
is typed in `ProgramFacts.tools` (`cudanalyst.trajectory.toolruns`); a tool that could not run leaves one plain
line in the report, never its failure text.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import weakref
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
from cudanalyst.trajectory.toolruns import (
    NCU,
    SANITIZER,
    TOOL_NAMES,
    VERIFICATION_NO_CONTEXT,
    ToolRun,
    verification_lacked_memory,
)


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
    tools: dict[str, ToolRun] = field(default_factory=dict)  # filled as the reports are written
    inputs_dir: str | None = None  # where the tools' launches of this program share its inputs

    @property
    def correct(self) -> bool:
        return bool(self.verdict and self.verdict.get("ok") and self.verdict.get("correct"))


def debugger_report(f: ProgramFacts) -> str:
    text = compile_report(f.source, f.task, f.compiled)
    if f.verdict is None:
        return text + ("" if f.compiled.ok else "\nRun-time checks: not run (no binary).")
    why = f.verdict.get("reason") or f.verdict.get("error")
    if not f.correct and verification_lacked_memory(str(why)):
        text += "\n" + VERIFICATION_NO_CONTEXT  # the machine's state, not the program's (issue 28)
    else:
        text += f"\nRun-time verification: {'correct' if f.correct else 'FAILED'}: {why}"
    sanitized = sanitizer_report(f.task, f.compiled.cubin or b"", inputs_dir=f.inputs_dir)
    f.tools[SANITIZER] = sanitized.run
    return text + "\n" + sanitized.text


def analyzer_report(f: ProgramFacts) -> str:
    return analyze(f.source, f.task, f.compiled).text


def profiler_report_of(f: ProgramFacts) -> str:
    if f.verdict is None:
        out = profiler_report(f.task, f.compiled.cubin if f.compiled.ok else None, None, None, gpu=f.gpu)
    else:
        out = profiler_report(f.task, f.compiled.cubin, f.program_stats, f.baseline_stats, gpu=True,
                              use_ncu=f.use_ncu, inputs_dir=f.inputs_dir)
    f.tools[NCU] = out.run
    return out.text


def program_facts(task: Task, source: str, cfg: Any, *, gpu: bool, pool: Any | None = None,
                  use_ncu: bool = True) -> ProgramFacts:
    cache = shared_cache()
    facts = ProgramFacts(task, source, compile_task_source(task, source, cache=cache), gpu, use_ncu)
    if not gpu or not facts.compiled.ok:
        return facts
    # The tools launch the program up to five times: its inputs are made once, in a folder that goes with the facts.
    facts.inputs_dir = tempfile.mkdtemp(prefix="cudanalyst-tool-inputs-")
    weakref.finalize(facts, shutil.rmtree, facts.inputs_dir, True)
    own = pool is None
    pool = pool or WorkerPool(1)
    try:
        base = compile_task_source(task, task.baseline_source, cache=cache)
        facts.verdict = pool.verify(verify_request(task, facts.compiled.cubin or b"", cfg), cfg.timeout_seconds)
        # Program and baseline in interleaved trials of one request, as candidates are timed (timing.py);
        # a wrong program's times still describe it, but one that crashed the GPU is not run again. A program that
        # builds the baseline's own cubin is the baseline: one binary, one measurement, as the kernel stage times
        # candidates of one cubin once. Timed apart, a no-op rewrite of linear_bias_gelu (`erf` for `erff`, the sizes
        # defined again) was recorded 1.135x its baseline, the recording's one `fast` program (H200, 2026-12-02).
        crashed = facts.verdict.get("stage") == "run" or not facts.verdict.get("ok")
        same = bool(base.ok and base.cubin and facts.compiled.cubin == base.cubin)
        programs = [] if crashed or same else [TimedProgram("program", facts.compiled.cubin or b"")]
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
    if same and not crashed:
        facts.program_stats = facts.baseline_stats
    return facts


def reporter(tool: players.FeedbackTool) -> Callable[[ProgramFacts], str]:
    """The function a registry entry names (`module:function`)."""
    module, _, attr = tool.report.partition(":")
    return getattr(importlib.import_module(module), attr)


def all_reports(facts: ProgramFacts, only: Collection[str] | None = None) -> dict[str, str]:
    """Every registered tool's report by name (`only` these: the recorder under a policy's `runTools: shown`; the
    others are not made, and their GPU tools not run), the tools side by side. One after the other, an evaluation waited
    for Nsight Compute's one slot only once compute-sanitizer was done (H200, 2026-12-02: sanitizer 24 s, then the
    wait for ncu 97 s, a compiled program's evaluation 162 s, median); each tool still takes its own queue's slot
    (gpu_queue), so running them together adds no GPU load that other programs' tools did not already add."""
    with ThreadPoolExecutor(max_workers=len(players.TOOLS), thread_name_prefix="report") as tools:
        running = {t.name: tools.submit(reporter(t), facts) for t in players.TOOLS if only is None or t.name in only}
    return {name: future.result() for name, future in running.items()}


def typed_reports(facts: ProgramFacts) -> tuple[dict[str, str], dict[str, ToolRun]]:
    """(every registered tool's report by name, how each GPU tool ran): the tools that did not run are typed
    `not-run` (no GPU, no binary)."""
    reports = all_reports(facts)
    runs = {name: facts.tools.get(name, ToolRun(status="not-run")) for name in TOOL_NAMES}
    return reports, runs


def frozen_program_feedback(task_name: str, source: str, cfg: Any, *, gpu: bool, pool: Any | None = None,
                            use_ncu: bool = True) -> tuple[dict[str, str], dict[str, ToolRun]]:
    """Every registered tool's report of one frozen program, by tool name, and how the GPU tools ran."""
    try:
        task = get_task(task_name)
    except UnknownTaskError as exc:
        return {t.name: f"No report: {exc}" for t in players.TOOLS}, {}
    return typed_reports(program_facts(task, source, cfg, gpu=gpu, pool=pool, use_ncu=use_ncu))


def frozen_program_reports(task_name: str, source: str, cfg: Any, *, gpu: bool, pool: Any | None = None,
                           use_ncu: bool = True) -> dict[str, str]:
    """Every registered tool's report of one frozen program, by tool name."""
    return frozen_program_feedback(task_name, source, cfg, gpu=gpu, pool=pool, use_ncu=use_ncu)[0]
