"""Failure reasons from runner pods, in words a user can act on (pure functions)."""

from __future__ import annotations

from typing import Any

from cudanalyst.operator.pods import job_summary, pod_problem, pod_summary


def pod(status: dict[str, Any], limits: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "r-runner-1-abc", "annotations": {"batch.kubernetes.io/job-completion-index": "1"}},
        "spec": {"containers": [{"name": "runner", "resources": {"limits": limits or {}}}]},
        "status": status,
    }


def runner(state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"containerStatuses": [{"name": "runner", "image": "reg/runner:1", "state": state,
                                   "lastState": last or {}}]}


def test_unschedulable() -> None:
    p = pod({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                 "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]})
    problem = pod_problem(p)
    assert problem is not None and problem["reason"] == "Unschedulable" and not problem["stalled"]
    assert "shard 1" in problem["message"] and "Insufficient nvidia.com/gpu" in problem["message"]


def test_image_pull_backoff_needs_a_person() -> None:
    problem = pod_problem(pod({"phase": "Pending", **runner({"waiting": {"reason": "ErrImagePull",
                                                                         "message": "not found"}})}))
    assert problem is not None and problem["reason"] == "ImagePullBackOff" and problem["stalled"]
    assert "reg/runner:1" in problem["message"]


def test_oom_killed_names_the_limit() -> None:
    problem = pod_problem(pod({"phase": "Failed", **runner({"terminated": {"reason": "OOMKilled", "exitCode": 137}})},
                              limits={"memory": "64Gi"}))
    assert problem is not None and problem["reason"] == "OOMKilled" and "64Gi" in problem["message"]


def test_shard_error_quotes_the_termination_message() -> None:
    problem = pod_problem(pod({"phase": "Failed", **runner(
        {"terminated": {"exitCode": 2, "reason": "Error",
                        "message": "loading\nspec.models.planner.model: /models/x does not exist\n"}})}))
    assert problem is not None and problem["reason"] == "InvalidInput"
    assert "exited with status 2" in problem["message"] and "/models/x does not exist" in problem["message"]
    other = pod_problem(pod({"phase": "Failed", **runner({"terminated": {"exitCode": 1, "message": "boom"}})}))
    assert other is not None and other["reason"] == "ShardFailed"


def test_healthy_pod_has_no_problem() -> None:
    p = pod({"phase": "Running", **runner({"running": {"startedAt": "x"}})})
    assert pod_problem(p) is None
    assert pod_summary(p) == {"name": "r-runner-1-abc", "shard": "1", "phase": "Running", "problem": None}


def test_job_summary_keeps_counts_and_conditions() -> None:
    summary = job_summary({"metadata": {"name": "j"}, "spec": {"suspend": True},
                           "status": {"active": 1, "failed": 2, "failedIndexes": "0,3",
                                      "conditions": [{"type": "Failed", "status": "True", "reason": "X",
                                                      "lastTransitionTime": "t"}]}})
    assert summary["suspend"] and summary["failed"] == 2 and summary["failedIndexes"] == "0,3"
    assert summary["conditions"] == [{"type": "Failed", "status": "True", "reason": "X", "message": ""}]
