"""`cudanalyst run FILE`: run an AttributionRun on this machine, then report.

The orchestration of one pass: the run is resolved once (`PlannedRun`: spec, S3 settings, store, plan) for this
machine's lanes (one per GPU), its folder prepared, and then the stages run as the executor's subprocesses.
What the terminal shows is display.py's; the command's arguments are commands.py's. Ctrl-C stops cleanly;
running the same command again resumes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
from pathlib import Path
from typing import Protocol

from rich.console import Console

from cudanalyst.api import AttributionRun
from cudanalyst.exits import EXIT_INVALID, die
from cudanalyst.planned_run import PlanError, PlannedRun
from cudanalyst.runfolder import OUTCOMES, keys_under
from cudanalyst.runner.llm import timeline as llm_timeline
from cudanalyst.runner.llm.server_metrics import ServerMeter
from cudanalyst.runner.local.clock import WallClock
from cudanalyst.runner.local.display import (
    RunDisplay,
    ended_early,
    show_failed_stages,
    show_report,
    show_start,
    stage_summaries,
)
from cudanalyst.runner.local.executor import (
    LaneServers,
    RunInputError,
    check_set_up,
    lanes_for,
    llm_stage_in_lanes,
    prepare_planned,
    run_lanes,
    stage_to_run,
    start_stage,
    wait_stage,
    work_dir,
    write_spec_file,
)
from cudanalyst.runner.local.gpus import Lane, split_shards
from cudanalyst.store import StoreError

# The model server is ours and on this machine: a slow request is slow, not lost, and a retry would start it
# again from nothing (on two loaded CPU cores 16 answers took longer than the runner's default 600 s).
LOCAL_LLM_ARGS = ("--request-timeout", "3600")

Codes = dict[str, dict[int, int]]  # {stage: {shard: exit status}}


class Watcher(Protocol):
    """Who hears how a pass goes (display.RunDisplay on a terminal)."""

    def tick(self) -> None: ...
    def say(self, text: str) -> None: ...
    def llm_started(self) -> None: ...
    def llm_over(self) -> None: ...


def _interrupt_on_sigterm() -> None:
    # SIGTERM (a closed terminal, a batch system) must stop the shard children and model servers too,
    # exactly as Ctrl-C does; they run in their own sessions and would otherwise be orphaned.
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def resolve(run: AttributionRun, args: argparse.Namespace) -> tuple[PlannedRun, list[Lane], str]:
    """The run as this machine executes it (its shards spread over the lanes), planned once and its folder
    prepared, and the stages this pass runs (stage_to_run); bad input exits 2 before any work."""
    try:
        local, lanes = lanes_for(run, args.gpus)
        planned = PlannedRun.resolve(local)  # planned once: the stage and the folder's preparation both use it
        stage = stage_to_run(planned, args.stage)
        per_gpu = getattr(args, "servers_per_gpu", 1)
        if stage != "kernels":  # every GPU's shards dealt over its model servers, one each at least
            try:
                for lane in lanes:
                    split_shards(lane.shards, per_gpu)
            except ValueError as exc:
                raise RunInputError(f"--servers-per-gpu {per_gpu}: {exc}") from None
        check_set_up(run, stage)
        return prepare_planned(planned, stage), lanes, stage
    except StoreError as exc:  # the output folder's URI (the trajectory's errors are PlanErrors)
        die(f"output folder {run.spec.output.uri!r} is not usable: {exc}", EXIT_INVALID)
    except (PlanError, RunInputError) as exc:
        die(str(exc), EXIT_INVALID)


class Timed:
    """A watcher that also marks the wall clock (clock.py) and samples the model servers' own figures over the LLM
    stage (llm/server_metrics.py)."""

    def __init__(self, watcher: Watcher, clock: WallClock) -> None:
        self.watcher, self.clock = watcher, clock
        self.lane_servers: LaneServers | None = None
        self.meter: ServerMeter | None = None

    def tick(self) -> None:
        self.watcher.tick()

    def say(self, text: str) -> None:
        self.watcher.say(text)

    def llm_started(self) -> None:
        self.clock.mark("llm")
        if self.lane_servers is not None:
            self.clock.notes += self.lane_servers.start_notes()
            servers = self.lane_servers.servers
            self.meter = ServerMeter([s.endpoint.root for s in servers],
                                     [s.endpoint.root for s in servers if s.api_servers > 1])
            self.meter.start()
        self.watcher.llm_started()

    def llm_over(self) -> None:
        self.clock.mark("llmOver")
        if self.meter is not None:
            self.meter.stop()
            self.clock.server = self.meter.summary()
        self.watcher.llm_over()


def run_stages(planned: PlannedRun, lanes: list[Lane], stage: str, folder: str, watcher: Watcher,
               health_timeout: float, clock: WallClock | None = None, servers_per_gpu: int = 1) -> Codes:
    """The stages asked for, over the lanes: both (each lane's kernel stage beside its LLM stage), the LLM stage
    alone, or the kernel stage alone over candidates already stored. `clock` gets the marks of the user's clock;
    `servers_per_gpu` sets of model servers share each lane's GPU (LaneServers)."""
    run, codes = planned.run, Codes()
    timed = Timed(watcher, clock or WallClock())

    def servers() -> LaneServers:
        timed.lane_servers = LaneServers(planned, lanes, folder, health_timeout, watcher.say, servers_per_gpu)
        return timed.lane_servers

    if stage == "all":
        # Per lane (GPU): the kernel stage (the lane's shards in one process: one set of workers) beside the LLM
        # stage, compiling and verifying as candidates come; it times once the lane's LLM stage is over.
        codes.update(run_lanes(run, lanes, folder, watcher.tick, servers, LOCAL_LLM_ARGS, timed.llm_started,
                               timed.llm_over))
        timed.clock.mark("kernelsOver")
    elif stage == "llm":
        with servers() as served:
            timed.llm_started()
            codes["llm"] = llm_stage_in_lanes(lanes, served.served, folder, watcher.tick, LOCAL_LLM_ARGS,
                                              lambda lane: served.stop(lane.index))
            timed.llm_over()
    else:
        spec_path = write_spec_file(run, folder)
        # Per lane, its shards in one process: one set of workers per GPU; timing holds its GPU alone.
        of = run.spec.resources.shards
        procs = {g: p for lane in lanes
                 for g, p in start_stage(spec_path, lane.shards, of, "kernels", folder, False, env=lane.env()).items()}
        codes["kernels"] = wait_stage(procs, watcher.tick)
        timed.clock.mark("kernelsOver")
    return codes


def show_clock(console: Console, clock: WallClock, timings: str | None) -> None:
    """The wall-time table, last (and as JSON to `timings`, for bench/pipeline.py)."""
    clock.mark("end")
    for line in clock.lines():  # whole lines, as a log file gets them: a wrapped table is hard to read
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if timings:
        Path(timings).write_text(json.dumps(clock.to_json(), indent=2))


def main(run: AttributionRun, args: argparse.Namespace) -> int:
    """`cudanalyst run`: `run` is the spec file as loaded (commands.py), `args` the command's other arguments."""
    _interrupt_on_sigterm()
    console = Console(stderr=True)
    clock = WallClock()
    timings = getattr(args, "timings", None)
    planned, lanes, stage = resolve(run, args)
    done = keys_under(planned.store, OUTCOMES)
    clock.units = len({u.key for u in planned.plan.units} - done)  # this pass's: a resumed one's rate is of its own
    show_start(console, planned, [str(lane.gpu) for lane in lanes])
    if args.stage == "all" and not clock.units:
        # Every unit has its outcome (the kernel stage's final word): a rerun has nothing to do, so it does not
        # start the model servers (a minute or more) only to find that out; the report is built again.
        console.print(f"every unit already has its outcome: nothing to run ({len(planned.plan.units)} units)")
        return 0 if args.no_report else show_report(planned.store, console)
    if stage != args.stage:
        console.print("every unit left already has its candidate: the kernel stage alone, no model server started",
                      soft_wrap=True)
    folder = work_dir(planned.run)
    try:
        with RunDisplay(console, planned, stage) as display:
            codes = run_stages(planned, lanes, stage, folder, display, args.health_timeout, clock,
                               getattr(args, "servers_per_gpu", 1))
    except (KeyboardInterrupt, Exception) as exc:  # Ctrl-C; a model server that never got healthy, a missing model
        return ended_early(exc, console, folder, "finished units are kept")
    if failed := show_failed_stages(console, codes, folder, planned):
        return failed
    for line in stage_summaries(Path(folder)):
        console.print(line, markup=False, highlight=False)
    clock.llm = llm_timeline.merge(folder)
    if getattr(args, "keep_logs", False):  # a bench, or a user looking into a run that went well
        console.print(f"logs kept: {folder}", soft_wrap=True, markup=False, highlight=False)
    else:
        shutil.rmtree(folder, ignore_errors=True)  # nothing failed: the logs go (a failure keeps and names them)
    if args.stage != "all" or args.no_report:
        console.print(f"done: {args.stage} stage; store: {planned.store.uri}")
        show_clock(console, clock, timings)
        return 0
    clock.mark("report")
    status = show_report(planned.store, console)
    clock.mark("reportOver")
    show_clock(console, clock, timings)
    return status
