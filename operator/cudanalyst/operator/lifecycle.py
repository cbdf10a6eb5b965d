"""What the handlers do, as plain methods over plain data: start a run, follow it, suspend it, clean up.

The kopf handlers in handlers.py only unpack kopf's arguments and call these, so each step can be read
(and tested) without kopf's machinery. Status goes into kopf's `patch.status`; nothing here writes spec.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from cudanalyst.api import AttributionRun, SpecError, parse_run
from cudanalyst.api.status import AttributionRunStatus, Results, read_status
from cudanalyst.operator import constants as c
from cudanalyst.operator import kueue
from cudanalyst.operator.completion import aggregate as aggregate_outcomes
from cudanalyst.operator.conditions import (
    Observation,
    SeenStatus,
    Verdict,
    invalid,
    is_finished,
    judge,
    reached_text,
    status_for,
    transition_event,
    waiting_for_endpoint,
)
from cudanalyst.operator.config import OperatorConfig
from cudanalyst.operator.jobs import owner_view, runner_job, spec_configmap
from cudanalyst.operator.kube import Kube, api_message
from cudanalyst.operator.metrics import Metrics
from cudanalyst.operator.pods import job_summary
from cudanalyst.operator.progress import read_shards, run_progress
from cudanalyst.plan import Plan
from cudanalyst.planned_run import PlanError, check_models, plan_run
from cudanalyst.runfolder import run_store, write_start
from cudanalyst.store import ObjectStore, StoreError

log = logging.getLogger("cudanalyst.operator")

# Stalled reasons that something outside the spec may cure (a trajectory uploaded later, a store back up): the
# start is tried again (kopf.TemporaryError), first after RETRY_FIRST_S, then twice as long each time up to the
# configured retry interval, so a fix made at once is seen at once and a long outage costs little.
PLAN_FAILED = "PlanFailed"
STORE_UNAVAILABLE = "StoreUnavailable"
RETRY_FIRST_S = 1.0


def utc_now() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Services:
    """Everything the operator reaches outside itself, replaceable one piece at a time."""

    config: OperatorConfig
    metrics: Metrics = field(default_factory=Metrics)
    kube_factory: Callable[[], Kube] = Kube.from_environment
    plan: Callable[[AttributionRun], Plan] = plan_run
    store: Callable[[AttributionRun], ObjectStore] = run_store
    aggregate: Callable[[AttributionRun, ObjectStore], tuple[Results, str]] = aggregate_outcomes
    clock: Callable[[], datetime] = utc_now
    _kube: Kube | None = None

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            self._kube = self.kube_factory()
        return self._kube


def object_document(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What our models validate of an object as the API server holds it (its status and the server's own
    metadata left out), and its namespace/name, for error messages. Runs and recordings alike."""
    meta = body.get("metadata") or {}
    doc = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "labels", "annotations") if meta.get(k)},
        "spec": body.get("spec"),
    }
    return doc, f"{meta.get('namespace')}/{meta.get('name')}"


def parse_body(body: dict[str, Any]) -> AttributionRun:
    """The run as the API server holds it, validated by the same models that generated the CRD."""
    doc, source = object_document(body)
    return parse_run(doc, source=source)


def spec_problem_text(exc: SpecError) -> str:
    return "; ".join(f"{path or '<root>'}: {msg}" for path, msg in exc.problems)


def _changed(current: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Only the status fields whose value differs, so a quiet run causes no API writes. Compared as JSON, the
    form both sides have at the patch (a field that does not validate is then written over)."""
    return {k: v for k, v in new.items() if current.get(k) != v}


def run_status(body: dict[str, Any]) -> AttributionRunStatus:
    """The run's status, typed (partial or missing reads as defaults: api.status.read_status)."""
    return read_status(AttributionRunStatus, body.get("status"))


def apply_verdict(body: dict[str, Any], patch: kopf.Patch, verdict: Verdict, extra: dict[str, Any],
                  seen: SeenStatus, now: str) -> None:
    """Write what a verdict changes, with `extra`, into the status patch, and an event when the phase or its
    reason changes: for runs and recordings alike (`seen` is the status read through its kind's model)."""
    current = dict(body.get("status") or {})
    generation = int((body.get("metadata") or {}).get("generation") or 1)
    new = status_for(verdict, seen, generation, now)
    new.update(extra)
    for key, value in _changed(current, new).items():
        patch.status[key] = value
    event = transition_event(seen, verdict)
    if event is not None:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)


class Operations:
    def __init__(self, services: Services) -> None:
        self.s = services

    # ---- events and status

    def _apply(self, body: dict[str, Any], patch: kopf.Patch, verdict: Verdict, extra: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        apply_verdict(body, patch, verdict, extra, run_status(body), rfc3339(self.s.clock()))
        self.s.metrics.set_phase(meta.get("namespace", ""), meta.get("name", ""), verdict.phase)

    def _stall(self, body: dict[str, Any], patch: kopf.Patch, reason: str, message: str) -> None:
        self._apply(body, patch, invalid(reason, message), {})

    # ---- start (create, resume, edits before the start)

    def retry_delay(self, retry: int) -> float:
        """Seconds before start's `retry`-th retry (kopf counts from 0): doubling, up to the retry interval."""
        return min(self.s.config.retry_interval, RETRY_FIRST_S * 2.0 ** min(retry, 30))

    def start(self, body: dict[str, Any], patch: kopf.Patch, retry: int = 0) -> None:
        body = self._with_live_status(body)
        current = body.get("status") or {}  # as JSON, for the restart's patch below
        seen = run_status(body)
        if is_finished(seen):
            return
        try:
            run = parse_body(body)
        except SpecError as exc:
            text = spec_problem_text(exc)
            self._stall(body, patch, "InvalidSpec", f"invalid spec: {text}")
            raise kopf.PermanentError(f"invalid spec: {text}") from None
        if run.spec.resources.queue_name and not self.s.config.kueue:
            text = (f"spec.resources.queueName: {run.spec.resources.queue_name!r} names a Kueue queue, but the operator "
                    "does not follow Kueue (install the chart with kueue.enabled=true, or set CUDANALYST_KUEUE=true)")
            self._stall(body, patch, "KueueNotEnabled", text)
            raise kopf.PermanentError(text)
        if run.spec.trajectory.recording:
            run = self._trajectory_of_recording(body, patch, run)
        try:
            plan = self.s.plan(run)
            check_models(run, local_paths=False)  # an s3:// model prefix is checked; pod paths cannot be
            store = self.s.store(run)
            write_start(store, run, plan.overview())
        except PlanError as exc:
            # The trajectory may still be uploaded, or the spec edited (the retry reads the object as it is then).
            self._stall(body, patch, PLAN_FAILED, f"cannot plan the run: {exc}")
            raise kopf.TemporaryError(f"cannot plan the run: {exc}", delay=self.retry_delay(retry)) from None
        except StoreError as exc:
            self._stall(body, patch, STORE_UNAVAILABLE, f"cannot write to spec.output.uri: {exc}")
            raise kopf.TemporaryError(str(exc), delay=self.retry_delay(retry)) from None
        if is_finished(run_status(self._with_live_status(body))):
            # Planning and the store's write above can take seconds under load. A second start (kopf runs it again at
            # times) that read the status while the run was still running would otherwise re-create the Job that
            # the TTL controller removed once the run finished (kmock's TTL test, seen once in CI).
            return
        try:
            job, created = self.ensure_children(body, run)
        except ApiException as exc:
            if exc.status == 403:
                # On the run for `kubectl describe ar`, not only in the operator's log; kopf retries the
                # handler, and the next start that gets through replaces this condition.
                self._stall(body, patch, "Forbidden", f"the operator may not create the run's ConfigMap and Job: "
                            f"{api_message(exc)} (grant it the chart's RBAC rules, charts/cudanalyst)")
            if exc.status in (400, 422):
                # The spec made a child the API server refuses (a field our schema let through): say so on the run
                # and retry at the stalled pace, not kopf's, until the spec is edited.
                message = f"the API server refused the run's Job or ConfigMap: {api_message(exc)}"
                self._stall(body, patch, "InvalidChild", message)
                raise kopf.TemporaryError(message, delay=self.retry_delay(retry)) from None
            raise
        now = rfc3339(self.s.clock())
        total = len(plan.units)
        queued = bool(run.spec.resources.queue_name)
        obs = Observation(int(body["metadata"].get("generation") or 1), run.spec.suspend,
                          queued, job_summary(job) if job else None, total=total)
        extra: dict[str, Any] = {
            "startTime": seen.start_time or now,
            "jobName": c.job_name(run.metadata.name),
        }
        if "progress" not in seen.model_fields_set or seen.progress.total != total:
            extra["progress"] = run_progress([], total, None, self.s.clock())[0].model_dump(by_alias=True, mode="json")
        if queued and seen.queue is None:
            extra["queue"] = kueue.queue_status(run.spec.resources.queue_name, None)
        if seen.phase and job is not None and not created:
            # A restart (kopf's resume): the Job as made says nothing of what happened since (shards that ran
            # while the operator was down, Kueue's admission); the refresh that its event brings judges from the
            # Job, Pods and Workload as they are. Judging here raced that refresh: this patch, computed from the
            # manifest ("PodsStarting") and the status before it, was applied after the refresh had written
            # Succeeded, and left a finished run with Ready=False for good.
            for key, value in _changed(current, extra).items():
                patch.status[key] = value
            return
        self._apply(body, patch, judge(obs), extra)
        self.s.metrics.set_progress(run.metadata.namespace or "", run.metadata.name, 0, total)

    def _with_live_status(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with its status as the API server holds it now. kopf may run this handler again with a body older
        than what the refreshes wrote since: it ran `start` a second time with the body from before the first one's
        patch (tests/operator/test_kmock_follow.py, about 1 run in 15), judged the Job as made, and its patch turned
        a Failed run back to Running. The live status decides whether the run started, and whether it finished."""
        meta = body.get("metadata") or {}
        live = self.s.kube.get_run(meta.get("namespace", ""), meta.get("name", ""))
        return body if live is None else {**body, "status": live.get("status") or {}}

    def _trajectory_of_recording(self, body: dict[str, Any], patch: kopf.Patch, run: AttributionRun) -> AttributionRun:
        """The run with its recording's trajectory URI; waits (Reconciling, WaitingForTrajectory) until the
        recording is Ready, and stalls with the recording's reason when it failed (operator.recording)."""
        from cudanalyst.operator.waiting import WAITING, get_recording, resolve, with_trajectory

        name = str(run.spec.trajectory.recording)
        found = resolve(get_recording(self.s.kube, body["metadata"]["namespace"], name), name)
        if found.stalled:
            self._stall(body, patch, *found.stalled)
            raise kopf.PermanentError(found.stalled[1])
        if found.waiting:
            self._apply(body, patch, Verdict("Pending", WAITING, found.waiting), {})
            raise kopf.TemporaryError(found.waiting, delay=self.s.config.retry_interval)
        return with_trajectory(run, str(found.uri))

    def ensure_children(self, body: dict[str, Any], run: AttributionRun) -> tuple[dict[str, Any] | None, bool]:
        """Create the spec ConfigMap and the Indexed Job if absent; returns the Job manifest and whether it was
        created now. A queued run suspended from the start gets no Job (and so no Workload in Kueue's queue)
        until it is resumed."""
        namespace = body["metadata"]["namespace"]
        configmap = spec_configmap(run)
        job = runner_job(run, self.s.config)
        kopf.adopt([configmap, job], owner=owner_view(body))  # owner reference, namespace, labels
        kube = self.s.kube
        if kube.create_configmap(namespace, configmap):
            log.info("created ConfigMap %s/%s", namespace, configmap["metadata"]["name"])
        if run.spec.resources.queue_name and run.spec.suspend:
            return None, False
        created = kube.create_job(namespace, job)
        if created:
            kopf.event(body, type="Normal", reason="JobCreated",
                       message=f"created Indexed Job {job['metadata']['name']} with {run.spec.resources.shards} shard(s)")
        return job, created

    # ---- follow

    def refresh(self, namespace: str, name: str, jobs: list[dict[str, Any]], pods: list[dict[str, Any]],
                workloads: list[dict[str, Any]] | None = None) -> bool:
        """Follow the run after a change of its Job or Pods: read it fresh, observe, write what changed.

        Returns False when the run has not started yet (nothing to follow until its start handler wrote
        status); True otherwise, also for a run that is gone or finished.
        """
        body = self.s.kube.get_run(namespace, name)
        if body is None:
            return True
        if not run_status(body).start_time:
            return False
        patch = kopf.Patch()
        self.observe(body, patch, jobs, pods, workloads)
        if patch.status:
            self.s.kube.patch_run_status(namespace, name, dict(patch.status))
        return True

    def observe(self, body: dict[str, Any], patch: kopf.Patch, jobs: list[dict[str, Any]],
                pods: list[dict[str, Any]], workloads: list[dict[str, Any]] | None = None) -> None:
        seen = run_status(body)
        if is_finished(seen) or not seen.start_time:
            return
        try:
            run = parse_body(body)
        except SpecError:
            return  # the start handler has said so already
        meta = body["metadata"]
        total = seen.progress.total
        now = self.s.clock()
        extra: dict[str, Any] = {}
        store = self.s.store(run)
        waiting = ""
        try:
            shards = read_shards(store, run.spec.resources.shards)
            waiting = next((d.waiting for d in shards if d is not None and d.waiting), "")
            progress, gpu_seconds = run_progress(shards, total, seen.start_time, now)
            extra["progress"] = progress.model_dump(by_alias=True, mode="json")  # the boundary: status is JSON
            extra["gpuSeconds"] = gpu_seconds
            done = progress.done
        except StoreError as exc:
            log.warning("%s/%s: progress unavailable: %s", meta.get("namespace"), meta.get("name"), exc)
            done = seen.progress.done
        job = jobs[0] if jobs else None
        if job is not None:
            extra["shards"] = {"active": job["active"], "succeeded": job["succeeded"], "failed": job["failed"]}
        obs = Observation(int(meta.get("generation") or 1), run.spec.suspend, bool(run.spec.resources.queue_name),
                          job, pods, done=done, total=total)
        if obs.queued:
            obs.workload = self._follow_workload(run, workloads or [], extra)
        verdict = waiting_for_endpoint(judge(obs), waiting)
        if verdict.phase == "Pending" and not run.spec.trajectory.recording:
            self.ensure_children(body, run)  # the Job was deleted before finishing: make it again
        if verdict.phase == "Aggregating":
            verdict = self._aggregate(run, store, obs, extra)
        self._apply(body, patch, verdict, extra)
        self.s.metrics.set_progress(meta.get("namespace", ""), meta.get("name", ""), done, total)

    def _aggregate(self, run: AttributionRun, store: ObjectStore, obs: Observation,
                   extra: dict[str, Any]) -> Verdict:
        try:
            results, report_uri = self.s.aggregate(run, store)
        except StoreError as exc:
            log.warning("%s: aggregation waits for the store: %s", run.metadata.name, exc)
            return judge(obs)
        except ValueError as exc:  # unusable outcome records: retrying reads the same objects
            return Verdict("Failed", "AggregationFailed", f"cannot compute the attribution: {exc}", stalled=True)
        extra["results"] = results.model_dump(by_alias=True, mode="json")
        extra["reportUri"] = report_uri
        obs.aggregated = True
        obs.reached = reached_text(results)
        return judge(obs)

    # ---- suspend

    def suspend(self, body: dict[str, Any], patch: kopf.Patch, suspend: bool) -> None:
        seen = run_status(body)
        if not seen.start_time or is_finished(seen):
            return
        meta = body["metadata"]
        try:
            run = parse_body(body)
        except SpecError:
            return
        if run.spec.resources.queue_name:
            self._suspend_queued(body, patch, run, suspend)
            return
        found = self.s.kube.set_job_suspend(meta["namespace"], c.job_name(meta["name"]), suspend)
        if not found:
            return
        progress = seen.progress
        obs = Observation(int(meta.get("generation") or 1), suspend, False,
                          {"suspend": suspend, "active": 0, "conditions": []},
                          done=progress.done, total=progress.total)
        self._apply(body, patch, judge(obs), {})

    # ---- Kueue (kueue.py says why the Workload, not the Job, is what the operator switches)

    def _follow_workload(self, run: AttributionRun, workloads: list[dict[str, Any]],
                         extra: dict[str, Any]) -> dict[str, Any] | None:
        """status.queue from the run's Workload, and its spec.active brought in line with spec.suspend (level-
        triggered: a suspend that came before Kueue made the Workload is applied once it exists)."""
        workload = kueue.current(workloads, run.metadata.name)
        stale = workload is not None and workload["state"] != "Finished" and workload["active"] == run.spec.suspend
        if stale and kueue.set_active(self.s.kube.custom, run.metadata.namespace or "", workload["name"],  # type: ignore[index]
                                      not run.spec.suspend):
            log.info("%s/%s: set Workload %s active=%s", run.metadata.namespace, run.metadata.name,
                     workload["name"], not run.spec.suspend)  # type: ignore[index]
        extra["queue"] = kueue.queue_status(run.spec.resources.queue_name, workload)
        return workload

    def _read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = self.s.kube.batch.read_namespaced_job(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(json.loads(response.data))

    def _suspend_queued(self, body: dict[str, Any], patch: kopf.Patch, run: AttributionRun, suspend: bool) -> None:
        """Suspend: deactivate the Workload (Kueue evicts it, frees its quota and suspends the Job). Resume: make the
        Job if the run was suspended from the start, else activate the Workload (Kueue queues it again and
        unsuspends the Job only when it admits it). The Job's spec.suspend is never touched here."""
        namespace, name = run.metadata.namespace or "", run.metadata.name
        if not suspend:
            self.ensure_children(body, run)
        workloads = kueue.list_workloads(self.s.kube.custom, namespace, name)
        workload = kueue.current(workloads, name)
        if workload is not None and workload["active"] == suspend:
            kueue.set_active(self.s.kube.custom, namespace, workload["name"], not suspend)
            workload = {**workload, "active": not suspend, "state": "Inactive" if suspend else "Pending"}
        progress = run_status(body).progress
        job = self._read_job(namespace, c.job_name(name))
        obs = Observation(int(body["metadata"].get("generation") or 1), suspend, True,
                          job_summary(job) if job else None, done=progress.done,
                          total=progress.total, workload=workload)
        verdict = judge(obs)
        self._apply(body, patch, verdict, {"queue": kueue.queue_status(run.spec.resources.queue_name, workload)})

    # ---- delete

    def delete_results(self, body: dict[str, Any]) -> None:
        """Only when spec.output.deleteWithRun asks: results stay in the store by default."""
        run = parse_body(body)
        store = self.s.store(run)
        keys = list(store.list(""))
        for key in keys:
            store.delete(key)
        log.info("deleted %d objects of run %s from %s", len(keys), run.metadata.name, store.uri)

    def forget(self, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        self.s.metrics.forget(meta.get("namespace", ""), meta.get("name", ""))
