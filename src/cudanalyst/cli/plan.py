"""`cudanalyst plan FILE`: the units and shards a run will execute, with estimated tokens and GPU time, and
the expected half-width of its Banzhaf intervals with the frozen programs it would need for 0.05.

The half-width assumes a spread of per-program Banzhaf values (default 0.15 at the noisiest rate, 0.5;
docs/attribution.md), or takes it from an earlier run's outcomes with `--pilot RUN_URI`. `--effect DELTA` adds the
programs and tasks the smallest effect to see needs (docs/sizing.md); a stratified freeze (spec.trajectory.strata)
shows the programs drawn per task and state, warning about short strata."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from cudanalyst import usage
from cudanalyst.api import AttributionRun
from cudanalyst.attribution.design import (
    DEFAULT_RATE,
    DEFAULT_SPREAD,
    MAX_UNITS,
    Spread,
    design_rows,
    pilot_spreads,
)
from cudanalyst.attribution.values import OutcomeError, OutcomeTables, tabulate
from cudanalyst.cli.common import EXIT_INVALID, die, load_or_die
from cudanalyst.plan import Plan, estimate
from cudanalyst.planned_run import PlanError, plan_run
from cudanalyst.report.load import ReportError, load_outcomes
from cudanalyst.sizing import Design, default_levels, input_problem, pilot_levels, sizing, sizing_markdown
from cudanalyst.store import S3Settings, StoreError, open_store
from cudanalyst.trajectory.states import STATES
from cudanalyst.trajectory.toolruns import count_tools, failed_report_warnings, report_lines


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="show the units, shards and estimated cost of a run", description=__doc__)
    p.add_argument("file", help="AttributionRun YAML or JSON")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--pilot", metavar="RUN_URI", help="an earlier run's folder: take the spread of per-program "
                   "effects and the rates from its outcomes instead of the documented defaults")
    p.add_argument("--s3-endpoint", default="", help="S3 endpoint URL for the pilot run (MinIO/Ceph)")
    p.add_argument("--effect", type=float, metavar="DELTA", help="the smallest Banzhaf value to see: print how many "
                   "programs and tasks it needs, with the calculation as a study page's section (docs/sizing.md)")
    p.add_argument("--power", type=float, default=0.8, help="with --effect: the chance of seeing it (default 0.8; "
                   "0.5: the expected half-width is the effect)")
    p.add_argument("--comparisons", type=int, default=1, metavar="M", help="with --effect: the size of the Holm "
                   "family the effect is tested in (alpha is divided by M, Holm's strictest step; default 1)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    ar = load_or_die(args.file)
    try:
        plan = plan_run(ar)
    except PlanError as exc:
        die(str(exc), EXIT_INVALID)
    # Whether the frozen programs' reports are the tools' real output, before any GPU time (issue 28).
    tool_summary = {"toolReports": {t: c.to_dict() for t, c in count_tools(plan.programs).items()},
                    "warnings": failed_report_warnings(plan.programs)}
    try:
        design = _design(ar, plan, args)
    except (OutcomeError, StoreError, ReportError) as exc:
        die(f"--pilot {args.pilot}: {exc}", EXIT_INVALID)
    summary = plan.overview() | {"estimate": estimate(ar, plan), "tokens": usage.estimate(ar, plan.programs, plan.units),
                                 "design": design}
    sized = _sizing(ar, plan, args)
    if sized is not None:
        summary["sizing"] = sized | {"markdown": sizing_markdown(sized, args.pilot)}
    context = usage.context_warnings(ar, summary["tokens"], plan.programs)
    if args.json:
        tool_summary["warnings"] = strata_warnings(plan) + context + tool_summary["warnings"]
        print(json.dumps(summary | tool_summary, indent=2))
        return 0
    table = Table(title=f"plan of {ar.metadata.name}", show_header=False)
    for key in ("players", "programs", "coalitions", "units", "unitsByArm", "shards"):
        value = summary[key]
        table.add_row(key, ", ".join(map(str, value)) if isinstance(value, list) else
                      (json.dumps(value) if isinstance(value, dict) else str(value)))
    for key, value in summary["estimate"].items():
        table.add_row(key, str(value))
    for key, value in token_rows(summary["tokens"]):
        table.add_row(key, value)
    Console().print(table)
    if plan.draws:
        Console().print(strata_table(summary["strata"]))
    Console().print(design_table(design, ar.spec.attribution.confidence))
    for line in strata_warnings(plan) + context:
        Console().print(line, highlight=False, markup=False, style="yellow")
    for line in report_lines(plan.programs):  # before any GPU time is spent (issue 28)
        Console().print(line, highlight=False, markup=False, style="yellow" if line.startswith("warning") else None)
    if sized is not None:
        print()
        print(summary["sizing"]["markdown"], end="")  # plain: it is pasted into a study page as it is
    return 0


def token_rows(tokens: dict[str, object]) -> list[tuple[str, str]]:
    """Rows of the plan's table: each stage's requests and tokens (completions at their cap), and the cost."""
    rows = []
    stages = tokens.get("stages")
    assert isinstance(stages, dict)
    for stage, row in stages.items():
        price = f", at most {row['maxCost']} {tokens['currency']}" if row.get("maxCost") is not None else ""
        rows.append((f"tokens, {stage}", f"{row['model']}: {row['requests']} requests, about {row['promptTokens']:,} "
                     f"prompt + at most {row['maxCompletionTokens']:,} completion{price}"))
    if tokens.get("maxCost") is not None:
        rows.append(("estimated cost", f"at most {tokens['maxCost']} {tokens['currency']} (completions at maxTokens)"))
    return rows


def _pilot_tables(ar: AttributionRun, args: argparse.Namespace) -> OutcomeTables:
    spec = ar.spec
    settings = S3Settings(endpoint=args.s3_endpoint) if args.s3_endpoint else None
    records = load_outcomes(open_store(args.pilot, settings))
    return tabulate(records, spec.players, spec.attribution.metrics)


def _sizing(ar: AttributionRun, plan: Plan, args: argparse.Namespace) -> dict[str, object] | None:
    """With --effect: the programs and tasks the smallest effect needs (cudanalyst.sizing)."""
    if args.effect is None:
        return None
    problem = input_problem(args.effect, args.power, args.comparisons)
    if problem:
        die(problem, EXIT_INVALID)
    spec = ar.spec
    if args.pilot:
        try:
            levels = pilot_levels(_pilot_tables(ar, args))
        except (OutcomeError, StoreError, ReportError) as exc:
            die(f"--pilot {args.pilot}: {exc}", EXIT_INVALID)
        if not levels:
            die(f"--pilot {args.pilot}: no pooled game with every coalition and two programs to size from",
                EXIT_INVALID)
    else:
        levels = default_levels(spec.attribution.metrics)
    design = Design(players=len(spec.players), rollouts=spec.sampling.rollouts, programs=len(plan.programs),
                    tasks=len({p.task for p in plan.programs}))
    return sizing(levels, design, args.effect, spec.attribution.confidence, args.power, args.comparisons)


def _design(ar: AttributionRun, plan: Plan, args: argparse.Namespace) -> list[dict[str, object]]:
    spec = ar.spec
    if args.pilot:
        spreads = pilot_spreads(_pilot_tables(ar, args))
        if not spreads:
            raise OutcomeError("no per-generation game with every coalition and two programs to take a spread from")
    else:
        spreads = [Spread(m, DEFAULT_SPREAD, DEFAULT_RATE, "default") for m in spec.attribution.metrics]
    tasks = sorted({p.task for p in plan.programs})
    generations = sorted({p.generation for p in plan.programs})
    return design_rows(spreads, players=len(spec.players), rollouts=spec.sampling.rollouts,
                       programs_per_generation=programs_per_cell(ar, plan), tasks=len(tasks),
                       generations=len(generations), confidence=spec.attribution.confidence)


def programs_per_cell(ar: AttributionRun, plan: Plan) -> int:
    """Frozen programs per task and generation: programsPerGeneration, or for a stratified freeze (which need not
    draw the same number in each) the mean as drawn, rounded, at least 1."""
    if ar.spec.trajectory.strata is None:
        return ar.spec.trajectory.programs_per_generation
    cells = {(p.task, p.generation) for p in plan.programs}
    return max(1, round(len(plan.programs) / max(1, len(cells))))


def strata_table(strata: dict[str, object]) -> Table:
    """Programs drawn per task and recorded state (spec.trajectory.strata)."""
    drawn = strata["drawn"]
    assert isinstance(drawn, dict)
    table = Table(title="frozen programs by recorded state (spec.trajectory.strata)", title_justify="left")
    for col in ("task", *STATES, "total"):
        table.add_column(col, justify="left" if col == "task" else "right")
    totals = dict.fromkeys(STATES, 0)
    for task, row in drawn.items():
        table.add_row(task, *(str(row.get(s, "-")) for s in STATES), str(sum(row.values())))
        for s in STATES:
            totals[s] += row.get(s, 0)
    table.add_row("all", *(str(totals[s]) for s in STATES), str(sum(totals.values())))
    return table


def strata_warnings(plan: Plan) -> list[str]:
    """One line per stratum that gave fewer programs than spec.trajectory.strata asks."""
    lines = []
    for d in plan.draws:
        if d.short:
            where = d.task if d.generation is None else f"{d.task}, generation {d.generation}"
            repeats = f" ({d.repeats} more repeat a source)" if d.repeats else ""
            lines.append(f"warning: spec.trajectory.strata.{d.state}: {where} has {d.available} distinct {d.state} "
                         f"program(s){repeats}, {d.asked} asked; drew {d.drawn}")
    return lines


def design_table(rows: list[dict[str, object]], confidence: float) -> Table:
    table = Table(title=f"expected half-width of the Banzhaf intervals ({confidence * 100:g}%)", title_justify="left")
    for col in ("metric", "spread (source)", "rate", "per generation", "programs for 0.05", "pooled",
                "tasks for 0.05"):
        table.add_column(col)
    for r in rows:
        gen, pool = r["perGeneration"], r["pooled"]
        assert isinstance(gen, dict) and isinstance(pool, dict)
        def hw(d: dict) -> str:
            return f"+-{d['halfWidth']} ({d['units']} {d['unit']}s)" if d["halfWidth"] is not None else (
                f"no interval ({d['units']} {d['unit']})")
        table.add_row(str(r["metric"]), f"{r['spread']} ({r['source']})", str(r["rate"]), hw(gen),
                      str(gen["programsFor0.05"] or f"> {MAX_UNITS}"), hw(pool),
                      str(pool["tasksFor0.05"] or f"> {MAX_UNITS}"))
    return table
