"""A run end to end on the real control plane: the operator (a local process with the chart's ServiceAccount
token) makes the Indexed Job, its pods bind to kwok GPU nodes, the harness plays each pod by running its shard
of the runner locally (vLLM on CPU serving the tiny model, compile-only kernels), and the run reaches Ready.

Also: status survives the API server (nothing pruned), CEL on a started run, suspend/resume, garbage
collection of the Job, and an operator killed mid-run."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from cp_cluster import Cluster, wait_for
from cp_harness import PodHarness
from e2e_support import (
    RUN_LABEL,
    OperatorProcess,
    Runs,
    condition,
    is_true,
    play_pods,
    run_body,
)

pytestmark = [pytest.mark.cluster, pytest.mark.vllm]

SHARDS = 2
UNITS = 4  # 1 program x 4 coalitions of 2 players x 1 rollout x 1 sample


def _job(runs: Runs, name: str, operator: OperatorProcess) -> Any:
    return wait_for(lambda: (runs.jobs(name) or [None])[0], 30,
                    f"the operator to create the Job of {name}\n{operator.tail()}")


def test_run_reaches_ready_with_real_pods_and_status_survives(
        cluster: Cluster, operator: OperatorProcess, planner: dict[str, Any], runs: Runs, harness: PodHarness,
        tmp_path: Path) -> None:
    out = tmp_path / "store"
    runs.create(run_body("e2e", out, planner, shards=SHARDS))
    job = _job(runs, "e2e", operator)
    assert job.spec.completions == SHARDS and job.spec.completion_mode == "Indexed"
    assert job.metadata.owner_references[0].kind == "AttributionRun"
    pods = harness.running_pods(runs.ns, f"{RUN_LABEL}=e2e", SHARDS)
    assert {p.spec.node_name.startswith("kwok-gpu") for p in pods} == {True}
    assert all(p.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1" for p in pods)
    codes = play_pods(runs, harness, "e2e", SHARDS, tmp_path)
    assert codes == {0: 0, 1: 0}, [p.read_text()[-2000:] for p in tmp_path.glob("e2e-shard-*.log")]

    run = runs.wait("e2e", lambda r: is_true(r, "Ready"), 90, "Ready", operator)
    status = run["status"]
    assert status["phase"] == "Succeeded" and is_true(run, "Succeeded") and not is_true(run, "Stalled")
    assert status["progress"]["done"] == UNITS and status["progress"]["text"] == f"{UNITS}/{UNITS}"
    assert status["shards"] == {"active": 0, "succeeded": SHARDS, "failed": 0}
    assert status["jobName"] == "e2e-runner" and status["startTime"] and status["completionTime"]
    assert status["observedGeneration"] == run["metadata"]["generation"]
    results = status["results"]
    assert results["topPlayer"] in ("debugger", "analyzer") and results["banzhaf"]
    assert status["reportUri"].endswith("e2e/report/report.json")
    assert len(list((out / "e2e" / "outcomes").glob("*.json"))) == UNITS

    # Round trip: what the operator computed is what the API server gives back, field for field. The
    # report in the store is the operator's own input to status.results, so nothing may be missing.
    from cudanalyst.attribution.result import AttributionResult
    from cudanalyst.operator.completion import status_results

    report = json.loads((out / "e2e" / "report" / "report.json").read_text())
    expected = status_results(AttributionResult.model_validate(report["attribution"]), ["compiled", "pass", "fast"],
                              report).model_dump(by_alias=True, mode="json", exclude_none=True)
    assert json.loads(json.dumps(results)) == json.loads(json.dumps(expected))
    for key in ("done", "total", "percent", "text", "etaSeconds", "failures", "llm", "kernels"):
        assert key in status["progress"], key
    assert status["progress"]["llm"] == {"done": UNITS, "total": UNITS}
    for cond in status["conditions"]:
        assert set(cond) >= {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}

    # The printer columns.
    table = cluster.kubectl("get", "ar", "-n", runs.ns).stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "PHASE", "PROGRESS", "TOP", "PLAYER", "AGE"], table
    assert table[1].split()[:5] == ["e2e", "True", "Succeeded", f"{UNITS}/{UNITS}", results["topPlayer"]], table

    # Deleting the run: the controller-manager's garbage collector removes its Job and ConfigMap.
    runs.delete("e2e")
    wait_for(lambda: not runs.jobs("e2e"), 60, "the garbage collector to delete the Job of e2e")
    wait_for(lambda: not runs.core.list_namespaced_config_map(runs.ns, label_selector=f"{RUN_LABEL}=e2e").items,
             60, "the garbage collector to delete the ConfigMap of e2e")
    assert (out / "e2e" / "report" / "report.json").exists()  # results stay in the store


def test_cel_suspend_resume_and_garbage_collection_on_a_started_run(
        cluster: Cluster, operator: OperatorProcess, runs: Runs, harness: PodHarness, tmp_path: Path) -> None:
    planner = {"endpoint": "http://127.0.0.1:9/v1", "model": "tiny"}  # never reached: pods are not played
    runs.create(run_body("held", tmp_path / "store", planner, shards=SHARDS))
    _job(runs, "held", operator)
    run = runs.wait("held", lambda r: (r.get("status") or {}).get("startTime"), 30, "startTime", operator)
    harness.running_pods(runs.ns, f"{RUN_LABEL}=held", SHARDS)

    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as info:
        runs.patch("held", {"spec": {"sampling": {"rollouts": 2}}})
    assert info.value.status == 422 and "only spec.suspend may change" in info.value.body
    assert runs.get("held")["spec"]["sampling"]["rollouts"] == 1

    runs.patch("held", {"spec": {"suspend": True}})
    wait_for(lambda: runs.jobs("held")[0].spec.suspend is True, 30, "the Job to be suspended")
    run = runs.wait("held", lambda r: is_true(r, "Suspended"), 30, "Suspended", operator)
    assert run["status"]["phase"] == "Suspended" and not is_true(run, "Reconciling")
    # The Job controller deletes the active pods of a suspended Job.
    wait_for(lambda: not runs.core.list_namespaced_pod(runs.ns, label_selector=f"{RUN_LABEL}=held").items,
             60, "the suspended Job's pods to go")

    runs.patch("held", {"spec": {"suspend": False}})
    wait_for(lambda: runs.jobs("held")[0].spec.suspend is False, 30, "the Job to be resumed")
    run = runs.wait("held", lambda r: condition(r, "Suspended").get("status") == "False"
                    and r["status"]["phase"] == "Running", 30, "resumed", operator)
    harness.running_pods(runs.ns, f"{RUN_LABEL}=held", SHARDS)
    assert len(runs.jobs("held")) == 1

    runs.delete("held")
    wait_for(lambda: not runs.jobs("held"), 60, "the garbage collector to delete the Job of held")
    wait_for(lambda: not runs.core.list_namespaced_pod(runs.ns, label_selector=f"{RUN_LABEL}=held").items,
             60, "the pods of held to go with their Job")


def test_operator_killed_mid_run_restarts_without_duplicates_or_lost_units(
        cluster: Cluster, operator: OperatorProcess, planner: dict[str, Any], runs: Runs, harness: PodHarness,
        tmp_path: Path) -> None:
    out = tmp_path / "store"
    runs.create(run_body("crash", out, planner, shards=SHARDS))
    job = _job(runs, "crash", operator)
    assert play_pods(runs, harness, "crash", SHARDS, tmp_path, only={0}) == {0: 0}
    runs.wait("crash", lambda r: (r["status"].get("shards") or {}).get("succeeded") == 1, 30, "shard 0 counted",
              operator)
    first = {p.name: p.stat().st_mtime_ns for p in (out / "crash" / "outcomes").glob("*.json")}
    assert len(first) == UNITS // SHARDS

    operator.kill()  # SIGKILL mid-run: no cleanup, no last status write
    assert play_pods(runs, harness, "crash", SHARDS, tmp_path, only={1}) == {1: 0}
    time.sleep(1)
    operator.start()

    run = runs.wait("crash", lambda r: is_true(r, "Ready"), 90, "Ready after the restart", operator)
    jobs = runs.jobs("crash")
    assert [j.metadata.uid for j in jobs] == [job.metadata.uid]  # the same one Job, not a second
    assert jobs[0].status.succeeded == SHARDS and not jobs[0].status.failed
    pods = runs.core.list_namespaced_pod(runs.ns, label_selector=f"{RUN_LABEL}=crash").items
    assert len(pods) == SHARDS  # no pod was made again
    outcomes = {p.name: p.stat().st_mtime_ns for p in (out / "crash" / "outcomes").glob("*.json")}
    assert len(outcomes) == UNITS and run["status"]["progress"]["done"] == UNITS
    assert {k: outcomes[k] for k in first} == first  # shard 0's units were not redone
    plan = json.loads((out / "crash" / "plan.json").read_text())
    assert plan["units"] == UNITS and plan["shards"] == [UNITS // SHARDS] * SHARDS
    events = runs.core.list_namespaced_event(runs.ns, field_selector="reason=JobCreated").items
    assert len(events) == 1, [e.message for e in events]
