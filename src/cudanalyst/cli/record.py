"""`cudanalyst record FILE`: record an agent trajectory with OpenEvolve on this machine, then import it.

The spec is a TrajectoryRecording (`examples/recording-quick.yaml`). The model is served with vLLM as
`cudanalyst run` serves it; every task runs OpenEvolve from its baseline kernel; each program is evaluated by
the kernel stage's tools (compile, contract, and with a GPU verify and time) and its three reports go back
to OpenEvolve as artifacts, so the agent's next prompts show them. Checkpoints go to the store as they are
written; Ctrl-C stops, running the same command again resumes. The trajectory lands in
`<output.uri>/<name>/trajectory/`, ready as an AttributionRun's `spec.trajectory.uri`.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cudanalyst.api import SpecError
from cudanalyst.cli.common import EXIT_FAILURE, EXIT_INVALID, die

LOG_EVERY_S = 10.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record a trajectory with OpenEvolve on this machine", description=__doc__)
    p.add_argument("file", help="TrajectoryRecording YAML or JSON")
    p.add_argument("--output", help="override spec.output.uri (a folder or s3:// prefix)")
    p.add_argument("--health-timeout", type=float, default=600.0,
                   help="seconds to wait for a local model server to become healthy (default %(default)s)")
    p.set_defaults(handler=record)


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


def per_generation(store: Any) -> str:
    """`generation: programs` over the imported trajectory, what an AttributionRun's generations can pick from."""
    from collections import Counter

    from cudanalyst.trajectory import parse_programs

    folder = store.child("trajectory/")
    counts = Counter(p.generation for p in parse_programs(folder.get_text("programs.jsonl"), folder.uri))
    return ", ".join(f"{g}: {n}" for g, n in sorted(counts.items()))


def record(args: argparse.Namespace) -> int:
    from cudanalyst.api.recording import load_recording
    from cudanalyst.recording import (
        RecordInputError,
        check_input,
        import_recording,
        prepare_store,
        read_progress,
        run_tasks,
        served_model,
    )

    _interrupt_on_sigterm()
    try:
        rec = load_recording(args.file)
    except SpecError as exc:
        die(str(exc))
    if args.output:
        rec = rec.model_copy(update={"spec": rec.spec.model_copy(
            update={"output": rec.spec.output.model_copy(update={"uri": args.output})})})
    console = Console(stderr=True)
    try:
        check_input(rec)
        store = prepare_store(rec)
    except RecordInputError as exc:
        die(str(exc), EXIT_INVALID)
    from cudanalyst.runner.kernels.stage import gpu_status

    gpu, why = gpu_status()
    spec = rec.spec
    console.print(f"[bold]{rec.name}[/]: OpenEvolve on {len(spec.tasks)} task(s) x {spec.iterations} iterations "
                  f"({spec.islands} island(s), population {spec.population}) -> {store.uri}")
    console.print("evaluation: compile, contract, verify and time on the GPU" if gpu else
                  f"evaluation: [yellow]compiled only[/] ({why}): correct and speedup are not evaluated; "
                  "metrics say gpu_evaluated 0 and the profiler report says it did not run")
    folder = Path(tempfile.mkdtemp(prefix=f"cudanalyst-record-{rec.name}-"))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    codes: dict[str, int] = {}
    try:
        with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as progress:
            now = Reporter(console, progress)
            tasks = read_progress(rec, store)
            for t in tasks:
                if 0 < t.done < t.total:
                    now.say(f"{t.task}: resuming after iteration {t.done} (its last complete checkpoint)")
            if any(t.done < t.total for t in tasks):
                with served_model(rec, str(folder), args.health_timeout, now.say) as (endpoint, served):
                    now.say("evolving: every task at once against one model server")
                    codes = run_tasks(rec, endpoint, served, gpu, folder, now.tick)
            else:
                now.say("every task has all its iterations: importing")
    except KeyboardInterrupt:
        console.print("[yellow]stopped[/]; finished checkpoints are in the store: run the same command again "
                      f"to resume (logs: {folder})")
        return 130
    except Exception as exc:  # a model server that never got healthy, an unreachable store, ...
        console.print(f"[red]error:[/] {exc}\nlogs: {folder}")
        return EXIT_FAILURE
    bad = {task: code for task, code in codes.items() if code != 0}
    if bad:
        for task, code in bad.items():
            console.print(f"[red]{task} failed[/] (exit status {code}): see {folder}/task-{task}.log; "
                          "run again to resume")
        return EXIT_FAILURE
    try:
        uri, programs = import_recording(rec, store)
    except Exception as exc:  # a checkpoint the importer cannot read names its file
        console.print(f"[red]import failed:[/] {exc}\nlogs: {folder}")
        return EXIT_FAILURE
    shutil.rmtree(folder, ignore_errors=True)
    console.print(f"trajectory: {programs} programs with their debugger, analyzer and profiler reports -> {uri}")
    console.print(f"programs per generation (OpenEvolve's lineage depth): {per_generation(store)}", highlight=False)
    console.print(f"use it as an AttributionRun's spec.trajectory.uri: {uri}")
    return 0
