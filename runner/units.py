"""Unit records in the run's store: written once by key, skipped when present, progress per shard.

Keys under the run folder (see cudanalyst.runs for the shared layout):
  candidates/<unitKey>.json   the LLM stage's record of a finished unit (written once, never replaced)
  outcomes/<unitKey>.json     the outcome, written by the kernel stage only (a completion without code too)
  errors/<unitKey>.json       why an unfinished unit failed this time (server down, prompt too long...);
                              replaced on each try and deleted once the unit finishes, so a resumed
                              shard retries exactly the units without a candidate
  plans/<groupKey>.json       a planner's plan, shared by the samples of one rollout (written once, so a
                              resumed shard gives the missing samples the same plan as the finished ones)
  feedback/summaries/<programId>/<player>.json   summarizer output, cached per program and player
  progress/shard-<i>.json     {done, total, byStage, gpuSeconds, failures, ...}: readable without
                              listing or reading the unit records; a process running only the kernel
                              stage writes progress/shard-<i>.kernels.json (read together: runs.read_progress)
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cudanalyst.outcomes import CandidateRecord, OutcomeRecord
from cudanalyst.runs import candidate_key, outcome_key, progress_key
from cudanalyst.store import ObjectNotFound, ObjectStore

MAX_FAILURES_IN_PROGRESS = 20


def error_key(unit_key: str) -> str:
    return f"errors/{unit_key}.json"


def plan_key(group_key: str) -> str:
    return f"plans/{group_key}.json"


def summary_key(program_id: str, player: str) -> str:
    return f"feedback/summaries/{program_id}/{player}.json"


def group_key(run: str, program_id: str, coalition: Iterable[str], arm: str, rollout: int) -> str:
    """Key of the samples that share one prompt (and, in explicit planning, one plan)."""
    ident = json.dumps([run, program_id, ",".join(coalition), arm, rollout], separators=(",", ":"))
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


def _keys_under(store: ObjectStore, prefix: str) -> set[str]:
    """Unit keys present under a prefix, from one paginated listing (no object is read)."""
    out = set()
    for key in store.list(prefix):
        name = key[len(prefix):]
        if name.endswith(".json") and "/" not in name:
            out.add(name[: -len(".json")])
    return out


@dataclass
class Failure:
    """A unit (or a whole phase) that did not finish, and why."""

    stage: str
    kind: str
    reason: str
    units: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "kind": self.kind, "reason": self.reason[:2000],
                "units": len(self.units), "unitKeys": self.units[:10]}


class UnitStore:
    """The run folder seen as unit records; every write of a finished unit is put-if-absent."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    # ---- finished units
    def finished_candidates(self) -> set[str]:
        return _keys_under(self.store, "candidates/")

    def finished_outcomes(self) -> set[str]:
        return _keys_under(self.store, "outcomes/")

    def write_candidate(self, record: CandidateRecord) -> bool:
        """Write once; returns False when the unit was already finished (its record is kept)."""
        data = record.model_dump(by_alias=True, mode="json")
        written = self.store.put_json_if_absent(candidate_key(record.key), data)
        self.store.delete(error_key(record.key))  # a missing object is not an error
        return written

    def read_candidate(self, unit_key: str) -> CandidateRecord:
        return CandidateRecord.model_validate(self.store.get_json(candidate_key(unit_key)))

    def write_outcome(self, record: OutcomeRecord) -> bool:
        return self.store.put_json_if_absent(outcome_key(record.key), record.model_dump(by_alias=True, mode="json"))

    # ---- errors of unfinished units
    def write_error(self, record: CandidateRecord) -> None:
        self.store.put_json(error_key(record.key), record.model_dump(by_alias=True, mode="json"))

    def error_keys(self) -> set[str]:
        return _keys_under(self.store, "errors/")

    def read_error(self, unit_key: str) -> CandidateRecord:
        return CandidateRecord.model_validate(self.store.get_json(error_key(unit_key)))

    # ---- shared intermediate results
    def read_plan(self, key: str) -> dict[str, Any] | None:
        try:
            return dict(self.store.get_json(plan_key(key)))
        except ObjectNotFound:
            return None

    def write_plan(self, key: str, plan: dict[str, Any]) -> dict[str, Any]:
        """Store a plan once; if another writer got there first, theirs is the plan."""
        if self.store.put_json_if_absent(plan_key(key), plan):
            return plan
        return dict(self.store.get_json(plan_key(key)))

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
    def read_progress(self, shard: int) -> dict[str, Any] | None:
        try:
            return dict(self.store.get_json(progress_key(shard)))
        except ObjectNotFound:
            return None

    def write_progress(self, shard: int, progress: Progress) -> None:
        only_kernels = progress.stages == ["kernels"]  # a process of its own: its own object (runs.read_progress)
        self.store.put_json(progress_key(shard, "kernels" if only_kernels else None), progress.to_json())


@dataclass
class Progress:
    """One shard's progress object. `done` counts units with an outcome (finished end to end)."""

    shard: int
    of: int
    total: int
    llm_done: int = 0
    kernels_done: int = 0
    gpu_seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    state: str = "running"  # running | succeeded | failed
    stages: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "of": self.of,
            "done": self.kernels_done,
            "total": self.total,
            "byStage": {"llm": {"done": self.llm_done, "total": self.total},
                        "kernels": {"done": self.kernels_done, "total": self.total}},
            "gpuSeconds": round(self.gpu_seconds, 3),
            "failures": [f.to_json() for f in self.failures[:MAX_FAILURES_IN_PROGRESS]],
            "failedUnits": len({k for f in self.failures for k in f.units}),
            "state": self.state,
            "stages": self.stages,
            "startedAt": self.started_at,
            "updatedAt": time.time(),
        }
