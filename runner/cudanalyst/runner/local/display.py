"""What `cudanalyst run` shows on the terminal (or writes to a log file): the two stages' bars and notes, the
shards' summaries, the report's table and closing paragraph; and what `run` and `record` say when they end
early. The orchestration is command.py's; this module only reads the run folder and prints."""

from __future__ import annotations

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

from cudanalyst.exits import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_INVALID
from cudanalyst.plan import strata_line
from cudanalyst.planned_run import PlannedRun
from cudanalyst.runfolder import REPORT_HTML
from cudanalyst.runner.local.executor import Snapshot, plans_expected, plans_written, read_snapshot
from cudanalyst.store import ObjectStore
from cudanalyst.trajectory.toolruns import report_lines
from cudanalyst.usage import lines as usage_lines

LOG_EVERY_S = 10.0
SUMMARY_MARKERS = {"llm": "cudanalyst-runner: LLM stage:", "kernels": "cudanalyst-runner: kernel stage:"}


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

    def notes(self, snap: Snapshot, plans_done: int) -> tuple[str, str]:
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
        if snap.waiting and not self.llm_over:
            llm += f", waiting out an endpoint's outage: {snap.waiting}"
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


class RunDisplay:
    """The two bars (LLM stage, kernel stage) of one pass, redrawn from the run folder on each `tick()`; the
    orchestration tells it what happens (`say`, `llm_started`, `llm_over`). A context manager, like rich's
    Progress it wraps."""

    COLUMNS = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[note]}"), TimeElapsedColumn(), TimeRemainingColumn())

    def __init__(self, console: Console, planned: PlannedRun, stage: str) -> None:
        self.store, self.shards = planned.store, planned.run.spec.resources.shards
        total = len(planned.plan.units)
        self.activity = Activity(console, total, plans_expected(planned), stage)
        self.bars = Progress(*self.COLUMNS, console=console, transient=False)
        self.llm = self.bars.add_task("LLM stage", total=total, note="")
        self.kernels = self.bars.add_task("kernel stage", total=total, note="")

    def __enter__(self) -> RunDisplay:
        self.bars.__enter__()
        self.tick()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.__exit__(None, None, None)

    def tick(self) -> None:
        now = self.activity
        snap = read_snapshot(self.store, self.shards)
        planned = plans_written(self.store) if now.plans and now.llm_started and not now.llm_over else 0
        llm_note, kernels_note = now.notes(snap, planned)
        self.bars.update(self.llm, completed=snap.llm.done, note=llm_note)
        gpu = f"  gpu {snap.gpu_seconds:.0f}s" if snap.gpu_seconds else ""
        self.bars.update(self.kernels, completed=snap.kernels.done, note=kernels_note + gpu)
        now.log(f"{llm_note}; kernel stage: {kernels_note}")

    def say(self, text: str) -> None:
        self.activity.say(text)

    def llm_started(self) -> None:
        self.activity.llm_started = True

    def llm_over(self) -> None:
        self.activity.llm_over = True


def show_start(console: Console, planned: PlannedRun, gpus: list[str]) -> None:
    plan = planned.plan
    where = f" on {len(gpus)} GPUs ({', '.join(gpus)})" if len(gpus) > 1 else ""
    console.print(f"[bold]{planned.name}[/]: {len(plan.units)} units over {len(plan.programs)} frozen programs, "
                  f"{planned.run.spec.resources.shards} shard(s){where} -> {planned.store.uri}")
    if plan.draws:
        console.print(strata_line(plan.draws), highlight=False, markup=False)
    # Before any GPU time: what the frozen programs' recorded reports say of the tools behind them (issue 28).
    for line in report_lines(plan.programs):
        console.print(line, highlight=False, markup=False)


def show_failed_stages(console: Console, codes: dict[str, dict[int, int]], folder: str,
                       planned: PlannedRun | None = None) -> int:
    """Name the shards each stage failed in and where their logs are, with the shards' own reasons from the run
    folder (read only when something failed); the exit status (2 if any input was invalid, else 1), or 0."""
    bad = {stage: [s for s, c in by_shard.items() if c != 0] for stage, by_shard in codes.items()}
    bad = {k: v for k, v in bad.items() if v}
    for stage, which in bad.items():
        invalid = any(codes[stage][s] == EXIT_INVALID for s in which)
        console.print(f"[red]{stage} stage failed[/] in shard(s) {which}: see {folder}/shard-*-{stage}.log"
                      + (" (invalid input)" if invalid else "; run again to resume"))
    if not bad:
        return 0
    reasons = read_snapshot(planned.store, len(planned.plan.shards)).reasons if planned else []
    for reason in reasons[:5]:  # the shards' own words (a refused key, an endpoint's outage)
        console.print(f"  {reason}", markup=False, highlight=False)
    return EXIT_INVALID if any(c == EXIT_INVALID for st in codes.values() for c in st.values()) else EXIT_FAILURE


def ended_early(exc: BaseException, console: Any, logs: object, kept: str) -> int:
    """What `cudanalyst run` and `record` print and exit with when Ctrl-C (or an error) ends a pass early:
    what is kept and how to resume, or the error, and where the logs are."""
    if isinstance(exc, KeyboardInterrupt):
        console.print(f"[yellow]stopped[/]; {kept}: run the same command again to resume (logs: {logs})")
        return EXIT_INTERRUPTED
    console.print(f"[red]error:[/] {exc}\nlogs: {logs}")
    return EXIT_FAILURE


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


def show_report(store: ObjectStore, console: Console) -> int:
    """Build the report (attribution, intervals, figures), print its table and what it says, and where it is."""
    from cudanalyst.report import build_report, render_table
    from cudanalyst.report.compute import summary_lines

    console.print("building the report (attribution, intervals, figures)")
    report = build_report(store)
    # One generation and one task: the pooled game has no interval (tasks are its unit), while the
    # generation's game has one over its programs; it is the same data, so show the table with intervals.
    generations = list(report.get("generations") or [])
    render_table(report, console=Console(), generation=generations[0] if len(generations) == 1 else None)
    for line in summary_lines(report):  # each names the cause the records give, never a guess
        console.print(f"[yellow]{line}[/]", highlight=False)
    for line in usage_lines(report.get("usage") or {}):  # tokens per stage, and the cost where priced
        console.print(line, highlight=False)
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

