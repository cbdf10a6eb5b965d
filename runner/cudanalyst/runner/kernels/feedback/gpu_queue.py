"""A queue for the GPU tools (compute-sanitizer, Nsight Compute) across the processes of one machine.

In a recording, every OpenEvolve worker of every task evaluates programs at once beside the model server; when
all of them started a tool together, the tools' CUDA contexts ran out of memory (29 of 50 sanitizer reports of
the 2026-11-30 recording) and Nsight Compute, which serializes profiling on the GPU, ran past its time limit.
A tool run now first takes one of a few slots (an exclusive `flock` on a file; the kernel drops it when the
process dies, so a killed worker never holds one), and a run whose launcher found no memory for its context
(launch_once's exit status 4) waits and tries again: the tool runs when the GPU has room for it.

CUDANALYST_GPU_TOOL_SLOTS sets the number of slots (default 2), CUDANALYST_GPU_TOOL_DIR their folder,
CUDANALYST_GPU_TOOL_RETRIES the tries after the first when no memory was free (default 4).

Nsight Compute has a queue of its own (pool "ncu", CUDANALYST_NCU_SLOTS, default 1). ncu serializes profiling across
every process of the machine itself (a lock file, $TMPDIR/nsight-compute-lock), so in the shared queue the ncu runs
held slots while they waited for each other: on the H200 (2026-12-02, 8 slots, 16 tasks) compute-sanitizer waited up
to 251 s for a slot, ncu "ran" 28-141 s a program, and that time, which ncu's time limit counts, was mostly ncu's own
queue. In a pool of one, ncu's waiting is counted as waiting and its running as running, and the other tools go on.

Waiting runs take slots in the order they asked for them (a line of tickets, `_ticket`), not at random.

A report's tools are timed (`tool_clock`): the seconds spent waiting for a slot and running in one go into the
report's `ToolRun`, so a recording says whether its evaluations wait for the queue or for the tools themselves
(the 2026-12-01 recording took 22 s to 277 s per compiled program, and could not say which).
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cudanalyst.trajectory.toolruns import ToolRun

DEFAULT_SLOTS = 2
TOOLS_POOL, NCU_POOL = "tools", "ncu"
POOL_SLOTS_ENV = {TOOLS_POOL: ("CUDANALYST_GPU_TOOL_SLOTS", DEFAULT_SLOTS), NCU_POOL: ("CUDANALYST_NCU_SLOTS", 1)}
POLL_S = 0.2
CONTEXT_RETRIES = 4  # a context that found no memory: tried again after 2, 4, 8, 16 s (CUDANALYST_GPU_TOOL_RETRIES)
T = TypeVar("T")


@dataclass
class ToolClock:
    """Seconds the runs in a block waited for a slot, and ran holding one (back-offs after no memory count as
    waiting)."""

    waited: float = 0.0
    ran: float = 0.0
    runs: int = 0

    def timed(self, run: ToolRun) -> ToolRun:
        """`run` with these seconds, when a tool was launched at all (not when it is not installed, say)."""
        if not self.runs:
            return run
        return run.model_copy(update={"seconds": round(self.ran, 3), "waited_seconds": round(self.waited, 3)})


_clock: contextvars.ContextVar[ToolClock | None] = contextvars.ContextVar("cudanalyst_tool_clock", default=None)


@contextlib.contextmanager
def tool_clock() -> Iterator[ToolClock]:
    """Time every `queued` run of this thread inside the block (a report's tool runs)."""
    clock = ToolClock()
    token = _clock.set(clock)
    try:
        yield clock
    finally:
        _clock.reset(token)


def slots(pool: str = TOOLS_POOL) -> int:
    name, default = POOL_SLOTS_ENV[pool]
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


def slot_dir() -> Path:
    folder = Path(os.environ.get("CUDANALYST_GPU_TOOL_DIR") or Path(tempfile.gettempdir()) /
                  f"cudanalyst-gpu-tools-{os.getuid()}")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def gpu_slot(device: str | None = None, pool: str = TOOLS_POOL) -> Iterator[float]:
    """Hold one slot of the device's queue (of `pool`) for the block; yields the seconds waited for it.
    Slots go in the order the runs asked for them (`_ticket`)."""
    device = device if device is not None else os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_")
    started = time.monotonic()
    folder, count = slot_dir(), slots(pool)
    prefix = f"gpu-{device}" if pool == TOOLS_POOL else f"gpu-{device}-{pool}"
    with _ticket(folder / f"{prefix}-queue") as waiting_ahead:
        while True:
            fd = _free_slot(folder, prefix, count) if waiting_ahead(count) < count else None
            if fd is not None:
                break
            time.sleep(POLL_S)
    try:
        yield time.monotonic() - started
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _free_slot(folder: Path, prefix: str, count: int) -> int | None:
    """The descriptor of a slot's lock file, locked; None when every slot is held."""
    for i in range(count):
        fd = os.open(folder / f"{prefix}-slot-{i}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return fd
    return None


@contextlib.contextmanager
def _ticket(queue: Path) -> Iterator[Callable[[int], int]]:
    """A place in the queue's line, held until the block ends; yields `waiting_ahead(up_to)`: how many live tickets
    are ahead of this one (counted up to `up_to`). Without a line, every run polled the slots at random: on the H200
    (2026-12-02) an ncu run waited up to 431 s behind 10 s runs, and tasks whose evaluations lost the draw did not
    reach a checkpoint in three device calls. A ticket is a file named by its arrival and locked by its holder
    (flock, so the kernel drops it when the holder dies): one whose lock can be taken is stale and is removed."""
    queue.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}-{threading.get_ident()}"
    hidden = queue / f".{name}"  # locked before it is visible, so that no one takes it for a stale one
    fd = os.open(hidden, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(hidden, queue / name)

    def waiting_ahead(up_to: int) -> int:
        live = 0
        for other in sorted(n for n in os.listdir(queue) if not n.startswith(".")):
            if other >= name or live >= up_to:
                break
            live += _alive(queue / other)
        return live

    try:
        yield waiting_ahead
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(queue / name)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _alive(ticket: Path) -> bool:
    """Whether a ticket's holder still holds it; a stale ticket (its holder died) is removed."""
    try:
        fd = os.open(ticket, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ticket)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def context_retries() -> int:
    try:
        return max(0, int(os.environ.get("CUDANALYST_GPU_TOOL_RETRIES", CONTEXT_RETRIES)))
    except ValueError:
        return CONTEXT_RETRIES


def queued(run: Callable[[], T], no_context: Callable[[T], bool], *, retries: int | None = None,
           sleep: Callable[[float], None] = time.sleep, pool: str = TOOLS_POOL) -> T:
    """`run()` in a slot of `pool`; again after a back-off while `no_context(result)` says it found no GPU memory."""
    retries = context_retries() if retries is None else retries
    clock = _clock.get() or ToolClock()
    result = None
    for attempt in range(retries + 1):
        with gpu_slot(pool=pool) as waited:
            clock.waited += waited
            started = time.monotonic()
            clock.runs += 1
            try:
                result = run()
            finally:
                clock.ran += time.monotonic() - started
        if not no_context(result) or attempt == retries:
            break
        backoff = 2.0 * 2**attempt
        started = time.monotonic()
        sleep(backoff)
        clock.waited += time.monotonic() - started
    return result  # type: ignore[return-value]
