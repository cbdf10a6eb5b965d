"""Following running runs on their children's events: which events matter, and one refresh per run at a time.

A Job or Pod event leads to a refresh of the owning run only when the child's summary (pods.job_summary,
pods.pod_summary) changed; refreshes of one run never overlap, and events that arrive during one are
folded into a single refresh after it. A child that changed before its run had started is remembered, and
the run is refreshed once its start is seen. Plain asyncio and dicts: tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

RunKey = tuple[str, str]  # (namespace, run name)


class ChildChanges:
    """The last summary seen of each child (by uid): says whether a new one differs."""

    def __init__(self) -> None:
        self._last: dict[str, dict[str, Any]] = {}

    def changed(self, uid: str, summary: dict[str, Any]) -> bool:
        if self._last.get(uid) == summary:
            return False
        self._last[uid] = summary
        return True

    def forget(self, uid: str) -> None:
        self._last.pop(uid, None)

    def __len__(self) -> int:
        return len(self._last)


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


def run_key(meta: dict[str, Any], label: str) -> RunKey | None:
    """The run a child belongs to, from its run label; None for an unlabelled object."""
    run = (meta.get("labels") or {}).get(label)
    return (meta.get("namespace", ""), run) if run else None

