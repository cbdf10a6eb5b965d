"""A run resolved once: the AttributionRun with its S3 settings, its run folder and its plan (`PlannedRun`).

The operator, `cudanalyst run` and every shard resolve a run here and pass the object along. Everything here
reads or reaches something outside the spec (the trajectory, the store, model folders); the pure parts live
beside it (`cudanalyst.plan`: the schedule; `cudanalyst.runfolder`: the folder's keys and objects).

A shard plans again from the spec and the trajectory rather than reading the plan from the run folder: the plan
is a pure function of the two (docs/decisions.md), so plan.json stores only its summary and digest, and the
trajectory stays the one copy of the frozen programs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cudanalyst.api import AttributionRun
from cudanalyst.cache import models_cache
from cudanalyst.plan import Plan, make_plan
from cudanalyst.runfolder import run_store
from cudanalyst.store import ObjectStore, S3Settings, StoreError, open_store
from cudanalyst.trajectory import (
    FrozenProgram,
    StratumDraw,
    TrajectoryError,
    freeze,
    freeze_strata,
    load_trajectory,
)


class PlanError(ValueError):
    """The run cannot be planned: its trajectory or store is unreadable, a generation is empty, or a model
    cannot be served."""


def plan_run(run: AttributionRun, s3: S3Settings | None = None) -> Plan:
    """Load the trajectory, freeze its programs (seeded) and build the plan."""
    spec = run.spec
    if spec.trajectory.uri is None:
        # Only the operator resolves a recording's name (to the trajectory URI in its status).
        raise PlanError(f"spec.trajectory.recording: {spec.trajectory.recording!r} names a TrajectoryRecording, "
                        "which only the operator resolves; here give spec.trajectory.uri (the recording's "
                        "trajectory: <its output.uri>/<its name>/trajectory/)")
    try:
        tasks = spec.trajectory.tasks
        trajectory = load_trajectory(spec.trajectory.uri, s3 or S3Settings.from_spec(spec.s3), spec.trajectory.format,
                                     tasks[0] if len(tasks) == 1 else None)
        strata = spec.trajectory.strata
        draws: list[StratumDraw] = []
        if strata is None:
            programs = freeze(trajectory.programs, spec.trajectory.generations,
                              spec.trajectory.programs_per_generation, spec.sampling.seed, spec.trajectory.tasks)
        else:
            programs, draws = freeze_strata(trajectory.programs, spec.trajectory.generations, strata.counts(),
                                            spec.sampling.seed, spec.trajectory.tasks, strata.per,
                                            spec.evaluation.fast_tolerance)
    except (TrajectoryError, StoreError, OSError) as exc:  # OSError: what a reader let through, not a crash or a retry loop
        message = str(exc)
        # Name the field the user has to fix; freezing errors already do.
        raise PlanError(message if message.startswith("spec.") else f"spec.trajectory.uri: {message}") from None
    unmade = unmade_reports(trajectory.manifest.source, programs, spec.players)
    if unmade:
        program, player = unmade[0]
        raise PlanError(
            f"spec.players: {len(unmade)} report(s) of the frozen programs were never made (e.g. {player} of "
            f"{program.task} program {program.program_id}): the trajectory's recording "
            f"({trajectory.manifest.source.get('recording', '?')}) ran only the tools its policy showed "
            "(runTools: shown), and a replay would show the agent 'no report' where no tool was asked; attribute a "
            "recording made with runTools: all, or leave those players out")
    return make_plan(run, programs, draws)


def unmade_reports(source: dict[str, object], programs: list[FrozenProgram], players: list[str]
                   ) -> list[tuple[FrozenProgram, str]]:
    """(program, player) whose report the recorder never made: only a `runTools: shown` recording leaves one out on
    purpose (elsewhere a missing report is what the tool gave: none)."""
    if source.get("runTools") != "shown":
        return []
    return [(p, player) for p in programs for player in players if player not in p.feedback]


def model_problems(run: AttributionRun, local_paths: bool, s3: S3Settings | None = None) -> list[str]:
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
                found = open_store(name.rstrip("/") + "/", s3 or S3Settings.from_spec(run.spec.s3)).exists("config.json")
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


def check_models(run: AttributionRun, local_paths: bool, s3: S3Settings | None = None) -> None:
    problems = model_problems(run, local_paths, s3)
    if problems:
        raise PlanError("; ".join(problems))


@dataclass(frozen=True)
class PlannedRun:
    """One run, resolved once: the spec as given, how to reach S3, its own folder in the store, and its plan."""

    run: AttributionRun
    s3: S3Settings
    store: ObjectStore
    plan: Plan

    @classmethod
    def resolve(cls, run: AttributionRun) -> PlannedRun:
        """Plan the run (PlanError when it cannot be) and open its folder (nothing is written)."""
        s3 = S3Settings.from_spec(run.spec.s3)
        plan = plan_run(run, s3)
        return cls(run, s3, run_store(run, s3), plan)

    @property
    def name(self) -> str:
        return self.run.metadata.name

    def check_models(self, local_paths: bool) -> None:
        check_models(self.run, local_paths, self.s3)
