"""The profiler's raw text report: event timings against the task baseline, then Nsight Compute.

Nsight Compute runs with `--clock-control none` (the card's clocks are left as they are) over the
first launch of each kernel of the program. Where the GPU grants no performance counters (common in
pods without the capability), the report says so and the event timings stand alone.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from cudanalyst.runner.kernels.feedback.sanitizer import launch_command
from cudanalyst.runner.kernels.timing.trials import speedup
from cudanalyst.runner.kernels.workers.worker import scrubbed_environment
from cudanalyst.tasks import Task

NCU_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis")
_NO_COUNTERS = re.compile(r"ERR_NVGPUCTRPERM|LibraryNotLoaded|Failed to initialize the profiler|"
                          r"not supported|permission", re.IGNORECASE)


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


def clean_ncu_output(text: str) -> list[str]:
    """Nsight Compute's text without its progress lines, trailing blanks or doc links (pure)."""
    keep = []
    for line in text.splitlines():
        if line.startswith("==PROF==") or not line.strip():
            continue
        keep.append(re.sub(r"\s+$", "", line))
    return keep


def ncu_report(task: Task, cubin: bytes, timeout_s: float = 180.0) -> tuple[bool, list[str]]:
    """(counters were read, lines)."""
    exe = find_ncu()
    if exe is None:
        return False, ["Nsight Compute (ncu) is not installed here."]
    with tempfile.TemporaryDirectory(prefix="cudanalyst-ncu-") as work:
        path = Path(work) / "program.cubin"
        path.write_bytes(cubin)
        cmd = [exe, "--clock-control", "none", "--launch-count", str(len(task.kernels))]
        for s in NCU_SECTIONS:
            cmd += ["--section", s]
        cmd += launch_command(task, path)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                               env=scrubbed_environment(), cwd=work)
        except subprocess.TimeoutExpired:
            return False, [f"Nsight Compute did not finish within {timeout_s:g} s."]
    text = p.stdout + p.stderr
    if p.returncode != 0 or "Section:" not in text:
        return False, [ncu_failure(p.returncode, text)]
    return True, clean_ncu_output(text)


def ncu_failure(returncode: int, text: str) -> str:
    """Why Nsight Compute gave no sections, from its output (pure).

    The program's own error (launch_once's stderr, which ncu passes through) comes first: ncu then only says "the
    application returned an error code", and calling that a refusal of counters would mislead the agent."""
    lines = clean_ncu_output(text)
    tail = "; only the event timings above are available."
    program = next((x.strip() for x in lines if x.lstrip().startswith("launch_once:")), None)
    if program is not None:
        return f"Nsight Compute ran, but the program's launch under it failed ({program}){tail}"
    refused = next((x.strip() for x in lines if _NO_COUNTERS.search(x)), None)
    if refused is not None:
        return f"Nsight Compute could not read the GPU's performance counters here (exit status {returncode}: {refused}){tail}"
    first = next((x.strip() for x in lines if "ERROR" in x), lines[-1].strip() if lines else "no output")
    return f"Nsight Compute failed (exit status {returncode}: {first}){tail}"


def profiler_report(task: Task, cubin: bytes | None, program: dict[str, Any] | None,
                    baseline: dict[str, Any] | None, *, gpu: bool, use_ncu: bool = True) -> str:
    head = [f"Profiler report: task {task.name} on the GPU"]
    if not gpu:
        return "\n".join([f"Profiler report: task {task.name}",
                          "Not run: no GPU on this machine, so there are no timings or counters."])
    if cubin is None:
        return "\n".join([*head, "Not run: the program did not compile (see the debugger report)."])
    lines = head + timing_lines(program, baseline)
    if use_ncu:
        ok, ncu = ncu_report(task, cubin)
        lines += (["Nsight Compute (--clock-control none):"] + [f"  {x}" for x in ncu]) if ok else ncu
    return "\n".join(lines)
