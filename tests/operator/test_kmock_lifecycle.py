"""Lifecycle handlers against kmock: bad input, suspend, restart, deletion, events, Kueue."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from harness import (
    CONFIGMAPS,
    EVENTS,
    JOBS,
    NS,
    RUNS,
    check_all_status_patches,
    condition,
    eventually,
    operator_config,
    operator_running,
    run_body,
    run_status,
    run_url,
    write_trajectory,
)

from cudanalyst.operator.lifecycle import Services

pytestmark = pytest.mark.asyncio


def jobs_created(kube: Any) -> list[Any]:
    return [r for r in kube[kube.resource(JOBS)] if r.method == "POST"]


def job_exists(kube: Any, name: str) -> bool:
    key = (kube.resource(JOBS), NS, name)
    return key in kube.objects and not kube.objects[key].deleted


async def patch_spec(kube: Any, name: str, spec: dict[str, Any]) -> None:
    async with kube.patch(run_url(name), json={"metadata": {"generation": 2}, "spec": spec}) as resp:
        assert resp.status == 200, await resp.text()


async def test_invalid_spec_stalls_with_the_field_path_and_makes_no_job(kube: Any, trajectory: str,
                                                                        output: str) -> None:
    bad = run_body("bad", trajectory, output)
    bad["spec"]["sampling"]["rollouts"] = 0
    bad["spec"]["resources"]["shards"] = 0
    kube.objects[RUNS, NS, "bad"] = bad
    async with operator_running():
        await eventually(lambda: run_status(kube, "bad").get("phase") == "Stalled")
        await asyncio.sleep(1.0)  # a permanent error is not retried
    stalled = condition(kube, "bad", "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "InvalidSpec"
    assert "spec.sampling.rollouts: Input should be greater than or equal to 1" in stalled["message"]
    assert "spec.resources.shards" in stalled["message"]
    assert condition(kube, "bad", "Ready")["status"] == "False"
    assert condition(kube, "bad", "Reconciling")["status"] == "False"
    assert jobs_created(kube) == [] and not job_exists(kube, "bad-runner")
    assert "startTime" not in run_status(kube, "bad")
    check_all_status_patches(kube)


async def test_fixing_a_stalled_spec_starts_the_run(kube: Any, trajectory: str, output: str) -> None:
    bad = run_body("fix", trajectory, output)
    bad["spec"]["trajectory"]["generations"] = [0, 7]  # generation 7 has no program
    kube.objects[RUNS, NS, "fix"] = bad
    async with operator_running():
        stalled = await eventually(lambda: condition(kube, "fix", "Stalled")
                                   if condition(kube, "fix", "Stalled")["status"] == "True" else None)
        assert stalled["reason"] == "PlanFailed"
        assert "spec.trajectory.generations: generation 7 has no program" in stalled["message"]
        assert not job_exists(kube, "fix-runner")
        await patch_spec(kube, "fix", {"trajectory": {"generations": [0, 1]}})
        await eventually(lambda: job_exists(kube, "fix-runner"))
        await eventually(lambda: run_status(kube, "fix").get("phase") == "Running")
    assert condition(kube, "fix", "Stalled")["status"] == "False"
    assert run_status(kube, "fix")["observedGeneration"] == 2
    check_all_status_patches(kube)


async def test_a_trajectory_uploaded_later_starts_the_run(kube: Any, tmp_path: Path, output: str) -> None:
    """PlanFailed may be cured outside the spec: kopf tries the start again (TemporaryError), no edit needed."""
    later = tmp_path / "later"
    kube.objects[RUNS, NS, "later"] = run_body("later", str(later), output)
    async with operator_running(Services(operator_config(retry_interval=2.0))):
        stalled = await eventually(lambda: condition(kube, "later", "Stalled")
                                   if condition(kube, "later", "Stalled")["status"] == "True" else None)
        assert stalled["reason"] == "PlanFailed" and not job_exists(kube, "later-runner")
        write_trajectory(later)
        await eventually(lambda: job_exists(kube, "later-runner"))
        await eventually(lambda: run_status(kube, "later").get("phase") == "Running")
    assert condition(kube, "later", "Stalled")["status"] == "False"
    assert run_status(kube, "later")["observedGeneration"] == 1  # the same spec, never edited
    check_all_status_patches(kube)


async def test_unreachable_store_stalls_one_run_while_others_are_served(
        kube: Any, trajectory: str, output: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    with socket.socket() as sock:  # a loopback port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kube.objects[RUNS, NS, "nostore"] = run_body(
        "nostore", trajectory, "s3://results/runs/", s3={"endpoint": f"http://127.0.0.1:{port}", "region": "us-east-1"})
    kube.objects[RUNS, NS, "fine"] = run_body("fine", trajectory, output)
    async with operator_running():
        await eventually(lambda: job_exists(kube, "fine-runner"), timeout=20)
        stalled = await eventually(lambda: condition(kube, "nostore", "Stalled")
                                   if condition(kube, "nostore", "Stalled")["status"] == "True" else None, timeout=60)
    assert stalled["reason"] == "StoreUnavailable" and f"127.0.0.1:{port}" in stalled["message"]
    assert not job_exists(kube, "nostore-runner")
    assert run_status(kube, "fine")["phase"] == "Running"
    check_all_status_patches(kube)


async def test_suspend_and_resume_go_through_the_job(kube: Any, trajectory: str, output: str) -> None:
    kube.objects[RUNS, NS, "sus"] = run_body("sus", trajectory, output)
    async with operator_running():
        await eventually(lambda: run_status(kube, "sus").get("phase") == "Running")
        await patch_spec(kube, "sus", {"suspend": True})
        await eventually(lambda: kube.objects[JOBS, NS, "sus-runner"].raw["spec"]["suspend"] is True)
        await eventually(lambda: run_status(kube, "sus").get("phase") == "Suspended")
        assert condition(kube, "sus", "Suspended")["status"] == "True"
        assert condition(kube, "sus", "Reconciling")["status"] == "False"
        await patch_spec(kube, "sus", {"suspend": False})
        await eventually(lambda: kube.objects[JOBS, NS, "sus-runner"].raw["spec"]["suspend"] is False)
        await eventually(lambda: run_status(kube, "sus").get("phase") == "Running")
    # kmock has no resourceVersion, so kopf may see a stale run and try to create again: that is a 409.
    assert [k for k in kube.objects if k[0] == kube.resource(JOBS)] == [(kube.resource(JOBS), NS, "sus-runner")]
    assert None not in list(kube.objects[JOBS, NS, "sus-runner"].history)
    check_all_status_patches(kube)


async def test_queued_run_stalls_when_the_operator_does_not_follow_kueue(kube: Any, trajectory: str,
                                                                        output: str) -> None:
    # Suspending a queued run needs its Workload (operator.kueue), so the operator refuses to half-run it.
    # What it does with a real Kueue is in tests/cluster/test_e2e_kueue.py.
    kube.objects[RUNS, NS, "q"] = run_body("q", trajectory, output, resources={"shards": 1, "queueName": "gpus"})
    async with operator_running():
        await eventually(lambda: run_status(kube, "q").get("phase") == "Stalled")
        await asyncio.sleep(0.5)  # a permanent error is not retried
    stalled = condition(kube, "q", "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "KueueNotEnabled"
    assert "spec.resources.queueName" in stalled["message"] and "kueue.enabled=true" in stalled["message"]
    assert not jobs_created(kube)
    check_all_status_patches(kube)


async def test_restarted_operator_creates_nothing_twice(kube: Any, trajectory: str, output: str) -> None:
    kube.objects[RUNS, NS, "again"] = run_body("again", trajectory, output)
    async with operator_running():
        await eventually(lambda: run_status(kube, "again").get("phase") == "Running")
    first = dict(kube.objects[JOBS, NS, "again-runner"].raw)
    async with operator_running():
        await asyncio.sleep(1.5)
    jobs = [k for k in kube.objects if k[0] == kube.resource(JOBS) and not kube.objects[k].deleted]
    assert jobs == [(kube.resource(JOBS), NS, "again-runner")]
    # Every further create attempt was answered 409 and nothing replaced the first Job.
    assert kube.objects[JOBS, NS, "again-runner"].raw == first
    assert len(kube.objects[JOBS, NS, "again-runner"].history) == 1
    configmaps = [k for k in kube.objects if k[0] == kube.resource(CONFIGMAPS) and not kube.objects[k].deleted]
    assert len(configmaps) == 1
    assert run_status(kube, "again")["phase"] == "Running"


async def test_deleting_a_run_keeps_results_unless_asked(kube: Any, trajectory: str, output: str,
                                                         tmp_path: Path) -> None:
    kube.objects[RUNS, NS, "keep"] = run_body("keep", trajectory, output)
    kube.objects[RUNS, NS, "drop"] = run_body("drop", trajectory, output, output={"uri": output, "deleteWithRun": True})
    async with operator_running():
        await eventually(lambda: job_exists(kube, "keep-runner") and job_exists(kube, "drop-runner"))
        # drop's deletion handler needs the finalizer from the start. keep never gets one (no timer or daemon on
        # runs: the sweep keeps keys), so it can be deleted while the operator is away, or uninstalled.
        assert "cudanalyst.dev/finalizer" in kube.objects[RUNS, NS, "drop"].raw["metadata"]["finalizers"]
        await eventually(lambda: run_status(kube, "keep").get("phase") == "Running")
        assert "cudanalyst.dev/finalizer" not in (kube.objects[RUNS, NS, "keep"].raw["metadata"].get("finalizers") or [])
        assert (tmp_path / "out" / "drop" / "plan.json").exists()
        for name in ("keep", "drop"):
            async with kube.delete(run_url(name)) as resp:
                assert resp.status == 200
        await eventually(lambda: kube.objects[RUNS, NS, "drop"].deleted and kube.objects[RUNS, NS, "keep"].deleted)
    assert (tmp_path / "out" / "keep" / "plan.json").exists()
    assert not any(p.is_file() for p in (tmp_path / "out" / "drop").rglob("*"))


async def test_transitions_are_posted_as_events(kube: Any, output: str, tmp_path: Path) -> None:
    trajectory = write_trajectory(tmp_path / "t2")
    bad = run_body("ev", trajectory, output)
    bad["spec"]["players"] = ["debugger", "debugger"]
    kube.objects[RUNS, NS, "ev"] = bad
    kube.objects[RUNS, NS, "ok"] = run_body("ok", trajectory, output)
    async with operator_running(posting=True):
        def events() -> list[dict[str, Any]]:
            # kmock has no generateName, so it stores one event only; the requests hold every one posted.
            return [r.data for r in kube[kube.resource(EVENTS)] if r.method == "POST"]
        await eventually(lambda: {e.get("reason") for e in events()} >= {"InvalidSpec", "JobCreated", "PodsStarting"})
    by_reason = {e["reason"]: e for e in events()}
    assert by_reason["InvalidSpec"]["type"] == "Warning" and "players must be unique" in by_reason["InvalidSpec"]["message"]
    assert by_reason["InvalidSpec"]["involvedObject"]["name"] == "ev"
    assert by_reason["JobCreated"]["involvedObject"]["name"] == "ok"
    for event in events():
        assert "AWS_SECRET" not in str(event) and "secret" not in event["message"].lower()


async def test_model_prefix_without_weights_stalls_naming_the_field(
        kube: Any, trajectory: str, output: str, s3_endpoint: Any, s3_bucket: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_endpoint.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_endpoint.secret_access_key)
    body = run_body("nomodel", trajectory, output, s3={"endpoint": s3_endpoint.url, "region": s3_endpoint.region})
    body["spec"]["models"] = {"planner": {"model": f"s3://{s3_bucket}/models/missing/", "serve": "local"}}
    kube.objects[RUNS, NS, "nomodel"] = body
    async with operator_running():
        stalled = await eventually(lambda: condition(kube, "nomodel", "Stalled")
                                   if condition(kube, "nomodel", "Stalled")["status"] == "True" else None)
    assert stalled["reason"] == "PlanFailed"
    assert "spec.models.planner.model" in stalled["message"] and "config.json" in stalled["message"]
    assert not job_exists(kube, "nomodel-runner")
