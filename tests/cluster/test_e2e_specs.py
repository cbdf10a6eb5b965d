"""Malformed specs on the real control plane: the API server refuses what the schema and CEL can judge, the
operator stalls what only it can (the trajectory, the store), each naming the field; the operator never
crashes and keeps serving a healthy run meanwhile."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cp_cluster import Cluster, wait_for
from cp_harness import PodHarness
from cp_process import free_port
from e2e_support import (
    RUN_LABEL,
    OperatorProcess,
    Runs,
    condition,
    install_chart,
    is_true,
    run_body,
)

pytestmark = pytest.mark.cluster

PLANNER = {"endpoint": "http://127.0.0.1:9/v1", "model": "tiny"}  # never reached: pods are not played
Edit = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Edit:
    def edit(spec: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = spec
        for key in parents:
            node = node[key]
        node[last] = value
    return edit


def _drop(key: str) -> Edit:
    return lambda spec: spec.pop(key)


# (case, edit of a valid spec, words the API server's refusal must contain: the field path)
API_REFUSED: list[tuple[str, Edit, str]] = [
    ("dup-players", _set("players", ["debugger", "debugger"]), "spec.players must be unique"),
    ("no-players", _set("players", []), "spec.players"),
    ("many-players", _set("players", [f"p{i}" for i in range(17)]), "spec.players"),
    ("zero-shards", _set("resources.shards", 0), "spec.resources.shards"),
    ("mode-of-stranger", _set("feedback.modes", {"linter": "raw"}), "spec.feedback.modes"),
    ("bad-mode", _set("feedback.mode", "loud"), "spec.feedback.mode"),
    ("dup-generations", _set("trajectory.generations", [0, 0]), "spec.trajectory.generations"),
    ("negative-generation", _set("trajectory.generations", [-1]), "spec.trajectory.generations[0]"),
    ("no-generations", _set("trajectory.generations", []), "spec.trajectory.generations"),
    ("bad-format", _set("trajectory.format", "csv"), "spec.trajectory.format"),
    ("bad-planning", _set("planning", "sometimes"), "spec.planning"),
    ("zero-samples", _set("sampling.samplesPerCoalition", 0), "spec.sampling.samplesPerCoalition"),
    ("zero-rollouts", _set("sampling.rollouts", 0), "spec.sampling.rollouts"),
    ("bad-control", _set("controls", ["bogus"]), "spec.controls[0]"),
    ("bad-metric", _set("attribution.metrics", ["speed"]), "spec.attribution.metrics[0]"),
    ("bad-confidence", _set("attribution.confidence", 1.5), "spec.attribution.confidence"),
    ("no-trajectory", _drop("trajectory"), "spec.trajectory"),
    ("ftp-endpoint", _set("models.planner", {"endpoint": "ftp://models/v1", "model": "m"}),
     "spec.models.planner.endpoint"),
    ("negative-gpus", _set("resources.gpusPerShard", -1), "spec.resources.gpusPerShard"),
    ("string-shards", _set("resources.shards", "four"), "spec.resources.shards"),
]


def test_the_api_server_refuses_bad_specs_naming_the_field(cluster: Cluster, namespace: str,
                                                          tmp_path: Path) -> None:
    install_chart(cluster)
    base = run_body("bad", tmp_path, PLANNER)
    for case, edit, words in API_REFUSED:
        body = copy.deepcopy(base)
        body["metadata"]["name"] = case
        edit(body["spec"])
        done = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body), check=False)
        assert done.returncode != 0, f"{case}: accepted"
        assert words in done.stderr, f"{case}: {done.stderr}"
    assert cluster.kubectl("get", "ar", "-n", namespace, "-o", "name").stdout.strip() == ""  # nothing half-made


def _unreachable_store(spec: dict[str, Any]) -> None:
    spec["output"] = {"uri": "s3://runs/out/"}
    spec["s3"] = {"endpoint": f"http://127.0.0.1:{free_port()}", "region": "us-east-1"}


# (case, edit, reason, words of the Stalled message): what only the operator can judge.
OPERATOR_STALLED: list[tuple[str, Edit, str, str]] = [
    ("empty-generation", _set("trajectory.generations", [7]), "PlanFailed",
     "spec.trajectory.generations: generation 7 has no program"),
    ("unknown-task", _set("trajectory.tasks", ["no-such-task"]), "PlanFailed",
     "spec.trajectory.tasks: not in the trajectory: no-such-task"),
    # The loader names the URI it could not read (not the field path): see the report of issue 6.
    ("missing-trajectory", _set("trajectory.uri", "/nonexistent/trajectory/"), "PlanFailed",
     "/nonexistent/trajectory"),
    ("unreachable-store", _unreachable_store, "StoreUnavailable", "spec.output.uri"),
]


def test_the_operator_stalls_what_only_it_can_judge_and_keeps_serving(
        operator: OperatorProcess, runs: Runs, harness: PodHarness, tmp_path: Path) -> None:
    for case, edit, _, _ in OPERATOR_STALLED:
        body = run_body(case, tmp_path / "store", PLANNER)
        edit(body["spec"])
        runs.create(body)
    runs.create(run_body("healthy", tmp_path / "store", PLANNER))

    for case, _, reason, words in OPERATOR_STALLED:
        run = runs.wait(case, lambda r: is_true(r, "Stalled"), 60, "Stalled", operator)
        stalled = condition(run, "Stalled")
        assert stalled["reason"] == reason, (case, stalled)
        assert words in stalled["message"], (case, stalled["message"])
        assert not is_true(run, "Ready") and not is_true(run, "Reconciling") and run["status"]["phase"] == "Stalled"
        assert runs.jobs(case) == [], case  # nothing started for a run that cannot run
        events = runs.core.list_namespaced_event(runs.ns, field_selector=f"involvedObject.name={case}").items
        assert any(e.type == "Warning" and e.reason == reason for e in events), (case, [e.reason for e in events])

    # Meanwhile the healthy run got its Job and pods, and the operator is alive and healthy.
    runs.wait("healthy", lambda r: (r.get("status") or {}).get("phase") == "Running", 60, "Running", operator)
    harness.running_pods(runs.ns, f"{RUN_LABEL}=healthy", 2)
    assert operator.alive() and operator.healthy()

    # Fixing a stalled spec (allowed: it never started) starts it.
    runs.patch("empty-generation", {"spec": {"trajectory": {"generations": [0]}}})
    run = runs.wait("empty-generation", lambda r: (r.get("status") or {}).get("startTime"), 60, "started after the fix",
                    operator)
    assert not is_true(run, "Stalled")
    wait_for(lambda: runs.jobs("empty-generation"), 30, "the Job of the fixed run")
    assert operator.alive()
