"""Unit records in the run's store: written once by key, skipped when present, progress per shard.

The keys and the layout are `cudanalyst.runfolder`'s; this is the runner's view of them.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cudanalyst.outcomes import UnitCandidate, UnitOutcome
from cudanalyst.runfolder import (
    CANDIDATES,
    ERRORS,
    OUTCOMES,
    FailureNote,
    ShardProgress,
    StageCount,
    candidate_key,
    error_key,
    keys_under,
    outcome_key,
    planner_text_key,
    progress_key,
    summary_key,
)
from cudanalyst.store import ObjectNotFound, ObjectStore

MAX_FAILURES_IN_PROGRESS = 20


def group_key(run: str, program_id: str, coalition: Iterable[str], arm: str, rollout: int) -> str:
    """Key of the samples that share one prompt (and, in explicit planning, one plan)."""
    ident = json.dumps([run, program_id, ",".join(coalition), arm, rollout], separators=(",", ":"))
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


@dataclass
class Failure:
    """A unit (or a whole phase) that did not finish, and why."""

    stage: str
    kind: str
    reason: str
    units: list[str] = field(default_factory=list)

    def note(self) -> FailureNote:
        return FailureNote(stage=self.stage, kind=self.kind, reason=self.reason[:2000], units=len(self.units),
                           unit_keys=self.units[:10])


class UnitStore:
    """The run folder seen as unit records; every write of a finished unit is put-if-absent."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    # ---- finished units
    def finished_candidates(self) -> set[str]:
        return keys_under(self.store, CANDIDATES)

    def finished_outcomes(self) -> set[str]:
        return keys_under(self.store, OUTCOMES)

    def write_candidate(self, record: UnitCandidate) -> bool:
        """Write once; returns False when the unit was already finished (its record is kept)."""
        data = record.model_dump(by_alias=True, mode="json")
        written = self.store.put_json_if_absent(candidate_key(record.key), data)
        self.store.delete(error_key(record.key))  # a missing object is not an error
        return written

    def read_candidate(self, unit_key: str) -> UnitCandidate:
        return UnitCandidate.model_validate(self.store.get_json(candidate_key(unit_key)))

    def write_outcome(self, record: UnitOutcome) -> bool:
        return self.store.put_json_if_absent(outcome_key(record.key), record.model_dump(by_alias=True, mode="json"))

    # ---- errors of unfinished units
    def write_error(self, record: UnitCandidate) -> None:
        self.store.put_json(error_key(record.key), record.model_dump(by_alias=True, mode="json"))

    def error_keys(self) -> set[str]:
        return keys_under(self.store, ERRORS)

    def read_error(self, unit_key: str) -> UnitCandidate:
        return UnitCandidate.model_validate(self.store.get_json(error_key(unit_key)))

    # ---- shared intermediate results: the planner's text per rollout, the summarizer's per program and player
    def read_planner_text(self, key: str) -> dict[str, Any] | None:
        try:
            return dict(self.store.get_json(planner_text_key(key)))
        except ObjectNotFound:
            return None

    def write_planner_text(self, key: str, plan: dict[str, Any]) -> dict[str, Any]:
        """Store a plan once; if another writer got there first, theirs is the plan."""
        if self.store.put_json_if_absent(planner_text_key(key), plan):
            return plan
        return dict(self.store.get_json(planner_text_key(key)))

    def read_summary(self, program_id: str, player: str) -> dict[str, Any] | None:
        try:
            return dict(self.store.get_json(summary_key(program_id, player)))
        except ObjectNotFound:
            return None

    def write_summary(self, program_id: str, player: str, summary: dict[str, Any]) -> dict[str, Any]:
        if self.store.put_json_if_absent(summary_key(program_id, player), summary):
            return summary
        return dict(self.store.get_json(summary_key(program_id, player)))

    # ---- progress
    def write_progress(self, shard: int, progress: ProgressTracker) -> None:
        only_kernels = progress.stages == ["kernels"]  # a process of its own: its own object (runfolder.read_shard_progress)
        self.store.put_json(progress_key(shard, "kernels" if only_kernels else None), progress.snapshot().wire())


@dataclass
class ProgressTracker:
    """What one runner process counts of a shard as it goes; `snapshot()` is the stored `ShardProgress`."""

    shard: int
    of: int
    total: int
    llm_done: int = 0
    kernels_done: int = 0
    gpu_seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    state: str = "running"  # running | succeeded | failed
    waiting: str = ""  # an endpoint's outage being waited out (client.ClientSettings.on_stall)
    stages: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)

    def snapshot(self) -> ShardProgress:
        return ShardProgress(
            shard=self.shard, of=self.of, done=self.kernels_done, total=self.total,
            by_stage={"llm": StageCount(done=self.llm_done, total=self.total),
                      "kernels": StageCount(done=self.kernels_done, total=self.total)},
            gpu_seconds=round(self.gpu_seconds, 3),
            failures=[f.note() for f in self.failures[:MAX_FAILURES_IN_PROGRESS]],
            failed_units=len({k for f in self.failures for k in f.units}),
            state=self.state, waiting=self.waiting, stages=self.stages, started_at=self.started_at, updated_at=time.time())
