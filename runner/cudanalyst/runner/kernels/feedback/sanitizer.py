"""The debugger's run-time part: compute-sanitizer's memcheck, racecheck, initcheck and synccheck.

Run on programs that fail verification (each tool costs about a second on a small kernel, more on a
large one). The program runs through `launch_once` in a child with the same scrubbed environment as
the GPU workers. Host stack frames are dropped from the report: they describe Python, not the kernel.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cudanalyst.runner.kernels.workers.worker import scrubbed_environment
from cudanalyst.tasks import Task

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
MAX_LINES_PER_TOOL = 25
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def find_sanitizer() -> str | None:
    return shutil.which("compute-sanitizer") or next(
        (str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/compute-sanitizer"), reverse=True)), None)


def launch_command(task: Task, cubin_path: Path, runs: int = 1) -> list[str]:
    return [sys.executable, "-m", "cudanalyst.runner.kernels.verify.launch_once", "--task", task.name,
            "--sizes", json.dumps(dict(task.sizes)), "--cubin", str(cubin_path), "--runs", str(runs)]


def clean_tool_output(text: str, limit: int = MAX_LINES_PER_TOOL) -> tuple[list[str], int | None]:
    """(the report's useful lines, the error count) of one compute-sanitizer run (pure)."""
    count = None
    kept: list[str] = []
    for line in text.splitlines():
        if (m := _SUMMARY.search(line)) is not None:
            count = int(m.group(1)) if count is None else count
        if "Host Frame" in line or line.strip() in ("=========", "========= COMPUTE-SANITIZER"):
            continue
        kept.append(line.replace("========= ", "").rstrip())
    kept = [x for x in kept if x.strip()]
    if len(kept) > limit:
        kept = [*kept[: limit - 1], f"... ({len(kept) - limit + 1} more lines)"]
    return kept, count


def sanitizer_report(task: Task, cubin: bytes, tools: tuple[str, ...] = TOOLS, timeout_s: float = 120.0) -> str:
    exe = find_sanitizer()
    if exe is None:
        return "compute-sanitizer: not found on this machine; no run-time memory or race checks."
    lines = [f"compute-sanitizer ({', '.join(tools)}) on task {task.name}:"]
    with tempfile.TemporaryDirectory(prefix="cudanalyst-sanitizer-") as work:
        path = Path(work) / "program.cubin"
        path.write_bytes(cubin)
        for tool in tools:
            cmd = [exe, "--tool", tool, "--print-limit", "10", *launch_command(task, path)]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                                   env=scrubbed_environment(), cwd=work)
            except subprocess.TimeoutExpired:
                lines.append(f"[{tool}] did not finish within {timeout_s:g} s (a kernel that never terminates?)")
                continue
            kept, count = clean_tool_output(p.stdout + p.stderr)
            if count is None:
                lines.append(f"[{tool}] could not run (exit status {p.returncode}): " + " | ".join(kept[-3:]))
            elif count == 0:
                lines.append(f"[{tool}] no errors")
            else:
                lines.append(f"[{tool}] {count} error(s):")
                lines += [f"  {x}" for x in kept if "ERROR SUMMARY" not in x]
    return "\n".join(lines)
