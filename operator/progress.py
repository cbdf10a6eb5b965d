"""Progress of a run from the shards' progress objects in the store (progress/shard-<i>.json)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from cudanalyst.runs import read_progress
from cudanalyst.store import ObjectStore


def _count(doc: dict[str, Any], *path: str) -> int:
    node: Any = doc
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    try:
        return max(0, int(node or 0))
    except (TypeError, ValueError):
        return 0


def _failures(doc: dict[str, Any]) -> int:
    if "failedUnits" in doc:
        return _count(doc, "failedUnits")
    failures = doc.get("failures")
    return len(failures) if isinstance(failures, list) else _count(doc, "failures")


def summarize(
    shards: list[dict[str, Any] | None],
    total: int,
    start_time: str | None,
    now: datetime,
) -> tuple[dict[str, Any], float]:
    """(status.progress, gpuSeconds) from the shards' objects; a shard that wrote nothing yet counts zero.

    `total` is the plan's unit count (the operator's own, not the shards' claim). The ETA assumes the
    rate so far holds: elapsed x remaining / done.
    """
    docs = [d for d in shards if isinstance(d, dict)]
    done = min(total, sum(_count(d, "done") for d in docs)) if total else sum(_count(d, "done") for d in docs)
    llm = sum(_count(d, "byStage", "llm", "done") for d in docs)
    kernels = sum(_count(d, "byStage", "kernels", "done") for d in docs)
    gpu_seconds = round(sum(float(d.get("gpuSeconds") or 0.0) for d in docs), 3)
    percent = round(100.0 * done / total, 1) if total else 0.0
    eta: int | None = None
    if start_time and 0 < done < total:
        started = datetime.fromisoformat(start_time.replace("Z", "+00:00"))
        elapsed = max(0.0, (now - started).total_seconds())
        eta = math.ceil(elapsed * (total - done) / done)
    elif total and done >= total:
        eta = 0
    progress = {
        "done": done,
        "total": total,
        "percent": min(100.0, percent),
        "text": f"{done}/{total}",
        "etaSeconds": eta,
        "failures": sum(_failures(d) for d in docs),
        "llm": {"done": min(llm, total) if total else llm, "total": total},
        "kernels": {"done": min(kernels, total) if total else kernels, "total": total},
    }
    return progress, gpu_seconds


def read_shards(store: ObjectStore, shards: int) -> list[dict[str, Any] | None]:
    """Each shard's progress object, or None where a shard has not written one yet."""
    out: list[dict[str, Any] | None] = []
    for index in range(shards):
        out.append(read_progress(store, index))
    return out
