"""Following a started run against kmock: progress from the store, pod problems, completion, failure."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from harness import (
    JOBS,
    NS,
    RUNS,
    add_pod,
    check_all_status_patches,
    condition,
    eventually,
    operator_config,
    operator_running,
    run_body,
    run_status,
    set_job_status,
    write_outcomes,
)

from cudanalyst.operator.lifecycle import Services

pytestmark = pytest.mark.asyncio


def label_of(coalition: tuple[str, ...]) -> str:
    # The debugger's report makes kernels correct, the profiler's makes them fast on top of it; without
    # the debugger, the analyzer's report at least makes them compile.
    if "debugger" in coalition and "profiler" in coalition:
        return "fast"
    if "debugger" in coalition:
        return "pass"
    return "compile" if "analyzer" in coalition else "fail"


async def test_progress_then_completion_writes_results_and_report(kube: Any, trajectory: str, output: str,
                                                                 tmp_path: Path) -> None:
    # An older spec's metrics: `fast` reads as it did (tests/operator/test_kmock_fast_metrics.py: the new default).
    body = run_body("r1", trajectory, output, attribution={"bootstrap": 0, "metrics": ["compiled", "pass", "fast"]})
    kube.objects[RUNS, NS, "r1"] = body
    services = Services(operator_config())
    async with operator_running(services):
        await eventually(lambda: run_status(kube, "r1").get("phase") == "Running")
        (tmp_path / "out" / "r1" / "progress").mkdir(parents=True, exist_ok=True)
        (tmp_path / "out" / "r1" / "progress" / "shard-0.json").write_text(json.dumps(
            {"done": 16, "total": 32, "gpuSeconds": 12.5, "byStage": {"llm": {"done": 32}, "kernels": {"done": 16}}}))
        await set_job_status(kube, "r1-runner", {"active": 2, "ready": 2})
        # The timer (store progress) and the Job event (shard counts) land in either order: wait for both.
        progress = await eventually(lambda: run_status(kube, "r1")["progress"]
                                    if run_status(kube, "r1")["progress"]["done"] == 16
                                    and run_status(kube, "r1").get("shards", {}).get("active") == 2 else None)
        assert progress["total"] == 64 and progress["percent"] == 25.0 and progress["text"] == "16/64"
        assert progress["llm"]["done"] == 32 and progress["etaSeconds"] is not None
        assert run_status(kube, "r1")["gpuSeconds"] == 12.5
        assert run_status(kube, "r1")["shards"] == {"active": 2, "succeeded": 0, "failed": 0}

        total = write_outcomes(body, label_of)
        await set_job_status(kube, "r1-runner", {"active": 0, "succeeded": 2,
                                                 "conditions": [{"type": "Complete", "status": "True"}]})
        await eventually(lambda: run_status(kube, "r1").get("phase") == "Succeeded")
    status = run_status(kube, "r1")
    assert condition(kube, "r1", "Ready")["status"] == "True"
    assert condition(kube, "r1", "Reconciling")["status"] == "False"
    assert status["progress"]["done"] == total and status["completionTime"]
    results = status["results"]
    assert (results["topPlayer"], results["metric"], results["notEvaluated"]) == ("debugger", "compiled", [])
    pooled = {(v["player"], v["metric"]): v for v in results["banzhaf"] if v["generation"] == "pooled"}
    # "compiled" needs the debugger or the analyzer (0.5 each); the debugger alone decides "pass" (1);
    # "fast" needs debugger and profiler together (0.5 each, interaction 1).
    assert pooled[("debugger", "compiled")]["value"] == 0.5 and pooled[("analyzer", "compiled")]["value"] == 0.5
    assert pooled[("profiler", "compiled")]["value"] == 0.0
    assert pooled[("debugger", "pass")]["value"] == 1.0 and pooled[("profiler", "pass")]["value"] == 0.0
    assert pooled[("debugger", "fast")]["value"] == 0.5 and pooled[("profiler", "fast")]["value"] == 0.5
    top = {(i["players"], i["metric"], i["value"]) for i in results["topInteractions"][:2]}
    # Either one suffices to compile (interaction -1); fast needs both (interaction +1).
    assert top == {("debugger,analyzer", "compiled", -1.0), ("debugger,profiler", "fast", 1.0)}
    assert status["reportUri"].endswith("r1/report/report.json")
    report = json.loads((tmp_path / "out" / "r1" / "report" / "report.json").read_text())
    assert report["players"] == ["debugger", "analyzer", "profiler"]
    assert len(json.dumps(status)) < 64_000
    assert check_all_status_patches(kube) >= 3
    metrics = services.metrics.registry
    assert metrics.get_sample_value("cudanalyst_runs", {"phase": "Succeeded"}) == 1
    assert metrics.get_sample_value("cudanalyst_runs", {"phase": "Running"}) == 0
    assert metrics.get_sample_value("cudanalyst_units_done", {"namespace": NS, "run": "r1"}) == total
    assert metrics.get_sample_value("cudanalyst_reconcile_duration_seconds_count", {"handler": "follow"}) >= 2
    assert metrics.get_sample_value("cudanalyst_reconcile_duration_seconds_count", {"handler": "start"}) >= 1


async def test_pod_problems_become_conditions_a_user_can_act_on(kube: Any, trajectory: str, output: str) -> None:
    kube.objects[RUNS, NS, "r2"] = run_body("r2", trajectory, output)
    async with operator_running():
        await eventually(lambda: run_status(kube, "r2").get("phase") == "Running")
        await add_pod(kube, "r2", 0, {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]})
        ready = await eventually(lambda: condition(kube, "r2", "Ready")
                                 if condition(kube, "r2", "Ready")["reason"] == "Unschedulable" else None)
        assert "Insufficient nvidia.com/gpu" in ready["message"]
        assert condition(kube, "r2", "Stalled")["status"] == "False"
        await add_pod(kube, "r2", 1, {"phase": "Pending", "containerStatuses": [
            {"name": "runner", "image": "reg/runner:1",
             "state": {"waiting": {"reason": "ImagePullBackOff", "message": "manifest unknown"}}}]})
        stalled = await eventually(lambda: condition(kube, "r2", "Stalled")
                                   if condition(kube, "r2", "Stalled")["status"] == "True" else None)
        assert stalled["reason"] == "ImagePullBackOff" and "reg/runner:1" in stalled["message"]
    check_all_status_patches(kube)


async def test_failed_job_fails_the_run_and_ttl_cleanup_leaves_the_run(kube: Any, trajectory: str,
                                                                       output: str) -> None:
    kube.objects[RUNS, NS, "r3"] = run_body("r3", trajectory, output, ttlSecondsAfterFinished=0)
    async with operator_running():
        await eventually(lambda: run_status(kube, "r3").get("phase") == "Running")
        assert kube.objects[JOBS, NS, "r3-runner"].raw["spec"]["ttlSecondsAfterFinished"] == 0
        await add_pod(kube, "r3", 1, {"phase": "Failed", "containerStatuses": [
            {"name": "runner", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
        await set_job_status(kube, "r3-runner", {"failed": 3, "failedIndexes": "1", "conditions": [
            {"type": "Failed", "status": "True", "reason": "FailedIndexes", "message": "Job has failed indexes"}]})
        await eventually(lambda: run_status(kube, "r3").get("phase") == "Failed")
        failed = condition(kube, "r3", "Failed")
        assert failed["status"] == "True" and failed["reason"] == "FailedIndexes"
        assert "failed shards: 1" in failed["message"] and "ran out of memory" in failed["message"]
        assert condition(kube, "r3", "Stalled")["status"] == "True"
        # The TTL controller deletes the finished Job; the run and its status stay as they are.
        async with kube.delete(f"/apis/batch/v1/namespaces/{NS}/jobs/r3-runner") as resp:
            assert resp.status == 200
        patches_before = len([r for r in kube[kube.resource(JOBS)] if r.method == "POST"])
        await asyncio.sleep(1.0)
        assert run_status(kube, "r3")["phase"] == "Failed"
        assert not kube.objects[RUNS, NS, "r3"].deleted
        assert len([r for r in kube[kube.resource(JOBS)] if r.method == "POST"]) == patches_before
    check_all_status_patches(kube)


async def test_job_deleted_before_finishing_is_made_again(kube: Any, trajectory: str, output: str) -> None:
    kube.objects[RUNS, NS, "r4"] = run_body("r4", trajectory, output)
    async with operator_running():
        await eventually(lambda: run_status(kube, "r4").get("phase") == "Running")
        async with kube.delete(f"/apis/batch/v1/namespaces/{NS}/jobs/r4-runner") as resp:
            assert resp.status == 200
        await eventually(lambda: not kube.objects[JOBS, NS, "r4-runner"].deleted)
    assert run_status(kube, "r4")["phase"] in ("Running", "Pending")
