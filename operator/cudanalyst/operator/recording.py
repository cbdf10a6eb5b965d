"""TrajectoryRecordings: one Job that runs `cudanalyst record`, its status, and runs that wait for them.

Plain functions over plain data, as lifecycle.py is for runs; handlers.py only unpacks kopf's arguments.
The recorder pod reads the recording from a ConfigMap, serves the model on its GPU, runs OpenEvolve and
writes the trajectory; its progress is read from the store (`progress/<task>.json`), and the trajectory's
URI from `done.json` once the Job completes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from cudanalyst.api import SpecError
from cudanalyst.api.recording import (
    RECORDING_KIND,
    RECORDING_PLURAL,
    TrajectoryRecording,
    TrajectoryRecordingStatus,
    parse_recording,
)
from cudanalyst.api.spec import API_GROUP, API_VERSION
from cudanalyst.api.status import read_status
from cudanalyst.operator import constants as c
from cudanalyst.operator.conditions import Verdict, invalid, is_finished
from cudanalyst.operator.config import OperatorConfig
from cudanalyst.operator.jobs import job_pod_spec, passthrough_labels, pod_failure_policy
from cudanalyst.operator.lifecycle import apply_verdict, object_document, rfc3339, spec_problem_text
from cudanalyst.operator.pods import job_condition, job_summary
from cudanalyst.operator.waiting import get_recording
from cudanalyst.recording import DONE, read_recording_progress, recording_store
from cudanalyst.store import ObjectNotFound, StoreError

log = logging.getLogger("cudanalyst.operator.recording")

RECORDING_LABEL = f"{c.PREFIX}/recording"  # not the run label: a run and a recording may share a name
RECORDING_RESOURCE = (API_GROUP, API_VERSION, RECORDING_PLURAL)


def job_name(recording: str) -> str:
    return f"{recording}-recorder"


def configmap_name(recording: str) -> str:
    return f"{recording}-recording"


def parse_body(body: dict[str, Any]) -> TrajectoryRecording:
    doc, source = object_document(body)
    return parse_recording(doc, source=source)


# ---- the children (pure) -------------------------------------------------------------------------------


def child_labels(rec: TrajectoryRecording) -> dict[str, str]:
    labels = passthrough_labels(rec.metadata.labels)
    labels[RECORDING_LABEL] = rec.name
    labels[c.MANAGED_BY_LABEL] = c.MANAGED_BY
    if rec.spec.resources.queue_name:
        labels[c.KUEUE_QUEUE_LABEL] = rec.spec.resources.queue_name
    return labels


def recording_configmap(rec: TrajectoryRecording) -> dict[str, Any]:
    doc = rec.to_dict()
    doc.pop("status", None)
    doc["metadata"] = {k: v for k, v in doc["metadata"].items() if k in ("name", "namespace", "labels") and v}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": configmap_name(rec.name), "labels": child_labels(rec)},
            "data": {c.SPEC_FILE: json.dumps(doc, indent=2, sort_keys=True)}}


class _AsRun:
    """The fields jobs.py's pod pieces read (name, s3, resources), under the names they read them by."""

    def __init__(self, rec: TrajectoryRecording) -> None:
        self.metadata, self.spec = rec.metadata, rec.spec


def recorder_job(rec: TrajectoryRecording, config: OperatorConfig) -> dict[str, Any]:
    """One pod that runs `cudanalyst record` on the recording (a retry resumes from the last checkpoint)."""
    pod_spec = job_pod_spec(_AsRun(rec), config, configmap_name(rec.name),  # type: ignore[arg-type]
                            ["cudanalyst", "record", f"{c.SPEC_MOUNT}/{c.SPEC_FILE}"])
    labels = child_labels(rec)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(rec.name), "labels": labels},
        "spec": {
            "completions": 1, "parallelism": 1, "backoffLimit": config.backoff_limit_per_index,
            "podFailurePolicy": pod_failure_policy(on_invalid="FailJob"),  # one pod: exit 2 ends the Job
            "template": {"metadata": {"labels": {**labels, **config.runner_pod_labels, c.COMPONENT_LABEL: "recorder",
                                                 c.MANAGED_BY_LABEL: c.MANAGED_BY}}, "spec": pod_spec},
        },
    }


# ---- status (pure) -------------------------------------------------------------------------------------


@dataclass
class RecordingObservation:
    job: dict[str, Any] | None
    done: int = 0
    total: int = 0
    trajectory_uri: str | None = None  # from done.json: the import is written


def judge_recording(obs: RecordingObservation) -> Verdict:
    text = f"{obs.done}/{obs.total} iterations"
    if obs.trajectory_uri:
        return Verdict("Succeeded", "Succeeded", f"trajectory recorded ({text}): {obs.trajectory_uri}")
    job = obs.job
    if job is None:
        return Verdict("Pending", "CreatingJob", "creating the recorder Job")
    failed = job_condition(job, "Failed") or job_condition(job, "FailureTarget")
    if failed:
        return Verdict("Failed", failed.get("reason") or "JobFailed",
                       f"{failed.get('message') or 'the recorder Job failed'}; finished checkpoints are kept "
                       f"in the store ({text})", stalled=True)
    if job_condition(job, "Complete") or job_condition(job, "SuccessCriteriaMet"):
        return Verdict("Failed", "NoTrajectory", f"the recorder Job completed but wrote no done.json ({text})",
                       stalled=True)
    if not job.get("active"):
        return Verdict("Running", "PodStarting", f"waiting for the recorder pod ({text})")
    return Verdict("Running", "Recording", f"recording: {text}")


def recording_status(body: dict[str, Any]) -> TrajectoryRecordingStatus:
    """The recording's status, typed (partial or missing reads as defaults: api.status.read_status)."""
    return read_status(TrajectoryRecordingStatus, body.get("status"))


def progress_status(done: int, total: int) -> dict[str, Any]:
    return {"done": done, "total": total, "percent": round(100.0 * done / total, 1) if total else 0.0,
            "text": f"{done}/{total}"}


# ---- what the handlers call ----------------------------------------------------------------------------


class RecordingOperations:
    def __init__(self, services: Any) -> None:
        self.s = services

    def _apply(self, body: dict[str, Any], patch: kopf.Patch, verdict: Verdict, extra: dict[str, Any]) -> None:
        apply_verdict(body, patch, verdict, extra, recording_status(body), rfc3339(self.s.clock()))

    def start(self, body: dict[str, Any], patch: kopf.Patch) -> None:
        seen = recording_status(body)
        if is_finished(seen):
            return
        try:
            rec = parse_body(body)
        except SpecError as exc:
            text = spec_problem_text(exc)
            self._apply(body, patch, invalid("InvalidSpec", f"invalid spec: {text}"), {})
            raise kopf.PermanentError(f"invalid spec: {text}") from None
        try:
            recording_store(rec).put_json("recording.json", {k: v for k, v in rec.to_dict().items() if k != "status"})
        except StoreError as exc:
            self._apply(body, patch, invalid("StoreUnavailable", f"cannot write to spec.output.uri: {exc}"), {})
            raise kopf.PermanentError(str(exc)) from None
        configmap, job = recording_configmap(rec), recorder_job(rec, self.s.config)
        kopf.adopt([configmap, job], owner=_owner(body))
        namespace = body["metadata"]["namespace"]
        self.s.kube.create_configmap(namespace, configmap)
        if self.s.kube.create_job(namespace, job):
            kopf.event(body, type="Normal", reason="JobCreated", message=f"created recorder Job {job_name(rec.name)}")
        total = rec.spec.iterations * len(rec.spec.tasks)
        progress = (seen.progress.model_dump(by_alias=True, mode="json") if seen.progress
                    else progress_status(0, total))
        extra = {"startTime": seen.start_time or rfc3339(self.s.clock()), "jobName": job_name(rec.name),
                 "progress": progress}
        self._apply(body, patch, judge_recording(RecordingObservation(job_summary(job), 0, total)), extra)

    def observe(self, body: dict[str, Any], patch: kopf.Patch, job: dict[str, Any] | None) -> None:
        seen = recording_status(body)
        if not seen.start_time or is_finished(seen):
            return
        try:
            rec = parse_body(body)
        except SpecError:
            return
        store = recording_store(rec)
        total = rec.spec.iterations * len(rec.spec.tasks)
        extra: dict[str, Any] = {}
        obs = RecordingObservation(job, total=total)
        try:
            obs.done = sum(min(t.done, t.total) for t in read_recording_progress(rec, store))
            # Read whatever the Job says: it may be SuccessCriteriaMet before Complete, and `record` writes
            # done.json before it exits 0, so a succeeded Job without it is a recording that wrote nothing.
            done = store.get_json(DONE)
            if done:
                obs.trajectory_uri = str(done["trajectoryUri"])
                extra["trajectoryUri"], extra["programs"] = obs.trajectory_uri, int(done.get("programs") or 0)
        except ObjectNotFound:
            pass
        except StoreError as exc:
            log.warning("%s: progress unavailable: %s", rec.name, exc)
            obs.done = seen.progress.done if seen.progress else 0
        extra["progress"] = progress_status(obs.done, total)
        self._apply(body, patch, judge_recording(obs), extra)

    def refresh(self, namespace: str, name: str) -> None:
        """After an event of the recorder Job: read the recording and its Job fresh, write what changed."""
        kube = self.s.kube
        body = get_recording(kube, namespace, name)
        if body is None:
            return
        try:
            job = job_summary(json.loads(kube.batch.read_namespaced_job(job_name(name), namespace,
                                                                        _preload_content=False).data))
        except ApiException as exc:
            if exc.status != 404:
                raise
            job = None
        patch = kopf.Patch()
        self.observe(body, patch, job)
        if patch.status:
            _patch_status(kube, namespace, name, dict(patch.status))


def _owner(body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata", {})
    return {"apiVersion": body.get("apiVersion", c.RUN_API_VERSION), "kind": body.get("kind", RECORDING_KIND),
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                         "labels": passthrough_labels(meta.get("labels") or {})}}


def _patch_status(kube: Any, namespace: str, name: str, status: dict[str, Any]) -> None:
    try:
        kube.custom.patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, namespace, RECORDING_PLURAL, name, {"status": status},
            _content_type="application/merge-patch+json")
    except ApiException as exc:
        if exc.status != 404:
            raise
