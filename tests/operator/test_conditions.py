"""Phase, kstatus conditions and events from observations (pure functions)."""

from __future__ import annotations

from typing import Any

from cudanalyst.api.recording import TrajectoryRecordingStatus
from cudanalyst.api.status import AttributionRunStatus, Condition, read_status
from cudanalyst.operator.conditions import (
    Observation,
    conditions_for,
    invalid,
    is_finished,
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


def seen(status: dict[str, Any] | None) -> AttributionRunStatus:
    """A status as the operator reads it back from the API server: through its model."""
    return read_status(AttributionRunStatus, status)


def typed(conditions: list[dict[str, Any]]) -> list[Condition]:
    return [Condition.model_validate(c) for c in conditions]


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
    status = status_for(verdict, seen({}), 3, NOW)
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
    second = conditions_for(judge(obs(job(), done=20)), typed(first), 3, LATER)
    assert all(c["lastTransitionTime"] == NOW for c in second)
    done = judge(obs(job(conditions=[{"type": "Complete", "status": "True"}]), aggregated=True))
    third = {c["type"]: c for c in conditions_for(done, typed(second), 4, LATER)}
    assert third["Ready"]["lastTransitionTime"] == LATER
    assert third["Failed"]["lastTransitionTime"] == NOW
    assert third["Ready"]["observedGeneration"] == 4


def test_events_on_transitions_only() -> None:
    running = judge(obs(job()))
    status = seen(status_for(running, seen({}), 3, NOW))
    assert transition_event(seen({}), running) is not None
    assert transition_event(status, judge(obs(job(), done=30))) is None
    stalled = invalid("InvalidSpec", "invalid spec: spec.players: must be unique")
    event = transition_event(status, stalled)
    assert event is not None and event.type == "Warning" and "spec.players" in event.message


def test_a_status_is_read_through_its_model_missing_partial_or_stray() -> None:
    # Before the first patch a run has no status; a recording's status has fields a run's has not.
    assert seen(None) == AttributionRunStatus() and not is_finished(seen(None))
    partial = seen({"phase": "Succeeded", "startTime": NOW, "progress": {"total": 40}, "notOurs": 1})
    assert is_finished(partial) and partial.start_time == NOW
    assert (partial.progress.total, partial.progress.done) == (40, 0)
    assert "progress" in partial.model_fields_set and "results" not in partial.model_fields_set
    # A field that does not validate reads as its default; the others are still read.
    stray = seen({"phase": "Running", "startTime": NOW, "progress": {"total": -3}, "gpuSeconds": "lots"})
    assert (stray.phase, stray.start_time, stray.progress.total, stray.gpu_seconds) == ("Running", NOW, 0, 0.0)
    recording = read_status(TrajectoryRecordingStatus, {"phase": "Failed", "trajectoryUri": "s3://b/t/"})
    assert is_finished(recording) and recording.trajectory_uri == "s3://b/t/"


def test_status_for_keeps_a_completion_time_already_written() -> None:
    failed = judge(obs(job(conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])))
    first = status_for(failed, seen({}), 3, NOW)
    assert first["completionTime"] == NOW
    again = status_for(failed, seen({**first, "startTime": NOW}), 3, LATER)
    assert "completionTime" not in again and again["conditions"] == first["conditions"]


def test_a_shard_waiting_out_an_endpoint_outage_says_so_without_stalling() -> None:
    from cudanalyst.operator.conditions import waiting_for_endpoint

    running = judge(obs(job()))
    waiting = waiting_for_endpoint(running, "big at https://gw/v1: rate limited (429): slow down, for 40 s")
    assert (waiting.phase, waiting.reason, waiting.stalled) == ("Running", "WaitingForEndpoint", False)
    assert "10/40 units" in waiting.message and "rate limited (429)" in waiting.message
    assert waiting_for_endpoint(running, "") == running
    failed = judge(obs(job(conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])))
    assert waiting_for_endpoint(failed, "anything") == failed  # a worse verdict is not hidden by the wait
