"""Readings of Kueue Workloads (operator.kueue) and the verdicts of queued runs (pure functions)."""

from __future__ import annotations

from typing import Any

from cudanalyst.api.status import QueueStatus
from cudanalyst.operator.conditions import Observation, judge
from cudanalyst.operator.kueue import current, queue_status, run_of, workload_summary

INSUFFICIENT = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
                "gpu, 4 more needed")


def workload(name: str = "job-r-runner-1a2b3", *, run: str | None = "r", active: bool | None = None,
             conditions: list[dict[str, Any]] | None = None, deleting: bool = False, **status: Any) -> dict[str, Any]:
    labels = {"cudanalyst.dev/run": run} if run else {"app": "other"}
    meta: dict[str, Any] = {"name": name, "namespace": "ns",
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"{run}-runner"}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"queueName": "gpus", "priority": 1000, "priorityClassRef": {
        "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
        "podSets": [{"name": "main", "count": 2, "template": {"metadata": {"labels": labels}}}]}
    if active is not None:
        spec["active"] = active
    return {"metadata": meta, "spec": spec, "status": {"conditions": conditions or [], **status}}


def cond(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def test_the_run_is_found_by_the_label_kueue_copies_into_the_pod_sets() -> None:
    assert run_of(workload(run="gemm-early")) == "gemm-early"
    assert run_of(workload(run=None)) is None  # a Workload of someone else's Job


def test_pending_workload_gives_kueues_reason_and_message() -> None:
    summary = workload_summary(workload(conditions=[cond("QuotaReserved", "False", "Pending", INSUFFICIENT)]))
    assert summary["state"] == "Pending" and summary["reason"] == "Pending" and summary["message"] == INSUFFICIENT
    assert summary["active"] is True and summary["job"] == "r-runner"
    assert summary["priorityClass"] == "high" and summary["priority"] == 1000
    status = queue_status("gpus", summary)
    assert status["workload"] == "job-r-runner-1a2b3" and status["state"] == "Pending"
    QueueStatus.model_validate(status)  # the CRD's own model accepts what the operator writes


def test_admitted_inactive_and_finished_states() -> None:
    admitted = workload(conditions=[cond("QuotaReserved", reason="QuotaReserved"), cond("Admitted", reason="Admitted")],
                        admission={"clusterQueue": "gpu-cluster"})
    assert workload_summary(admitted)["state"] == "Admitted"
    assert workload_summary(admitted)["clusterQueue"] == "gpu-cluster"
    # Deactivated (spec.suspend of the run): Inactive, with Kueue's eviction reason when it has evicted it.
    inactive = workload(active=False, conditions=[cond("Evicted", reason="Deactivated", message="The workload is deactivated")])
    assert workload_summary(inactive)["state"] == "Inactive" and workload_summary(inactive)["reason"] == "Deactivated"
    finished = workload(active=False, conditions=[cond("Finished", reason="Succeeded", message="Job finished")])
    assert workload_summary(finished)["state"] == "Finished"
    # Evicted while it still holds its quota; once Kueue has let the quota go, it simply waits again.
    evicting = workload(conditions=[cond("QuotaReserved"), cond("Evicted", reason="Preempted", message="Preempted")])
    assert workload_summary(evicting)["state"] == "Evicted"
    requeued = workload(conditions=[cond("QuotaReserved", "False", "Pending", INSUFFICIENT),
                                    cond("Evicted", reason="Preempted", message="Preempted")])
    assert workload_summary(requeued)["state"] == "Pending" and workload_summary(requeued)["message"] == INSUFFICIENT


def test_current_skips_a_workload_on_its_way_out_and_other_jobs() -> None:
    old = workload_summary(workload("old", deleting=True))
    new = workload_summary(workload("new"))
    other = workload_summary(workload("other", run="s"))
    assert current([old, other, new], "r") == new
    assert current([old], "r") is None


def test_long_kueue_messages_fit_the_status_field() -> None:
    summary = workload_summary(workload(conditions=[cond("QuotaReserved", "False", "Pending", "x " * 2000)]))
    assert len(summary["message"]) <= 1000
    QueueStatus.model_validate(queue_status("gpus", summary))


def _obs(job: dict[str, Any] | None, **fields: Any) -> Observation:
    values: dict[str, Any] = {"generation": 1, "spec_suspend": False, "queued": True, "job": job, "done": 0, "total": 4}
    values.update(fields)
    return Observation(**values)


def _job(suspend: bool, active: int = 0) -> dict[str, Any]:
    return {"name": "r-runner", "suspend": suspend, "active": active, "succeeded": 0, "failed": 0,
            "failedIndexes": "", "conditions": []}


def test_queued_verdict_quotes_kueue() -> None:
    summary = workload_summary(workload(conditions=[cond("QuotaReserved", "False", "Pending", INSUFFICIENT)]))
    verdict = judge(_obs(_job(True), workload=summary))
    assert (verdict.phase, verdict.reason) == ("Queued", "WaitingForAdmission")
    assert "job-r-runner-1a2b3" in verdict.message and INSUFFICIENT in verdict.message
    assert "make a Workload" in judge(_obs(_job(True))).message  # before Kueue has made one


def test_suspend_of_a_queued_run_waits_for_kueue_to_stop_the_job() -> None:
    summary = workload_summary(workload(active=False))
    running = judge(_obs(_job(False, active=2), spec_suspend=True, workload=summary))
    assert (running.phase, running.reason) == ("Running", "Suspending") and "job-r-runner-1a2b3" in running.message
    stopped = judge(_obs(_job(True), spec_suspend=True, workload=summary))
    assert stopped.phase == "Suspended"
    # Suspended from the start: no Job, so nothing waits in Kueue's queue.
    assert judge(_obs(None, spec_suspend=True)).phase == "Suspended"
    assert judge(_obs(None)).phase == "Pending"
