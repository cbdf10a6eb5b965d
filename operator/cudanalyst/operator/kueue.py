"""Kueue's side of a queued run (spec.resources.queueName set).

Kueue makes a Workload for the runner Job, admits it against a ClusterQueue's quota and then unsuspends the Job;
it suspends the Job again when it evicts the Workload. So for a queued run the operator never sets the Job's
spec.suspend after creating it: spec.suspend of the run becomes the Workload's spec.active (false evicts it and
frees its quota, true puts it back in the queue), which is how Kueue itself stops and resumes a Workload. Setting
the Job's suspend instead would not hold (Kueue unsuspends the Job of an admitted Workload) and, on resume, would
start the Job around Kueue's admission.

Pure readings of a Workload, plus the two API calls on it.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from cudanalyst.operator import constants as c

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
PLURAL = "workloads"
MESSAGE_LIMIT = 1000

def run_of(workload: dict[str, Any]) -> str | None:
    """The run a Workload belongs to: the run label Kueue copied from the Job's pod template into the pod sets."""
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        labels = (((pod_set.get("template") or {}).get("metadata")) or {}).get("labels") or {}
        if labels.get(c.RUN_LABEL):
            return str(labels[c.RUN_LABEL])
    return None


def _owner_job(workload: dict[str, Any]) -> str:
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job" and str(ref.get("apiVersion", "")).startswith("batch/"):
            return str(ref.get("name", ""))
    return ""


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def workload_summary(workload: dict[str, Any]) -> dict[str, Any]:
    """What the operator keeps of a Workload (small and JSON-able, for kopf's index)."""
    meta = workload.get("metadata") or {}
    spec = workload.get("spec") or {}
    status = workload.get("status") or {}
    conditions = {cond.get("type"): cond for cond in status.get("conditions") or []}
    active = spec.get("active") is not False

    def true(kind: str) -> bool:
        return conditions.get(kind, {}).get("status") == "True"

    # Evicted stays True after Kueue has let the quota go; then the Workload simply waits again (Pending).
    if true("Finished"):
        state, deciding = "Finished", conditions["Finished"]
    elif not active:
        state, deciding = "Inactive", conditions.get("Evicted") or {}
    elif true("Evicted") and true("QuotaReserved"):
        state, deciding = "Evicted", conditions["Evicted"]
    elif true("Admitted"):
        state, deciding = "Admitted", conditions["Admitted"]
    elif true("QuotaReserved"):
        state, deciding = "QuotaReserved", conditions["QuotaReserved"]
    else:
        state = "Pending"
        deciding = conditions.get("QuotaReserved") or conditions.get("Requeued") or conditions.get("Evicted") or {}
    priority_class = (spec.get("priorityClassRef") or {}).get("name") or spec.get("priorityClassName") or ""
    return {
        "name": meta.get("name", ""),
        "job": _owner_job(workload),
        "deleting": bool(meta.get("deletionTimestamp")),
        "active": active,
        "state": state,
        "reason": str(deciding.get("reason") or ""),
        "message": _clip(str(deciding.get("message") or "")),
        "clusterQueue": str((status.get("admission") or {}).get("clusterQueue") or ""),
        "priorityClass": str(priority_class),
        "priority": spec.get("priority"),
    }


def current(workloads: list[dict[str, Any]], run: str) -> dict[str, Any] | None:
    """The Workload of the run's Job now (an old Job's Workload may still be on its way out)."""
    live = [w for w in workloads if w.get("job") == c.job_name(run) and not w.get("deleting")]
    return live[0] if live else None


def queue_status(queue_name: str, workload: dict[str, Any] | None) -> dict[str, Any]:
    """status.queue of a queued run (api.status.QueueStatus)."""
    out: dict[str, Any] = {"name": queue_name, "workload": "", "state": "", "reason": "", "message": "",
                           "clusterQueue": "", "priorityClass": ""}
    if workload is not None:
        out |= {k: workload[k] for k in ("state", "reason", "message", "clusterQueue", "priorityClass")}
        out["workload"] = workload["name"]
        if workload.get("priority") is not None:  # absent rather than null: a merge patch would drop it anyway
            out["priority"] = int(workload["priority"])
    return out


def waiting_message(workload: dict[str, Any] | None) -> str:
    if workload is None:
        return "waiting for Kueue to make a Workload for the runner Job"
    text = f"waiting for Kueue to admit Workload {workload['name']}"
    return f"{text}: {workload['message']}" if workload.get("message") else text


# ---- API calls (the Workload's namespace is the run's)


def list_workloads(custom: Any, namespace: str, run: str) -> list[dict[str, Any]]:
    """Summaries of the run's Workloads, read from the API (for handlers that have no index at hand)."""
    answer = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    return [workload_summary(w) for w in answer.get("items") or [] if run_of(w) == run]


def set_active(custom: Any, namespace: str, name: str, active: bool) -> bool:
    """Kueue's own switch: false evicts the Workload and frees its quota, true queues it again. False when gone."""
    try:
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": {"active": active}},
                                              _content_type="application/merge-patch+json")
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
