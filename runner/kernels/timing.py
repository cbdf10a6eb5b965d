"""Timing of a task's launch sequence with CUDA events, inside a GPU worker.

Per trial: in/out arrays are restored on the device (outside the timed region), the L2 is flushed by
writing a buffer twice its size (also outside), then a start event, the launch sequence, an end event.
Warm-up launches come first, so module loading and first-touch costs stay out. The median of the
trials is the figure used; the spread (IQR / median and the coefficient of variation) comes with it so
a noisy measurement can be seen as such. The pool gives timing the GPU alone (see pool.py).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cudanalyst.runner.kernels.verify import Buffers, ContractError, ContractLauncher, Launch, resolve_task

if TYPE_CHECKING:
    from cudanalyst.runner.kernels.worker import GpuSession

MIN_TRIALS = 30


@dataclass(frozen=True)
class TimingStats:
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    q1_ms: float
    q3_ms: float
    iqr_over_median: float
    cv: float  # standard deviation / mean
    trials: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarize(times_ms: list[float]) -> TimingStats:
    """Order statistics and spread of per-trial times (pure)."""
    if not times_ms:
        raise ValueError("no timings to summarize")
    arr = np.asarray(times_ms, dtype=np.float64)
    q1, med, q3 = (float(x) for x in np.percentile(arr, [25, 50, 75]))
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return TimingStats(
        median_ms=med, mean_ms=mean, min_ms=float(arr.min()), max_ms=float(arr.max()), q1_ms=q1, q3_ms=q3,
        iqr_over_median=(q3 - q1) / med if med > 0 else float("inf"), cv=std / mean if mean > 0 else float("inf"),
        trials=int(arr.size),
    )


def speedup(reference_ms: float | None, candidate_ms: float | None) -> float | None:
    """reference time / candidate time; None when either is missing or not positive."""
    if not reference_ms or not candidate_ms or reference_ms <= 0 or candidate_ms <= 0:
        return None
    return reference_ms / candidate_ms


def time_launches(session: GpuSession, launch: Launch, buffers: Buffers, warmup: int, trials: int) -> list[float]:
    """Per-trial milliseconds of `launch`, L2 flushed and in/out arrays restored before each trial."""
    cuda = session.cuda
    trials = max(trials, MIN_TRIALS)
    flush, words = session.flush_buffer()
    stream = cuda.Stream()
    buffers.reset()
    for _ in range(warmup):
        buffers.restore_async(stream)
        launch(stream, buffers)
    stream.synchronize()
    events = [(cuda.Event(), cuda.Event()) for _ in range(trials)]
    for i, (start, end) in enumerate(events):
        buffers.restore_async(stream)
        cuda.memset_d32_async(flush, i, words, stream)  # a different value each time: real writes
        start.record(stream)
        launch(stream, buffers)
        end.record(stream)
    stream.synchronize()
    return [end.time_since(start) for start, end in events]


def handle_time(session: GpuSession, request: dict[str, Any]) -> dict[str, Any]:
    """The worker's `time` request: task, sizes, cubin, warmup, trials, seed, keep."""
    started = time.monotonic()
    task = resolve_task(request["task"], request.get("sizes"))
    cuda = session.cuda
    try:
        module = session.module(request["cubin"]) if request.get("keep") else cuda.module_from_buffer(request["cubin"])
        launcher = ContractLauncher(cuda, task, module)
    except (cuda.Error, ContractError) as exc:
        return {"ok": False, "kind": "load", "error": f"cannot time: {exc}", "sticky": not session.healthy()}
    buffers = Buffers(cuda, task, session.inputs_for(task, int(request.get("seed", 0))))
    prepared = time.monotonic()
    try:
        times = time_launches(session, launcher, buffers, int(request.get("warmup", 3)), int(request.get("trials", 30)))
    finally:
        buffers.free()
    stats = summarize(times)
    return {"ok": True, "stats": stats.to_dict(), "timesMs": times, "seconds": time.monotonic() - started,
            "prepSeconds": prepared - started,
            "l2FlushBytes": session.flush_buffer()[1] * 4, "median": statistics.median(times)}
