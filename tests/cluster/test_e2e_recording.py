"""TrajectoryRecordings end to end on the real control plane: the operator makes the recorder Job, its pod binds to
a kwok GPU node, the harness plays it by running `cudanalyst record` locally on the ConfigMap's spec (real
OpenEvolve against vLLM on CPU with the tiny model, compile-only evaluation), and the recording reaches Ready.

An AttributionRun that names the recording waits (Reconciling, WaitingForTrajectory) before the recording exists
and while it records, then replays its trajectory to Ready; one whose recording is deleted keeps waiting (a
GitOps sync may bring it back); one whose recording fails stalls with the recording's reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cp_cluster import Cluster, wait_for
from cp_harness import PodHarness
from e2e_support import GPU_SELECTOR, OperatorProcess, Runs, condition, is_true, play_pods, run_body

from cudanalyst.api import API_GROUP, API_VERSION
from cudanalyst.api.recording import RECORDING_PLURAL

pytestmark = [pytest.mark.cluster, pytest.mark.vllm]

RECORDING_LABEL = f"{API_GROUP}/recording"


class Recordings:
    def __init__(self, runs: Runs) -> None:
        self.runs, self.ns = runs, runs.ns

    def create(self, name: str, output: Path, model: dict[str, Any], iterations: int = 1) -> None:
        body = {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "TrajectoryRecording", "metadata": {"name": name},
                "spec": {"tasks": ["conv2d"], "model": {**model, "serve": "endpoint"}, "iterations": iterations,
                         "population": 4, "seed": 1, "maxTokens": 32, "output": {"uri": str(output)},
                         "resources": {"gpusPerShard": 1, "image": "registry.invalid/cudanalyst-runner:e2e",
                                       "nodeSelector": dict(GPU_SELECTOR)}}}
        self.runs.co.create_namespaced_custom_object(API_GROUP, API_VERSION, self.ns, RECORDING_PLURAL, body)

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.runs.co.get_namespaced_custom_object(API_GROUP, API_VERSION, self.ns, RECORDING_PLURAL, name))

    def delete(self, name: str) -> None:
        self.runs.co.delete_namespaced_custom_object(API_GROUP, API_VERSION, self.ns, RECORDING_PLURAL, name)

    def wait(self, name: str, check: Any, deadline_s: float, what: str, operator: OperatorProcess) -> dict[str, Any]:
        try:
            return dict(wait_for(lambda: (lambda r: r if check(r) else None)(self.get(name)), deadline_s,
                                 f"recording {name}: {what}", interval_s=0.3))
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\nstatus: {self.get(name).get('status')}\n{operator.tail()}") from None

    def play(self, harness: PodHarness, name: str, folder: Path, exit_code: int | None = None) -> int:
        """Runs the recorder pod's command locally (or ends the pod with `exit_code`), then ends the pod so."""
        pod = harness.running_pods(self.ns, f"{RECORDING_LABEL}={name}", 1, deadline_s=90)[0]
        if exit_code is None:
            spec = folder / f"{name}-recording.json"
            spec.write_text(self.runs.core.read_namespaced_config_map(f"{name}-recording", self.ns).data["spec.json"])
            work = folder / f"{name}-work"
            work.mkdir(exist_ok=True)
            with (folder / f"{name}-record.log").open("ab") as log:
                exit_code = subprocess.run([sys.executable, "-m", "cudanalyst", "record", str(spec)], stdout=log,
                                           stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(work)},
                                           timeout=900, check=False).returncode
        harness.finish(self.ns, pod.metadata.name, succeeded=exit_code == 0, exit_code=exit_code or 1)
        return exit_code


def waiting(run: dict[str, Any]) -> bool:
    return is_true(run, "Reconciling") and condition(run, "Reconciling").get("reason") == "WaitingForTrajectory"


def recorded_run(name: str, store: Path, planner: dict[str, Any], recording: str) -> dict[str, Any]:
    body = run_body(name, store, planner, shards=1, tasks=("conv2d",))
    body["spec"]["trajectory"] = {"recording": recording, "generations": [0], "programsPerGeneration": 1}
    return body


def test_a_run_waits_for_its_recording_which_reaches_ready_then_the_run_completes(
        cluster: Cluster, operator: OperatorProcess, planner: dict[str, Any], runs: Runs, harness: PodHarness,
        tmp_path: Path) -> None:
    recordings = Recordings(runs)
    # The run first, as a GitOps sync may apply it: it waits for a recording that does not exist yet.
    runs.create(recorded_run("over-rec", tmp_path / "runs", planner, "rec"))
    run = runs.wait("over-rec", waiting, 30, "waiting for its recording", operator)
    assert "does not exist" in condition(run, "Reconciling")["message"] and not runs.jobs("over-rec")

    recordings.create("rec", tmp_path / "recordings", planner)
    job = wait_for(lambda: (runs.batch.list_namespaced_job(runs.ns, label_selector=f"{RECORDING_LABEL}=rec").items
                            or [None])[0], 30, "the recorder Job")
    assert job.metadata.owner_references[0].kind == "TrajectoryRecording"
    assert job.spec.template.spec.containers[0].command == ["cudanalyst", "record", "/etc/cudanalyst/spec.json"]
    run = runs.wait("over-rec", lambda r: waiting(r) and "to be Ready" in condition(r, "Reconciling")["message"],
                    30, "waiting while it records", operator)
    assert not runs.jobs("over-rec")

    assert recordings.play(harness, "rec", tmp_path) == 0, (tmp_path / "rec-record.log").read_text()[-3000:]
    rec = recordings.wait("rec", lambda r: is_true(r, "Ready"), 60, "Ready", operator)
    status = rec["status"]
    uri = (tmp_path / "recordings" / "rec" / "trajectory").as_uri() + "/"
    assert status["trajectoryUri"] == uri and status["programs"] >= 2 and status["phase"] == "Succeeded"
    assert status["progress"]["text"] == "1/1" and not is_true(rec, "Stalled") and status["completionTime"]
    table = cluster.kubectl("get", "trec", "-n", runs.ns).stdout.splitlines()
    assert table[1].split()[:4] == ["rec", "True", "Succeeded", "1/1"], table

    # The run stops waiting, and its runner replays the recorded trajectory.
    wait_for(lambda: runs.jobs("over-rec"), 60, "the run's Job once the recording is Ready")
    spec = runs.core.read_namespaced_config_map("over-rec-spec", runs.ns).data["spec.json"]
    assert uri in spec and '"recording"' not in spec
    assert play_pods(runs, harness, "over-rec", 1, tmp_path) == {0: 0}
    run = runs.wait("over-rec", lambda r: is_true(r, "Ready"), 90, "Ready", operator)
    assert run["status"]["progress"]["done"] == 4  # 1 program x 4 coalitions of 2 players


def test_deleting_a_recording_keeps_its_runs_waiting_and_a_failed_one_stalls_them(
        cluster: Cluster, operator: OperatorProcess, planner: dict[str, Any], runs: Runs, harness: PodHarness,
        tmp_path: Path) -> None:
    recordings = Recordings(runs)
    recordings.create("gone", tmp_path / "recordings", planner)
    runs.create(recorded_run("on-gone", tmp_path / "runs", planner, "gone"))
    runs.wait("on-gone", lambda r: waiting(r) and "to be Ready" in condition(r, "Reconciling")["message"], 30,
              "waiting", operator)
    recordings.delete("gone")
    run = runs.wait("on-gone", lambda r: waiting(r) and "does not exist" in condition(r, "Reconciling")["message"],
                    30, "waiting for a recording that is gone", operator)
    assert not is_true(run, "Stalled") and not runs.jobs("on-gone")
    wait_for(lambda: not runs.batch.list_namespaced_job(runs.ns, label_selector=f"{RECORDING_LABEL}=gone").items,
             60, "the garbage collector to delete the recorder Job")

    # A recording that fails (exit 2: invalid input, no retry) stalls the runs naming it with its reason.
    recordings.create("bad", tmp_path / "recordings", planner)
    runs.create(recorded_run("on-bad", tmp_path / "runs", planner, "bad"))
    recordings.play(harness, "bad", tmp_path, exit_code=2)
    rec = recordings.wait("bad", lambda r: is_true(r, "Stalled"), 60, "Stalled", operator)
    reason = condition(rec, "Stalled")["reason"]
    assert rec["status"]["phase"] == "Failed" and reason
    run = runs.wait("on-bad", lambda r: is_true(r, "Stalled"), 60, "Stalled by its recording", operator)
    assert condition(run, "Stalled")["reason"] == reason and "bad" in condition(run, "Stalled")["message"]
    assert not runs.jobs("on-bad")
