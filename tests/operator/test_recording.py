"""The operator's TrajectoryRecording pieces as plain functions: the recorder Job, its verdicts, and what a run
naming a recording does (go, wait, stall with the recording's reason). The e2e is tests/cluster/test_e2e_recording.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cudanalyst.api import parse_run
from cudanalyst.api.recording import parse_recording
from cudanalyst.operator.conditions import Verdict, conditions_for
from cudanalyst.operator.config import OperatorConfig
from cudanalyst.operator.recording import (
    RECORDING_LABEL,
    RecordingObservation,
    judge_recording,
    recorder_job,
    recording_configmap,
)
from cudanalyst.operator.waiting import resolve, with_trajectory

ROOT = Path(__file__).resolve().parents[2]


def recording(**spec: Any) -> Any:
    return parse_recording({
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "TrajectoryRecording",
        "metadata": {"name": "gemm-rec", "namespace": "ns", "labels": {"batch": "b1", "argocd.argoproj.io/x": "y"}},
        "spec": {"tasks": ["gemm"], "model": {"model": "/models/coder"}, "output": {"uri": "s3://bucket/rec/"},
                 "s3": {"credentialsSecret": "s3-creds", "endpoint": "http://minio:9000"},
                 "resources": {"gpusPerShard": 1, "nodeSelector": {"gpu": "h200"}}, **spec}})


def test_the_recorder_job_runs_record_on_the_mounted_spec_with_a_gpu() -> None:
    rec = recording()
    job = recorder_job(rec, OperatorConfig())
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["cudanalyst", "record", "/etc/cudanalyst/spec.json"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {"gpu": "h200"} and pod["automountServiceAccountToken"] is False
    assert {"name": "spec", "configMap": {"name": "gemm-rec-recording"}} in pod["volumes"]
    assert any(v.get("secret", {}).get("secretName") == "s3-creds" for v in pod["volumes"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AWS_ENDPOINT_URL_S3"] == "http://minio:9000"
    labels = job["metadata"]["labels"]
    assert labels[RECORDING_LABEL] == "gemm-rec" and labels["batch"] == "b1"
    assert "cudanalyst.dev/run" not in labels and not any(k.startswith("argocd") for k in labels)
    assert job["spec"]["completions"] == 1 and job["metadata"]["name"] == "gemm-rec-recorder"
    # The ConfigMap holds the recording as `cudanalyst record` reads it.
    doc = json.loads(recording_configmap(rec)["data"]["spec.json"])
    assert parse_recording(doc).spec == rec.spec and "status" not in doc


def test_a_recording_is_ready_only_once_its_trajectory_is_written() -> None:
    running = {"active": 1, "conditions": []}
    complete = {"active": 0, "conditions": [{"type": "Complete", "status": "True"}]}
    failed = {"active": 0, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                           "message": "Job has reached the specified backoff limit"}]}
    assert judge_recording(RecordingObservation(None, 0, 4)).reason == "CreatingJob"
    v = judge_recording(RecordingObservation(running, 2, 4))
    assert (v.phase, v.reason, v.stalled) == ("Running", "Recording", False) and "2/4" in v.message
    v = judge_recording(RecordingObservation(complete, 4, 4))
    assert v.phase == "Failed" and v.reason == "NoTrajectory"  # complete, but nothing imported
    v = judge_recording(RecordingObservation(complete, 4, 4, "s3://b/rec/gemm-rec/trajectory/"))
    assert v.phase == "Succeeded" and "s3://b/rec/gemm-rec/trajectory/" in v.message
    v = judge_recording(RecordingObservation(failed, 1, 4))
    assert v.phase == "Failed" and v.stalled and v.reason == "BackoffLimitExceeded"


def body_with(verdict: Verdict, **status: Any) -> dict[str, Any]:
    return {"status": {"conditions": conditions_for(verdict, [], 1, "2026-01-01T00:00:00Z"), **status}}


def test_a_run_goes_waits_or_stalls_with_the_recordings_reason() -> None:
    assert resolve(None, "gemm-rec").waiting == "waiting for TrajectoryRecording gemm-rec, which does not exist (yet)"
    running = body_with(Verdict("Running", "Recording", "recording: 1/4 iterations"),
                        progress={"text": "1/4"})
    found = resolve(running, "gemm-rec")
    assert found.uri is None and found.stalled is None and "1/4" in str(found.waiting)
    ready = body_with(Verdict("Succeeded", "Succeeded", "done"), trajectoryUri="s3://b/t/")
    assert resolve(ready, "gemm-rec").uri == "s3://b/t/"
    failed = body_with(Verdict("Failed", "BackoffLimitExceeded", "the pod failed", stalled=True))
    reason, message = resolve(failed, "gemm-rec").stalled  # type: ignore[misc]
    assert reason == "BackoffLimitExceeded" and "gemm-rec" in message and "the pod failed" in message


def test_the_runner_gets_the_recordings_uri_in_place_of_its_name() -> None:
    run = parse_run({
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": "r"},
        "spec": {"trajectory": {"recording": "gemm-rec", "generations": [0]}, "players": ["debugger"],
                 "models": {"planner": {"model": "/m"}}, "output": {"uri": "s3://b/runs/"}}})
    resolved = with_trajectory(run, "s3://b/rec/gemm-rec/trajectory/")
    assert resolved.spec.trajectory.uri == "s3://b/rec/gemm-rec/trajectory/"
    assert resolved.spec.trajectory.recording is None
    parse_run(resolved.to_dict())  # still a valid run: exactly one of uri and recording


def test_the_recorded_batch_has_one_recording_and_three_runs_waiting_on_it() -> None:
    import jsonschema
    import yaml

    from cudanalyst import crd
    from cudanalyst.api import load_run
    from cudanalyst.api.recording import load_recording

    folder = ROOT / "examples" / "batch" / "recorded"
    listed = yaml.safe_load((folder / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml")
    rec = load_recording(folder / "recording.yaml")
    schema = jsonschema.Draft4Validator(crd.to_json_schema(crd.recording_schema()))  # as crd.validator()
    assert not list(schema.iter_errors(yaml.safe_load((folder / "recording.yaml").read_text())))
    runs = [load_run(p) for p in sorted(folder.glob("recorded-*.yaml"))]
    assert len(runs) == 3 and {r.spec.trajectory.recording for r in runs} == {rec.name}
    assert all(r.spec.trajectory.uri is None for r in runs)
    for path in folder.glob("recorded-*.yaml"):
        assert not list(crd.validator().iter_errors(yaml.safe_load(path.read_text())))
