"""`cudanalyst-runner`: run one shard of an AttributionRun (the LLM stage, the kernel stage, or both).

  cudanalyst-runner --spec run.yaml --shard I --of N [--stage llm|kernels|all]
  cudanalyst-runner --spec run.yaml --shard 0,1,2,3 --of 4 --stage kernels

The stages meet only in the run's store: the LLM stage writes candidates/<unit>.json, the kernel
stage reads them and writes outcomes/<unit>.json, so they can run on different machines. Finished
units are never redone; a restarted shard continues where the last one stopped.

The kernel stage may take several shards in one process (a comma-separated `--shard`): on one machine
with one GPU (`cudanalyst run`) that is one compile pool and one set of GPU workers, with their cached
references, for all the shards, instead of a fresh set per shard. Each shard keeps its own progress.

Exit status: 0 every unit of the shard finished the requested stages; 1 some did not (their reasons
are in errors/<unit>.json and progress/shard-<i>.json; run the same command again to resume);
2 invalid input (spec, shard numbers, trajectory, unknown task).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from cudanalyst.api import AttributionRun, SpecError, load_run
from cudanalyst.outcomes import UnitOutcome, unit_identity
from cudanalyst.plan import Unit, shard_units
from cudanalyst.planned_run import PlanError, PlannedRun
from cudanalyst.runfolder import feedback_key, run_secret
from cudanalyst.runner.kernels.limits import first_attempt_seconds
from cudanalyst.runner.llm.client import ClientSettings
from cudanalyst.runner.llm.credentials import CredentialError, check_keys, forget_keys, read_keys
from cudanalyst.runner.llm.model_servers import StageSettings
from cudanalyst.runner.llm.serving import DEFAULT_HEALTH_TIMEOUT_S, SERVED_HERE_ANNOTATION
from cudanalyst.runner.llm.stage import LlmStage
from cudanalyst.runner.units import Failure, ProgressTracker, UnitStore
from cudanalyst.store import ObjectNotFound, StoreError
from cudanalyst.tasks import UnknownTaskError, get_task
from cudanalyst.trajectory import FrozenProgram
from cudanalyst.trajectory.toolruns import HOST_PLAYER, ToolRun, classify, report_lines

log = logging.getLogger("cudanalyst.runner")

EXIT_OK, EXIT_UNFINISHED, EXIT_INVALID = 0, 1, 2
PROGRESS_EVERY_S = 2.0  # how often the kernel stage rewrites progress objects while outcomes stream in
FOLLOW_POLL_S = 1.0  # how often a kernel stage beside the LLM stage looks for new candidates
SIDE_JOB_NICE = 10  # nvcc and GPU workers beside a model server run at this lower CPU priority


class InvalidInput(ValueError):
    """Input the shard cannot run with; exit status 2."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="cudanalyst-runner", description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", required=True, help="AttributionRun YAML or JSON file")
    p.add_argument("--shard", default=None,
                   help="shard index 0..N-1 (default: $JOB_COMPLETION_INDEX, as set in an Indexed Job); "
                        "with --stage kernels also a comma-separated list of indexes")
    p.add_argument("--of", type=int, required=True, dest="of", help="number of shards (spec.resources.shards)")
    p.add_argument("--stage", choices=("llm", "kernels", "all"), default="all")
    p.add_argument("--health-timeout", type=float, default=DEFAULT_HEALTH_TIMEOUT_S,
                   help="seconds to wait for a local vLLM server's /health (default %(default)s)")
    p.add_argument("--concurrency", type=int, default=ClientSettings.concurrency,
                   help="requests in flight per model server (default %(default)s)")
    p.add_argument("--request-timeout", type=float, default=ClientSettings.timeout_s,
                   help="seconds per request before it is retried (default %(default)s)")
    p.add_argument("--retries", type=int, default=ClientSettings.retries,
                   help="retries of a request on connection errors and 5xx (default %(default)s)")
    p.add_argument("--outage-timeout", type=float, default=ClientSettings.outage_s,
                   help="seconds a serve: endpoint model may answer only 429/5xx before its requests give up "
                        "(units stay pending; default %(default)s)")
    p.add_argument("--log-dir", default=None, help="folder for vLLM server logs (default: a temp folder)")
    p.add_argument("--follow", metavar="FILE", default=None,
                   help="with --stage kernels: start beside the LLM stage, compiling and verifying candidates as "
                        "they are stored, until FILE exists (the LLM stage is over and the GPU free); then time")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.shard is None:
        env = os.environ.get("JOB_COMPLETION_INDEX")
        if env is None or not env.isdigit():
            p.error("--shard is required (or set JOB_COMPLETION_INDEX)")
        args.shard = env
    parts = [x.strip() for x in str(args.shard).split(",")]
    if not all(x.isdigit() for x in parts) or len(set(parts)) != len(parts):
        p.error(f"--shard {args.shard!r}: expected an index or distinct comma-separated indexes")
    args.shards = [int(x) for x in parts]
    if len(args.shards) > 1 and args.stage != "kernels":
        p.error("several shards in one process only with --stage kernels")
    if args.follow and args.stage != "kernels":
        p.error("--follow only with --stage kernels")
    args.shard = args.shards[0]
    return args


def check_tasks(programs: Sequence[FrozenProgram]) -> None:
    for task in sorted({p.task for p in programs}):
        try:
            get_task(task)
        except UnknownTaskError as exc:
            raise InvalidInput(f"trajectory: {exc}") from None


def recomputed_feedback(run: AttributionRun, program: FrozenProgram, store: UnitStore) -> dict[str, str]:
    """The tools' reports of one frozen program: from feedback/<programId>.json, else computed once and stored."""
    return recomputed_feedback_typed(run, program, store)[0]


def recomputed_feedback_typed(run: AttributionRun, program: FrozenProgram,
                              store: UnitStore) -> tuple[dict[str, str], dict[str, ToolRun]]:
    """(reports, how each GPU tool ran): from feedback/<programId>.json, else computed once and stored.
    A file written before issue 28 has no `tools`; its texts are read instead (toolruns.classify)."""
    key = feedback_key(program.program_id)
    try:
        cached = store.store.get_json(key)
        reports = cached.get("reports", cached) if isinstance(cached, dict) else {}
        texts = {str(k): str(v) for k, v in reports.items() if isinstance(v, str)}
        typed = cached.get("tools") if isinstance(cached, dict) else None
        runs = ({str(k): ToolRun.model_validate(v) for k, v in typed.items()} if isinstance(typed, dict)
                else classify(texts))
        return texts, runs
    except ObjectNotFound:
        pass
    from cudanalyst.runner.kernels.stage import feedback_with_tools

    reports, runs = feedback_with_tools(program.task, program.source, run.spec.evaluation, gpu=None)
    store.store.put_json_if_absent(key, {"programId": program.program_id, "reports": reports,
                                         "tools": {k: v.model_dump(by_alias=True) for k, v in runs.items()},
                                         "computedBy": "cudanalyst-runner"})
    return reports, runs


def fill_feedback(run: AttributionRun, programs: Sequence[FrozenProgram], needed: set[str],
                  store: UnitStore) -> list[FrozenProgram]:
    """Programs whose recorded feedback lacks a shown player get the tools' report for it.

    Recorded reports always win; the tools run only for the gaps, before any model server starts, so
    no GPU work of theirs overlaps the LLM's. A program the tools cannot analyse keeps its gaps (the
    prompt then says the player produced no report) and the reason is logged.
    """
    shown = [p for p in run.spec.players if run.spec.mode_of(p) != "off"]
    out = []
    for program in programs:
        missing = [p for p in shown if p not in program.feedback]
        if program.program_id not in needed or not missing:
            out.append(program)
            continue
        try:
            reports, runs = recomputed_feedback_typed(run, program, store)
        except (ImportError, RuntimeError, OSError, ValueError) as exc:
            log.warning("feedback of %s could not be recomputed: %s", program.program_id, exc)
            out.append(program)
            continue
        merged = {**{p: reports[p] for p in missing if p in reports}, **program.feedback}
        # A tool's run is typed from the reports that carry it: recorded ones keep what they say.
        hosts = {t: HOST_PLAYER[t] for t in runs if HOST_PLAYER.get(t) in missing and HOST_PLAYER[t] in reports}
        tools = {**program.tools, **{t: runs[t] for t in hosts}}
        out.append(program.model_copy(update={"feedback": merged, "tools": tools}))
    return out


def run_kernel_stage(run: AttributionRun, programs: dict[str, FrozenProgram], units: Sequence[Unit],
                     store: UnitStore, progress: ProgressTracker | dict[int, ProgressTracker],
                     shard_of: dict[str, int] | None = None,
                     follow: Callable[[], bool] | None = None) -> list[Failure]:
    """The kernel stage (kernels/stage.py) over the candidates of `units` that have no outcome yet.

    Outcomes are written as each one is final. `progress` is one shard's, or one per shard with
    `shard_of` mapping each unit key to its shard (several shards in one process). With `follow`, the
    stage runs beside the LLM stage: it takes in candidates as they are stored (compiling and
    verifying them at once) until `follow()` says the LLM stage is over, then takes the rest and times."""
    progresses = progress if isinstance(progress, dict) else {progress.shard: progress}
    owner = shard_of or {u.key: next(iter(progresses)) for u in units}
    open_units = {u.key: u for u in units if u.key not in store.finished_outcomes()}
    if not open_units:
        return []
    try:
        from cudanalyst.runner.kernels import stage as kernels
    except ImportError as exc:
        return [Failure("kernels", "unavailable", f"the kernel stage cannot be loaded: {exc}",
                        sorted(k for k in open_units if k in store.finished_candidates()))]
    submitted: set[str] = set()
    written: set[str] = set()
    keys_of = {shard: {k for k, s in owner.items() if s == shard} for shard in progresses}  # once, not per look
    last_progress = [time.monotonic()]

    def write_progress(force: bool = False) -> None:
        if force or time.monotonic() - last_progress[0] > PROGRESS_EVERY_S:
            last_progress[0] = time.monotonic()
            for shard, prog in progresses.items():
                store.write_progress(shard, prog)

    def store_outcome(record: UnitOutcome) -> None:
        p = progresses[owner[record.key]]
        if store.write_outcome(record):
            p.kernels_done += 1
        p.gpu_seconds += record.gpu_seconds
        written.add(record.key)
        write_progress()

    def new_jobs() -> list[Any]:
        finished = store.finished_candidates()
        if follow is not None:  # the LLM stage writes candidates meanwhile: its count, read from the store
            for shard, prog in progresses.items():
                prog.llm_done = len(finished & keys_of[shard])
        jobs = []
        for key in sorted((finished & set(open_units)) - submitted):
            record = store.read_candidate(key)
            u = open_units[key]
            submitted.add(key)
            jobs.append(kernels.KernelJob(key=u.key, task=u.task, source=record.code,
                                          frozen_source=programs[u.program_id].source,
                                          unit=unit_identity(u, run.metadata.name)))
        return jobs

    t0 = time.monotonic()
    failures: list[Failure] = []
    phases: dict[str, Any] = {}
    try:
        # Beside the LLM stage, the model server and its clients come first.
        nice = SIDE_JOB_NICE if follow is not None else 0
        # The inputs derive from the run folder's secret (written when the run started), never from the spec.
        secret = run_secret(store.store, run.spec.evaluation)
        # A brief first attempt is for verifications beside the model server only (limits.py): off unless set.
        first_attempt_s = first_attempt_seconds(os.environ) if follow is not None else None
        with kernels.KernelStage(run.spec.evaluation, on_outcome=store_outcome, phases=phases,
                                 nice=nice, secret=secret, first_attempt_s=first_attempt_s) as stage:
            while True:
                over = follow is None or follow()  # asked before listing: nothing stored after it is missed
                stage.add(new_jobs())
                if over:
                    break
                write_progress()
                waited = time.monotonic()
                stage.poll(timeout=FOLLOW_POLL_S)
                time.sleep(max(0.0, FOLLOW_POLL_S - (time.monotonic() - waited)))
            stage.finish()
    except Exception as exc:  # noqa: BLE001 - a broken stage fails the shard with its reason, units stay open
        failures.append(Failure("kernels", "error", f"{type(exc).__name__}: {exc}", sorted(submitted - written)))
    else:
        if missing := submitted - written:
            failures.append(Failure("kernels", "missing", "the kernel stage returned no result", sorted(missing)))
    # On stderr (the shard's log), so a user sees where the stage's time went without -v.
    print(f"cudanalyst-runner: kernel stage: {len(written)} of {len(submitted)} candidates in "
          f"{time.monotonic() - t0:.1f} s (compile and verify {phases.get('compileAndVerify', 0.0):.1f} s, "
          f"{int(phases.get('verifiedBefore', 0))} verdicts found stored, {_costs(phases)}, "
          f"{int(phases.get('workerRestarts', 0))} worker restarts taking {phases.get('restartSeconds', 0.0):.1f} s, "
          f"{kernels.tail_summary(phases)}"
          f"timing {int(phases.get('timed', 0))} correct ones {phases.get('timing', 0.0):.1f} s "
          f"({int(phases.get('timedCopies', 0))} shared the timing of the same cubin, "
          f"{int(phases.get('tooSlowToTime', 0))} too slow after their warm-up to be fast, not timed): "
          f"{int(phases.get('timingRequests', 0))} requests, {phases.get('timingWorker', 0.0):.1f} s in the worker "
          f"of which {phases.get('timingPrep', 0.0):.1f} s loading ({int(phases.get('madeTaskData', 0))} task data "
          f"made); units per reference {phases.get('references', {})}; "
          f"fences {phases.get('fences', 'unused')}: audits {phases.get('verifyAuditSeconds', 0.0):.1f} s in verification, "
          f"{phases.get('timingAuditSeconds', 0.0):.1f} s of GPU in timing, {int(phases.get('fenceReruns', 0))} timing "
          f"reruns without a culprit, {int(phases.get('rebuiltTaskData', 0))} kept task data rebuilt; "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')})",  # which GPU, in local mode's lanes
          file=sys.stderr)
    return failures


def _costs(phases: dict[str, Any]) -> str:
    """What the compiles and verifications cost where they ran, and how busy that kept the GPU workers: the
    one of the two near its capacity is what holds a lane's kernel stage behind its LLM stage."""
    wall, workers = phases.get("compileAndVerify", 0.0), phases.get("gpuWorkers", 0)
    text = (f"nvcc {int(phases.get('compiles', 0))} runs summing {phases.get('compileSeconds', 0.0):.1f} s, "
            f"verification {int(phases.get('verifications', 0))} runs summing {phases.get('verifySeconds', 0.0):.1f} s "
            "in the GPU workers")
    if workers and wall > 0:
        text += f" ({100 * phases.get('verifySeconds', 0.0) / (workers * wall):.0f} % of {workers} workers' time)"
    return text


def _split_failures(failures: Sequence[Failure], shard_of: dict[str, int], shard: int) -> list[Failure]:
    """The failures that concern one shard (a failure naming no unit concerns every shard)."""
    out = []
    for f in failures:
        mine = [k for k in f.units if shard_of.get(k) == shard]
        if mine or not f.units:
            out.append(Failure(f.stage, f.kind, f.reason, mine))
    return out


def run_shard(args: argparse.Namespace) -> int:
    shards: list[int] = getattr(args, "shards", None) or [args.shard]
    try:
        planned = PlannedRun.resolve(load_run(args.spec))
        run, plan = planned.run, planned.plan
        units_of = {s: shard_units(plan, s, args.of) for s in shards}
        check_tasks(plan.programs)
    except (SpecError, PlanError, InvalidInput, ValueError) as exc:
        print(f"cudanalyst-runner: {exc}", file=sys.stderr)
        return EXIT_INVALID
    store = UnitStore(planned.store)
    stages = ["llm", "kernels"] if args.stage == "all" else [args.stage]
    candidates, outcomes = store.finished_candidates(), store.finished_outcomes()
    progresses: dict[int, ProgressTracker] = {}
    shard_of: dict[str, int] = {}
    for s, units in units_of.items():
        keys = {u.key for u in units}
        shard_of.update(dict.fromkeys(keys, s))
        progresses[s] = ProgressTracker(s, args.of, len(units), stages=stages)
        progresses[s].llm_done = len(candidates & keys)
        progresses[s].kernels_done = len(outcomes & keys)
        store.write_progress(s, progresses[s])
    programs = {p.program_id: p for p in plan.programs}
    failures: list[Failure] = []

    if "llm" in stages:  # one shard (parse_args allows several only for the kernel stage)
        units, progress = units_of[args.shard], progresses[args.shard]
        # A unit with an outcome is done even when its candidate is gone (a packed folder leaves those out).
        pending = [u for u in units if u.key not in candidates and u.key not in outcomes]
        log.info("shard %d/%d: %d units, %d pending for the LLM stage", args.shard, args.of, len(units), len(pending))
        # Donors of randomized feedback may be any program of the run; otherwise only the shard's own.
        needed = ({p.program_id for p in plan.programs} if "randomizedFeedback" in run.spec.controls
                  else {u.program_id for u in pending})
        try:  # before any unit is spent: every key there, and taken by its endpoint
            keys = read_keys(run.spec) if pending else {}
            forget_keys(run.spec)
            if pending:
                check_keys(run.spec, keys)
        except CredentialError as exc:
            print(f"cudanalyst-runner: {exc}", file=sys.stderr)
            progress.failures, progress.state = [Failure("llm", "llm:credentials", str(exc), [])], "failed"
            store.write_progress(args.shard, progress)  # the reason where `cudanalyst run` and a reader look
            return EXIT_INVALID
        with_feedback = fill_feedback(run, plan.programs, needed, store) if pending else plan.programs
        for line in report_lines([p for p in with_feedback if p.program_id in needed]):  # issue 28
            print(f"cudanalyst-runner: {line}", file=sys.stderr)
        settings = StageSettings(
            health_timeout_s=args.health_timeout,
            client=ClientSettings(concurrency=args.concurrency, retries=args.retries, timeout_s=args.request_timeout,
                                  outage_s=getattr(args, "outage_timeout", ClientSettings.outage_s)),
            log_dir=args.log_dir, s3=planned.s3, api_keys=keys, shard=args.shard, shards=args.of,
            served_here=frozenset(run.metadata.annotations.get(SERVED_HERE_ANNOTATION, "").split()),
        )
        llm = LlmStage(run, with_feedback, pending, store, progress, args.shard, settings)
        failures += llm.run_stage()
        if pending:  # on stderr (the shard's log), as the kernel stage's line
            print(f"cudanalyst-runner: LLM stage: {llm.time_note()}", file=sys.stderr)
    forget_keys(run.spec)  # a kernel stage of its own: no key reaches nvcc, the workers or the tools
    if "kernels" in stages:
        every = [u for s in shards for u in units_of[s]]
        marker = getattr(args, "follow", None)
        follow = (lambda: os.path.exists(marker)) if marker else None
        failures += run_kernel_stage(run, programs, every, store, progresses, shard_of, follow)

    for s, progress in progresses.items():
        progress.failures = _split_failures(failures, shard_of, s)
        progress.state = "failed" if progress.failures else "succeeded"
        store.write_progress(s, progress)
    for f in failures:
        print(f"cudanalyst-runner: {f.stage} {f.kind}: {len(f.units)} unit(s) unfinished: {f.reason}", file=sys.stderr)
    if any(f.kind.endswith(":refused") for f in failures):
        return EXIT_INVALID  # a key refused mid-run: running again with the same key will not help
    return EXIT_UNFINISHED if failures else EXIT_OK


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # Kubernetes stops a pod with SIGTERM; unwinding (instead of dying at once) stops the model server
    # started in its own process group, which would otherwise outlive the runner.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return run_shard(args)
    except StoreError as exc:
        print(f"cudanalyst-runner: object store: {exc}", file=sys.stderr)
        return EXIT_UNFINISHED


if __name__ == "__main__":
    sys.exit(main())
