"""Where an LLM stage's requests wait (issue 32): counters of requests held back by the client's bound and in
flight at the server, per role, sampled over the stage; and one shard's timeline, written beside its logs as
`llm-timeline-shard-<i>.json` (epoch seconds, so `cudanalyst run` can set it on its own clock), merged over
the shards by `merge`."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SAMPLE_EVERY_S = 1.0
PREFIX = "llm-timeline-shard-"


class InFlight:
    """Requests of one shard by state (queued: waiting for the client's bound; sent: at the server) and role."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now: Counter[tuple[str, str]] = Counter()
        self.samples: list[tuple[float, int, int, int, int]] = []  # (epoch, plans sent, kernels sent, queued, max)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def move(self, role: str, old: str | None, new: str | None) -> None:
        with self._lock:
            if old:
                self.now[(old, role)] -= 1
            if new:
                self.now[(new, role)] += 1

    def sample(self) -> None:
        with self._lock:
            sent_plans = self.now[("sent", "planner")]
            sent = sum(v for (state, _), v in self.now.items() if state == "sent")
            queued = sum(v for (state, _), v in self.now.items() if state == "queued")
            self.samples.append((time.time(), sent_plans, sent - sent_plans, queued, sent + queued))

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(SAMPLE_EVERY_S):
                self.sample()

        self._thread = threading.Thread(target=loop, name="llm-inflight", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.sample()


def in_flight_summary(samples: Iterable[tuple[float, int, int, int, int]]) -> dict[str, Any] | None:
    """Mean and max requests at the server, and the share of samples with requests held back by the client."""
    rows = list(samples)
    if not rows:
        return None
    sent = [p + k for _, p, k, _, _ in rows]
    return {"mean": sum(sent) / len(rows), "max": max(sent),
            "queuedShare": sum(1 for *_, q, _ in rows if q > 0) / len(rows), "samples": len(rows)}


def write(folder: str | None, shard: int, timeline: dict[str, Any]) -> None:
    if folder:
        path = Path(folder) / f"{PREFIX}{shard}.json"
        path.write_text(json.dumps(timeline))


def merge(folder: str | Path) -> dict[str, Any]:
    """The shards' timelines as one: the stage's first start, last plan and last kernel back, tokens, and the
    in-flight samples added up second by second over the shards."""
    found = [json.loads(p.read_text()) for p in sorted(Path(folder).rglob(f"{PREFIX}*.json"))]
    if not found:
        return {}

    def edge(key: str, pick: Any) -> float | None:
        values = [t[key] for t in found if t.get(key) is not None]
        return pick(values) if values else None

    out: dict[str, Any] = {"shards": len(found), "started": edge("started", min), "ended": edge("ended", max),
                           "firstPlan": edge("firstPlan", min), "lastPlan": edge("lastPlan", max),
                           "firstCode": edge("firstCode", min), "lastCode": edge("lastCode", max)}
    out["planTokens"] = sum(int(t.get("planTokens") or 0) for t in found)
    out["codeTokens"] = sum(int(t.get("codeTokens") or 0) for t in found)
    out["tokens"] = out["planTokens"] + out["codeTokens"]
    if out["started"] is not None and out["ended"] is not None:
        out["seconds"] = out["ended"] - out["started"]
    by_second: dict[int, list[int]] = {}
    for t in found:
        for at, plans, kernels, queued, _ in t.get("inFlight") or []:
            row = by_second.setdefault(int(at), [0, 0, 0])
            row[0] += plans
            row[1] += kernels
            row[2] += queued
    summary = in_flight_summary((float(s), p, k, q, p + k + q) for s, (p, k, q) in sorted(by_second.items()))
    if summary is not None:
        out["inFlight"] = summary
    return out
