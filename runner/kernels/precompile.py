"""Compiling (and verifying) candidates while the model still writes the others: the LLM stage's side job.

The kernel stage compiles every candidate, then verifies it on the GPU, then times the correct ones
with the GPU to itself. On a machine with spare cores, the LLM stage can start the first two early:
- each extracted kernel goes to a small nvcc pool that writes the shared on-disk cache
  (`compile.shared_cache`), where the kernel stage later finds the cubin ready;
- with `verify_workers` and a GPU, each cubin that compiled is also verified by a small pool of GPU
  workers beside the model server, and the verdict is stored beside the compile cache (verdicts.py),
  where the kernel stage finds it. Verification shares the GPU with the model; nothing is timed here.
No record depends on the side job: whatever it did not finish, the kernel stage does. When the LLM
stage ends, work not started yet is dropped rather than waited for, so the side job never makes the
LLM stage longer than one compile or one verification.
"""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from cudanalyst.tasks import Task, UnknownTaskError, get_task
from cudanalyst.tasks.conformance import contract_problems

log = logging.getLogger("cudanalyst.runner.kernels")
# nvcc and the GPU workers of the side job run at this lower CPU priority: the model server and its
# clients come first (they are what the LLM stage waits for).
SIDE_JOB_NICE = 10


class Precompiler:
    """`submit(task, code)` from any thread; `close()` at the end of the LLM stage. Off without nvcc."""

    def __init__(self, workers: int, verify_workers: int = 0, settings: Any = None) -> None:
        from cudanalyst.runner.kernels.compile import CompilePool, shared_cache
        from cudanalyst.runner.kernels.stage import EvalSettings
        from cudanalyst.runner.kernels.toolchain import ToolchainNotFoundError
        from cudanalyst.runner.kernels.verdicts import VerdictCache

        self.submitted = 0
        self.verified = 0
        self.pool: Any = None
        self.gpu: Any = None
        self.cfg = EvalSettings.of(settings)
        self._verifier: ThreadPoolExecutor | None = None
        try:
            cache = shared_cache()
            self.pool = CompilePool(workers, cache=cache, nice=SIDE_JOB_NICE)
        except ToolchainNotFoundError as exc:
            log.info("no compiles during generation: %s", exc)
            return
        if verify_workers > 0:
            from cudanalyst.runner.kernels.pool import WorkerPool

            # Workers start on the first request, and the first verification asks whether there is a
            # GPU at all (a child process), so none of this delays the LLM stage's first request.
            self.gpu = WorkerPool(verify_workers, nice=SIDE_JOB_NICE)
            self.verdicts = VerdictCache.beside(cache)
            self._verifier = ThreadPoolExecutor(verify_workers, thread_name_prefix="early-verify")

    def submit(self, task: str, code: str) -> None:
        from cudanalyst.runner.kernels.compile import task_translation_unit

        if self.pool is None:
            return
        try:
            t = get_task(task)
        except UnknownTaskError:
            return
        if contract_problems(t, code):  # the kernel stage fails these before nvcc
            return
        future = self.pool.submit(task_translation_unit(t, code))
        self.submitted += 1
        if self._verifier is not None:
            future.add_done_callback(lambda f, t=t: self._compiled(t, f))

    def _compiled(self, task: Task, future: Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None or self._verifier is None:
            return
        result = future.result()
        if result.ok and result.cubin:
            with contextlib.suppress(RuntimeError):  # shut down: the LLM stage has ended
                self._verifier.submit(self._verify, task, result.cubin)

    def _verify(self, task: Task, cubin: bytes) -> None:
        from cudanalyst.runner.kernels.stage import gpu_available, verify_request
        from cudanalyst.runner.kernels.verdicts import verify_once

        if not gpu_available():  # asked once per process (cached)
            return
        try:
            reply = verify_once(self.gpu, self.verdicts, verify_request(task, cubin, self.cfg),
                                self.cfg.timeout_seconds)
        except Exception as exc:  # noqa: BLE001 - a side job: the kernel stage verifies whatever is missing
            log.info("early verification dropped: %s", exc)
            return
        if reply.get("ok") and not reply.get("cached"):
            self.verified += 1

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close(drop_queued=True)
        if self._verifier is not None:
            self._verifier.shutdown(wait=False, cancel_futures=True)
            # A verification still running (a slow or hung kernel) is cut short rather than waited for;
            # its verdict is not stored, so the kernel stage does it again.
            for worker in self.gpu.workers:  # (its timer never started: nothing is timed here)
                worker.stop()
            self._verifier.shutdown(wait=True)
            self.gpu.close()

    def __enter__(self) -> Precompiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
