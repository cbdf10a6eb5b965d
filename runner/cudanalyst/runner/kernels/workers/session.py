"""A GPU worker's CUDA state (`GpuSession`): one context, loaded modules, and the task inputs and references
it verifies and times on. Apart from worker.py so that verify.py and timing.py, which the worker calls with a
session, can name its type without importing the worker (no module imports its caller)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import OrderedDict
from typing import Any

import numpy as np

from cudanalyst.runner.kernels.verify.fences import (
    Auditor,
    FencedArrays,
    PlainAllocator,
    Region,
    VmmAllocator,
    allocator,
)
from cudanalyst.runner.kernels.workers.references import SharedArrays, task_inputs, task_reference

FENCES_ENV = "CUDANALYST_FENCES"  # "guards": plain guards even where the driver offers unmapped pages (to compare)


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
        self._allocator: PlainAllocator | VmmAllocator | None = None
        self._auditor: Auditor | None = None
        self._fenced: OrderedDict[tuple[Any, ...], FencedArrays] = OrderedDict()
        self.audit_seconds = 0.0  # what the fences' audits cost the current request (its reply says)

    # ---- fences (fences.py) ---------------------------------------------------------------------

    @property
    def allocator(self) -> PlainAllocator | VmmAllocator:
        if self._allocator is None:
            self._allocator = allocator(self.cuda, prefer_vmm=os.environ.get(FENCES_ENV, "vmm") != "guards")
        return self._allocator

    @property
    def fence_mode(self) -> str:
        """"vmm" (unmapped pages around each array, guards within) or "guards" (plain guards only); "vmm, N on
        guards" when the driver would not map N arrays (they got plain guards)."""
        fallbacks = getattr(self.allocator, "fallbacks", 0)
        return f"{self.allocator.mode}, {fallbacks} on guards" if fallbacks else self.allocator.mode

    def auditor(self, checker: bytes) -> Auditor:
        """The audit kernel of the trusted checker module, with this worker's secret digest key."""
        if self._auditor is None:
            self._auditor = Auditor(self.cuda, self.module(checker))
        return self._auditor

    def fenced_arrays(self, task: Any) -> FencedArrays:
        """A task's fenced candidate arrays for verification, kept for the next candidates of the task."""
        key = (task.name, tuple(sorted(task.sizes.items())))
        if key not in self._fenced:
            sizes = {p.name: max(4, int(np.prod(task.shape(p.name))) * np.dtype(p.dtype).itemsize)
                     for p in task.params if p.is_array}
            self._fenced[key] = FencedArrays(self.cuda, self.allocator, sizes, task.name)
            while len(self._fenced) > 8:  # tasks arrive interleaved; each kept set costs its arrays + 2 MiB each
                self._fenced.popitem(last=False)[1].free()
        self._fenced.move_to_end(key)
        return self._fenced[key]

    def resident_regions(self, own: FencedArrays | None = None) -> tuple[list[Region], dict[int, int]]:
        """What a launch must have left alone, with the digests it must have: the guards of every fenced array
        the worker keeps (`own`'s first, named by array; others' prefixed by their task) and the harness data
        kept between requests (timing's task data). Audited after every launch, since one worker may verify
        and time: a far write is blamed on the launch that made it, never on the next user of what it hit."""
        regions: list[Region] = list(own.guards) if own is not None else []
        expected: dict[int, int] = {}
        others = [f for f in self._fenced.values() if f is not own]
        for data in self.__dict__.get("_timing_data", {}).values():
            others.append(data.live)
            for region, digest in zip(data.regions, data.digests, strict=True):
                expected[len(regions)] = digest
                regions.append(region)
        for f in others:
            regions += [Region(g.ptr, g.words, g.kind, f"{f.owner}:{g.array}", g.side) for g in f.guards]
        return regions, expected

    def repoison(self) -> None:
        """Every kept guard back to the guard word (after a breach: the culprit is refused, the rest go on)."""
        for f in self._fenced.values():
            f.poison()
        for data in self.__dict__.get("_timing_data", {}).values():
            data.live.poison()

    def drop_harness(self) -> None:
        """Forget timing's kept data (rebuilt from the host when next needed): some of it was written."""
        cache = self.__dict__.get("_timing_data", {})
        while cache:
            cache.popitem()[1].free()

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
