"""Compiling candidates while the model still writes the others (the LLM stage's side job).

The kernel stage compiles every candidate before it can verify it. On a machine with spare cores, the
LLM stage can start that work early: each extracted kernel goes to a small nvcc pool that writes the
shared on-disk cache (`compile.shared_cache`), where the kernel stage later finds the cubin ready. It
only compiles: nothing runs on the GPU, and no record depends on it (a compile missing from the cache
is simply done by the kernel stage). When the LLM stage ends, compiles not started yet are dropped
rather than waited for, so the side job never makes the LLM stage longer than one compile.
"""

from __future__ import annotations

import logging
from typing import Any

from cudanalyst.tasks import UnknownTaskError, get_task
from cudanalyst.tasks.conformance import contract_problems

log = logging.getLogger("cudanalyst.runner.kernels")


class Precompiler:
    """`submit(task, code)` from any thread; `close()` at the end of the LLM stage. Off without nvcc."""

    def __init__(self, workers: int) -> None:
        from cudanalyst.runner.kernels.compile import CompilePool, shared_cache
        from cudanalyst.runner.kernels.toolchain import ToolchainNotFoundError

        self.submitted = 0
        self.pool: Any = None
        try:
            self.pool = CompilePool(workers, cache=shared_cache())
        except ToolchainNotFoundError as exc:
            log.info("no compiles during generation: %s", exc)

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
        self.pool.submit(task_translation_unit(t, code))
        self.submitted += 1

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close(drop_queued=True)

    def __enter__(self) -> Precompiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

