"""A GPU worker's CUDA state (`GpuSession`): one context, loaded modules, and the task inputs and references
it verifies and times on. Apart from worker.py so that verify.py and timing.py, which the worker calls with a
session, can name its type without importing the worker (no module imports its caller)."""

from __future__ import annotations

import contextlib
import hashlib
from collections import OrderedDict
from typing import Any

from cudanalyst.runner.kernels.workers.references import SharedArrays, task_inputs, task_reference


class GpuSession:
    """The child's CUDA state: one context, loaded modules (keyed by cubin hash), and the task inputs and
    references it verifies and times on (made once for the whole pool: references.py)."""

    def __init__(self, device: int) -> None:
        import pycuda.driver as cuda

        cuda.init()
        self._setup(cuda, cuda.Device(device))
        self.context = self.device.make_context()

    def _setup(self, cuda: Any, device: Any) -> None:
        """Everything but the context (a subclass may bring its own)."""
        self.cuda = cuda
        self.device = device
        self.modules: OrderedDict[str, Any] = OrderedDict()
        self.shared = SharedArrays.from_environment()
        self._pinned: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.l2_bytes = int(self.device.get_attribute(cuda.device_attribute.L2_CACHE_SIZE))
        self._flush: Any = None

    def inputs_for(self, task: Any, seed: int) -> Any:
        """The task's inputs for a seed, made once: every candidate of a task is timed on the same ones,
        and making them (a seeded numpy draw of up to tens of MB) costs more than many short kernels.
        The host arrays are only read (Buffers copies them to the device)."""
        return task_inputs(self.shared, task, seed)

    def reference_for(self, task: Any, seed: int) -> Any:
        """(inputs, expected outputs) of the task for a correctness seed, made once (only read)."""
        return task_reference(self.shared, task, seed)

    def pinned(self, name: str, shape: tuple[int, ...], dtype: str) -> Any:
        """A page-locked host array lent for one read of output `name` (allocating one per read costs
        milliseconds; every candidate of a task reads the same shapes)."""
        key = (name, tuple(shape), str(dtype))
        if key not in self._pinned:
            self._pinned[key] = self.cuda.pagelocked_empty(shape, dtype=dtype)
            while len(self._pinned) > 16:
                self._pinned.popitem(last=False)
        self._pinned.move_to_end(key)
        return self._pinned[key]

    def module(self, cubin: bytes) -> Any:
        key = hashlib.sha256(cubin).hexdigest()
        if key in self.modules:
            self.modules.move_to_end(key)
            return self.modules[key]
        mod = self.cuda.module_from_buffer(cubin)
        self.modules[key] = mod
        while len(self.modules) > 64:  # candidates are seen once; keep the frozen/baseline ones warm
            self.modules.popitem(last=False)
        return mod

    def flush_buffer(self) -> tuple[Any, int]:
        """A device buffer twice the size of L2 (at least 64 MiB); writing it evicts the L2."""
        words = max(2 * self.l2_bytes, 64 << 20) // 4
        if self._flush is None:
            self._flush = self.cuda.mem_alloc(words * 4)
        return self._flush, words

    def healthy(self) -> bool:
        try:
            self.context.synchronize()
            probe = self.cuda.mem_alloc(4)
            self.cuda.memset_d32(probe, 0, 1)
            probe.free()
            return True
        except self.cuda.Error:
            return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.context.pop()
            self.context.detach()
