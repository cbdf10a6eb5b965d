"""Pure: from what the operator observes (Job, Pods, progress) to the run's phase and kstatus conditions.

Polarity follows kstatus: Ready is True only when the run succeeded; Reconciling is True while work goes
on; Stalled is True when nothing more happens without a person (bad spec, failed run, unpullable image).
Succeeded/Failed/Suspended/Queued say the rest. Phase is for display only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from cudanalyst.api.status import CONDITION_TYPES, Condition, Results
from cudanalyst.operator.kueue import waiting_message
from cudanalyst.operator.pods import job_condition

ACTIVE_PHASES = {"Pending", "Queued", "Running", "Aggregating"}
WARNING_PHASES = {"Failed", "Stalled"}
FINISHED_PHASES = ("Succeeded", "Failed")


class SeenStatus(Protocol):
    """What these functions read of a status already written: AttributionRunStatus and
    TrajectoryRecordingStatus both have it (api.status.read_status validates one from the object)."""

    @property
    def phase(self) -> str | None: ...
    @property
    def conditions(self) -> list[Condition]: ...
    @property
    def completion_time(self) -> str | None: ...


@dataclass(frozen=True)
class Verdict:
    """The run's state in one word, why, and in a sentence."""

    phase: str
    reason: str
    message: str
    stalled: bool = False


@dataclass
class Observation:
    generation: int
    spec_suspend: bool
    queued: bool
    job: dict[str, Any] | None
    pods: list[dict[str, Any]] = field(default_factory=list)
    done: int = 0
    total: int = 0
    aggregated: bool = False
    # A queued run's Workload (kueue.workload_summary), once Kueue has made it.
    workload: dict[str, Any] | None = None
    reached: str = ""  # the results' samples per metric (reached_text), once aggregated


def worst_problem(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A stalling problem before a passing one; among equals the lowest shard, so the message is stable."""
    problems = [p["problem"] for p in sorted(pods, key=lambda p: str(p.get("shard"))) if p.get("problem")]
    stalled = [p for p in problems if p.get("stalled")]
    return (stalled or problems or [None])[0]


def _progress_text(obs: Observation) -> str:
    return f"{obs.done}/{obs.total} units"


def judge(obs: Observation) -> Verdict:
    """The run's verdict from one observation (the caller handles invalid specs separately)."""
    job = obs.job
    problem = worst_problem(obs.pods)
    if job is None:
        if obs.total and obs.done >= obs.total:
            # The Job is gone (TTL, or deleted) after finishing every unit: the results are what count.
            return _finished(obs)
        if obs.queued and obs.spec_suspend:
            # A queued run suspended from the start has no Job yet, so nothing waits in Kueue's queue for it.
            return Verdict("Suspended", "Suspended", "suspended by spec.suspend before it was queued; "
                           "the runner Job is made and queued when it is resumed")
        return Verdict("Pending", "CreatingJob", "creating the runner Job")
    if job_condition(job, "Complete") or job_condition(job, "SuccessCriteriaMet"):
        return _finished(obs)
    failed = job_condition(job, "Failed") or job_condition(job, "FailureTarget")
    if failed:
        reason = failed.get("reason") or "JobFailed"
        text = failed.get("message") or "the runner Job failed"
        if job.get("failedIndexes"):
            text += f" (failed shards: {job['failedIndexes']})"
        if problem:
            text += f"; {problem['message']}"
        text += f"; finished units are kept in the store ({_progress_text(obs)})"
        return Verdict("Failed", reason, text, stalled=True)
    if job.get("suspend"):
        if obs.spec_suspend:
            return Verdict("Suspended", "Suspended", f"suspended by spec.suspend at {_progress_text(obs)}")
        if obs.queued:
            return Verdict("Queued", "WaitingForAdmission", waiting_message(obs.workload))
        return Verdict("Running", "Resuming", "resuming the runner Job")
    if obs.queued and obs.spec_suspend:
        # Kueue suspends the Job once it has evicted the deactivated Workload (kueue.py).
        name = f"Workload {obs.workload['name']}" if obs.workload else "the Workload"
        return Verdict("Running", "Suspending", f"spec.suspend is set: waiting for Kueue to evict {name} "
                       f"and suspend the runner Job ({_progress_text(obs)})")
    if problem:
        return Verdict("Running", problem["reason"], problem["message"], stalled=bool(problem.get("stalled")))
    if not job.get("active"):
        return Verdict("Running", "PodsStarting", f"waiting for runner pods ({_progress_text(obs)})")
    return Verdict("Running", "Running", f"{job.get('active', 0)} shard(s) running, {_progress_text(obs)}")


def waiting_for_endpoint(verdict: Verdict, waiting: str) -> Verdict:
    """A running run whose shard waits out an endpoint's 429/5xx (its progress says which and why): said so, not
    Stalled, since it resumes by itself; past the runner's outage allowance the shard fails with the reason."""
    if not waiting or (verdict.phase, verdict.reason) != ("Running", "Running"):
        return verdict
    return Verdict("Running", "WaitingForEndpoint", f"{verdict.message}; waiting out an endpoint's outage: {waiting}")


def _finished(obs: Observation) -> Verdict:
    if obs.aggregated:
        return Verdict("Succeeded", "Succeeded", f"all {obs.total} units evaluated; attribution written"
                       + (f" ({obs.reached})" if obs.reached else ""))
    return Verdict("Aggregating", "Aggregating", f"runner Job complete; computing the attribution of {obs.total} units")


def reached_text(results: Results) -> str:
    """'samples reaching compiled 40, pass 30, fastVsBaseline 9, fastVsFrozen 4 of 48': both fast metrics in the
    message a user sees first (`kubectl get ar`, the Succeeded condition)."""
    if not results.reached:
        return ""
    return ("samples reaching " + ", ".join(f"{c.metric} {c.reached}" for c in results.reached)
            + f" of {results.reached[0].units}")


def invalid(reason: str, message: str) -> Verdict:
    """A spec the operator cannot run: Stalled, with the field path in the message."""
    return Verdict("Stalled", reason, message, stalled=True)


def _truth(verdict: Verdict) -> dict[str, bool]:
    phase = verdict.phase
    return {
        "Ready": phase == "Succeeded",
        "Reconciling": phase in ACTIVE_PHASES and not verdict.stalled,
        "Stalled": verdict.stalled or phase in WARNING_PHASES,
        "Succeeded": phase == "Succeeded",
        "Failed": phase == "Failed",
        "Suspended": phase == "Suspended",
        "Queued": phase == "Queued",
    }


def conditions_for(verdict: Verdict, previous: list[Condition], generation: int, now: str) -> list[dict[str, Any]]:
    """All condition types, each keeping its lastTransitionTime while its status does not change."""
    before: dict[str, Condition] = {cond.type: cond for cond in previous}
    out = []
    for kind, truth in zip(CONDITION_TYPES, (_truth(verdict)[k] for k in CONDITION_TYPES), strict=True):
        status = "True" if truth else "False"
        old = before.get(kind)
        kept = old is not None and old.status == status and old.last_transition_time
        since = old.last_transition_time if kept and old is not None else now
        out.append({
            "type": kind,
            "status": status,
            "reason": verdict.reason,
            "message": verdict.message,
            "lastTransitionTime": since,
            "observedGeneration": generation,
        })
    return out


def status_for(verdict: Verdict, previous: SeenStatus, generation: int, now: str) -> dict[str, Any]:
    """The status fields that follow from a verdict (the caller adds progress, results and times)."""
    status: dict[str, Any] = {
        "phase": verdict.phase,
        "conditions": conditions_for(verdict, previous.conditions, generation, now),
        "observedGeneration": generation,
        "message": verdict.message,
    }
    if verdict.phase in FINISHED_PHASES and not previous.completion_time:
        status["completionTime"] = now
    return status


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


def condition_of(status: SeenStatus, kind: str) -> Condition | None:
    return next((cond for cond in status.conditions if cond.type == kind), None)


def true_condition(status: SeenStatus, kind: str) -> Condition | None:
    """The condition of that type when its status is True."""
    cond = condition_of(status, kind)
    return cond if cond is not None and cond.status == "True" else None


def transition_event(previous: SeenStatus, verdict: Verdict) -> Event | None:
    """An event when the phase or its reason changes; none for a mere progress update."""
    ready = condition_of(previous, "Ready")
    old_reason = ready.reason if ready is not None else None
    if previous.phase == verdict.phase and old_reason == verdict.reason:
        return None
    kind = "Warning" if verdict.phase in WARNING_PHASES or verdict.stalled else "Normal"
    return Event(kind, verdict.reason, verdict.message)


def is_finished(status: SeenStatus | None) -> bool:
    return status is not None and status.phase in FINISHED_PHASES
