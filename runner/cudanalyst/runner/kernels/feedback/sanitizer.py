"""The debugger's run-time part: compute-sanitizer's memcheck, racecheck, initcheck and synccheck.

Run on every program that compiles, correct or not (each tool costs about a second on a small kernel, more
on a large one): a race or an uninitialized read can hide in a program that passed. Each run waits for a slot of
the GPU tools' queue (`gpu_queue`). The program runs through `launch_once` in a child with the same scrubbed environment as
the GPU workers. Host stack frames are dropped from the report: they describe Python, not the kernel.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cudanalyst.runner.kernels.feedback.gpu_queue import queued, tool_clock
from cudanalyst.runner.kernels.verify.launch_once import LAUNCHED
from cudanalyst.runner.kernels.workers.references import FOLDER_ENV
from cudanalyst.runner.kernels.workers.worker import scrubbed_environment
from cudanalyst.tasks import Task
from cudanalyst.trajectory.toolruns import SANITIZER, ToolRun, statement

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
MAX_LINES_PER_TOOL = 25
# memcheck sees an access only when it leaves every live allocation, and cuMemAlloc may put one array right after
# another: on the H200 (2026-12-01) a gemm writing a whole C past its end wrote into A and memcheck said "no errors".
# --padding puts an invalid region after every allocation; sized like the task's largest array (capped: it costs
# that much GPU memory per array), an overrun of up to one array lands there and is reported.
PADDING_CAP = 64 << 20
# racecheck ends with its own summary line ("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)");
# read as no summary, it made 4 clean racecheck runs of the 2026-11-30 recording "could not run".
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error")


def find_sanitizer() -> str | None:
    return shutil.which("compute-sanitizer") or next(
        (str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/compute-sanitizer"), reverse=True)), None)


def launch_command(task: Task, cubin_path: Path, runs: int = 1) -> list[str]:
    return [sys.executable, "-m", "cudanalyst.runner.kernels.verify.launch_once", "--task", task.name,
            "--sizes", json.dumps(dict(task.sizes)), "--cubin", str(cubin_path), "--runs", str(runs)]


def padding_bytes(task: Task) -> int:
    """memcheck's --padding for a task: its largest array's bytes, at most PADDING_CAP (pure)."""
    sizes = [int(np.prod(task.shape(p.name))) * np.dtype(p.dtype).itemsize for p in task.params if p.is_array]
    return max(1, min(max(sizes, default=1), PADDING_CAP))


def tool_options(tool: str, task: Task) -> list[str]:
    """compute-sanitizer's options for one of its tools on a task (pure)."""
    options = ["--tool", tool, "--print-limit", "10"]
    if tool == "memcheck":
        options += ["--padding", str(padding_bytes(task))]
    return options


def clean_tool_output(text: str, limit: int = MAX_LINES_PER_TOOL) -> tuple[list[str], int | None]:
    """(the report's useful lines, the error count) of one compute-sanitizer run (pure)."""
    count = None
    kept: list[str] = []
    for line in text.splitlines():
        if (m := _SUMMARY.search(line)) is not None:
            count = int(m.group(1) or m.group(2)) if count is None else count
        if "Host Frame" in line or line.strip() in ("=========", "========= COMPUTE-SANITIZER"):
            continue
        kept.append(line.replace("========= ", "").rstrip())
    kept = [x for x in kept if x.strip()]
    if len(kept) > limit:
        kept = [*kept[: limit - 1], f"... ({len(kept) - limit + 1} more lines)"]
    return kept, count


@dataclass
class ToolOutput:
    """One tool run's text and type: `run` says whether it ran on the program, else why not."""

    text: str
    run: ToolRun


def launcher_failure(text: str, returncode: int | None) -> tuple[str, str] | None:
    """(cause, the program's own error or '') when launch_once did not launch the kernels, from a tool's output
    (pure); None when it launched them. launch_once prints its own lines on stderr, which the tools pass on."""
    if LAUNCHED in text:
        return None
    own = [x.split("launch_once:", 1)[1].strip() for x in text.splitlines() if "launch_once:" in x]
    # Out of memory before any launch (the context, the module, the buffers) is the machine's state, not the
    # program's: the caller waits and tries again (gpu_queue).
    if any(x.startswith("no CUDA context") for x in own) or "out of memory" in text.lower():
        return "gpu-memory", ""
    if own:
        return "not-launchable", own[-1]
    return "tool-error", ""


def tool_environment(inputs_dir: str | None) -> dict[str, str]:
    """The tools' environment: the workers' scrubbed one, and the folder where a program's launches share inputs."""
    env = scrubbed_environment()
    if inputs_dir:
        env[FOLDER_ENV] = inputs_dir
    return env


def run_tool(exe: str, tool: str, task: Task, path: Path, work: str, timeout_s: float,
             inputs_dir: str | None = None) -> tuple[str, str | None, str]:
    """(the tool's line(s), cause when it did not check a launched kernel, the program's error)."""
    cmd = [exe, *tool_options(tool, task), *launch_command(task, path)]

    def once() -> tuple[str, str | None, str]:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                               env=tool_environment(inputs_dir), cwd=work)
        except subprocess.TimeoutExpired:
            return f"[{tool}] did not finish within {timeout_s:g} s", "timeout", ""
        raw = p.stdout + p.stderr
        failed = launcher_failure(raw, p.returncode)
        if failed is not None:
            return raw, failed[0], failed[1]
        kept, count = clean_tool_output(raw)
        kept = [x for x in kept if not x.startswith(LAUNCHED)]
        if count is None:
            return f"[{tool}] could not run (exit status {p.returncode}): " + " | ".join(kept[-3:]), "tool-error", ""
        if count == 0:
            return f"[{tool}] no errors", None, ""
        return "\n".join([f"[{tool}] {count} error(s):", *(f"  {x}" for x in kept if "ERROR SUMMARY" not in x)]), None, ""

    return queued(once, lambda r: r[1] == "gpu-memory")


def sanitizer_report(task: Task, cubin: bytes, tools: tuple[str, ...] = TOOLS, timeout_s: float = 120.0,
                     inputs_dir: str | None = None) -> ToolOutput:
    """compute-sanitizer's tools on the program's kernels, or the one statement of why they did not check them;
    its ToolRun says how long the tools ran and waited for the GPU-tools queue."""
    with tool_clock() as clock:
        out = _sanitizer_report(task, cubin, tools, timeout_s, inputs_dir)
    return ToolOutput(out.text, clock.timed(out.run))


def _sanitizer_report(task: Task, cubin: bytes, tools: tuple[str, ...], timeout_s: float,
                      inputs_dir: str | None) -> ToolOutput:
    exe = find_sanitizer()
    if exe is None:
        return ToolOutput(statement(SANITIZER, "not-installed"), ToolRun(status="failed", cause="not-installed"))
    lines = [f"compute-sanitizer ({', '.join(tools)}) on task {task.name}, its kernels launched:"]
    checked = 0
    cause, program_error, details = None, "", []
    with tempfile.TemporaryDirectory(prefix="cudanalyst-sanitizer-") as work:
        path = Path(work) / "program.cubin"
        path.write_bytes(cubin)
        for tool in tools:
            text, why, error = run_tool(exe, tool, task, path, work, timeout_s, inputs_dir or work)
            if why is None:
                checked += 1
                lines.append(text)
                continue
            details.append(f"[{tool}] {why}: {text.strip()[-1500:]}")
            cause, program_error = cause or why, program_error or error
            lines.append(f"[{tool}] " + statement(SANITIZER, why, error))
            if why in ("not-launchable", "gpu-memory", "timeout"):
                # The same for every tool: the kernels cannot be launched, no context now, or a kernel that
                # does not end (each further tool would wait out its limit again).
                break
    if checked == 0:
        cause = cause or "tool-error"
        return ToolOutput(statement(SANITIZER, cause, program_error),
                          ToolRun(status="failed", cause=cause, detail="\n".join(details)[-4000:]))
    return ToolOutput("\n".join(lines), ToolRun(status="ok", detail="\n".join(details)[-4000:]))
