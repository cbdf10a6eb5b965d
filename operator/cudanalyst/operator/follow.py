"""Following running runs on their children's events: which events matter, and one refresh per run at a time.

A Job or Pod event leads to a refresh of the owning run only when what its status depends on changed
(job_relevant, pod_relevant of pods.job_summary and pods.pod_summary); refreshes of one run never overlap, and events that arrive during one are
folded into a single refresh after it. A child that changed before its run had started is remembered, and
the run is refreshed once its start is seen. Plain asyncio and dicts: tested without a cluster.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

RunKey = tuple[str, str]  # (namespace, run name)


class ChildChanges:
    """The last relevant summary seen of each child (by uid): says whether a new one differs.

    `quiet`: a first sight of a child whose relevant summary equals it is no change (a new Pod without a
    problem says nothing new about its run; a Job, even a quiet one, is news after an operator restart).
    """

    def __init__(self) -> None:
        self._last: dict[str, dict[str, Any]] = {}

    def changed(self, uid: str, summary: dict[str, Any], quiet: dict[str, Any] | None = None) -> bool:
        last = self._last.get(uid)
        self._last[uid] = summary
        if last is None:
            return summary != quiet
        return last != summary

    def forget(self, uid: str) -> dict[str, Any] | None:
        """Drops a deleted child; returns its last relevant summary."""
        return self._last.pop(uid, None)

    def __len__(self) -> int:
        return len(self._last)


# What of a child's summary the run's status depends on (conditions.judge, Operations.observe): a Job's
# counts, suspension and conditions but not `ready`; a Pod's problem, not its phase.
def job_relevant(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "ready"}


def pod_relevant(summary: dict[str, Any]) -> dict[str, Any]:
    return {"problem": summary.get("problem")}


POD_QUIET: dict[str, Any] = {"problem": None}


Refresh = Callable[[], Awaitable[bool]]


class Follower:
    """Runs a refresh of a run on demand, never two at once for one run.

    A refresh returns False when the run has not started yet (its start handler has not written status);
    such a run is refreshed again by `started(key, ...)`, which the run's own events call.
    """

    def __init__(self) -> None:
        self._busy: set[RunKey] = set()
        self._again: dict[RunKey, Refresh] = {}
        self._waiting_start: set[RunKey] = set()

    async def poke(self, key: RunKey, refresh: Refresh) -> None:
        if key in self._busy:
            self._again[key] = refresh  # the refresh under way may have read the run before this change
            return
        self._busy.add(key)
        try:
            while True:
                if await refresh():
                    self._waiting_start.discard(key)
                else:
                    self._waiting_start.add(key)
                next_refresh = self._again.pop(key, None)
                if next_refresh is None:
                    return
                refresh = next_refresh
        finally:
            self._busy.discard(key)
            self._again.pop(key, None)

    async def started(self, key: RunKey, refresh: Refresh) -> None:
        """The run's status now has a startTime: refresh it if a child changed before that."""
        if key in self._waiting_start:
            self._waiting_start.discard(key)
            await self.poke(key, refresh)

    def forget(self, key: RunKey) -> None:
        self._waiting_start.discard(key)

    def waiting(self) -> set[RunKey]:
        return set(self._waiting_start)


class Sweeper:
    """The safety net under the events: every running run refreshed once per `interval` (which also reads its
    progress from the store), through the Follower, by at most `workers` refreshes at a time: fewer than the
    threads of the loop's executor, which the refreshes on events share, so that those are not queued behind a
    sweep of a thousand runs.

    It keeps only the keys of running runs. A kopf timer on runs did this before, and kopf keeps the last whole
    body of every object of a kind that has a timer, finished runs included, for the operator's life: tens of KB a
    run (issue 33). A refresh reads the run fresh, so the sweep needs nothing more than its key.
    """

    def __init__(self, interval: float, follower: Follower, workers: int = 2) -> None:
        self.interval, self.follower, self.workers = interval, follower, workers
        self._keys: dict[RunKey, None] = {}  # insertion-ordered: swept oldest first
        self._refresh_of: Callable[[RunKey], Refresh] | None = None
        self._task: asyncio.Task[None] | None = None
        self.sweeps = 0

    def track(self, key: RunKey, running: bool, refresh_of: Callable[[RunKey], Refresh]) -> None:
        """A run's event: follow it while it runs; start the sweeping at the first event (in the loop)."""
        self._refresh_of = refresh_of
        if running:
            self._keys.setdefault(key, None)
        else:
            self._keys.pop(key, None)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._forever(), name="cudanalyst sweep")

    def forget(self, key: RunKey) -> None:
        self._keys.pop(key, None)

    def running(self) -> list[RunKey]:
        return list(self._keys)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _forever(self) -> None:
        # `interval` from the end of one sweep to the start of the next (as kopf's timers count): a slow sweep
        # delays the next, never piles up behind it.
        while True:
            await asyncio.sleep(self.interval)
            await self.sweep()

    async def sweep(self) -> None:
        """One refresh of each run running now; one that raises is logged and tried at the next sweep."""
        keys = iter(list(self._keys))

        async def worker() -> None:
            for key in keys:  # one iterator shared by the workers: each key taken once
                if key not in self._keys or self._refresh_of is None:
                    continue  # finished or deleted since the sweep began
                try:
                    await self.follower.poke(key, self._refresh_of(key))
                except Exception:
                    log.exception("%s/%s: the periodic refresh failed; the next sweep tries again", *key)

        await asyncio.gather(*(worker() for _ in range(self.workers)))
        self.sweeps += 1


def run_key(meta: dict[str, Any], label: str) -> RunKey | None:
    """The run a child belongs to, from its run label; None for an unlabelled object."""
    run = (meta.get("labels") or {}).get(label)
    return (meta.get("namespace", ""), run) if run else None

