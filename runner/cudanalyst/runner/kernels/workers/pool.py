"""A pool of persistent GPU workers. Verification may overlap; timing holds the GPU alone.

Any number of threads may call `verify` at once (each borrows an idle worker). A `time` call takes the
GPU exclusively: it waits for running verifications to finish and blocks new ones until it is done, so
no other kernel shares the GPU while events are recorded. Writers are preferred, so timing is not
starved by a steady stream of verifications.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from cudanalyst.runner.kernels.workers.requests import CompareRequest, VerifyRequest
from cudanalyst.runner.kernels.workers.worker import Reply, WorkerHandle


class GpuGate:
    """A readers-writer lock: shared for verification, exclusive for timing (writer preferred)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class WorkerPool:
    """`size` workers on one device for verification, and one for timing; each starts on its first request."""

    def __init__(self, size: int = 2, device: int = 0, nice: int = 0) -> None:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {size}")
        # The workers make each task's inputs and references once between them (references.py).
        self.shared_dir = tempfile.mkdtemp(prefix="cudanalyst-references-")
        self.workers = [WorkerHandle(device, name=f"gpu{device}-worker-{i}", shared_dir=self.shared_dir, nice=nice)
                        for i in range(size)]
        self._idle: queue.Queue[WorkerHandle] = queue.Queue()
        for w in self.workers:
            self._idle.put(w)
        # Timing always goes to one more worker of its own: it holds the GPU alone anyway, and its inputs,
        # L2-flush buffer and frozen programs' modules then stay loaded from one candidate to the next.
        self.timer = WorkerHandle(device, name=f"gpu{device}-timer", shared_dir=self.shared_dir, nice=nice)
        self._timer_lock = threading.Lock()
        self.gate = GpuGate()

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[WorkerHandle]:
        worker = self._idle.get()
        try:
            yield worker
        finally:
            self._idle.put(worker)

    def verify(self, request: VerifyRequest, timeout_s: float, ready_s: float | None = None) -> Reply:
        """`timeout_s` bounds the candidate's own runs; `ready_s` the task's references before them (worker.py)."""
        with self._borrow() as worker, self.gate.shared():
            return worker.call(request.wire(), timeout_s, ready_s)

    def compare(self, request: CompareRequest, timeout_s: float) -> Reply:
        """Time programs against each other (timing.py), with the GPU to this request alone."""
        with self._timer_lock, self.gate.exclusive():
            return self.timer.call(request.wire(), timeout_s)

    def call(self, request: dict[str, Any], timeout_s: float) -> Reply:
        """Any other request (probe, ping), shared like a verification."""
        with self._borrow() as worker, self.gate.shared():
            return worker.call(request, timeout_s)

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in (*self.workers, self.timer))

    @property
    def restart_seconds(self) -> float:
        """Wall seconds the replacement workers took to start, added up (each overlaps other work)."""
        return sum(w.restart_seconds for w in (*self.workers, self.timer))

    def close(self) -> None:
        for w in (*self.workers, self.timer):
            w.close()
        shutil.rmtree(self.shared_dir, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
