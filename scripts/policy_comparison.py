#!/usr/bin/env python3
"""The comparison of issue 30, part 3: does the learned feedback policy make the agent better on held-out tasks?

  specs    COMPARISON.yaml --out DIR      one TrajectoryRecording per arm and seed (cudanalyst.comparison); exit 2
                                          when a task is one the policy was learned on, or a family has no task
  measure  RECORDING... --comparison COMPARISON.yaml --out DIR
                                          (GPU) re-verify and re-time every recorded program with the kernel stage's
                                          verify and compare (the AttributionRun's timing, on fresh secret inputs,
                                          never the agent's fitness): DIR/NAME.jsonl per recording, written as each
                                          is done; a recording measured before (its file there) is kept, so a
                                          machine lost mid-way loses one recording's work (DIR/spec.json: what
                                          measured them, refused under other settings)
  analyse  DIR --recordings RUNS --comparison COMPARISON.yaml --out RESULTS [--preface FILE]
                                          (no GPU) each arm's numbers with intervals over tasks x seeds:
                                          RESULTS/README.md and RESULTS/comparison.json. RUNS holds the recordings
                                          (NAME/ or a kept NAME.tar.xz) and their times-NAME.tsv: the tokens
                                          (OpenEvolve's usage, the gating log) and GPU seconds come from there

docs/policy.md gives the H200 commands (scripts/device/policy.sh runs the recordings and `measure`).
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recording_archive  # noqa: E402  (a kept recording's archive, as the other scripts read it)

EXIT_INVALID = 2


def bad(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_INVALID


def load_comparison(path: str) -> tuple[Any, Any]:
    """(ComparisonSpec, the learned FeedbackPolicy); SystemExit(2) naming the file and field."""
    from cudanalyst.api import SpecError
    from cudanalyst.api.policy import load_policy
    from cudanalyst.comparison import ComparisonSpecError, load_spec

    try:
        spec = load_spec(path)
    except ComparisonSpecError as exc:
        raise SystemExit(bad(str(exc))) from None
    try:
        policy = load_policy(Path(path).parent / spec.policy)
    except SpecError as exc:
        raise SystemExit(bad(f"{path}: policy: {exc}")) from None
    return spec, policy


def held_out_problems(tasks: list[str], learned_on: list[str]) -> list[str]:
    """Why these tasks are not a held-out set from every family (pure but for the task registry)."""
    from cudanalyst.tasks import UnknownTaskError, all_tasks, get_task

    problems = []
    seen = [t for t in tasks if t in set(learned_on)]
    if seen:
        problems.append(f"tasks: {', '.join(seen)} were in the policy's own runs (spec.tasks of the policy)")
    families = set()
    for i, t in enumerate(tasks):
        try:
            families.add(get_task(t).family)
        except UnknownTaskError as exc:
            problems.append(f"tasks[{i}]: {exc}")
    missing = sorted({t.family for t in all_tasks()} - families)
    if missing:
        problems.append(f"tasks: no held-out task of the famil{'y' if len(missing) == 1 else 'ies'} "
                        f"{', '.join(missing)}")
    return problems


def cmd_specs(args: argparse.Namespace) -> int:
    from cudanalyst.comparison import recordings

    spec, policy = load_comparison(args.comparison)
    problems = held_out_problems(spec.tasks, policy.spec.tasks)
    if problems:
        return bad(f"{args.comparison}: " + "; ".join(problems))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recs = recordings(spec, policy.spec)
    from cudanalyst.api.recording import parse_recording

    for name, doc in recs.items():
        parse_recording(doc, name)  # every arm's spec valid before any is written
    for name, doc in recs.items():
        (out / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=120))
    withheld = sum(1 for r in policy.spec.states.values() for c in r.components if not c.show)
    print(f"{len(recs)} recordings ({len(spec.arms)} arms x {len(spec.seeds)} seeds) over {len(spec.tasks)} held-out "
          f"tasks -> {out}/")
    if withheld == 0 and policy.spec.models.planner is None:
        print("note: the learned policy withholds nothing and names no planner: its arm is `all` again, and `random`"
              " withholds nothing either (say so in the results)")
    return 0


# ---- measure (GPU) --------------------------------------------------------------------------------------------


def arm_and_seed(name: str, comparison: str) -> tuple[str, int]:
    rest = name.removeprefix(f"{comparison}-")
    arm, _, seed = rest.rpartition("-s")
    return arm, int(seed)


def measure_program(task: Any, source: str, cfg: Any, seeds: Any, pool: Any) -> dict[str, Any]:
    """Compile, verify and time against the baseline as the kernel stage does (its functions, its settings)."""
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source, shared_cache
    from cudanalyst.runner.kernels.timing.trials import speedup
    from cudanalyst.runner.kernels.workers.requests import TimedProgram, compare_request, verify_request

    cache = shared_cache()
    built = compile_task_source(task, source, cache=cache)
    if not built.ok or not built.cubin:
        return {"compiled": False, "correct": False, "speedup": None}
    verdict = pool.verify(verify_request(task, built.cubin, cfg, seeds), cfg.timeout_seconds)
    correct = bool(verdict.get("ok") and verdict.get("correct"))
    if not correct:
        return {"compiled": True, "correct": False, "speedup": None}
    base = compile_task_source(task, task.baseline_source, cache=cache)
    reply = pool.compare(compare_request(task, [TimedProgram("program", built.cubin),
                                                TimedProgram("baseline", base.cubin or b"")], cfg, seeds),
                         max(cfg.timeout_seconds, 60))
    timed = reply.get("programs", {}) if reply.get("ok") else {}

    def median(name: str) -> float | None:
        entry = timed.get(name, {})
        return (entry.get("stats") or {}).get("median_ms") if entry.get("ok") else None

    p_ms, b_ms = median("program"), median("baseline")
    return {"compiled": True, "correct": True, "speedup": speedup(b_ms, p_ms), "programMs": p_ms, "baselineMs": b_ms}


def measured_settings(spec: Any, out: Path) -> dict[str, Any]:
    """What a measured folder's rows were measured under (its spec.json): the same folder, the same settings."""
    return {"name": out.name, "comparison": spec.name,
            "evaluation": spec.evaluation.model_dump(by_alias=True, exclude_none=True, mode="json")}


def cmd_measure(args: argparse.Namespace) -> int:
    from cudanalyst.runner.kernels.workers.pool import WorkerPool
    from cudanalyst.runner.kernels.workers.requests import EvalSettings, fresh_secret, seeds_for
    from cudanalyst.tasks import get_task
    from cudanalyst.trajectory import load_trajectory

    spec, _ = load_comparison(args.comparison)
    cfg = EvalSettings.of(spec.evaluation)
    folders = [Path(f) for f in args.recordings]
    for f in folders:
        if not (f / "trajectory" / "programs.jsonl").exists() and not (f / "trajectory" / "programs.jsonl.gz").exists():
            return bad(f"{f}: no trajectory/ (an unfinished recording? run it again to finish and import it)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # spec.json makes the folder a run folder that keep_running.sh snapshots each call (recording_archive.py), and
    # says what its rows were measured under: rows of other settings are not mixed into it.
    settings, marker = measured_settings(spec, out), out / "spec.json"
    if marker.exists() and json.loads(marker.read_text()).get("evaluation") != settings["evaluation"]:
        return bad(f"{marker}: measured under other evaluation settings than {args.comparison}'s; measure into a "
                   "new folder")
    marker.write_text(json.dumps(settings, indent=1) + "\n")
    todo = []
    for f in folders:
        name = json.loads((f / "spec.json").read_text())["name"]
        dest = out / f"{name}.jsonl"
        if dest.exists():
            print(f"{name}: measured before ({len(dest.read_text().splitlines())} programs), kept", flush=True)
        else:
            todo.append((f, name, dest))
    if not todo:
        return 0
    from cudanalyst.runner.llm.compile_cache import gpu_kind

    card = gpu_kind()  # each row says which card timed it: a comparison's seeds may run on different ones
    with WorkerPool(args.workers) as pool:
        for f, name, dest in todo:
            arm, seed = arm_and_seed(name, spec.name)
            seeds = seeds_for(cfg, fresh_secret())  # inputs the agent never saw, one secret per recording
            programs = load_trajectory((f / "trajectory").resolve().as_uri() + "/").programs
            rows = []
            # Compiles and verifications side by side (the pool's workers); timing holds the GPU alone (its gate).
            with ThreadPoolExecutor(max_workers=args.workers) as threads:
                measured = threads.map(
                    lambda p, seeds=seeds: measure_program(get_task(p.task), p.source, cfg, seeds, pool), programs)
                for p, got in zip(programs, measured, strict=True):
                    rows.append({"recording": name, "arm": arm, "seed": seed, "task": p.task,
                                 "programId": p.program_id, "iteration": p.generation, **got, "gpu": card})
            partial = dest.with_name(dest.name + ".partial")  # a recording's rows are whole or absent
            partial.write_text("".join(json.dumps(r) + "\n" for r in rows))
            partial.replace(dest)
            print(f"{name}: {len(programs)} programs measured", flush=True)
    return 0


# ---- analyse (no GPU) -----------------------------------------------------------------------------------------


def last_checkpoint_programs(folder: Path, task: str) -> list[dict[str, Any]]:
    root = folder / "openevolve" / task / "checkpoints"
    numbers = sorted(int(p.name.removeprefix("checkpoint_")) for p in root.glob("checkpoint_*"))
    if not numbers:
        return []
    return [json.loads(p.read_text()) for p in (root / f"checkpoint_{numbers[-1]}" / "programs").glob("*.json")]


def task_usage(folder: Path, task: str) -> dict[str, float]:
    """Tokens the agent spent on one task: OpenEvolve's per-program usage, the gating log's planner and savings."""
    prompt = completion = 0.0
    for p in last_checkpoint_programs(folder, task):
        usage = (p.get("metadata") or {}).get("token_usage") or {}
        prompt += float(usage.get("prompt_tokens") or 0)
        completion += float(usage.get("completion_tokens") or 0)
    planner = saved = 0.0
    log = folder / "openevolve" / task / "gating.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                e = json.loads(line)
                planner += float(e.get("plannerPromptTokens") or 0) + float(e.get("plannerCompletionTokens") or 0)
                saved += float(e.get("savedTokens") or 0)
    return {"promptTokens": prompt, "completionTokens": completion, "plannerTokens": planner, "savedTokens": saved}


def task_tool_seconds(folder: Path, task: str) -> float:
    """GPU seconds the recorder's tools (compute-sanitizer, Nsight Compute) ran on one task's distinct compiled
    programs (evaluation logs: openevolve/TASK/evaluations/pass-*.jsonl), each source counted once: a repeat, or a
    source another arm's recording evaluated first on the machine (shared evaluations), costs what its first run
    did, and the time a tool waited for its slot is not counted."""
    cost: dict[str, float] = {}
    for log in sorted((folder / "openevolve" / task / "evaluations").glob("*.jsonl")):
        for line in log.read_text().splitlines():
            if not line.strip():
                continue
            e = json.loads(line)
            if e.get("compiled") and e.get("sha256"):
                cost[e["sha256"]] = sum(float(t.get("seconds") or 0) for t in (e.get("tools") or {}).values())
    return sum(cost.values())


def measured_rows(folder: Path) -> list[dict[str, Any]]:
    """Every recording's rows in a folder `measure` wrote (NAME.jsonl each)."""
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        rows += [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return rows


def recording_seconds(runs: Path, name: str) -> float:
    """A recording's GPU seconds: the sum of its passes' wall seconds (times-NAME.tsv, a line per pass)."""
    path = runs / f"times-{name}.tsv"
    if not path.is_file():
        raise SystemExit(bad(f"{path}: not found (the wall seconds of {name}'s passes; scripts/device/policy.sh "
                             "writes it beside the recording)"))
    total = 0.0
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            got, _, seconds = line.partition("\t")
            try:
                if got != name:
                    raise ValueError(f"names {got!r}")
                total += float(seconds)
            except ValueError as exc:
                raise SystemExit(bad(f"{path}:{i}: not 'NAME<TAB>SECONDS' of {name} ({exc})")) from None
    return total


def recording_usage(runs: Path, name: str, comparison: str, scratch: Path) -> list[dict[str, Any]]:
    """Per task of one recording (its folder in RUNS or its kept NAME.tar.xz): tokens and GPU seconds."""
    folder = runs / name
    if not folder.is_dir():
        archive = runs / f"{name}.tar.xz"
        if not archive.is_file():
            raise SystemExit(bad(f"{runs}: neither {name}/ nor {name}.tar.xz (the recording of measured rows)"))
        try:
            folder = recording_archive.unpack(archive, scratch / name) / name
        except recording_archive.ArchiveError as exc:
            raise SystemExit(bad(str(exc))) from None
    arm, seed = arm_and_seed(name, comparison)
    tasks = sorted(p.name for p in (folder / "openevolve").iterdir() if p.is_dir())
    seconds = recording_seconds(runs, name)
    # The recording's GPU time, shared by its tasks (they ran at once on one server).
    return [{"recording": name, "arm": arm, "seed": seed, "task": t, **task_usage(folder, t),
             "gpuSeconds": seconds / max(len(tasks), 1), "toolSeconds": task_tool_seconds(folder, t)} for t in tasks]


def recording_state(runs: Path, name: str) -> dict[str, bool]:
    """Whether a recording (its folder in RUNS or its kept NAME.tar.xz) was started, and whether it finished: a
    finished one holds its trajectory; one stopped part-way (a call's or a session's end) holds only checkpoints."""
    folder, archive = runs / name, runs / f"{name}.tar.xz"
    if folder.is_dir():
        return {"started": True, "recorded": (folder / "trajectory").is_dir()}
    if not archive.is_file():
        return {"started": False, "recorded": False}
    try:
        names = recording_archive.member_names(archive)
    except recording_archive.ArchiveError as exc:
        raise SystemExit(bad(str(exc))) from None
    return {"started": True, "recorded": any(m.startswith(f"{name}/trajectory/") for m in names)}


def cmd_analyse(args: argparse.Namespace) -> int:
    import tempfile

    from cudanalyst.comparison import analyse, readme, recordings

    spec, policy = load_comparison(args.comparison)
    folder = Path(args.measured)
    rows = measured_rows(folder) if folder.is_dir() else []
    if not rows:
        return bad(f"{folder}: no measured rows (NAME.jsonl; run `measure` first)")
    names = sorted({r["recording"] for r in rows})
    with tempfile.TemporaryDirectory() as scratch:
        usage = [u for n in names for u in recording_usage(Path(args.recordings), n, spec.name, Path(scratch))]
    result = analyse(rows, usage, spec.iterations)
    result["runTools"] = spec.run_tools  # the page says what its saved tokens count under it
    # The comparison's recordings without rows: the page says which, so a partial page never reads as the whole.
    runs = Path(args.recordings)
    result["notMeasured"] = [{"recording": n, **recording_state(runs, n)}
                             for n in sorted(recordings(spec, policy.spec)) if n not in names]
    preface = Path(args.preface).read_text() if args.preface else ""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "README.md").write_text(readme(result, f"Does the learned feedback policy help? ({spec.name})", preface))
    print(f"-> {out}/README.md")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="policy_comparison.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("specs")
    p.add_argument("comparison")
    p.add_argument("--out", required=True)
    p.set_defaults(handler=cmd_specs)
    p = sub.add_parser("measure")
    p.add_argument("recordings", nargs="+", help="recording folders (<output.uri>/<name>/)")
    p.add_argument("--comparison", required=True)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--out", required=True)
    p.set_defaults(handler=cmd_measure)
    p = sub.add_parser("analyse")
    p.add_argument("measured", help="the folder `measure` wrote")
    p.add_argument("--recordings", required=True,
                   help="the recordings (NAME/ or NAME.tar.xz) and their times-NAME.tsv")
    p.add_argument("--comparison", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--preface", default="")
    p.set_defaults(handler=cmd_analyse)
    args = parser.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
