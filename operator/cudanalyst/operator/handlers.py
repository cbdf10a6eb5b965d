"""The kopf handlers: each unpacks kopf's arguments and delegates to lifecycle.Operations (runs) or
recording.RecordingOperations (recordings).

The handlers are plain functions and the methods of two small classes (what they share: the operations, the
metrics, the follower of runs' children); `build_registry()` registers them on a fresh registry, so tests and
benchmarks can run several operators with different settings side by side.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from cudanalyst.api.status import AttributionRunStatus, read_status
from cudanalyst.operator import constants as c
from cudanalyst.operator import kueue
from cudanalyst.operator.conditions import is_finished
from cudanalyst.operator.follow import (
    POD_QUIET,
    ChildChanges,
    Follower,
    RunKey,
    Sweeper,
    job_relevant,
    pod_relevant,
    run_key,
)
from cudanalyst.operator.lifecycle import Operations, Services
from cudanalyst.operator.pods import job_summary, pod_summary
from cudanalyst.operator.recording import RECORDING_LABEL, RECORDING_RESOURCE, RecordingOperations

RUN = c.RUN_RESOURCE
RUNNER_JOBS = {"labels": {c.RUN_LABEL: kopf.PRESENT}}  # the Jobs and Pods of runs, by their run label


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


# ---- filters (kopf's `when=`)

def _running(status: dict[str, Any], **_: Any) -> bool:
    seen = read_status(AttributionRunStatus, status)
    return bool(seen.start_time) and not is_finished(seen)


def _not_started(status: dict[str, Any], **_: Any) -> bool:
    return not read_status(AttributionRunStatus, status).start_time


def _delete_with_run(spec: dict[str, Any], **_: Any) -> bool:
    return bool((spec.get("output") or {}).get("deleteWithRun"))


# ---- indexes: every Job, Pod (and Kueue Workload) of a run, kept as small summaries under the run's key

def runner_jobs(meta: dict[str, Any], body: dict[str, Any], **_: Any) -> dict[Any, Any]:
    key = run_key(meta, c.RUN_LABEL)
    return {key: job_summary(dict(body))} if key else {}


def runner_pods(meta: dict[str, Any], body: dict[str, Any], **_: Any) -> dict[Any, Any]:
    key = run_key(meta, c.RUN_LABEL)
    return {key: pod_summary(dict(body))} if key else {}


def runner_workloads(meta: dict[str, Any], body: dict[str, Any], **_: Any) -> dict[Any, Any]:
    """Kueue's Workload of a queued run's Job, found by the run label Kueue copies into its pod sets."""
    run = kueue.run_of(dict(body))
    return {(meta.get("namespace", ""), run): kueue.workload_summary(dict(body))} if run else {}


def workloads_of(key: RunKey, indexes: dict[str, Any]) -> list[dict[str, Any]]:
    index = indexes.get("runner_workloads")
    return list(index.get(key, [])) if index is not None else []


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    # A fresh registry has no fallback logins: use the kubernetes client's (in-cluster, then kubeconfig).
    return kopf.login_via_client(**kwargs)


def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure(settings)


class RunHandlers:
    """AttributionRuns: start (create, resume, an edit before the start; a plan that may succeed later is retried
    by kopf, lifecycle.Operations.start), suspend, follow (at once on each change of the run's Job, Pods or
    Workload, and by a slow sweep of the running runs as a safety net that also reads progress from the store),
    delete."""

    def __init__(self, services: Services) -> None:
        self.services, self.ops, self.metrics = services, Operations(services), services.metrics
        self.follower, self.changes = Follower(), ChildChanges()
        self.sweeper = Sweeper(services.config.status_interval, self.follower)

    def cleanup(self, **_: Any) -> None:
        self.sweeper.stop()
        if self.services._kube is not None:
            self.services._kube.close()

    def start(self, body: kopf.Body, patch: kopf.Patch, retry: int, **_: Any) -> None:
        with self.metrics.reconcile("start"):
            self.ops.start(dict(body), patch, retry)

    def restart(self, body: kopf.Body, patch: kopf.Patch, retry: int, **_: Any) -> None:
        """A run that never started (e.g. Stalled on a bad spec) is tried again when its spec is edited."""
        with self.metrics.reconcile("restart"):
            self.ops.start(dict(body), patch, retry)

    def suspend(self, body: kopf.Body, patch: kopf.Patch, new: Any, old: Any, **_: Any) -> None:
        if old is None and not new:
            return  # first sight of the field, nothing to change
        with self.metrics.reconcile("suspend"):
            self.ops.suspend(dict(body), patch, bool(new))

    def delete_results(self, body: kopf.Body, **_: Any) -> None:
        with self.metrics.reconcile("delete"):
            self.ops.delete_results(dict(body))

    def refresher(self, key: RunKey, jobs: kopf.Index, pods: kopf.Index,
                  indexes: dict[str, Any]) -> Callable[[], Awaitable[bool]]:
        """One refresh of a run's status from its children, in a thread; the indexes are read when it starts,
        so the latest summaries count."""

        def blocking() -> bool:
            with self.metrics.reconcile("follow"):
                return self.ops.refresh(key[0], key[1], list(jobs.get(key, [])), list(pods.get(key, [])),
                                        workloads_of(key, indexes))

        return lambda: asyncio.to_thread(blocking)

    async def child_event(self, body: kopf.Body, type: str, relevant: dict[str, Any], quiet: dict[str, Any] | None,
                          jobs: kopf.Index, pods: kopf.Index, indexes: dict[str, Any],
                          key: RunKey | None = None) -> None:
        """A run's Job, Pod or Workload changed: refresh the run if what its status depends on changed. A refresh
        that raises is logged by kopf and not retried: the safety-net timer catches up."""
        meta = body.get("metadata") or {}
        key = key or run_key(dict(meta), c.RUN_LABEL)
        if key is None:
            return
        uid = str(meta.get("uid") or meta.get("name"))
        if type == "DELETED":
            last = self.changes.forget(uid)
            if quiet is not None and last == quiet:
                return  # a quiet Pod went (e.g. with its suspended Job): the run's status did not depend on it
        elif not self.changes.changed(uid, relevant, quiet):
            return  # nothing the run's status depends on has changed
        await self.follower.poke(key, self.refresher(key, jobs, pods, indexes))

    # Async, and filtered before any thread hop: Jobs and Pods change far more often than runs' status.
    async def job_changed(self, body: kopf.Body, type: str, runner_jobs: kopf.Index, runner_pods: kopf.Index,
                          **indexes: Any) -> None:
        await self.child_event(body, type, job_relevant(job_summary(dict(body))), None, runner_jobs, runner_pods,
                               indexes)

    async def pod_changed(self, body: kopf.Body, type: str, runner_jobs: kopf.Index, runner_pods: kopf.Index,
                          **indexes: Any) -> None:
        await self.child_event(body, type, pod_relevant(pod_summary(dict(body))), POD_QUIET, runner_jobs,
                               runner_pods, indexes)

    async def workload_changed(self, body: kopf.Body, type: str, runner_jobs: kopf.Index, runner_pods: kopf.Index,
                               **indexes: Any) -> None:
        """Kueue's decisions (quota reserved, admitted, evicted, its messages) show on the Workload first."""
        run = kueue.run_of(dict(body))
        if run is None:
            return  # a Workload of something else than a run's Job
        key = ((body.get("metadata") or {}).get("namespace", ""), run)
        await self.child_event(body, type, kueue.workload_summary(dict(body)), None, runner_jobs, runner_pods,
                               indexes, key=key)

    async def run_event(self, body: kopf.Body, type: str, status: kopf.Status, runner_jobs: kopf.Index,
                        runner_pods: kopf.Index, **indexes: Any) -> None:
        """Every event of every run (async: it must not cost a thread hop): start or stop following it."""
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if type == "DELETED":
            self.ops.forget(dict(body))
            self.follower.forget(key)
            self.sweeper.forget(key)
            return
        running = _running(dict(status))
        # The indexes are live views, the same objects at every call: the sweep's refreshes read them when they run.
        self.sweeper.track(key, running, lambda k: self.refresher(k, runner_jobs, runner_pods, indexes))
        if running:
            await self.follower.started(key, self.refresher(key, runner_jobs, runner_pods, indexes))


class RecordingHandlers:
    """TrajectoryRecordings: start (ConfigMap and recorder Job), then follow the Job's events and the store."""

    def __init__(self, services: Services) -> None:
        self.ops, self.metrics = RecordingOperations(services), services.metrics

    def start(self, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        with self.metrics.reconcile("recording_start"):
            self.ops.start(dict(body), patch)

    def follow(self, meta: kopf.Meta, **_: Any) -> None:
        with self.metrics.reconcile("recording_follow"):
            self.ops.refresh(meta.get("namespace", ""), meta.get("name", ""))

    async def job_changed(self, body: kopf.Body, **_: Any) -> None:
        meta = body.get("metadata") or {}
        await asyncio.to_thread(self.ops.refresh, meta.get("namespace", ""),
                                (meta.get("labels") or {})[RECORDING_LABEL])


def build_registry(services: Services) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    on = {"registry": registry}
    runs = RunHandlers(services)
    interval = services.config.status_interval

    kopf.on.login(id="login", **on)(login)
    kopf.on.startup(id="startup", **on)(startup)
    kopf.on.cleanup(id="cleanup", **on)(runs.cleanup)

    kopf.index("batch", "v1", "jobs", **RUNNER_JOBS, id="runner_jobs", **on)(runner_jobs)
    kopf.index("", "v1", "pods", **RUNNER_JOBS, id="runner_pods", **on)(runner_pods)
    if services.config.kueue:
        kopf.index(kueue.GROUP, kueue.VERSION, kueue.PLURAL, id="runner_workloads", **on)(runner_workloads)

    kopf.on.resume(*RUN, id="start", **on)(runs.start)
    kopf.on.create(*RUN, id="start", **on)(runs.start)
    kopf.on.update(*RUN, field="spec", when=_not_started, id="restart", **on)(runs.restart)
    kopf.on.field(*RUN, field="spec.suspend", id="suspend", **on)(runs.suspend)
    kopf.on.event("batch", "v1", "jobs", **RUNNER_JOBS, id="job_changed", **on)(runs.job_changed)
    kopf.on.event("", "v1", "pods", **RUNNER_JOBS, id="pod_changed", **on)(runs.pod_changed)
    if services.config.kueue:
        kopf.on.event(kueue.GROUP, kueue.VERSION, kueue.PLURAL, id="workload_changed", **on)(runs.workload_changed)
    kopf.on.delete(*RUN, when=_delete_with_run, id="delete_results", **on)(runs.delete_results)
    kopf.on.event(*RUN, id="run_event", **on)(runs.run_event)

    recordings = RecordingHandlers(services)
    kopf.on.resume(*RECORDING_RESOURCE, id="recording_start", **on)(recordings.start)
    kopf.on.create(*RECORDING_RESOURCE, id="recording_start", **on)(recordings.start)
    kopf.timer(*RECORDING_RESOURCE, interval=interval, initial_delay=interval, when=_running, id="recording_follow",
               **on)(recordings.follow)
    kopf.on.event("batch", "v1", "jobs", labels={RECORDING_LABEL: kopf.PRESENT}, id="recorder_job_changed",
                  **on)(recordings.job_changed)
    return registry
