"""The debugger's compile part: compiler diagnostics and contract problems as a raw text report.

The compute-sanitizer part (memcheck, racecheck, initcheck, synccheck on failing programs) is added
by `sanitizer.py`; `compile_report` is the text before it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cudanalyst.runner.kernels.compile.nvcc import CompileResult, compile_source, task_translation_unit
from cudanalyst.tasks.conformance import contract_problems

if TYPE_CHECKING:
    from cudanalyst.runner.kernels.compile.nvcc import CompileCache
    from cudanalyst.tasks.base import Task

MAX_DIAGNOSTICS = 20  # a cascade of errors after the first few adds length, not information


def _source_line(source: str, line: int | None) -> str:
    lines = source.splitlines()
    if line is None or not 1 <= line <= len(lines):
        return ""
    return lines[line - 1].rstrip()


def compile_report(
    source: str,
    task: Task | None = None,
    compiled: CompileResult | None = None,
    cache: CompileCache | None = None,
) -> str:
    """Compile (unless given the result) and describe what the compiler and the contract say."""
    if compiled is None:
        unit = task_translation_unit(task, source) if task is not None else source
        compiled = compile_source(unit, cache=cache)
    errors, warnings = compiled.errors, compiled.warnings
    status = "compiled" if compiled.ok else "FAILED to compile"
    lines = [
        f"Debugger report: compile (nvcc {compiled.toolchain or '?'}, {compiled.arch})",
        f"Status: {status}; {len(errors)} error(s), {len(warnings)} warning(s).",
    ]
    if compiled.timed_out:
        lines.append("The compiler ran past its time limit (heavy unrolling or templates?).")
    shown = [d for d in compiled.diagnostics if d.severity in ("error", "warning")][:MAX_DIAGNOSTICS]
    for d in shown:
        lines.append(d.render())
        own = _source_line(source, d.line) if d.file == "candidate.cu" else ""
        if own:
            lines.append(f"    {d.line} | {own.strip()}")
        elif d.excerpt and d.file != "candidate.cu":
            lines += [f"    {x.strip()}" for x in d.excerpt.splitlines()[:2]]
    hidden = len([d for d in compiled.diagnostics if d.severity in ("error", "warning")]) - len(shown)
    if hidden > 0:
        lines.append(f"... {hidden} more diagnostic(s) not shown.")
    if task is not None:
        problems = contract_problems(task, source)
        if problems:
            lines.append(f"Contract ({task.name}): {len(problems)} problem(s):")
            lines += [f"  - {p}" for p in problems]
        else:
            lines.append(
                f"Contract ({task.name}): all {len(task.kernels)} kernel(s) and launch arrays present."
            )
    return "\n".join(lines)
