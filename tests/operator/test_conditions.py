"""Phase, kstatus conditions and events from observations (pure functions)."""

from __future__ import annotations

from typing import Any

from cudanalyst.operator.conditions import (
    Observation,
    conditions_for,
    invalid,
    judge,
    status_for,
    transition_event,
)

NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:05:00Z"


def job(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "r-runner", "suspend": False, "active": 2, "succeeded": 0, "failed": 0,
                            "failedIndexes": "", "conditions": []}
    base.update(fields)
    return base


def obs(job_state: dict[str, Any] | None, **fields: Any) -> Observation:
    values: dict[str, Any] = {"generation": 3, "spec_suspend": False, "queued": False, "job": job_state,
                              "done": 10, "total": 40}
    values.update(fields)
    return Observation(**values)


def truth(verdict: Any) -> dict[str, str]:
    return {c["type"]: c["status"] for c in conditions_for(verdict, [], 3, NOW)}


def test_running_is_reconciling_not_ready() -> None:
    verdict = judge(obs(job()))
    assert verdict.phase == "Running"
    assert truth(verdict) == {"Ready": "False", "Reconciling": "True", "Stalled": "False", "Succeeded": "False",
                              "Failed": "False", "Suspended": "False", "Queued": "False"}


def test_complete_job_aggregates_then_succeeds() -> None:
    done = job(active=0, succeeded=2, conditions=[{"type": "Complete", "status": "True"}])
    assert judge(obs(done)).phase == "Aggregating"
    verdict = judge(obs(done, aggregated=True))
    assert verdict.phase == "Succeeded"
    assert truth(verdict)["Ready"] == "True" and truth(verdict)["Reconciling"] == "False"


def test_failed_job_is_failed_and_stalled_with_reason_and_shards() -> None:
    failed = job(active=0, failed=1, failedIndexes="1",
                 conditions=[{"type": "Failed", "status": "True", "reason": "FailedIndexes",
                              "message": "Job has failed indexes"}])
    pods = [{"shard": "1", "problem": {"reason": "OOMKilled", "message": "shard 1 ran out of memory", "stalled": False}}]
    verdict = judge(obs(failed, pods=pods))
    assert verdict.phase == "Failed" and verdict.reason == "FailedIndexes"
    assert "failed shards: 1" in verdict.message and "ran out of memory" in verdict.message
    assert truth(verdict)["Stalled"] == "True" and truth(verdict)["Failed"] == "True"
    status = status_for(verdict, {}, 3, NOW)
    assert status["completionTime"] == NOW


def test_suspended_and_queued() -> None:
    assert judge(obs(job(suspend=True, active=0), spec_suspend=True)).phase == "Suspended"
    verdict = judge(obs(job(suspend=True, active=0), queued=True))
    assert verdict.phase == "Queued" and truth(verdict)["Queued"] == "True"
    assert truth(verdict)["Reconciling"] == "True"


def test_stalling_pod_problem_wins_over_a_passing_one() -> None:
    pods = [
        {"shard": "0", "problem": {"reason": "Unschedulable", "message": "shard 0 ...", "stalled": False}},
        {"shard": "1", "problem": {"reason": "ImagePullBackOff", "message": "shard 1 ...", "stalled": True}},
    ]
    verdict = judge(obs(job(active=0), pods=pods))
    assert verdict.reason == "ImagePullBackOff" and verdict.stalled
    assert truth(verdict)["Stalled"] == "True" and truth(verdict)["Reconciling"] == "False"
    only_unschedulable = judge(obs(job(active=0), pods=pods[:1]))
    assert only_unschedulable.reason == "Unschedulable" and truth(only_unschedulable)["Reconciling"] == "True"


def test_missing_job_after_all_units_done_counts_as_finished() -> None:
    assert judge(obs(None, done=40, total=40)).phase == "Aggregating"
    assert judge(obs(None, done=3, total=40)).phase == "Pending"


def test_transition_time_kept_while_status_holds() -> None:
    first = conditions_for(judge(obs(job())), [], 3, NOW)
    second = conditions_for(judge(obs(job(), done=20)), first, 3, LATER)
    assert all(c["lastTransitionTime"] == NOW for c in second)
    done = judge(obs(job(conditions=[{"type": "Complete", "status": "True"}]), aggregated=True))
    third = {c["type"]: c for c in conditions_for(done, second, 4, LATER)}
    assert third["Ready"]["lastTransitionTime"] == LATER
    assert third["Failed"]["lastTransitionTime"] == NOW
    assert third["Ready"]["observedGeneration"] == 4


def test_events_on_transitions_only() -> None:
    running = judge(obs(job()))
    status = status_for(running, {}, 3, NOW)
    assert transition_event({}, running) is not None
    assert transition_event(status, judge(obs(job(), done=30))) is None
    stalled = invalid("InvalidSpec", "invalid spec: spec.players: must be unique")
    event = transition_event(status, stalled)
    assert event is not None and event.type == "Warning" and "spec.players" in event.message
