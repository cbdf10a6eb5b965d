"""A run against the world outside the spec: its object-store folder and S3 settings, its trajectory loaded
and planned, its model folders checked. Everything here reads or reaches something; the pure parts live
beside it (`cudanalyst.plan`: the schedule; `cudanalyst.runfolder`: the folder's keys and objects).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cudanalyst.api import AttributionRun, AttributionRunSpec
from cudanalyst.cache import models_cache
from cudanalyst.plan import Plan, make_plan
from cudanalyst.store import ObjectStore, S3Settings, StoreError, open_store
from cudanalyst.trajectory import TrajectoryError, freeze, load_trajectory

# Where the runner pod mounts spec.s3.credentialsSecret (the operator sets this up).
CREDENTIALS_DIR_ENV = "CUDANALYST_S3_CREDENTIALS_DIR"
# Spec parts that do not change what a unit computes: a run folder may be resumed with other values.
RESUMABLE_FIELDS = ("resources", "suspend", "ttlSecondsAfterFinished")
# A model server's capacity, per role: how long a prompt it takes and how much GPU memory it holds. A unit that
# finished computes the same with more of either; one its prompt did not fit (prompt-too-long) can then finish.
RESUMABLE_MODEL_FIELDS = ("maxModelLen", "gpuMemoryUtilization")


class PlanError(ValueError):
    """The run cannot be planned: its trajectory or store is unreadable, or a generation is empty."""


def s3_settings(run: AttributionRun) -> S3Settings:
    s3 = run.spec.s3
    return S3Settings(
        endpoint=s3.endpoint,
        region=s3.region,
        addressing_style=s3.addressing_style,
        credentials_dir=os.environ.get(CREDENTIALS_DIR_ENV, ""),
    )


def plan_run(run: AttributionRun) -> Plan:
    """Load the trajectory, freeze its programs (seeded) and build the plan."""
    spec = run.spec
    if spec.trajectory.uri is None:
        # Only the operator resolves a recording's name (to the trajectory URI in its status).
        raise PlanError(f"spec.trajectory.recording: {spec.trajectory.recording!r} names a TrajectoryRecording, "
                        "which only the operator resolves; here give spec.trajectory.uri (the recording's "
                        "trajectory: <its output.uri>/<its name>/trajectory/)")
    try:
        tasks = spec.trajectory.tasks
        trajectory = load_trajectory(spec.trajectory.uri, s3_settings(run), spec.trajectory.format,
                                     tasks[0] if len(tasks) == 1 else None)
        programs = freeze(trajectory.programs, spec.trajectory.generations,
                          spec.trajectory.programs_per_generation, spec.sampling.seed, spec.trajectory.tasks)
    except (TrajectoryError, StoreError, OSError) as exc:  # OSError: what a reader let through, not a crash or a retry loop
        message = str(exc)
        # Name the field the user has to fix; freezing errors already do.
        raise PlanError(message if message.startswith("spec.") else f"spec.trajectory.uri: {message}") from None
    return make_plan(run, programs)


def model_problems(run: AttributionRun, local_paths: bool) -> list[str]:
    """Models that cannot be served, each named by its field: an s3:// prefix without config.json, and
    (on this machine only: a pod's paths live in its image or volumes) a folder that does not exist."""
    problems = []
    for role in ("planner", "coder", "summarizer"):
        model = getattr(run.spec.models, role)
        if model is None or model.serve != "local" or not model.model:
            continue
        name, where = model.model, f"spec.models.{role}.model"
        if name.startswith("s3://"):
            try:
                found = open_store(name.rstrip("/") + "/", s3_settings(run)).exists("config.json")
            except StoreError as exc:
                problems.append(f"{where}: {exc}")
                continue
            if not found:
                problems.append(f"{where}: {name} holds no config.json (not a model folder)")
        elif local_paths:
            path = Path(name.removeprefix("file://")).expanduser()
            cached = models_cache() / name
            if not (path / "config.json").is_file() and not ("/" not in name and (cached / "config.json").is_file()):
                problems.append(f"{where}: {name!r} is neither a model folder nor a model in {models_cache()}")
    return problems


def check_models(run: AttributionRun, local_paths: bool) -> None:
    problems = model_problems(run, local_paths)
    if problems:
        raise PlanError("; ".join(problems))


def run_store(run: AttributionRun) -> ObjectStore:
    """The run's own folder: `<output.uri>/<name>/`."""
    return open_store(run.spec.output.uri, s3_settings(run)).child(f"{run.metadata.name}/")


def outcome_spec(spec: AttributionRunSpec) -> dict[str, Any]:
    """The spec fields that decide what a unit computes, in one normal form (defaults filled in): what a resumed
    run folder (runner.local.executor) and a study's run folder (study.py) must agree on."""
    dumped = spec.model_dump(by_alias=True, mode="json")
    models = {role: {k: v for k, v in model.items() if k not in RESUMABLE_MODEL_FIELDS}
              for role, model in (dumped.get("models") or {}).items() if isinstance(model, dict)}
    return {**{k: v for k, v in dumped.items() if k not in RESUMABLE_FIELDS}, "models": models}
