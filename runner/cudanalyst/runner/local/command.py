"""`cudanalyst run FILE`: run an AttributionRun on this machine, with live progress, then report.

The plan is the operator's; shards run as subprocesses; everything is stored under spec.output.uri
(a local folder by default). Ctrl-C stops cleanly; running the same command again resumes. The command's
arguments are the core CLI's (cudanalyst/cli/run.py), which hands the parsed command to `main` here.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from cudanalyst.cli.common import EXIT_FAILURE, EXIT_INVALID, die, ended_early, load_or_die
from cudanalyst.runfolder import OUTCOMES, REPORT_HTML, keys_under
from cudanalyst.runner.local.executor import (
    LaneServers,
    RunInputError,
    check_set_up,
    lanes_for,
    llm_stage_in_lanes,
    plans_expected,
    plans_written,
    prepare,
    read_snapshot,
    run_lanes,
    start_stage,
    wait_stage,
    work_dir,
    write_spec_file,
)
from cudanalyst.runs import PlanError

LOG_EVERY_S = 10.0
# The model server is ours and on this machine: a slow request is slow, not lost, and a retry would start it
# again from nothing (on two loaded CPU cores 16 answers took longer than the runner's default 600 s).
LOCAL_LLM_ARGS = ("--request-timeout", "3600")


class Activity:
    """What the run is doing now, in words: the notes beside the two bars, and a log file's lines.

    A small machine spends its first minute or two starting and warming up the model server, and with
    explicit planning the first candidates come only after the plans: without these notes the bars stand
    still at 0 for all that time."""

    def __init__(self, console: Console, total: int, plans: int, stage: str) -> None:
        self.console, self.total, self.plans, self.stage = console, total, plans, stage
        self.before_llm = "waiting to start" if stage != "kernels" else "not run here (--stage kernels)"
        self.llm_started = self.llm_over = False
        self._logged = (0.0, "", "")

    def say(self, text: str) -> None:
        """What happens before the LLM stage starts (the model server)."""
        self.before_llm = text
        self.log(text, force=True)

    def notes(self, snap: Any, plans_done: int) -> tuple[str, str]:
        """The LLM stage's and the kernel stage's notes for a snapshot of the shards' progress."""
        if self.llm_over:
            llm = "done; model server stopped"
        elif not self.llm_started:
            llm = self.before_llm
        elif self.plans and plans_done < self.plans:
            llm = f"writing plans {plans_done}/{self.plans}"
        else:
            llm = f"writing kernels {snap.llm.done}/{self.total}"
        if self.stage == "llm":
            kernels = "not run here (--stage llm)"
        elif snap.kernels.done >= self.total:
            kernels = "done"
        elif self.llm_over or self.stage == "kernels":
            kernels = f"checking the last candidates {snap.kernels.done}/{self.total}"
        elif snap.llm.done:
            kernels = f"compiling candidates as they come {snap.kernels.done}/{self.total}"
        else:
            kernels = "waiting for candidates"
        if snap.llm.failures:
            llm += f", failed {snap.llm.failures}"
        if snap.kernels.failures:
            kernels += f", failed {snap.kernels.failures}"
        return llm, kernels

    def log(self, line: str, force: bool = False) -> None:
        """A plain line for a log file (a terminal has the bars): on a new phase, else every LOG_EVERY_S."""
        if self.console.is_terminal:
            return
        last_at, last_line, last_phase = self._logged
        phase = " ".join(w for w in line.split()[:2] if not any(c.isdigit() for c in w))
        if line != last_line and (force or phase != last_phase or time.monotonic() - last_at >= LOG_EVERY_S):
            self.console.print(f"{time.strftime('%H:%M:%S')}  {line}", highlight=False, soft_wrap=True)
            self._logged = (time.monotonic(), line, phase)


def _interrupt_on_sigterm() -> None:
    # SIGTERM (a closed terminal, a batch system) must stop the shard children and model servers too,
    # exactly as Ctrl-C does; they run in their own sessions and would otherwise be orphaned.
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main(args: argparse.Namespace) -> int:
    _interrupt_on_sigterm()
    ar = load_or_die(args.file)
    if args.output:
        ar = ar.model_copy(update={"spec": ar.spec.model_copy(
            update={"output": ar.spec.output.model_copy(update={"uri": args.output})})})
    console = Console(stderr=True)
    try:
        check_set_up(ar, args.stage)
        plan, store = prepare(ar)
        # As this machine runs it: one lane per GPU, the shards spread over them (the folder keeps the spec).
        local, lanes = lanes_for(ar, args.gpus)
    except (PlanError, RunInputError) as exc:
        die(str(exc), EXIT_INVALID)
    shards = list(range(local.spec.resources.shards))
    where = f" on {len(lanes)} GPUs ({', '.join(str(lane.gpu) for lane in lanes)})" if len(lanes) > 1 else ""
    console.print(f"[bold]{ar.metadata.name}[/]: {len(plan.units)} units over {len(plan.programs)} frozen "
                  f"programs, {len(shards)} shard(s){where} -> {store.uri}")
    # Before any GPU time: what the frozen programs' recorded reports say of the tools behind them (issue 28).
    from cudanalyst.trajectory.toolruns import report_lines

    for line in report_lines(plan.programs):
        console.print(line, highlight=False, markup=False)
    if args.stage == "all" and {u.key for u in plan.units} <= keys_under(store, OUTCOMES):
        # Every unit has its outcome (the kernel stage's final word): a rerun has nothing to do, so it does not
        # start the model servers (a minute or more) only to find that out; the report is built again.
        console.print(f"every unit already has its outcome: nothing to run ({len(plan.units)} units)")
        if args.no_report:
            return 0
        console.print("building the report (attribution, intervals, figures)")
        return _report(store, console)
    folder = work_dir(ar)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[note]}"), TimeElapsedColumn(), TimeRemainingColumn())
    codes: dict[str, dict[int, int]] = {}
    try:
        with Progress(*columns, console=console, transient=False) as bars:
            total = len(plan.units)
            llm = bars.add_task("LLM stage", total=total, note="")
            kern = bars.add_task("kernel stage", total=total, note="")

            now = Activity(console, total, plans_expected(ar, plan), args.stage)

            def tick() -> None:
                snap = read_snapshot(store, len(shards))
                planned = plans_written(store) if now.plans and now.llm_started and not now.llm_over else 0
                llm_note, kernels_note = now.notes(snap, planned)
                bars.update(llm, completed=snap.llm.done, note=llm_note)
                gpu = f"  gpu {snap.gpu_seconds:.0f}s" if snap.gpu_seconds else ""
                bars.update(kern, completed=snap.kernels.done, note=kernels_note + gpu)
                now.log(f"{llm_note}; kernel stage: {kernels_note}")

            def servers() -> LaneServers:
                return LaneServers(local, lanes, folder, args.health_timeout, now.say)

            tick()
            if args.stage == "all":
                # Per lane (GPU): the kernel stage (the lane's shards in one process: one set of workers)
                # beside the LLM stage, compiling and verifying as candidates come; it times once the lane's
                # servers stop.
                def llm_started() -> None:
                    now.llm_started = True

                def llm_over() -> None:
                    now.llm_over = True

                codes.update(run_lanes(local, lanes, folder, tick, servers, LOCAL_LLM_ARGS, llm_started, llm_over))
            elif args.stage == "llm":
                with servers() as served:
                    now.llm_started = True
                    codes["llm"] = llm_stage_in_lanes(lanes, served.served, folder, tick, LOCAL_LLM_ARGS,
                                                      lambda lane: served.stop(lane.index))
            else:
                spec_path = write_spec_file(local, folder)
                # Per lane, its shards in one process: one set of workers per GPU; timing holds its GPU alone.
                procs = {g: p for lane in lanes for g, p in start_stage(
                    spec_path, lane.shards, len(shards), "kernels", folder, False, env=lane.env()).items()}
                codes["kernels"] = wait_stage(procs, tick)
    except (KeyboardInterrupt, Exception) as exc:  # Ctrl-C; a model server that never got healthy, a missing model
        return ended_early(exc, console, folder, "finished units are kept")
    bad = {stage: [s for s, c in c_.items() if c != 0] for stage, c_ in codes.items()}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        for stage, which in bad.items():
            invalid = any(codes[stage][s] == EXIT_INVALID for s in which)
            console.print(f"[red]{stage} stage failed[/] in shard(s) {which}: see {folder}/shard-*-{stage}.log"
                          + (" (invalid input)" if invalid else "; run again to resume"))
        return EXIT_INVALID if any(c == EXIT_INVALID for st in codes.values() for c in st.values()) else EXIT_FAILURE
    for line in stage_summaries(Path(folder)):
        console.print(line, markup=False, highlight=False)
    shutil.rmtree(folder, ignore_errors=True)  # nothing failed: the logs go (a failure keeps and names them)
    if args.stage != "all" or args.no_report:
        console.print(f"done: {args.stage} stage; store: {store.uri}")
        return 0
    console.print("building the report (attribution, intervals, figures)")
    return _report(store, console)


SUMMARY_MARKERS = {"llm": "cudanalyst-runner: LLM stage:", "kernels": "cudanalyst-runner: kernel stage:"}


def shard_summaries(folder: Path, stage: str) -> list[tuple[str, str]]:
    """(log name, summary) for each shard's one-line summary of `stage` (runner.shard prints it: where the
    stage's time went), from the logs in `folder`."""
    marker = SUMMARY_MARKERS[stage]
    return [(log.stem, line.removeprefix(marker).strip())
            for log in sorted(folder.glob(f"shard-*-{stage}.log"))
            for line in log.read_text(errors="replace").splitlines() if line.startswith(marker)]


def stage_summaries(folder: Path) -> list[str]:
    """Each shard's one-line summary of its stage, from the logs about to be removed, in the logs' order."""
    labels = {stage: marker.removeprefix("cudanalyst-runner: ") for stage, marker in SUMMARY_MARKERS.items()}
    found = [(name, f"{name}: {labels[stage]} {text}") for stage in SUMMARY_MARKERS
             for name, text in shard_summaries(folder, stage)]
    return [line for _, line in sorted(found)]


def _report(store, console: Console) -> int:  # type: ignore[no-untyped-def]
    from cudanalyst.report import build_report, render_table

    report = build_report(store)
    # One generation and one task: the pooled game has no interval (tasks are its unit), while the
    # generation's game has one over its programs; it is the same data, so show the table with intervals.
    generations = list(report.get("generations") or [])
    render_table(report, console=Console(), generation=generations[0] if len(generations) == 1 else None)
    from cudanalyst.report.compute import summary_lines

    for line in summary_lines(report):  # each names the cause the records give, never a guess
        console.print(f"[yellow]{line}[/]", highlight=False)
    console.print(f"report: {report.get('htmlUri', store.uri_of(REPORT_HTML))}")
    Console().print("\n" + what_you_saw(report), highlight=False)
    return 0


def _units(report: dict[str, Any]) -> tuple[int, int]:
    """(outcomes, outcomes that compiled), over every arm."""
    labels = [arm for arm in (report.get("units") or {}).get("labels", {}).values()]
    outcomes = sum(sum(arm.values()) for arm in labels)
    compiled = sum(arm.get("compile", 0) + arm.get("pass", 0) + arm.get("fast", 0) for arm in labels)
    return outcomes, compiled


def what_you_saw(report: dict[str, Any]) -> str:
    """The closing paragraph: what the run did, how to read the table, and what to run next."""
    spec = (report.get("provenance") or {}).get("spec") or {}
    players = list(report.get("players") or [])
    programs = sum(t.get("programs", 0) for t in report.get("tasks") or [])
    tasks = ", ".join(t["task"] for t in report.get("tasks") or [])
    coder = ((spec.get("models") or {}).get("coder") or (spec.get("models") or {}).get("planner") or {}).get("model")
    outcomes, compiled = _units(report)
    pct = f"{float(report.get('confidence', 0.95)) * 100:g}%"
    best = None
    one_generation = len(report.get("generations") or []) == 1
    for game in (report.get("attribution") or {}).get("games", []):
        if game.get("evaluated") and (not game.get("pooled") if one_generation else game.get("pooled")):
            for player, est in (game.get("banzhaf") or {}).items():
                if est.get("value") is not None and (best is None or abs(est["value"]) > abs(best[2])):
                    best = (game["metric"], player, est["value"])
    few = f" (only {programs} here, so they are wide)" if programs < 5 else ""
    text = (f"What you saw: {coder or 'the model'} revised {programs} frozen program(s) of {tasks or 'the task'} "
            f"under all {2 ** len(players)} coalitions of {', '.join(players)} and wrote {outcomes} kernels; "
            f"{compiled} compiled. Each cell is a Banzhaf value: how much adding a player's feedback to a coalition "
            f"changes the rate, averaged over the coalitions, with a {pct} interval over frozen programs{few}.")
    if best is not None and best[2] != 0:
        text += f" Here the {best[1]} moved `{best[0]}` most ({best[2]:+.2f})."
    if report.get("notEvaluated"):
        text += f" Without a GPU, {' and '.join(report['notEvaluated'])} were not evaluated."
    text += (" Next: `cudanalyst run examples/h200-pipeline.yaml` on a GPU machine (README: \"On one GPU machine\"),"
             " or `scripts/dev-cluster.sh up` and the README's cluster commands to see the operator.")
    return text

