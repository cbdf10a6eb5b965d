"""The small chaos run of CI (issue 33, part 1; the full one is bench/chaos.py): one run goes through faults and
comes out with every unit once, none redone, none corrupt, and what was deleted while the operator was down is
cleaned up when it comes back.

Faults, in order: the operator SIGKILLed as soon as the run's ConfigMap appears (its Job is made next, so the kill
lands around the Job's creation); while it is down a
run is created, one is edited and one that deletes its results is deleted; a runner pod exits non-zero, one is
evicted, one is deleted after its shard ran; the operator SIGTERMed while the last status patches come in.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from cp_cluster import Cluster, wait_for
from cp_harness import PodHarness
from e2e_support import (
    INDEX_ANNOTATION,
    RUN_LABEL,
    OperatorProcess,
    Runs,
    is_true,
    play_pods,
    run_body,
    run_shard,
    runner_spec_file,
)

from cudanalyst.api import parse_run
from cudanalyst.outcomes import UnitOutcome
from cudanalyst.planned_run import plan_run

pytestmark = [pytest.mark.cluster, pytest.mark.vllm]

SHARDS = 2
DEAD_PLANNER = {"endpoint": "http://127.0.0.1:9/v1", "model": "tiny"}  # for runs whose pods are not played


def pods_of(runs: Runs, name: str) -> list[Any]:
    return list(runs.core.list_namespaced_pod(runs.ns, label_selector=f"{RUN_LABEL}={name}").items)


def running_by_shard(runs: Runs, harness: PodHarness, name: str, count: int) -> dict[int, Any]:
    pods = harness.running_pods(runs.ns, f"{RUN_LABEL}={name}", count, deadline_s=120)
    return {int(p.metadata.annotations[INDEX_ANNOTATION]): p for p in pods}


def replacements(runs: Runs, name: str, gone: set[str], operator: OperatorProcess) -> dict[int, Any]:
    """Waits until every shard has a Running pod that is not one of `gone` (nor being deleted); by shard."""
    def live() -> dict[int, Any] | None:
        found = {int(p.metadata.annotations[INDEX_ANNOTATION]): p for p in pods_of(runs, name)
                 if p.status.phase == "Running" and p.spec.node_name and p.metadata.deletion_timestamp is None
                 and p.metadata.name not in gone}
        return found if len(found) == SHARDS else None

    try:
        return dict(wait_for(live, 300, f"new pods for every shard of {name}", interval_s=1))
    except TimeoutError as exc:
        state = [(p.metadata.name, p.status.phase, bool(p.metadata.deletion_timestamp),
                  [(c.type, c.status, c.reason) for c in p.status.conditions or []]) for p in pods_of(runs, name)]
        job = runs.jobs(name)[0].status
        raise TimeoutError(f"{exc}\npods: {state}\njob: {job}\n{operator.tail()}") from None


def test_faults_in_one_run_lose_and_redo_nothing(cluster: Cluster, operator: OperatorProcess, planner: dict[str, Any],
                                                 runs: Runs, harness: PodHarness, tmp_path: Path) -> None:
    out = tmp_path / "store"
    # A run that deletes its results with it: started now, deleted while the operator is down.
    doomed = run_body("doomed", out, DEAD_PLANNER, shards=1)
    doomed["spec"]["output"]["deleteWithRun"] = True
    runs.create(doomed)
    wait_for(lambda: runs.jobs("doomed") and (out / "doomed" / "plan.json").exists(), 60, "doomed started")

    # SIGKILL around the Job's creation: the start handler makes the ConfigMap, then the Job.
    runs.create(run_body("chaos", out, planner, shards=SHARDS))
    wait_for(lambda: runs.core.list_namespaced_config_map(runs.ns, label_selector=f"{RUN_LABEL}=chaos").items,
             30, "the ConfigMap of chaos", interval_s=0.02)
    operator.kill()
    # While it is down: apply a run, edit one, delete one.
    runs.create(run_body("late", out, DEAD_PLANNER, shards=1))
    runs.patch("chaos", {"metadata": {"labels": {"chaos.cudanalyst.dev/edited": "yes"}}})
    runs.delete("doomed")
    time.sleep(1)
    operator.start()

    # The chaos run's one Job; its pods fail in three ways.
    wait_for(lambda: runs.jobs("chaos"), 60, f"the Job of chaos\n{operator.tail()}")
    pods = running_by_shard(runs, harness, "chaos", SHARDS)
    harness.finish(runs.ns, pods[0].metadata.name, succeeded=False, exit_code=1, reason="Error")  # exits non-zero
    runs.core.create_namespaced_pod_eviction(pods[1].metadata.name, runs.ns, {  # evicted (DisruptionTarget)
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pods[1].metadata.name, "namespace": runs.ns}})
    first = {p.metadata.name for p in pods.values()}
    pods = replacements(runs, "chaos", first, operator)
    # Shard 0 runs, then its pod is deleted before it ends: the replacement runs the shard again.
    spec = runner_spec_file(runs, "chaos", tmp_path)
    assert run_shard(spec, 0, SHARDS, tmp_path / "chaos-shard-0-first.log") == 0
    done_first = {p.name: p.stat().st_mtime_ns for p in (out / "chaos" / "outcomes").glob("*.json")}
    assert done_first
    runs.core.delete_namespaced_pod(pods[0].metadata.name, runs.ns)
    replacements(runs, "chaos", first | {pods[0].metadata.name}, operator)
    codes = play_pods(runs, harness, "chaos", SHARDS, tmp_path)
    assert codes == {0: 0, 1: 0}, [p.read_text()[-2000:] for p in tmp_path.glob("chaos-shard-*.log")]
    operator.stop()  # SIGTERM while the Job's last changes come in
    operator.start()

    run = runs.wait("chaos", lambda r: is_true(r, "Ready"), 120, "Ready after the faults", operator)
    # Every unit of the plan once, each record whole, none of the first pass redone.
    plan = plan_run(parse_run(json.loads(spec.read_text())))
    files = {p.name: p for p in (out / "chaos" / "outcomes").glob("*.json")}
    assert sorted(files) == sorted(f"{u.key}.json" for u in plan.units)
    for path in files.values():
        UnitOutcome.model_validate_json(path.read_text())
    assert {k: files[k].stat().st_mtime_ns for k in done_first} == done_first
    assert run["status"]["progress"]["done"] == len(plan.units) == run["status"]["progress"]["total"]
    assert len(runs.jobs("chaos")) == 1
    events = runs.core.list_namespaced_event(runs.ns, field_selector="involvedObject.name=chaos,reason=JobCreated")
    # At most one: a Job is never created twice. The event may be missing: the SIGKILL can land after the Job's
    # create and before kopf posts its event (events are best effort; a clean-clone CI run saw none).
    assert len(events.items) <= 1, [e.message for e in events.items]

    # What changed while the operator was down: the late run got its one Job; the deleted run left nothing.
    wait_for(lambda: len(runs.jobs("late")) == 1, 60, "the Job of the run applied while the operator was down")
    from kubernetes.client.exceptions import ApiException

    def gone() -> bool:
        try:
            runs.get("doomed")
            return False
        except ApiException as exc:
            return exc.status == 404

    wait_for(gone, 60, f"the deleted run to be finalized\n{operator.tail()}")
    wait_for(lambda: not runs.jobs("doomed") and not pods_of(runs, "doomed"), 60, "the deleted run's Job and pods")
    wait_for(lambda: not runs.core.list_namespaced_config_map(runs.ns, label_selector=f"{RUN_LABEL}=doomed").items,
             60, "the deleted run's ConfigMap")
    assert not [p for p in (out / "doomed").rglob("*") if p.is_file()], "its results were asked to go"
    assert operator.alive()
