"""Pure readings of runner Pods and the Job: what went wrong, in words a user can act on.

The results are small JSON-able summaries, so kopf's in-memory indexes can hold them.
"""

from __future__ import annotations

from typing import Any

from cudanalyst.operator import constants as c

JOB_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
PULL_ERRORS = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}
CONFIG_ERRORS = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
MESSAGE_LIMIT = 600


def _shard(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata", {})
    index = (meta.get("annotations") or {}).get(JOB_INDEX_ANNOTATION)
    if index is None:
        index = (meta.get("labels") or {}).get(JOB_INDEX_ANNOTATION)
    return str(index) if index is not None else "?"


def _tail(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """The end of a log-ish message: the runner prints its error last."""
    text = " ".join(line.strip() for line in text.strip().splitlines()[-5:] if line.strip())
    return text if len(text) <= limit else "..." + text[-limit:]


def _runner_status(pod: dict[str, Any]) -> dict[str, Any]:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == c.RUNNER_CONTAINER:
            return status
    return {}


def _memory_limit(pod: dict[str, Any]) -> str:
    for container in pod.get("spec", {}).get("containers") or []:
        if container.get("name") == c.RUNNER_CONTAINER:
            return (container.get("resources", {}).get("limits") or {}).get("memory", "")
    return ""


def pod_problem(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The one thing wrong with a runner pod, as {reason, message, stalled}; None when nothing is.

    `stalled` marks what needs a person (a wrong image, a missing Secret); the rest may pass by itself
    (capacity appears, a retried shard succeeds).
    """
    shard = _shard(pod)
    status = pod.get("status", {})
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return {
                "reason": "Unschedulable",
                "message": f"shard {shard} cannot be scheduled: {_tail(cond.get('message', ''))} "
                "(check spec.resources: gpusPerShard, nodeSelector, tolerations; or the cluster's free GPUs)",
                "stalled": False,
            }
    runner = _runner_status(pod)
    waiting = (runner.get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason", "")
    if reason in PULL_ERRORS:
        return {
            "reason": "ImagePullBackOff",
            "message": f"shard {shard} cannot pull image {runner.get('image', '')}: {_tail(waiting.get('message', reason))} "
            "(check spec.resources.image and the image pull secret)",
            "stalled": True,
        }
    if reason in CONFIG_ERRORS:
        return {
            "reason": "ContainerConfigError",
            "message": f"shard {shard} cannot start: {_tail(waiting.get('message', reason))} "
            "(check that spec.s3.credentialsSecret exists in this namespace)",
            "stalled": True,
        }
    for state in ((runner.get("state") or {}).get("terminated"), (runner.get("lastState") or {}).get("terminated")):
        if not state:
            continue
        if state.get("reason") == "OOMKilled":
            limit = _memory_limit(pod)
            return {
                "reason": "OOMKilled",
                "message": f"shard {shard} ran out of memory{f' (limit {limit})' if limit else ''}: "
                "raise spec.resources.memory or lower models.*.maxModelLen",
                "stalled": False,
            }
        code = state.get("exitCode", 0)
        if code:
            detail = _tail(state.get("message", "")) or state.get("reason", "")
            return {
                "reason": "InvalidInput" if code == c.RUNNER_INVALID_INPUT_EXIT else "ShardFailed",
                "message": f"shard {shard} exited with status {code}: {detail}",
                "stalled": False,
            }
    return None


def pod_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """What the operator keeps of a runner pod in its index."""
    return {
        "name": pod.get("metadata", {}).get("name", ""),
        "shard": _shard(pod),
        "phase": pod.get("status", {}).get("phase", "Pending"),
        "problem": pod_problem(pod),
    }


def job_summary(job: dict[str, Any]) -> dict[str, Any]:
    """What the operator keeps of the run's Job in its index."""
    status = job.get("status") or {}
    return {
        "name": job.get("metadata", {}).get("name", ""),
        "suspend": bool((job.get("spec") or {}).get("suspend")),
        "active": status.get("active", 0) or 0,
        "ready": status.get("ready", 0) or 0,
        "succeeded": status.get("succeeded", 0) or 0,
        "failed": status.get("failed", 0) or 0,
        "failedIndexes": status.get("failedIndexes", "") or "",
        "conditions": [
            {k: cond.get(k, "") for k in ("type", "status", "reason", "message")}
            for cond in status.get("conditions") or []
        ],
    }


def job_condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in job.get("conditions", []):
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None
