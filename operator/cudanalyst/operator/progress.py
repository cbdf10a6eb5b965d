"""Progress of a run from the shards' progress objects in the store (`cudanalyst.runfolder.read_shard_progress`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from cudanalyst.api.status import RunProgress, StageProgress
from cudanalyst.runfolder import ShardProgress, read_shard_progress
from cudanalyst.store import ObjectStore


def run_progress(shards: Sequence[ShardProgress | None], total: int, start_time: str | None,
                 now: datetime) -> tuple[RunProgress, float]:
    """(status.progress, gpuSeconds) from the shards' objects; a shard that wrote nothing yet counts zero.

    `total` is the plan's unit count (the operator's own, not the shards' claim). The ETA assumes the
    rate so far holds: elapsed x remaining / done.
    """
    docs = [d for d in shards if d is not None]
    done = sum(d.done for d in docs)
    done = min(total, done) if total else done
    llm = sum(d.stage("llm").done for d in docs)
    kernels = sum(d.stage("kernels").done for d in docs)
    gpu_seconds = round(sum(d.gpu_seconds for d in docs), 3)
    percent = round(100.0 * done / total, 1) if total else 0.0
    eta: int | None = None
    if start_time and 0 < done < total:
        started = datetime.fromisoformat(start_time.replace("Z", "+00:00"))
        elapsed = max(0.0, (now - started).total_seconds())
        eta = math.ceil(elapsed * (total - done) / done)
    elif total and done >= total:
        eta = 0
    progress = RunProgress(
        done=done, total=total, percent=min(100.0, percent), text=f"{done}/{total}", eta_seconds=eta,
        failures=sum(d.failed_units for d in docs),
        llm=StageProgress(done=min(llm, total) if total else llm, total=total),
        kernels=StageProgress(done=min(kernels, total) if total else kernels, total=total),
    )
    return progress, gpu_seconds


def read_shards(store: ObjectStore, shards: int) -> list[ShardProgress | None]:
    """Each shard's progress object, or None where a shard has not written one yet."""
    return [read_shard_progress(store, index) for index in range(shards)]
