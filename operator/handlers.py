"""The kopf handlers: each unpacks kopf's arguments and delegates to lifecycle.Operations.

`build_registry()` registers them on a fresh registry, so tests and benchmarks can run several operators
with different settings side by side.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import kopf

from cudanalyst.operator import constants as c
from cudanalyst.operator.conditions import is_finished
from cudanalyst.operator.lifecycle import RETRYABLE, Operations, Services
from cudanalyst.operator.pods import job_summary, pod_summary

RUN = c.RUN_RESOURCE


def configure(settings: kopf.OperatorSettings) -> None:
    """Our own finalizer and annotation prefixes; kopf's progress kept in annotations, never in status
    (an undeclared status field would be pruned by the API server)."""
    settings.persistence.finalizer = c.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=c.PREFIX, key="last-handled-configuration"
    )
    # Fixed resources and an explicit namespace list (or cluster-wide): no need to scan CRDs or
    # namespaces, so the operator's RBAC needs no cluster-wide read of either.
    settings.scanning.disabled = True
    # Only our explicit events are posted, not every log line.
    settings.posting.loggers = False
    settings.posting.level = logging.INFO


def _running(status: dict[str, Any], **_: Any) -> bool:
    return bool(status.get("startTime")) and not is_finished(status)


def _not_started(status: dict[str, Any], **_: Any) -> bool:
    return not status.get("startTime")


def _retryable(status: dict[str, Any], **_: Any) -> bool:
    reasons = {c.get("reason") for c in status.get("conditions") or [] if c.get("type") == "Stalled"
               and c.get("status") == "True"}
    return not status.get("startTime") and bool(reasons & set(RETRYABLE))


def _delete_with_run(spec: dict[str, Any], **_: Any) -> bool:
    return bool((spec.get("output") or {}).get("deleteWithRun"))


def _run_key(meta: dict[str, Any]) -> tuple[str, str] | None:
    run = (meta.get("labels") or {}).get(c.RUN_LABEL)
    return (meta.get("namespace", ""), run) if run else None


def build_registry(services: Services) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    ops = Operations(services)
    metrics = services.metrics
    interval = services.config.status_interval

    # A fresh registry has no fallback logins: use the kubernetes client's (in-cluster, then kubeconfig).
    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(id="startup", registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)

    @kopf.on.cleanup(id="cleanup", registry=registry)
    def cleanup(**_: Any) -> None:
        if services._kube is not None:
            services._kube.close()

    # Indexes follow the children: every Job and Pod labelled with a run, kept as small summaries.
    @kopf.index("batch", "v1", "jobs", labels={c.RUN_LABEL: kopf.PRESENT}, id="runner_jobs", registry=registry)
    def runner_jobs(meta: dict[str, Any], body: dict[str, Any], **_: Any) -> dict[Any, Any]:
        key = _run_key(meta)
        return {key: job_summary(dict(body))} if key else {}

    @kopf.index("", "v1", "pods", labels={c.RUN_LABEL: kopf.PRESENT}, id="runner_pods", registry=registry)
    def runner_pods(meta: dict[str, Any], body: dict[str, Any], **_: Any) -> dict[Any, Any]:
        key = _run_key(meta)
        return {key: pod_summary(dict(body))} if key else {}

    @kopf.on.resume(*RUN, id="start", registry=registry)
    @kopf.on.create(*RUN, id="start", registry=registry)
    def start(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        with metrics.reconcile("start"):
            ops.start(dict(body), patch)

    # A run that never started (e.g. Stalled on a bad spec) is tried again when its spec is fixed.
    @kopf.on.update(*RUN, field="spec", when=_not_started, id="restart", registry=registry)
    def restart(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        with metrics.reconcile("restart"):
            ops.start(dict(body), patch)

    # Stalled on something outside the spec: try again now and then (the handler above is done with it).
    @kopf.timer(*RUN, interval=services.config.retry_interval, initial_delay=services.config.retry_interval,
                when=_retryable, id="retry_start", registry=registry)
    def retry_start(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        with metrics.reconcile("retry_start"), contextlib.suppress(kopf.PermanentError):
            ops.start(dict(body), patch)

    @kopf.on.field(*RUN, field="spec.suspend", id="suspend", registry=registry)
    def suspend(body: kopf.Body, patch: kopf.Patch, new: Any, old: Any, **_: Any) -> None:
        if old is None and not new:
            return  # first sight of the field, nothing to change
        with metrics.reconcile("suspend"):
            ops.suspend(dict(body), patch, bool(new))

    @kopf.timer(*RUN, interval=interval, when=_running, id="follow", registry=registry)
    def follow(body: kopf.Body, patch: kopf.Patch, meta: kopf.Meta, runner_jobs: kopf.Index,
               runner_pods: kopf.Index, **_: Any) -> None:
        key = (meta.get("namespace", ""), meta.get("name", ""))
        with metrics.reconcile("follow"):
            ops.observe(dict(body), patch, list(runner_jobs.get(key, [])), list(runner_pods.get(key, [])))

    @kopf.on.delete(*RUN, when=_delete_with_run, id="delete_results", registry=registry)
    def delete_results(body: kopf.Body, **_: Any) -> None:
        with metrics.reconcile("delete"):
            ops.delete_results(dict(body))

    # Async: called for every event of every run, so it must not cost a thread hop.
    @kopf.on.event(*RUN, id="forget_deleted", registry=registry)
    async def forget_deleted(body: kopf.Body, type: str, **_: Any) -> None:
        if type == "DELETED":
            ops.forget(dict(body))

    return registry
