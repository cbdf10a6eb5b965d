"""Pure builders of the run's children: the spec ConfigMap and the one Indexed Job (no API calls here)."""

from __future__ import annotations

import json
from typing import Any

from cudanalyst.api import AttributionRun
from cudanalyst.operator import constants as c
from cudanalyst.operator.config import OperatorConfig
from cudanalyst.store import CREDENTIALS_DIR_ENV, MAX_ATTEMPTS_ENV

# Store attempts per request in a runner pod: boto3 waits up to 20 s between them (about 1-2 minutes in all).
RUNNER_S3_ATTEMPTS = 10

# Labels of GitOps tools that track what belongs to an application. Copied onto a child, they would make
# Argo CD or Flux treat the operator's Job as their own (out of sync, or pruned), so they stay on the run.
TRACKING_LABEL_PREFIXES = (
    "app.kubernetes.io/instance",
    "argocd.argoproj.io/",
    "kustomize.toolkit.fluxcd.io/",
    "helm.toolkit.fluxcd.io/",
)

RUNNER_UID = 1000


def passthrough_labels(labels: dict[str, str]) -> dict[str, str]:
    """The run's labels that its children carry (batch labels, Kueue labels), minus GitOps tracking."""
    return {k: v for k, v in labels.items() if not k.startswith(TRACKING_LABEL_PREFIXES)}


def child_labels(run: AttributionRun) -> dict[str, str]:
    labels = passthrough_labels(run.metadata.labels)
    labels[c.RUN_LABEL] = run.metadata.name
    labels[c.MANAGED_BY_LABEL] = c.MANAGED_BY
    if run.spec.resources.queue_name:
        labels[c.KUEUE_QUEUE_LABEL] = run.spec.resources.queue_name
    return labels


def owner_view(body: dict[str, Any]) -> dict[str, Any]:
    """What `kopf.adopt` needs of the run: identity for the owner reference, and only passthrough labels."""
    meta = body.get("metadata", {})
    return {
        "apiVersion": body.get("apiVersion", c.RUN_API_VERSION),
        "kind": body.get("kind", "AttributionRun"),
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "labels": passthrough_labels(meta.get("labels") or {}),
        },
    }


def runner_spec_document(run: AttributionRun) -> dict[str, Any]:
    """The run as the runner reads it from --spec: metadata, spec, and no status."""
    doc = run.to_dict()
    doc.pop("status", None)
    meta = doc["metadata"]
    doc["metadata"] = {k: meta[k] for k in ("name", "namespace", "labels") if meta.get(k)}
    return doc


def spec_configmap(run: AttributionRun) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": c.configmap_name(run.metadata.name), "labels": child_labels(run)},
        "data": {c.SPEC_FILE: json.dumps(runner_spec_document(run), indent=2, sort_keys=True)},
    }


def initial_suspend(run: AttributionRun) -> bool:
    # Kueue admits a queued Job by unsuspending it, so a queued Job starts suspended.
    return run.spec.suspend or bool(run.spec.resources.queue_name)


def _env(run: AttributionRun, config: OperatorConfig) -> list[dict[str, Any]]:
    s3 = run.spec.s3
    env: list[dict[str, Any]] = [
        {"name": "CUDANALYST_RUN", "value": run.metadata.name},
        {"name": "CUDANALYST_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    if s3.endpoint:
        env.append({"name": "AWS_ENDPOINT_URL_S3", "value": s3.endpoint})
    if s3.region:
        env.append({"name": "AWS_REGION", "value": s3.region})
    # A shard waits out a store that is briefly unreachable or answering 5xx instead of exiting 1 (store.py).
    env.append({"name": MAX_ATTEMPTS_ENV, "value": str(RUNNER_S3_ATTEMPTS)})
    if s3.credentials_secret:
        # The runner's store reads the key files of the mounted Secret; the values never pass through us.
        env.append({"name": CREDENTIALS_DIR_ENV, "value": c.CREDENTIALS_MOUNT})
    if config.vllm_cache_uri:  # the runner's compile_cache.py reads it (with the run's S3 settings)
        env.append({"name": "CUDANALYST_VLLM_CACHE_URI", "value": config.vllm_cache_uri})
    env += api_key_env(run)
    return env


def api_key_env(run: AttributionRun) -> list[dict[str, Any]]:
    """The endpoints' keys, from their Secrets into the runner pod's environment: a reference only, the operator
    never reads a Secret. Optional, so that a missing Secret or key reaches the runner, which stops with exit 2
    naming the model and the field, instead of leaving the pod in CreateContainerConfigError."""
    refs = {}
    models = run.spec.models if hasattr(run.spec, "models") else None  # a recording (recording.py) has none
    for model in (models.planner, models.coder, models.summarizer) if models is not None else ():
        ref = model.api_key if model is not None else None
        if ref is not None and ref.secret_name:
            refs[ref.env] = {"name": ref.secret_name, "key": ref.secret_key, "optional": True}
    return [{"name": name, "valueFrom": {"secretKeyRef": ref}} for name, ref in sorted(refs.items())]


def _resources(run: AttributionRun) -> dict[str, Any]:
    res = run.spec.resources
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if res.cpu:
        requests["cpu"] = res.cpu
    if res.memory:
        requests["memory"] = res.memory
        limits["memory"] = res.memory
    if res.gpus_per_shard:
        limits["nvidia.com/gpu"] = str(res.gpus_per_shard)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _volumes(run: AttributionRun, configmap: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "spec", "configMap": {"name": configmap}},
        # vLLM's workers share tensors through /dev/shm, which is 64 MiB by default in a pod.
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "spec", "mountPath": c.SPEC_MOUNT, "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "scratch", "mountPath": "/tmp"},
    ]
    secret = run.spec.s3.credentials_secret
    if secret:
        volumes.append({"name": "s3-credentials", "secret": {"secretName": secret}})
        mounts.append({"name": "s3-credentials", "mountPath": c.CREDENTIALS_MOUNT, "readOnly": True})
    return volumes, mounts


def pod_failure_policy(on_invalid: str = "FailIndex") -> dict[str, Any]:
    """Infrastructure failures (preemption, eviction, node drain) do not count against a shard's retries;
    invalid input (exit 2) fails that shard (`FailIndex`; a recorder Job: `FailJob`) at once, since a retry
    would read the same input."""
    return {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {
                "action": on_invalid,
                "onExitCodes": {
                    "containerName": c.RUNNER_CONTAINER,
                    "operator": "In",
                    "values": [c.RUNNER_INVALID_INPUT_EXIT],
                },
            },
        ]
    }


def job_pod_spec(run: AttributionRun, config: OperatorConfig, configmap: str, command: list[str],
                 args: list[str] | None = None) -> dict[str, Any]:
    """The pod of a runner or recorder Job: one unprivileged container reading the spec from `configmap`,
    with the run's image, S3 settings, resources and scheduling (shared by jobs.py and recording.py)."""
    res = run.spec.resources
    volumes, mounts = _volumes(run, configmap)
    container: dict[str, Any] = {
        "name": c.RUNNER_CONTAINER,
        "image": res.image,
        "imagePullPolicy": config.image_pull_policy,
        "command": command,
        **({"args": args} if args is not None else {}),
        "env": _env(run, config),
        "volumeMounts": mounts,
        "resources": _resources(run),
        # The runner's last error lines become the pod's termination message, which the status quotes.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        },
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": config.runner_service_account,
        # The runner never talks to the Kubernetes API.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUNNER_UID,
            "runAsGroup": RUNNER_UID,
            "fsGroup": RUNNER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if res.node_selector:
        pod_spec["nodeSelector"] = dict(res.node_selector)
    if res.tolerations:
        pod_spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in res.tolerations]
    if res.priority_class_name:
        pod_spec["priorityClassName"] = res.priority_class_name
    return pod_spec


def runner_job(run: AttributionRun, config: OperatorConfig) -> dict[str, Any]:
    """The run's Indexed Job: one completion per shard, each pod running `cudanalyst-runner` on its index."""
    name = run.metadata.name
    res = run.spec.resources
    shards = res.shards
    labels = child_labels(run)
    # The operator watches only Pods with its managed-by label (handlers.configure): a pod label may not replace it.
    pod_labels = {**labels, **config.runner_pod_labels, c.COMPONENT_LABEL: "runner", c.MANAGED_BY_LABEL: c.MANAGED_BY}
    # The Job controller sets JOB_COMPLETION_INDEX in each pod; Kubernetes expands $(VAR) in args.
    args = ["--spec", f"{c.SPEC_MOUNT}/{c.SPEC_FILE}", "--shard", "$(JOB_COMPLETION_INDEX)", "--of", str(shards),
            "--stage", config.runner_stage]
    pod_spec = job_pod_spec(run, config, c.configmap_name(name), ["cudanalyst-runner"], args)
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": shards,
        "parallelism": shards,
        "backoffLimitPerIndex": config.backoff_limit_per_index,
        "podFailurePolicy": pod_failure_policy(),
        "suspend": initial_suspend(run),
        "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
    }
    if run.spec.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = run.spec.ttl_seconds_after_finished
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": c.job_name(name), "labels": labels},
        "spec": job_spec,
    }
