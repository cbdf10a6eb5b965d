"""`cudanalyst record` on this machine: the agent's model served (vLLM, or the spec's endpoint), every unfinished
task evolved at once in its own process (`cudanalyst.runner.record.evolve`), then the import (cudanalyst.recording).
The local executor's, like `cudanalyst run`: it may use the runner; its arguments are in commands.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cudanalyst.api.recording import SearchSpec, TrajectoryRecording
from cudanalyst.exits import EXIT_FAILURE, EXIT_INVALID, die
from cudanalyst.recording import (
    RecordInputError,
    TaskProgress,
    check_input,
    import_recording,
    prepare_store,
    read_recording_progress,
    recording_store,
    s3_settings,
    unfinished_tasks,
)
from cudanalyst.runner import lifeline
from cudanalyst.runner.kernels.stage import gpu_status
from cudanalyst.runner.llm.client import warming
from cudanalyst.runner.llm.serving import remote_endpoint, start_local_server
from cudanalyst.runner.local.display import ended_early
from cudanalyst.runner.weights import WeightsError, resolve_model_path
from cudanalyst.store import StoreError

LOG_EVERY_S = 10.0
POLL_S = 1.0
STOP_GRACE_S = 30.0  # what an OpenEvolve process gets to stop its workers before SIGKILL


def model_problems(rec: TrajectoryRecording) -> list[str]:
    """The local models' weights (the agent's, and the planner's when the policy asks for one), found (or synced
    from S3) here; else the field and why."""
    problems = []
    for field, model in (("model", rec.spec.model), ("planner", planner_spec(rec))):
        if model is None:
            continue
        if model.api_key is not None:  # the agent's processes are given a URL only (issue 34 covers runs)
            problems.append(f"spec.{field}.apiKey: a recording cannot send an API key yet; give an endpoint that "
                            "needs none")
        elif model.serve == "local":
            try:
                resolve_model_path(str(model.model), s3_settings(rec))
            except (WeightsError, StoreError) as exc:
                problems.append(f"spec.{field}.model: {exc}")
    return problems


def planner_spec(rec: TrajectoryRecording) -> Any:
    """The planner's model spec when the recording's policy names a planner; else None (the coder plans)."""
    policy = rec.spec.policy
    return rec.spec.planner if policy is not None and policy.models.planner else None


# ---- 2. the model ---------------------------------------------------------------------------------------


# The most of the GPU's memory the model server may take while the evaluations' GPU tools share its device:
# the rest holds every OpenEvolve worker's GPU worker (a CUDA context each, 4 workers x 8 tasks) and the
# sanitizer's and Nsight Compute's own contexts (issue 28: at a larger share they found no memory).
TOOLS_SHARE_CAP = 0.5


def search_note(search: SearchSpec) -> str:
    """The search strategy in a few words, when it is not the default (pure)."""
    if search == SearchSpec():
        return ""
    how = "diffs" + (f" ({search.full_rewrite_probability:g} rewrites)" if search.full_rewrite_probability else "") \
        if search.evolution == "diff" else "rewrites"
    return (f", {how}, exploration {search.exploration_ratio:g} / exploitation {search.exploitation_ratio:g}, "
            f"migration every {search.migration_interval} at {search.migration_rate:g}")


def server_share(model: Any, gpu: bool) -> Any:
    """The model spec the recorder serves: its gpuMemoryUtilization capped when tools share the GPU (pure)."""
    if not gpu or model.serve != "local" or model.gpu_memory_utilization <= TOOLS_SHARE_CAP:
        return model
    return model.model_copy(update={"gpu_memory_utilization": TOOLS_SHARE_CAP})


@contextlib.contextmanager
def served_model(rec: TrajectoryRecording, log_dir: str, health_timeout_s: float,
                 say: Callable[[str], None] = lambda _: None, gpu: bool = False,
                 spec: Any = None) -> Iterator[tuple[str, str]]:
    """(base URL, served name) of the agent's model (or `spec`, the planner's) for the duration of the block."""
    given = spec if spec is not None else rec.spec.model
    model = server_share(given, gpu)
    if model is not given:
        say(f"model server capped at {TOOLS_SHARE_CAP:.0%} of the GPU's memory (the spec asks "
            f"{given.gpu_memory_utilization:.0%}): the evaluations' GPU tools need the rest")
    if model.serve != "local":
        endpoint = remote_endpoint(model)
        yield endpoint.base_url, endpoint.model
        return
    path = resolve_model_path(str(model.model), s3_settings(rec))
    short = Path(str(model.model).rstrip("/")).name or str(model.model)
    say(f"starting the model server ({short}, vLLM)")
    with start_local_server(path, model, served_name=short, seed=rec.spec.seed, health_timeout_s=health_timeout_s,
                            log_dir=log_dir, s3=s3_settings(rec),
                            warm_up=warming(rec.spec.temperature, rec.spec.top_p, short, say)) as server:
        yield server.endpoint.base_url, server.endpoint.model


# ---- 3. the tasks ---------------------------------------------------------------------------------------


def launch_task(spec_path: Path, task: str, endpoint: str, served: str, gpu: bool,
                log_dir: Path, planner: tuple[str, str] | None = None) -> subprocess.Popen[bytes]:
    with open(log_dir / f"task-{task}.log", "ab") as log:
        # SIGTERM when `cudanalyst record` dies, however it dies; its own session keeps Ctrl-C from the
        # terminal from reaching it twice. OpenEvolve stops its workers on SIGTERM.
        return lifeline.popen(
            [sys.executable, "-m", "cudanalyst.runner.record.evolve", "--recording", str(spec_path),
             "--task", task, "--endpoint", endpoint, "--served-model", served, "--gpu", str(int(gpu)),
             "--workdir", str(log_dir / "work" / task),
             *(["--planner-endpoint", planner[0], "--planner-model", planner[1]] if planner else [])],
            death_signal=signal.SIGTERM, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)


def run_tasks(rec: TrajectoryRecording, endpoint: str, served: str, gpu: bool, log_dir: Path,
              tick: Callable[[list[TaskProgress]], None], planner: tuple[str, str] | None = None) -> dict[str, int]:
    """Every unfinished task at once (one model server batches their requests); exit status per task."""
    store = recording_store(rec)
    spec_path = log_dir / "recording.json"
    spec_path.write_text(json.dumps(rec.to_dict()))
    todo = [t.task for t in read_recording_progress(rec, store) if t.done < t.total]
    procs = {task: launch_task(spec_path, task, endpoint, served, gpu, log_dir, planner) for task in todo}
    try:
        while any(p.poll() is None for p in procs.values()):
            tick(read_recording_progress(rec, store))
            time.sleep(POLL_S)
        tick(read_recording_progress(rec, store))
    finally:
        lifeline.stop_groups(procs.values(), STOP_GRACE_S)
    return {task: int(p.returncode or 0) for task, p in procs.items()}



# ---- the command -------------------------------------------------------------------------------------


def _interrupt_on_sigterm() -> None:
    # As `cudanalyst run`: SIGTERM stops the task processes and the model server exactly as Ctrl-C does.
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


class Reporter:
    """Bars on a terminal; on a log file, a line whenever a task reaches a checkpoint."""

    def __init__(self, console: Console, progress: Progress) -> None:
        self.console, self.progress = console, progress
        self.bars: dict[str, int] = {}
        self.seen: dict[str, int] = {}

    def say(self, text: str) -> None:
        self.console.print(f"{time.strftime('%H:%M:%S')}  {text}", highlight=False)

    def tick(self, tasks: list) -> None:  # type: ignore[type-arg]
        for t in tasks:
            if t.task not in self.bars:
                self.bars[t.task] = self.progress.add_task(t.task, total=t.total, completed=t.done)
            self.progress.update(self.bars[t.task], completed=t.done)
            if self.seen.get(t.task) != t.done:
                self.seen[t.task] = t.done
                best = "" if t.best is None else f", best combined_score {t.best:.3f}"
                self.say(f"{t.task}: iteration {t.done}/{t.total} checkpointed, {t.programs} programs{best}")


def iteration_line(rec: TrajectoryRecording, store: Any) -> str:
    """How the iterations ended, over every task: children, and why the others gave none (runner.record.iterations)."""
    from cudanalyst.recording import task_store
    from cudanalyst.runner.record.iterations import ITERATIONS_LOG, summary

    stores = [task_store(rec, task) for task in rec.spec.tasks]
    total = summary("\n".join(s.get_text(ITERATIONS_LOG) for s in stores if s.exists(ITERATIONS_LOG)))
    return (f"iterations: {sum(total.values())}, {total['children']} with a child; without one: {total['agent']} "
            f"the agent's answer held no usable program, {total['timeout']} past OpenEvolve's time limit, "
            f"{total['model']} the model did not answer, {total['context']} the prompt did not fit the model's context")


def failure_line(rec: TrajectoryRecording, task: str, code: int, endpoint: str, folder: Path) -> str:
    """Why a task's process stopped, from its exit status, and what to do, for the console (pure)."""
    from cudanalyst.runner.record.evolve import EXIT_CONTEXT, EXIT_MODEL

    planner = planner_spec(rec)
    also = ", or the planner's" if planner else ""
    advice = "run again to resume"
    if code == EXIT_MODEL:
        why = f"the model server ({endpoint}{also}) did not answer an iteration; stopped at its last checkpoint"
    elif code == EXIT_CONTEXT:
        why = (f"the model ({endpoint}{also}) refused an iteration's prompt as longer "
               "than its context window; stopped at its last checkpoint, where a pass with the same settings stops "
               "again")
        fields = " or ".join(f"spec.{field}.maxModelLen" for field, spec in (("model", rec.spec.model),
                                                                              ("planner", planner))
                             if spec is not None and spec.serve == "local")
        advice = f"give the model a longer context ({fields or 'its server: vLLM --max-model-len'}), then {advice}"
    else:
        why = f"exit status {code}"
    return f"[red]{task} failed[/] ({why}): see {folder}/task-{task}.log; {advice}"


def per_generation(store: Any) -> str:
    """`generation: programs` over the imported trajectory, what an AttributionRun's generations can pick from."""
    from collections import Counter

    from cudanalyst.trajectory import parse_programs

    folder = store.child("trajectory/")
    counts = Counter(p.generation for p in parse_programs(folder.get_text("programs.jsonl"), folder.uri))
    return ", ".join(f"{g}: {n}" for g, n in sorted(counts.items()))


def main(rec: TrajectoryRecording, args: argparse.Namespace) -> int:
    """`cudanalyst record`: `rec` is the spec file as loaded (commands.py), `args` the command's other arguments."""
    _interrupt_on_sigterm()
    console = Console(stderr=True)
    try:
        # A pass with every iteration done only imports: it needs neither the model's weights nor vLLM.
        serving = bool(unfinished_tasks(rec))
        check_input(rec, model_problems(rec) if serving else [], serving=serving)
        store = prepare_store(rec)
    except RecordInputError as exc:
        die(str(exc), EXIT_INVALID)
    gpu, why = gpu_status()
    spec = rec.spec
    console.print(f"[bold]{rec.name}[/]: OpenEvolve on {len(spec.tasks)} task(s) x {spec.iterations} iterations "
                  f"({spec.islands} island(s), population {spec.population}{search_note(spec.search)}) -> {store.uri}")
    if serving:  # a pass that only imports evaluates nothing
        console.print("evaluation: compile, contract, verify and time on the GPU" if gpu else
                      f"evaluation: [yellow]compiled only[/] ({why}): correct and speedup are not evaluated; "
                      "metrics say gpu_evaluated 0 and the profiler report says it did not run")
    folder = Path(tempfile.mkdtemp(prefix=f"cudanalyst-record-{rec.name}-"))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    codes: dict[str, int] = {}
    try:
        with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as progress:
            now = Reporter(console, progress)
            tasks = read_recording_progress(rec, store)
            for t in tasks:
                if 0 < t.done < t.total:
                    now.say(f"{t.task}: resuming after iteration {t.done} (its last complete checkpoint)")
            if any(t.done < t.total for t in tasks):
                with contextlib.ExitStack() as stack:
                    endpoint, served = stack.enter_context(
                        served_model(rec, str(folder), args.health_timeout, now.say, gpu))
                    planner = None
                    if planner_spec(rec) is not None:  # the policy's planner: a second server (or endpoint)
                        (folder / "planner").mkdir(exist_ok=True)
                        planner = stack.enter_context(served_model(rec, str(folder / "planner"), args.health_timeout,
                                                                   now.say, gpu, planner_spec(rec)))
                    now.say("evolving: every task at once against one model server"
                            + (f"; plans by {planner[1]}" if planner else ""))
                    codes = run_tasks(rec, endpoint, served, gpu, folder, now.tick, planner)
            else:
                now.say("every task has all its iterations: importing")
    except (KeyboardInterrupt, Exception) as exc:  # Ctrl-C; a model server that never got healthy, a store away
        return ended_early(exc, console, folder, "finished checkpoints are in the store")
    bad = {task: code for task, code in codes.items() if code != 0}
    if bad:
        for task, code in bad.items():
            console.print(failure_line(rec, task, code, endpoint, folder))
        return EXIT_FAILURE
    try:
        uri, programs = import_recording(rec, store)
    except Exception as exc:  # a checkpoint the importer cannot read names its file
        console.print(f"[red]import failed:[/] {exc}\nlogs: {folder}")
        return EXIT_FAILURE
    shutil.rmtree(folder, ignore_errors=True)
    console.print(f"trajectory: {programs} programs with their debugger, analyzer and profiler reports -> {uri}")
    window = spec.iterations_per_generation
    meaning = ("OpenEvolve's lineage depth" if window is None else
               f"the window of {window} iteration(s) a program was found in, by its first")
    console.print(f"programs per generation ({meaning}): {per_generation(store)}", highlight=False)
    from cudanalyst.recording import recorded_tool_lines

    for line in recorded_tool_lines(store):  # whether the reports are the tools' real output (issue 28)
        console.print(line, highlight=False, markup=False)
    console.print(iteration_line(rec, store), highlight=False, markup=False)
    if spec.policy is not None:
        from cudanalyst.gating import gating_lines

        for line in gating_lines(store, spec.tasks):
            console.print(line, highlight=False, markup=False)
    console.print(f"use it as an AttributionRun's spec.trajectory.uri: {uri}")
    return 0
