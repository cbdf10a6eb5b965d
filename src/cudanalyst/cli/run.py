"""`cudanalyst run FILE`: run an AttributionRun on this machine, with live progress, then report.

The plan is the operator's; shards run as subprocesses; everything is stored under spec.output.uri
(a local folder by default). Ctrl-C stops cleanly; running the same command again resumes.
"""

from __future__ import annotations

import argparse
import signal
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from cudanalyst.cli.common import EXIT_FAILURE, EXIT_INVALID, die, load_or_die
from cudanalyst.local import (
    RunInputError,
    kernel_stage_alongside,
    llm_stage_args,
    prepare,
    read_snapshot,
    run_stage,
    shared_servers,
    work_dir,
    write_spec_file,
)
from cudanalyst.runs import PlanError

LOG_EVERY_S = 10.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a spec on this machine (local mode)", description=__doc__)
    p.add_argument("file", help="AttributionRun YAML or JSON")
    p.add_argument("--output", help="override spec.output.uri (a folder or s3:// prefix)")
    p.add_argument("--stage", choices=("llm", "kernels", "all"), default="all",
                   help="run only one stage (the other may run on another machine, from the same store)")
    p.add_argument("--health-timeout", type=float, default=600.0,
                   help="seconds to wait for a local model server to become healthy (default %(default)s)")
    p.add_argument("--no-report", action="store_true", help="skip building the report at the end")
    p.set_defaults(handler=run)


def _interrupt_on_sigterm() -> None:
    # SIGTERM (a closed terminal, a batch system) must stop the shard children and model servers too,
    # exactly as Ctrl-C does; they run in their own sessions and would otherwise be orphaned.
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def run(args: argparse.Namespace) -> int:
    _interrupt_on_sigterm()
    ar = load_or_die(args.file)
    if args.output:
        ar = ar.model_copy(update={"spec": ar.spec.model_copy(
            update={"output": ar.spec.output.model_copy(update={"uri": args.output})})})
    console = Console(stderr=True)
    try:
        plan, store = prepare(ar)
    except (PlanError, RunInputError) as exc:
        die(str(exc), EXIT_INVALID)
    shards = list(range(ar.spec.resources.shards))
    console.print(f"[bold]{ar.metadata.name}[/]: {len(plan.units)} units over {len(plan.programs)} frozen "
                  f"programs, {len(shards)} shard(s) -> {store.uri}")
    folder = work_dir(ar)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[note]}"), TimeElapsedColumn(), TimeRemainingColumn())
    codes: dict[str, dict[int, int]] = {}
    try:
        with Progress(*columns, console=console, transient=False) as bars:
            total = len(plan.units)
            llm = bars.add_task("LLM stage", total=total, note="")
            kern = bars.add_task("kernel stage", total=total, note="")

            last_line = [0.0, ""]

            def tick() -> None:
                snap = read_snapshot(store, len(shards))
                bars.update(llm, completed=snap.llm.done, note=f"failed {snap.llm.failures}")
                bars.update(kern, completed=snap.kernels.done,
                            note=f"failed {snap.kernels.failures}  gpu {snap.gpu_seconds:.0f}s")
                if not console.is_terminal:  # a log file gets a plain line when something moved
                    line = (f"LLM {snap.llm.done}/{total}, kernels {snap.kernels.done}/{total}, "
                            f"failed {snap.llm.failures + snap.kernels.failures}")
                    if line != last_line[1] and time.monotonic() - last_line[0] >= LOG_EVERY_S:
                        console.log(line)
                        last_line[:] = [time.monotonic(), line]

            tick()
            if args.stage == "all":
                # The kernel stage runs beside the LLM stage (all shards in one process: one GPU, one set
                # of workers), compiling and verifying as candidates come; it times once the servers stop.
                with kernel_stage_alongside(ar, shards, folder, tick) as kernels_after_llm:
                    with shared_servers(ar, folder, args.health_timeout) as served:
                        spec_path = write_spec_file(served, folder)
                        codes["llm"] = run_stage(spec_path, shards, len(shards), "llm", folder, True, tick)
                    codes["kernels"] = kernels_after_llm()
            elif args.stage == "llm":
                with shared_servers(ar, folder, args.health_timeout) as served:
                    spec_path = write_spec_file(served, folder)
                    # A kernel stage on this machine later finds these compiled.
                    early = llm_stage_args(ar, len(shards))
                    codes["llm"] = run_stage(spec_path, shards, len(shards), "llm", folder, True, tick, early)
            else:
                spec_path = write_spec_file(ar, folder)
                # Every shard in one process: one GPU, one set of workers; timing holds the GPU alone.
                codes["kernels"] = run_stage(spec_path, shards, len(shards), "kernels", folder, False, tick)
    except KeyboardInterrupt:
        console.print("[yellow]stopped[/]; finished units are kept: run the same command again to resume")
        return 130
    except Exception as exc:  # a model server that never got healthy, a missing model, ...
        console.print(f"[red]error:[/] {exc}\nlogs: {folder}")
        return EXIT_FAILURE
    bad = {stage: [s for s, c in c_.items() if c != 0] for stage, c_ in codes.items()}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        for stage, which in bad.items():
            invalid = any(codes[stage][s] == EXIT_INVALID for s in which)
            console.print(f"[red]{stage} stage failed[/] in shard(s) {which}: see {folder}/shard-*-{stage}.log"
                          + (" (invalid input)" if invalid else "; run again to resume"))
        return EXIT_INVALID if any(c == EXIT_INVALID for st in codes.values() for c in st.values()) else EXIT_FAILURE
    if args.stage != "all" or args.no_report:
        console.print(f"done: {args.stage} stage; store: {store.uri}")
        return 0
    return _report(store, console)


def _report(store, console: Console) -> int:  # type: ignore[no-untyped-def]
    from cudanalyst.report import build_report, render_table

    report = build_report(store)
    render_table(report, console=Console())
    from cudanalyst.report.compute import summary_lines

    for line in summary_lines(report):  # each names the cause the records give, never a guess
        console.print(f"[yellow]{line}[/]", highlight=False)
    console.print(f"report: {report.get('htmlUri', store.uri_of('report/report.html'))}")
    return 0

