"""Child processes that end when the process that started them dies, however it dies (SIGKILL included).

A child started in a session of its own (so that it can be stopped with its process group) no longer gets
the terminal's signals, and nothing stops it when its parent is killed outright: an out-of-memory kill of
`cudanalyst run` would leave its shards, model servers and GPU workers running. On Linux the kernel can
send a child a signal when its parent dies (prctl PR_SET_PDEATHSIG), set between fork and exec and kept
across exec. Elsewhere `popen` is plain `subprocess.Popen`.

The kernel sends that signal when the *thread* that forked the child ends, not the process. So `popen`
forks from the main thread, or else from one spawner thread of this module that lives as long as the
process: a child started from a short-lived worker thread (a ThreadPoolExecutor's) is not killed when
that thread goes.

    from cudanalyst.runner.lifeline import popen
    proc = popen(cmd, start_new_session=True)                  # SIGKILL when this process dies
    proc = popen(cmd, death_signal=signal.SIGTERM, ...)        # a chance to stop its own children first

Only stdlib here: the core, the runner and scripts may all import it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_libc: Any = None
if sys.platform.startswith("linux"):
    try:  # looked up once here, in the parent: the child, between fork and exec, only calls it
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    except (OSError, AttributeError):
        _libc = None


def supported() -> bool:
    """Whether children can be tied to this process (Linux)."""
    return _libc is not None


def die_with_parent(death_signal: int = signal.SIGKILL, parent_pid: int | None = None) -> None:
    """In a child (a preexec_fn, or a Python child's first lines): receive death_signal when the parent
    dies. With parent_pid, a parent that is already gone (it died before this call) ends the child now."""
    if _libc is None:
        return
    if _libc.prctl(PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), death_signal)


def preexec(death_signal: int = signal.SIGKILL,
            then: Callable[[], object] | None = None) -> Callable[[], None] | None:
    """A preexec_fn that ties the child to this process (and then runs `then`, another preexec_fn).
    Pass it to subprocess yourself only from the main thread or a thread that outlives the child;
    `popen` takes care of that."""
    if _libc is None:
        return then  # type: ignore[return-value]
    parent = os.getpid()

    def child() -> None:
        die_with_parent(death_signal, parent)
        if then is not None:
            then()

    return child


class _Spawner:
    """One daemon thread that forks on behalf of other threads and never ends before the process."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[Any]], Future[subprocess.Popen[Any]]]]
        self._jobs = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, start: Callable[[], subprocess.Popen[Any]]) -> subprocess.Popen[Any]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lifeline-spawner", daemon=True)
                self._thread.start()
        done: Future[subprocess.Popen[Any]] = Future()
        self._jobs.put((start, done))
        return done.result()

    def _loop(self) -> None:
        while True:
            start, done = self._jobs.get()
            try:
                done.set_result(start())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, who re-raises it
                done.set_exception(exc)


_spawner = _Spawner()


def popen(args: Any, *, death_signal: int = signal.SIGKILL, **kwargs: Any) -> subprocess.Popen[Any]:
    """subprocess.Popen(args, **kwargs) whose child receives death_signal when this process dies.

    death_signal: SIGKILL (default) for a leaf process; SIGTERM for one that stops children of its own
    when terminated (a shard, a vLLM server). A preexec_fn in kwargs still runs, after the tie is made."""
    if _libc is None:
        return subprocess.Popen(args, **kwargs)
    kwargs["preexec_fn"] = preexec(death_signal, kwargs.get("preexec_fn"))
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(args, **kwargs)
    return _spawner.submit(lambda: subprocess.Popen(args, **kwargs))


def stop_groups(procs: Iterable[subprocess.Popen[Any]], grace_s: float) -> None:
    """End children started in sessions of their own: SIGTERM to each one's process group, then SIGKILL to
    the groups still there after grace_s (in all, not each), so what they started themselves goes too."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


__all__ = ["die_with_parent", "popen", "preexec", "stop_groups", "supported"]
