"""The kopf handlers: each unpacks kopf's arguments and delegates to lifecycle.Operations.

`build_registry()` registers them on a fresh registry, so tests and benchmarks can run several operators
with different settings side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import kopf

from cudanalyst.api.status import AttributionRunStatus, read_status
from cudanalyst.operator import constants as c
from cudanalyst.operator import kueue
from cudanalyst.operator.conditions import is_finished, true_condition
from cudanalyst.operator.follow import (
    POD_QUIET,
    ChildChanges,
    Follower,
    RunKey,
    job_relevant,
    pod_relevant,
    run_key,
)
from cudanalyst.operator.lifecycle import RETRYABLE, Operations, Services
from cudanalyst.operator.pods import job_summary, pod_summary
from cudanalyst.operator.recording import RECORDING_LABEL, RECORDING_RESOURCE, RecordingOperations

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
    # Only our own Jobs and Pods come over the watches (filtered by the API server), not every Job and Pod of a
    # shared cluster: kopf keeps a memory for each object it watches (issue 33).
    for resource in (("batch", "v1", "jobs"), ("", "v1", "pods")):
        settings.watching.label_selectors[resource] = f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY}"
    # Only our explicit events are posted, not every log line.
    settings.posting.loggers = False
    settings.posting.level = logging.INFO


def _running(status: dict[str, Any], **_: Any) -> bool:
    seen = read_status(AttributionRunStatus, status)
    return bool(seen.start_time) and not is_finished(seen)


def _not_started(status: dict[str, Any], **_: Any) -> bool:
    return not read_status(AttributionRunStatus, status).start_time


def _retryable(status: dict[str, Any], **_: Any) -> bool:
    seen = read_status(AttributionRunStatus, status)
    stalled = true_condition(seen, "Stalled")
    return not seen.start_time and stalled is not None and stalled.reason in RETRYABLE


def _delete_with_run(spec: dict[str, Any], **_: Any) -> bool:
    return bool((spec.get("output") or {}).get("deleteWithRun"))


def _run_key(meta: dict[str, Any]) -> RunKey | None:
    return run_key(meta, c.RUN_LABEL)


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

    if services.config.kueue:
        # Kueue's Workload of each queued run's Job, found by the run label Kueue copies into its pod sets.
        @kopf.index(kueue.GROUP, kueue.VERSION, kueue.PLURAL, id="runner_workloads", registry=registry)
        def runner_workloads(meta: dict[str, Any], body: dict[str, Any], **_: Any) -> dict[Any, Any]:
            run = kueue.run_of(dict(body))
            return {(meta.get("namespace", ""), run): kueue.workload_summary(dict(body))} if run else {}

    def workloads_of(key: RunKey, indexes: dict[str, Any]) -> list[dict[str, Any]]:
        index = indexes.get("runner_workloads")
        return list(index.get(key, [])) if index is not None else []

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

    # Following a running run: at once on each change of its Job or Pods (the events below), and by a slow
    # timer as a safety net that also reads progress from the store while no child changes.
    @kopf.timer(*RUN, interval=interval, initial_delay=interval, when=_running, id="follow", registry=registry)
    def follow(body: kopf.Body, patch: kopf.Patch, meta: kopf.Meta, runner_jobs: kopf.Index,
               runner_pods: kopf.Index, **kwargs: Any) -> None:
        key = (meta.get("namespace", ""), meta.get("name", ""))
        with metrics.reconcile("follow"):
            ops.observe(dict(body), patch, list(runner_jobs.get(key, [])), list(runner_pods.get(key, [])),
                        workloads_of(key, kwargs))

    follower = Follower()
    changes = ChildChanges()

    def refresher(key: RunKey, jobs: kopf.Index, pods: kopf.Index, indexes: dict[str, Any]) -> Any:
        def blocking() -> bool:
            with metrics.reconcile("follow"):
                return ops.refresh(key[0], key[1], list(jobs.get(key, [])), list(pods.get(key, [])),
                                   workloads_of(key, indexes))

        async def refresh() -> bool:
            # The indexes are read in the thread, when the refresh starts: the latest summaries count.
            return await asyncio.to_thread(blocking)

        return refresh

    async def child_event(body: kopf.Body, type: str, relevant: dict[str, Any], quiet: dict[str, Any] | None,
                          runner_jobs: kopf.Index, runner_pods: kopf.Index, indexes: dict[str, Any],
                          key: RunKey | None = None) -> None:
        # A refresh that raises is logged by kopf and not retried: the safety-net timer catches up.
        meta = body.get("metadata") or {}
        key = key or _run_key(dict(meta))
        if key is None:
            return
        uid = str(meta.get("uid") or meta.get("name"))
        if type == "DELETED":
            last = changes.forget(uid)
            if quiet is not None and last == quiet:
                return  # a quiet Pod went (e.g. with its suspended Job): the run's status did not depend on it
        elif not changes.changed(uid, relevant, quiet):
            return  # nothing the run's status depends on has changed
        await follower.poke(key, refresher(key, runner_jobs, runner_pods, indexes))

    # Async, and filtered before any thread hop: Jobs and Pods change far more often than runs' status.
    @kopf.on.event("batch", "v1", "jobs", labels={c.RUN_LABEL: kopf.PRESENT}, id="job_changed", registry=registry)
    async def job_changed(body: kopf.Body, type: str, runner_jobs: kopf.Index, runner_pods: kopf.Index,
                          **kwargs: Any) -> None:
        await child_event(body, type, job_relevant(job_summary(dict(body))), None, runner_jobs, runner_pods, kwargs)

    @kopf.on.event("", "v1", "pods", labels={c.RUN_LABEL: kopf.PRESENT}, id="pod_changed", registry=registry)
    async def pod_changed(body: kopf.Body, type: str, runner_jobs: kopf.Index, runner_pods: kopf.Index,
                          **kwargs: Any) -> None:
        await child_event(body, type, pod_relevant(pod_summary(dict(body))), POD_QUIET, runner_jobs,
                          runner_pods, kwargs)

    if services.config.kueue:
        # Kueue's decisions (quota reserved, admitted, evicted, its messages) show on the Workload first.
        @kopf.on.event(kueue.GROUP, kueue.VERSION, kueue.PLURAL, id="workload_changed", registry=registry)
        async def workload_changed(body: kopf.Body, type: str, runner_jobs: kopf.Index, runner_pods: kopf.Index,
                                   **kwargs: Any) -> None:
            run = kueue.run_of(dict(body))
            if run is None:
                return  # a Workload of something else than a run's Job
            key = ((body.get("metadata") or {}).get("namespace", ""), run)
            await child_event(body, type, kueue.workload_summary(dict(body)), None, runner_jobs, runner_pods,
                              kwargs, key=key)

    @kopf.on.delete(*RUN, when=_delete_with_run, id="delete_results", registry=registry)
    def delete_results(body: kopf.Body, **_: Any) -> None:
        with metrics.reconcile("delete"):
            ops.delete_results(dict(body))

    # Async: called for every event of every run, so it must not cost a thread hop.
    @kopf.on.event(*RUN, id="run_event", registry=registry)
    async def run_event(body: kopf.Body, type: str, status: kopf.Status, runner_jobs: kopf.Index,
                        runner_pods: kopf.Index, **kwargs: Any) -> None:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if type == "DELETED":
            ops.forget(dict(body))
            follower.forget(key)
        elif _running(dict(status)):
            await follower.started(key, refresher(key, runner_jobs, runner_pods, kwargs))

    register_recordings(registry, services)
    return registry


def register_recordings(registry: kopf.OperatorRegistry, services: Services) -> None:
    """TrajectoryRecordings: start (ConfigMap and recorder Job), then follow the Job's events and the store."""
    ops = RecordingOperations(services)
    metrics = services.metrics
    interval = services.config.status_interval

    @kopf.on.resume(*RECORDING_RESOURCE, id="recording_start", registry=registry)
    @kopf.on.create(*RECORDING_RESOURCE, id="recording_start", registry=registry)
    def recording_start(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        with metrics.reconcile("recording_start"):
            ops.start(dict(body), patch)

    @kopf.timer(*RECORDING_RESOURCE, interval=interval, initial_delay=interval, when=_running,
                id="recording_follow", registry=registry)
    def recording_follow(meta: kopf.Meta, **_: Any) -> None:
        with metrics.reconcile("recording_follow"):
            ops.refresh(meta.get("namespace", ""), meta.get("name", ""))

    @kopf.on.event("batch", "v1", "jobs", labels={RECORDING_LABEL: kopf.PRESENT}, id="recorder_job_changed",
                   registry=registry)
    async def recorder_job_changed(body: kopf.Body, **_: Any) -> None:
        meta = body.get("metadata") or {}
        await asyncio.to_thread(ops.refresh, meta.get("namespace", ""), (meta.get("labels") or {})[RECORDING_LABEL])
