#!/usr/bin/env python3
"""Cut a small trajectory to bundle from a real recording: frozen programs with the reports the tools really wrote.

    python scripts/cut_example_trajectory.py RECORDING --to src/cudanalyst/data/trajectories/example \
        [--per-cell 2] [--generations 0,4,8] [--tasks a,b] [--seed 0] [--keep-prompts] [--force]

RECORDING: a recording's output folder, its trajectory folder, the `run-NAME.tgz` scripts/device/pipeline.sh brought
back, or builtin://NAME (as scripts/tool_report_share.py). For each task and generation it keeps up to `--per-cell`
programs, chosen by a generator seeded by (seed, task, generation): distinct sources first, and programs whose GPU
tools really ran (no tool failure of the machine's, `trajectory.toolruns`) before the others. The agent's prompts
and raw answers (several KB each, `context.prompt`, `metrics.openevolve.responses`) are dropped unless
--keep-prompts; everything else is kept as recorded, each program with its
typed tool runs. Writes programs.jsonl, trajectory.json and a README.md of provenance (the recording, its spec's
model, the cut's command, the counts per tool) into --to, which must not exist unless --force. Exit 2 on bad input,
nothing written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tool_report_share import shares, trajectory_uri  # noqa: E402 - the sibling script's readers

QUICKSTART_PROGRAMS = 2  # examples/quickstart.yaml: 2 programs of one task, generation 0


def machine_failures(program: Any) -> int:
    from cudanalyst.trajectory.toolruns import PROGRAM_CAUSES, tool_runs

    return sum(1 for r in tool_runs(program).values() if r.status == "failed" and r.cause not in PROGRAM_CAUSES)


def choose(programs: list[Any], per_cell: int, seed: int) -> list[Any]:
    """Up to `per_cell` per (task, generation), seeded per cell; real tool runs and distinct sources first."""
    cells: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for p in programs:
        cells[(p.task, p.generation)].append(p)
    out = []
    for (task, generation), found in sorted(cells.items()):
        rng = random.Random(f"{seed}:{task}:{generation}")
        order = sorted(found, key=lambda p: p.program_id)
        rng.shuffle(order)
        order.sort(key=machine_failures)  # stable: the seeded order within each rank
        picked: list[Any] = []
        sources: set[str] = set()
        for p in order:
            digest = hashlib.sha256(p.source.encode()).hexdigest()
            if digest not in sources:
                picked.append(p)
                sources.add(digest)
            if len(picked) == per_cell:
                break
        out += picked
    return out


def quickstart_task(programs: list[Any]) -> str | None:
    """A task with QUICKSTART_PROGRAMS programs in generation 0 (what examples/quickstart.yaml freezes)."""
    counts: dict[str, int] = defaultdict(int)
    for p in programs:
        counts[p.task] += p.generation == 0
    return next((t for t, n in sorted(counts.items()) if n >= QUICKSTART_PROGRAMS), None)


def readme(source_uri: str, manifest: Any, programs: list[Any], counts: dict[str, Any], command: str,
           quick: str | None) -> str:
    from cudanalyst.trajectory.toolruns import LABELS

    src = manifest.source or {}
    rows = defaultdict(lambda: defaultdict(int))  # type: ignore[var-annotated]
    for p in programs:
        rows[p.task][p.generation] += 1
    generations = sorted({p.generation for p in programs})
    table = ["| task | " + " | ".join(f"gen {g}" for g in generations) + " |",
             "|---|" + "---|" * len(generations)]
    table += [f"| {t} | " + " | ".join(str(rows[t][g]) for g in generations) + " |" for t in sorted(rows)]
    tools = []
    for tool, c in counts["tools"].items():
        failed = ", ".join(f"{k} {v}" for k, v in sorted(c["failed"].items())) or "none"
        share = "n/a" if c["share"] is None else f"{c['share']:.0%}"
        tools.append(f"- {LABELS[tool]}: {c['compiled']} compiled programs, ok {c['ok']}, failed by cause: {failed}, "
                     f"not run {c['notRun']}; the tool's real output on {share} of them")
    return "\n".join([
        "# The bundled example trajectory",
        "",
        f"Cut from a real recording, `{source_uri}`: {manifest.description}",
        "",
        f"- Recording: {src.get('recording', 'unknown')} (OpenEvolve; every program compiled, verified and timed on "
        f"the GPU: {src.get('gpu')}). Its spec is in the repository's examples/ under that name's recording spec.",
        f"- Cut by: `{command}`",
        f"- {len(programs)} frozen programs of {len(rows)} task(s), {len({p.source for p in programs})} distinct "
        "sources. Every report is what the tool wrote when the program was recorded, and what the agent's next "
        "prompts showed; the agent's own prompts and raw answers were dropped to keep the package small.",
        "",
        *table,
        "",
        "Whether the GPU tools behind the reports really ran (`trajectory.toolruns`; a prompt shows a failed tool's "
        "report as one plain line saying so, never its failure text):",
        "",
        *tools,
        "",
        f"Quickstart: `examples/quickstart.yaml` freezes {QUICKSTART_PROGRAMS} programs of one task in generation 0"
        + (f"; `{quick}` has them." if quick else "; no task here has that many, cut with a larger --per-cell."),
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recording")
    p.add_argument("--to", required=True, type=Path, help="the folder to write (the bundled example's)")
    p.add_argument("--per-cell", type=int, default=2, help="programs per task and generation (default 2)")
    p.add_argument("--generations", default="", help="comma-separated generations to keep (default: all)")
    p.add_argument("--tasks", default="", help="comma-separated tasks to keep (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-prompts", action="store_true", help="keep each program's recorded prompt and answers")
    p.add_argument("--force", action="store_true", help="replace --to if it exists")
    args = p.parse_args(argv)
    from cudanalyst.trajectory import TrajectoryError, dump_programs, load_trajectory, manifest_for
    from cudanalyst.trajectory.toolruns import tool_runs

    def bad(message: str) -> int:
        print(f"cut_example_trajectory: {message}", file=sys.stderr)
        return 2

    if args.per_cell < 1:
        return bad(f"--per-cell {args.per_cell}: must be 1 or more")
    if args.to.exists() and not args.force:
        return bad(f"--to {args.to}: exists (give --force to replace it)")
    with tempfile.TemporaryDirectory(prefix="cudanalyst-cut-") as scratch:
        try:
            uri = trajectory_uri(args.recording, Path(scratch))
            trajectory = load_trajectory(uri)
        except (ValueError, OSError, TrajectoryError) as exc:
            return bad(str(exc))
    # An archive is unpacked into a scratch folder that is gone by now: name the archive, as it was given.
    where = args.recording if Path(args.recording).is_file() else trajectory.uri
    programs = trajectory.programs
    try:
        gens = {int(x) for x in args.generations.split(",") if x.strip()}
    except ValueError:
        return bad(f"--generations {args.generations!r}: expected comma-separated integers")
    tasks = {x.strip() for x in args.tasks.split(",") if x.strip()}
    for name, wanted, have in (("--generations", gens, {x.generation for x in programs}),
                               ("--tasks", tasks, {x.task for x in programs})):
        if wanted - have:
            return bad(f"{name}: {sorted(wanted - have)} not in the recording (it has {sorted(have)})")
    kept = [x for x in programs if (not gens or x.generation in gens) and (not tasks or x.task in tasks)]
    chosen = choose(kept, args.per_cell, args.seed)
    ids = {x.program_id for x in chosen}
    cut = []
    for x in chosen:
        update: dict[str, Any] = {"tools": tool_runs(x)}
        if x.parent_id not in ids:
            update["parent_id"] = None  # its parent was not cut: a dangling id would point nowhere
        if not args.keep_prompts:  # the agent's own text (prompt and raw answers): kilobytes each, provenance only
            update["context"] = x.context.model_copy(update={"prompt": ""})
            if isinstance(x.metrics.get("openevolve"), dict) and "responses" in x.metrics["openevolve"]:
                kept = {k: v for k, v in x.metrics["openevolve"].items() if k != "responses"}
                update["metrics"] = {**x.metrics, "openevolve": kept}
        cut.append(x.model_copy(update=update))
    counts = shares(cut, 0.95)
    command = "python scripts/cut_example_trajectory.py " + " ".join(sys.argv[1:] if argv is None else argv)
    manifest = manifest_for(
        cut,
        description=(f"{len(cut)} frozen programs cut from the recording {where} "
                     f"({trajectory.manifest.description.strip()}) by scripts/cut_example_trajectory.py."),
        source={**trajectory.manifest.source, "cutFrom": where, "cutBy": command},
    )
    target = args.to
    staging = Path(tempfile.mkdtemp(prefix="cudanalyst-cut-out-"))
    (staging / "programs.jsonl").write_text(dump_programs(cut))
    (staging / "trajectory.json").write_text(json.dumps(manifest.model_dump(by_alias=True), indent=2) + "\n")
    (staging / "README.md").write_text(readme(where, trajectory.manifest, cut, counts, command,
                                              quickstart_task(cut)))
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(staging), str(target))
    size = sum(f.stat().st_size for f in target.iterdir())
    print(f"{target}: {len(cut)} programs of {len({x.task for x in cut})} task(s), {size / 1024:.0f} KiB")
    for tool, c in counts["tools"].items():
        print(f"  {tool}: ok {c['ok']}, failed {c['failed']}, not run {c['notRun']} (of {c['compiled']} compiled)")
    quick = quickstart_task(cut)
    print(f"quickstart: spec.trajectory.tasks: [{quick}] (generation 0 holds {QUICKSTART_PROGRAMS} of its programs)"
          if quick else "quickstart: no task has 2 programs in generation 0; cut with a larger --per-cell")
    return 0


if __name__ == "__main__":
    sys.exit(main())
