"""The start handler against kmock: validation, planning, the Indexed Job, status and its schema."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from harness import (
    CONFIGMAPS,
    JOBS,
    NS,
    RUNS,
    check_all_status_patches,
    eventually,
    operator_config,
    operator_running,
    run_body,
)

from cudanalyst.operator.lifecycle import Services

pytestmark = pytest.mark.asyncio


def conditions(kube: Any, name: str) -> dict[str, dict[str, Any]]:
    status = kube.objects[RUNS, NS, name].raw.get("status") or {}
    return {c["type"]: c for c in status.get("conditions", [])}


async def test_valid_run_gets_one_indexed_job_and_running_status(kube: Any, trajectory: str, output: str) -> None:
    kube.objects[RUNS, NS, "r1"] = run_body("r1", trajectory, output)
    async with operator_running(Services(operator_config())):
        await eventually(lambda: not kube.objects[JOBS, NS, "r1-runner"].deleted)
        await eventually(lambda: kube.objects[RUNS, NS, "r1"].raw["status"]["phase"] == "Running")
    job = kube.objects[JOBS, NS, "r1-runner"].raw
    assert job["spec"]["completions"] == 2 and job["spec"]["completionMode"] == "Indexed"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-r1"
    assert job["metadata"]["labels"]["cudanalyst.dev/batch"] == "b1"
    assert not kube.objects[CONFIGMAPS, NS, "r1-spec"].deleted
    status = kube.objects[RUNS, NS, "r1"].raw["status"]
    # 4 programs x (8 coalitions) x 1 rollout x 2 samples
    assert status["progress"]["total"] == 64
    assert status["jobName"] == "r1-runner" and status["startTime"]
    assert conditions(kube, "r1")["Reconciling"]["status"] == "True"
    assert conditions(kube, "r1")["Ready"]["status"] == "False"
    assert check_all_status_patches(kube) >= 1
    await asyncio.sleep(0)
