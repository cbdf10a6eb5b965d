"""Inputs and reference outputs of a task per seed, made once for a whole pool of GPU workers.

Every worker verifies candidates of every task on the same seeds, and the float64 reference of a
large task costs a good part of a second (jacobi-2d, conv2d). Made per worker, that cost is paid
once per worker and seed: a dozen workers pay it a dozen times. Here the first worker to need an
entry takes a lock, makes it and writes it to the pool's folder (atomically); the others wait on
the lock and load it (a file read of a few tens of MB). Each worker still keeps recent entries in
memory. Without a folder (a worker started alone), entries are only kept in memory.

The folder belongs to one WorkerPool and goes with it, so an entry can never outlive the code that
made it. Only numpy arrays are stored (no pickles).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

FOLDER_ENV = "CUDANALYST_REFERENCE_DIR"
Arrays = dict[str, np.ndarray]


def entry_name(kind: str, task: str, sizes: dict[str, int], seed: int) -> str:
    blob = json.dumps([kind, task, sorted(sizes.items()), int(seed)])
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _load(path: Path) -> Arrays | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError):
        return None  # absent (or torn, which the atomic write rules out): make it


def _save(path: Path, arrays: Arrays) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class SharedArrays:
    """`get(kind, task, seed, make)`: the arrays `make()` returns, made once per folder."""

    def __init__(self, folder: str | os.PathLike[str] | None, keep: int = 64) -> None:
        self.folder = Path(folder) if folder else None
        self.keep = keep
        self.memory: OrderedDict[str, Arrays] = OrderedDict()
        self.made = 0  # entries this process made itself (the rest it loaded or had)

    def get(self, kind: str, task: Any, seed: int, make: Callable[[], Arrays]) -> Arrays:
        name = entry_name(kind, task.name, dict(task.sizes), seed)
        if name not in self.memory:
            self.memory[name] = self._shared(name, make)
            while len(self.memory) > self.keep:
                self.memory.popitem(last=False)
        self.memory.move_to_end(name)
        return self.memory[name]

    def _shared(self, name: str, make: Callable[[], Arrays]) -> Arrays:
        if self.folder is None:
            self.made += 1
            return make()
        path = self.folder / f"{name}.npz"
        if (hit := _load(path)) is not None:
            return hit
        with _locked(self.folder / f"{name}.lock"):
            if (hit := _load(path)) is not None:  # made by another worker while this one waited
                return hit
            arrays = make()
            _save(path, arrays)
            self.made += 1
            return arrays

    @classmethod
    def from_environment(cls) -> SharedArrays:
        return cls(os.environ.get(FOLDER_ENV) or None)


def task_inputs(shared: SharedArrays, task: Any, seed: int) -> Arrays:
    """The task's inputs for a seed (scalars come back as 0-d arrays, as make_inputs gives them)."""
    return shared.get("inputs", task, seed, lambda: task.make_inputs(seed))


def task_reference(shared: SharedArrays, task: Any, seed: int) -> tuple[Arrays, Arrays]:
    """(inputs, expected outputs) for a seed."""
    inputs = task_inputs(shared, task, seed)
    return inputs, shared.get("reference", task, seed, lambda: task.reference(inputs))
