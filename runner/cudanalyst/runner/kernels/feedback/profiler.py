"""The profiler's raw text report: event timings against the task baseline, then Nsight Compute.

Nsight Compute runs with `--clock-control none` (the card's clocks are left as they are) over the
first launch of each kernel of the program. Where the GPU grants no performance counters (common in
pods without the capability), the report says so and the event timings stand alone. Where ncu could not
profile for another reason, the report says which one (`ncu_failure`) in one plain line, never ncu's own
failure text, which the agent would read as feedback about its program; that text is kept in the `ToolRun`.
A kernel that faults under ncu is stopped with it before the program can say why, so when ncu fails after the
kernels launched and nothing in its output is the program's, the program runs once alone (`program_alone`): its
own error makes the report program-failed; a program that runs fine alone leaves the failure ncu's own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from cudanalyst.runner.kernels.feedback.gpu_queue import NCU_POOL, queued, tool_clock
from cudanalyst.runner.kernels.feedback.sanitizer import (
    ToolOutput,
    launch_command,
    launcher_failure,
    tool_environment,
)
from cudanalyst.runner.kernels.timing.trials import speedup
from cudanalyst.runner.kernels.verify.launch_once import EXIT_CONTEXT, LAUNCHED
from cudanalyst.tasks import Task
from cudanalyst.trajectory.toolruns import NCU, ToolRun, statement

NCU_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis")


def find_ncu() -> str | None:
    return shutil.which("ncu") or next(
        (str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/ncu"), reverse=True)), None)


def timing_lines(program: dict[str, Any] | None, baseline: dict[str, Any] | None) -> list[str]:
    """The event-timing part of the report (pure)."""
    if program is None:
        return ["Event timings: the program could not be timed."]
    out = [f"Event timings (CUDA events, L2 flushed, {program['trials']} trials): program median "
           f"{program['median_ms']:.4f} ms (IQR/median {program['iqr_over_median']:.1%}, CV {program['cv']:.1%})"]
    if baseline is not None:
        s = speedup(baseline["median_ms"], program["median_ms"])
        out.append(f"  task baseline median {baseline['median_ms']:.4f} ms -> program is "
                   f"{s:.2f}x the baseline's speed" if s else "  baseline could not be compared")
    return out


PASSES = re.compile(r"^==PROF== Profiling .* - (\d+) pass(?:es)?\s*$", re.MULTILINE)


def replay_passes(text: str) -> int | None:
    """The replay passes ncu reports making, summed over its kernels; None when it reported none (pure)."""
    found = [int(n) for n in PASSES.findall(text)]
    return sum(found) if found else None


def clean_ncu_output(text: str) -> list[str]:
    """Nsight Compute's text without its progress lines, trailing blanks or doc links (pure)."""
    keep = []
    for line in text.splitlines():
        if line.startswith("==PROF==") or not line.strip():
            continue
        keep.append(re.sub(r"\s+$", "", line))
    return keep


def ncu_report(task: Task, cubin: bytes, timeout_s: float = 180.0,
               inputs_dir: str | None = None) -> tuple[bool, list[str], ToolRun]:
    """(counters were read, lines, the run's type, with the seconds it ran and waited for the GPU-tools queue).
    The time limit counts from the moment the run got its slot of the queue, not while it waited."""
    with tool_clock() as clock:
        ok, lines, run = _ncu_report(task, cubin, timeout_s, inputs_dir)
    return ok, lines, clock.timed(run)


def _ncu_report(task: Task, cubin: bytes, timeout_s: float,
                inputs_dir: str | None) -> tuple[bool, list[str], ToolRun]:
    exe = find_ncu()
    if exe is None:
        return False, [statement(NCU, "not-installed")], ToolRun(status="failed", cause="not-installed")
    with tempfile.TemporaryDirectory(prefix="cudanalyst-ncu-") as work:
        path = Path(work) / "program.cubin"
        path.write_bytes(cubin)
        cmd = [exe, "--clock-control", "none", "--launch-count", str(len(task.kernels))]
        for s in NCU_SECTIONS:
            cmd += ["--section", s]
        cmd += launch_command(task, path)

        def once() -> tuple[int | None, str]:
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                                   env=tool_environment(inputs_dir), cwd=work)
            except subprocess.TimeoutExpired:
                return None, ""
            return p.returncode, p.stdout + p.stderr

        # ncu's own queue: ncu serializes its runs anyway, and must not hold the other tools' slots while it waits.
        code, text = queued(once, lambda r: r[0] is not None and ncu_failure(r[0], r[1])[0] == "gpu-memory",
                            pool=NCU_POOL)
        if code is None:
            return False, [statement(NCU, "timeout")], ToolRun(status="failed", cause="timeout",
                                                                detail=f"did not finish within {timeout_s:g} s")
        if code == 0 and "Section:" in text:
            return True, [x for x in clean_ncu_output(text) if LAUNCHED not in x], ToolRun(status="ok",
                                                                                           passes=replay_passes(text))
        cause, line = ncu_failure(code, text)
        detail = "\n".join(clean_ncu_output(text))[-4000:]
        if cause == "tool-error" and LAUNCHED in text:
            # The kernels ran and ncu failed without a word from the program: a kernel that faults under ncu is
            # stopped with it (H200, 2026-12-01: a section table of "(!) nan", no launch_once line), so ask the
            # program alone whether it fails by itself.
            alone = program_alone(task, path, work, inputs_dir, timeout_s)
            if alone is not None:
                cause, line = alone_failure(*alone) or (cause, line)
                detail += f"\n-- the program alone (exit status {alone[0]}):\n" + alone[1].strip()[-1000:]
    return False, [line], ToolRun(status="failed", cause=cause, detail=detail[-5000:])


def program_alone(task: Task, path: Path, work: str, inputs_dir: str | None,
                  timeout_s: float) -> tuple[int, str] | None:
    """(exit status, output) of launch_once run on the program without a tool; None past the time limit."""
    def once() -> tuple[int, str] | None:
        try:
            p = subprocess.run(launch_command(task, path), capture_output=True, text=True, errors="replace",
                               timeout=timeout_s, env=tool_environment(inputs_dir), cwd=work)
        except subprocess.TimeoutExpired:
            return None
        return p.returncode, p.stdout + p.stderr

    return queued(once, lambda r: r is not None and r[0] == EXIT_CONTEXT)


def alone_failure(returncode: int, text: str) -> tuple[str, str] | None:
    """(cause, the report's line) when the program run alone failed with its own error after its kernels launched,
    the error that ncu's failed run then owes to the program; None when it ran (ncu's failure is then its own) or
    could not tell (pure)."""
    if returncode == 0 or LAUNCHED not in text:  # (its exit status may be pycuda's clean-up after the fault)
        return None
    cause, line = ncu_failure(returncode, text)
    return (cause, line) if cause == "program-failed" else None


def ncu_failure(returncode: int, text: str) -> tuple[str, str]:
    """(cause, the report's line) of an Nsight Compute run that gave no sections, from its output (pure).

    The program's own failure comes first (launch_once's stderr, which ncu passes through): ncu then only says
    "the application returned an error code", and calling that a refusal of counters would mislead the agent
    (the 2026-11-30 recording did, 77 times). Counters are denied only when ncu says ERR_NVGPUCTRPERM. A launched
    program that said nothing of its own reads as tool-error here; `ncu_report` then asks the program alone."""
    lines = clean_ncu_output(text)
    if "ERR_NVGPUCTRPERM" in text:
        return "counters-denied", statement(NCU, "counters-denied") + " The event timings above stand alone."
    launcher = launcher_failure(text, returncode)
    if launcher is not None and launcher[0] != "tool-error":
        cause, error = launcher
        if cause == "not-launchable":
            return "program-failed", statement(NCU, "program-failed", f"the program failed under it: {error}")
        return cause, statement(NCU, cause)
    own = next((x.split("launch_once:", 1)[1].strip() for x in lines
                if "launch_once:" in x and LAUNCHED not in x), None)
    if own is not None:  # the kernels were launched and failed
        return "program-failed", statement(NCU, "program-failed", f"the program failed under it: {own}")
    return "tool-error", statement(NCU, "tool-error")


def profiler_report(task: Task, cubin: bytes | None, program: dict[str, Any] | None,
                    baseline: dict[str, Any] | None, *, gpu: bool, use_ncu: bool = True,
                    inputs_dir: str | None = None) -> ToolOutput:
    head = [f"Profiler report: task {task.name} on the GPU"]
    if not gpu:
        return ToolOutput("\n".join([f"Profiler report: task {task.name}",
                                     "Not run: no GPU on this machine, so there are no timings or counters."]),
                          ToolRun(status="not-run"))
    if cubin is None:
        return ToolOutput("\n".join([*head, "Not run: the program did not compile (see the debugger report)."]),
                          ToolRun(status="not-run"))
    lines = head + timing_lines(program, baseline)
    if use_ncu:
        ok, ncu, run = ncu_report(task, cubin, inputs_dir=inputs_dir)
        lines += (["Nsight Compute (--clock-control none):"] + [f"  {x}" for x in ncu]) if ok else ncu
        return ToolOutput("\n".join(lines), run.model_copy(update={"timings": program is not None}))
    return ToolOutput("\n".join(lines), ToolRun(status="not-run", timings=program is not None))
