"""Persistent GPU worker processes: one CUDA context each, talking to the runner over a pipe.

Candidate kernels are untrusted. Each worker is a separate process started with an environment
scrubbed of credentials (no `AWS_*`, no service-account token path), so nothing a kernel or its
loader does can reach the object store; the worker only answers requests on its pipe and never
writes the store (the runner writes outcome records). Compiling is not done here: the CPU pool
(`compile.py`) builds a cubin with nvcc, and the worker loads it with `module_from_buffer`.

A worker is replaced at once after:
- a timeout: a hung kernel cannot be interrupted, so the process is killed;
- a crash: the process died (segfault, killed for memory);
- a sticky CUDA error: an illegal address or similar poisons the context for good, so the worker
  answers, then exits.
The replacement starts in the background as soon as the old process is gone, so its start-up (Python,
pycuda, a CUDA context) overlaps the caller's next steps; the next request waits only for what is left.

Parent side: `WorkerHandle`. Child side: `serve()` (run as `python -m cudanalyst.runner.kernels.workers.worker`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from typing import Any

from cudanalyst.runner import lifeline
from cudanalyst.runner.kernels.compile.nvcc import niced
from cudanalyst.runner.kernels.timing import trials as timing
from cudanalyst.runner.kernels.verify import correctness as verify
from cudanalyst.runner.kernels.workers.references import FOLDER_ENV
from cudanalyst.runner.kernels.workers.requests import CompareRequest, VerifyRequest
from cudanalyst.runner.kernels.workers.session import GpuSession

Reply = dict[str, Any]

# Names of variables a candidate's process must not see: credentials and token paths.
_SECRET_NAME = re.compile(
    r"^AWS_|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|ACCESS_KEY|PRIVATE_KEY|API_?KEY|^KUBERNETES_SERVICE|^S3_",
    re.IGNORECASE,
)
# Values that point at mounted secrets (a service-account token, a secret volume).
_SECRET_VALUE = re.compile(r"/var/run/secrets|/run/secrets|serviceaccount", re.IGNORECASE)

STARTUP_TIMEOUT_S = 120.0


def scrubbed_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker runs with: everything but credentials and secret paths."""
    env = dict(os.environ if environ is None else environ)
    return {k: v for k, v in env.items() if not _SECRET_NAME.search(k) and not _SECRET_VALUE.search(v)}


class WorkerHandle:
    """The runner's end of one worker process. Not thread-safe: the pool hands it to one thread at a time."""

    def __init__(self, device: int = 0, name: str = "worker-0", shared_dir: str | None = None,
                 nice: int = 0) -> None:
        self.device = device
        self.name = name
        self.nice = nice  # > 0: a lower CPU priority (a side job beside a model server)
        self.shared_dir = shared_dir  # where the pool's workers share task inputs and references
        self.restarts = 0
        self.restart_seconds = 0.0  # wall time the replacements took to start (they overlap other work)
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._log = tempfile.NamedTemporaryFile(prefix=f"cudanalyst-{name}-", suffix=".log", delete=False)  # noqa: SIM115
        self._cwd = tempfile.mkdtemp(prefix=f"cudanalyst-{name}-")

    # ---- life cycle -------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        parent, child = Pipe(duplex=True)
        cmd = [sys.executable, "-m", "cudanalyst.runner.kernels.workers.worker", "--fd", str(child.fileno()),
               "--device", str(self.device)]
        env = scrubbed_environment()
        if self.shared_dir:
            env[FOLDER_ENV] = self.shared_dir
        # Tied to this process: a runner that dies, however it dies, leaves no worker holding the GPU.
        self._proc = lifeline.popen(
            niced(cmd, self.nice), death_signal=signal.SIGKILL, env=env, pass_fds=(child.fileno(),), cwd=self._cwd,
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
        )
        child.close()
        self._conn = parent
        if not parent.poll(STARTUP_TIMEOUT_S):
            self.stop()
            raise RuntimeError(f"{self.name}: no answer from the worker within {STARTUP_TIMEOUT_S:g} s")
        try:
            hello = parent.recv()
        except EOFError:
            code = self._proc.wait(timeout=10)
            self._proc = None
            raise RuntimeError(f"{self.name}: worker exited with status {code} at start: {self.log_tail()}") from None
        if not hello.get("ready"):
            raise RuntimeError(f"{self.name}: worker did not start: {hello}")

    def _replace(self) -> None:
        """Kill what is left of the process and start its replacement in the background."""
        self.stop()
        self.restarts += 1
        self._start_error = None
        self._starting = threading.Thread(target=self._start_in_background, name=f"{self.name}-restart", daemon=True)
        self._starting.start()

    def _start_in_background(self) -> None:
        began = time.monotonic()
        try:
            self.start()
        except BaseException as exc:  # noqa: BLE001 - reported by the next call, which starts it again
            self._start_error = exc
            self.stop()
        finally:
            self.restart_seconds += time.monotonic() - began

    def _ready(self) -> None:
        """Wait for a replacement being started; start one here if there is none (or it failed)."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if not self.alive:
            if self._proc is not None:
                self.stop()
                self.restarts += 1
            self.start()

    def stop(self) -> None:
        """Kill the process (a hung kernel ignores anything gentler) and forget it."""
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=30)
        self._proc, self._conn = None, None

    def close(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self.alive and self._conn is not None:
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send({"op": "quit"})
            with contextlib.suppress(subprocess.TimeoutExpired):
                assert self._proc is not None
                self._proc.wait(timeout=10)
        self.stop()
        with contextlib.suppress(OSError):
            os.unlink(self._log.name)
        shutil.rmtree(self._cwd, ignore_errors=True)

    def log_tail(self, limit: int = 2000) -> str:
        try:
            with open(self._log.name, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - limit))
                return fh.read().decode(errors="replace").strip()
        except OSError:
            return ""

    # ---- requests ---------------------------------------------------------------------------

    def call(self, request: dict[str, Any], timeout_s: float, ready_s: float | None = None) -> Reply:
        """Send one request; always returns a reply dict (`ok` False with `kind` on any failure).

        A verification announces when the candidate's own work begins (`{"started": True}`), once the task's
        inputs and references are ready: those are the harness's, made once per task and seed and shared by
        the pool, so they are waited for up to `ready_s` (default `timeout_s`), and `timeout_s` counts only
        from the announcement. A hung kernel is then killed `timeout_s` after it began, never later because a
        worker first made references (issue 32: on the H100 23 hung candidates each held a worker 60 s)."""
        self._ready()
        assert self._conn is not None and self._proc is not None
        started = time.monotonic()
        with contextlib.suppress(OSError, BrokenPipeError):  # a dead worker: the receive below reports it
            self._conn.send(request)
        if ready_s is None:
            reply = self._receive(timeout_s, started, "no result within {limit:g} s (a kernel that never terminates?)")
        else:
            reply = self._receive(ready_s, started, "the task's inputs and references were not ready within {limit:g} s")
        if reply.get("started") is True:  # the candidate's own runs begin: its time limit starts now
            reply = self._receive(timeout_s, started,
                                  "no result within {limit:g} s of its own runs (a kernel that never terminates?)")
        if reply.get("sticky"):
            # The context is poisoned; the child exits after answering. Reap it now.
            with contextlib.suppress(subprocess.TimeoutExpired):
                assert self._proc is not None
                self._proc.wait(timeout=30)
            self._replace()
        return reply

    def _receive(self, limit: float, started: float, timeout_text: str) -> Reply:
        """The worker's next message within `limit` seconds; a timeout or a death as a failure reply (the
        worker replaced)."""
        assert self._conn is not None and self._proc is not None
        try:
            answered = self._conn.poll(limit)
        except (OSError, BrokenPipeError):
            answered = True  # the recv below reports the death
        if not answered:
            self._replace()
            return {"ok": False, "kind": "timeout", "seconds": time.monotonic() - started,
                    "error": timeout_text.format(limit=limit) + "; the worker was killed and restarted"}
        try:
            return self._conn.recv()  # type: ignore[no-any-return]
        except (EOFError, OSError):
            code = self._proc.wait(timeout=30)
            tail = self.log_tail(500)
            self._replace()
            return {"ok": False, "kind": "crash", "seconds": time.monotonic() - started,
                    "error": f"the worker process died (exit status {code}); restarted. {tail}".strip()}


# ---- child side ---------------------------------------------------------------------------------

# Errors after which a CUDA context cannot be used again (cuda.h: "the context cannot be used").
_STICKY = re.compile(
    r"illegal (memory )?(address|access)|illegal instruction|misaligned|unspecified launch failure|"
    r"hardware stack error|invalid program counter|launch timed out|device-side assert|context is destroyed",
    re.IGNORECASE,
)


def _handle(session_box: list[GpuSession | None], device: int, request: dict[str, Any],
            announce: Callable[[], None]) -> Reply:
    op = request.get("op")
    if op == "ping":  # the pipe's own checks: `ready_s` stands for making references, then `sleep_s` for the runs
        if "ready_s" in request:
            time.sleep(float(request["ready_s"]))
            announce()
        time.sleep(float(request.get("sleep_s", 0.0)))
        return {"ok": True, "pid": os.getpid()}
    if op == "environ":
        return {"ok": True, "names": sorted(os.environ)}
    if session_box[0] is None:
        session_box[0] = GpuSession(device)
    session = session_box[0]
    if op == "probe":
        return {"ok": True, "name": session.device.name(), "l2Bytes": session.l2_bytes,
                "computeCapability": list(session.device.compute_capability())}
    if op == "references":  # make a task's inputs and references for these seeds ahead of their use (timing's)
        task = verify.resolve_task(request["task"], request.get("sizes"))
        for seed in request["seeds"]:
            session.reference_for(task, int(seed))
        return {"ok": True}
    if op == VerifyRequest.op:
        return verify.handle_verify(session, request, announce)
    if op == CompareRequest.op:
        return timing.handle_compare(session, request)
    return {"ok": False, "kind": "request", "error": f"unknown request op {op!r}"}


def serve(conn: Connection, device: int) -> int:
    session_box: list[GpuSession | None] = [None]
    conn.send({"ready": True, "pid": os.getpid()})
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return 0  # the runner went away
        if request.get("op") == "quit":
            return 0
        started = time.monotonic()
        try:
            reply = _handle(session_box, device, request, lambda: conn.send({"started": True}))
        except Exception as exc:  # noqa: BLE001 - any failure of one candidate is reported, never fatal here
            message = f"{type(exc).__name__}: {exc}"
            session = session_box[0]
            sticky = bool(_STICKY.search(message)) or (session is not None and not session.healthy())
            reply = {"ok": False, "kind": "cuda" if "pycuda" in type(exc).__module__ else "error",
                     "error": message, "sticky": sticky}
        reply.setdefault("seconds", time.monotonic() - started)
        conn.send(reply)
        if reply.get("sticky"):
            os._exit(3)  # a poisoned context: leave without touching CUDA again


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A persistent GPU worker (started by the runner).")
    parser.add_argument("--fd", type=int, required=True, help="the pipe's file descriptor")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    conn = Connection(args.fd)
    return serve(conn, args.device)


if __name__ == "__main__":
    sys.exit(main())
