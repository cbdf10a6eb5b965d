"""The operator's Kueue path against kmock (CUDANALYST_KUEUE=true): status.queue from the Workload, suspend and resume
through the Workload's spec.active, and no write of the Job's spec.suspend. kmock plays Kueue's part by hand; the
real Kueue is in tests/cluster/test_e2e_kueue.py."""

from __future__ import annotations

from typing import Any

import pytest
from harness import (
    JOBS,
    NS,
    RUNS,
    check_all_status_patches,
    eventually,
    operator_config,
    operator_running,
    run_body,
    run_status,
    run_url,
)

from cudanalyst.operator.lifecycle import Services

pytestmark = pytest.mark.asyncio

WORKLOADS = "kueue.x-k8s.io/v1beta2/workloads"
WL = "job-q-runner-abcde"
INSUFFICIENT = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu"


def declare_workloads(kube: Any) -> None:
    kube.resources[WORKLOADS] = kube.ResourceInfo(kind="Workload", singular="workload", namespaced=True,
                                                  verbs={"list", "watch", "get", "patch", "create", "delete"},
                                                  subresources={"status"})


def workload(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    """What Kueue makes for the Job: owned by it, the Job's pod template (with the run label) in its pod set."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": WL, "namespace": NS, "uid": "wl-1",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "q-runner", "uid": "j"}]},
            "spec": {"queueName": "gpus", "priority": 0, "podSets": [{"name": "main", "count": 1, "template": {
                "metadata": {"labels": {"cudanalyst.dev/run": "q"}}}}]},
            "status": {"conditions": conditions}}


def job_patches(kube: Any) -> list[Any]:
    return [r for r in kube[kube.resource(JOBS)] if r.method == "PATCH"]


async def test_queued_run_is_followed_and_suspended_through_its_workload(kube: Any, trajectory: str,
                                                                        output: str) -> None:
    declare_workloads(kube)
    kube.objects[RUNS, NS, "q"] = run_body("q", trajectory, output, resources={"shards": 1, "queueName": "gpus"})
    async with operator_running(Services(operator_config(kueue=True))):
        await eventually(lambda: run_status(kube, "q").get("phase") == "Queued")
        assert kube.objects[JOBS, NS, "q-runner"].raw["spec"]["suspend"] is True
        # Kueue makes the Workload and cannot fit it: the run quotes Kueue.
        async with kube.post(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads", json=workload([
                {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": INSUFFICIENT}])) as resp:
            assert resp.status in (200, 201), await resp.text()
        queue = await eventually(lambda: run_status(kube, "q")["queue"]
                                 if run_status(kube, "q").get("queue", {}).get("workload") == WL else None)
        assert queue["state"] == "Pending" and queue["message"] == INSUFFICIENT and queue["name"] == "gpus"
        assert INSUFFICIENT in run_status(kube, "q")["message"]
        # The user suspends: the operator deactivates the Workload and leaves the Job to Kueue.
        async with kube.patch(run_url("q"), json={"metadata": {"generation": 2}, "spec": {"suspend": True}}) as resp:
            assert resp.status == 200
        await eventually(lambda: kube.objects[WORKLOADS, NS, WL].raw["spec"].get("active") is False)
        await eventually(lambda: run_status(kube, "q").get("phase") == "Suspended")
        async with kube.patch(run_url("q"), json={"metadata": {"generation": 3}, "spec": {"suspend": False}}) as resp:
            assert resp.status == 200
        await eventually(lambda: kube.objects[WORKLOADS, NS, WL].raw["spec"].get("active") is True)
        await eventually(lambda: run_status(kube, "q").get("phase") == "Queued")
    assert job_patches(kube) == []  # the operator never wrote the Job after creating it
    assert kube.objects[JOBS, NS, "q-runner"].raw["spec"]["suspend"] is True
    check_all_status_patches(kube)


async def test_queued_run_suspended_from_the_start_has_no_job_until_resumed(kube: Any, trajectory: str,
                                                                            output: str) -> None:
    declare_workloads(kube)
    kube.objects[RUNS, NS, "q"] = run_body("q", trajectory, output, suspend=True,
                                           resources={"shards": 1, "queueName": "gpus"})
    async with operator_running(Services(operator_config(kueue=True))):
        await eventually(lambda: run_status(kube, "q").get("phase") == "Suspended")
        assert (kube.resource(JOBS), NS, "q-runner") not in kube.objects
        async with kube.patch(run_url("q"), json={"metadata": {"generation": 2}, "spec": {"suspend": False}}) as resp:
            assert resp.status == 200
        await eventually(lambda: (kube.resource(JOBS), NS, "q-runner") in kube.objects)
        await eventually(lambda: run_status(kube, "q").get("phase") == "Queued")
    assert kube.objects[JOBS, NS, "q-runner"].raw["spec"]["suspend"] is True
    check_all_status_patches(kube)
