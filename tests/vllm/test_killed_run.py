"""`cudanalyst run` killed outright (SIGKILL: an out-of-memory kill, a closed terminal's last resort) leaves no
process of it running: not its shards, not the vLLM server nor the engine processes that server started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_local_run_vllm import write_spec


def children() -> dict[int, list[int]]:
    """{pid: its child pids}, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    tree, found, todo = children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie runs nothing; its parent is gone, init reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(check, deadline_s: float, interval_s: float = 0.5):  # type: ignore[no-untyped-def]
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(interval_s)
    return check()


def test_sigkill_of_the_run_leaves_no_process_behind(tmp_path, tiny_models):
    spec = write_spec(tmp_path, tiny_models)
    work = tmp_path / "work"  # the run's own folder (spec copies, logs) lands here, not in /tmp
    work.mkdir()
    run = subprocess.Popen([sys.executable, "-m", "cudanalyst", "run", str(spec), "--output", str(tmp_path / "runs")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(work)})
    try:
        # Halfway: the model server is up and the LLM stage is writing (its shard starts after the warm-up).
        def llm_stage_running() -> list[int]:
            tree = descendants(run.pid)
            llm = [p for p in tree if "--stage llm" in cmdline(p)]
            return tree if llm and any("vllm.entrypoints" in cmdline(p) for p in tree) else []

        # A run that exits first ends the wait at once (its exit code is the failure), not after 900 s.
        tree = wait_for(lambda: llm_stage_running() or ([0] if run.poll() is not None else []), 900)
        assert tree and run.poll() is None, f"the LLM stage never started; the run exited with {run.poll()}"
        kinds = {p: cmdline(p) for p in tree}
        assert any("--stage kernels" in c for c in kinds.values())  # the kernel stage runs beside it
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(30)

    wait_for(lambda: not any(running(p) for p in tree), 120)  # a vLLM server gets SIGTERM: it shuts down its engine
    alive = {p: kinds[p][:120] for p in tree if running(p)}
    assert not alive, f"still running 2 minutes after the run was killed: {alive}"
