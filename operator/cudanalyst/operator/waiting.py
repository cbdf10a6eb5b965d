"""What an AttributionRun naming a TrajectoryRecording does now: replay its trajectory, wait, or stall.

Apart from recording.py (which follows the recordings themselves and uses lifecycle's status helpers), so that
lifecycle.py can ask it without the two importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from cudanalyst.api.recording import RECORDING_PLURAL, TrajectoryRecordingStatus
from cudanalyst.api.spec import API_GROUP, API_VERSION
from cudanalyst.api.status import read_status
from cudanalyst.operator.conditions import true_condition

WAITING = "WaitingForTrajectory"


@dataclass(frozen=True)
class Resolution:
    """What a run naming a recording can do now: go (with the URI), wait, or stall (with the reason)."""

    uri: str | None = None
    waiting: str | None = None
    stalled: tuple[str, str] | None = None  # (reason, message)


def resolve(body: dict[str, Any] | None, name: str) -> Resolution:
    """From the recording as the API server holds it (None: absent), pure."""
    if body is None:
        return Resolution(waiting=f"waiting for TrajectoryRecording {name}, which does not exist (yet)")
    seen = read_status(TrajectoryRecordingStatus, body.get("status"))
    if true_condition(seen, "Ready") and seen.trajectory_uri:
        return Resolution(uri=seen.trajectory_uri)
    stalled = true_condition(seen, "Stalled")
    if stalled is not None:
        reason = stalled.reason or "RecordingFailed"
        return Resolution(stalled=(reason, f"TrajectoryRecording {name} failed ({reason}): {stalled.message}"))
    progress = (seen.progress.text if seen.progress else "") or "not started"
    return Resolution(waiting=f"waiting for TrajectoryRecording {name} to be Ready ({progress} iterations)")


def with_trajectory(run: Any, uri: str) -> Any:
    """The AttributionRun as its runner sees it: the recording's trajectory URI in place of its name."""
    trajectory = run.spec.trajectory.model_copy(update={"uri": uri, "recording": None})
    return run.model_copy(update={"spec": run.spec.model_copy(update={"trajectory": trajectory})})


def get_recording(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(kube.custom.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, RECORDING_PLURAL,
                                                             name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


