#!/usr/bin/env python3
"""A finished recording's provenance for docs/results (issue 29): its spec, the exact model file, what it recorded
per task and state, what the GPU tools said, and where the device time went.

    python scripts/recording_provenance.py RECORDING --out DIR [--console LOG ...] [--fast-tolerance 0.12]

RECORDING is a recording's output folder (`<output.uri>/<name>/`, with `spec.json` and the imported `trajectory/`)
or the `run-NAME.tgz` that `scripts/device/pipeline.sh` brought back. Each `--console LOG` is one device call's
console or pipeline log of this recording (`$OUT/lane0.rN/console.log`); their "pipeline wall time" lines are the
device time it took. Writes DIR/provenance.json and DIR/provenance.md, every figure read from those files (nothing
typed in). States are those of a stratified freeze (`cudanalyst.trajectory.states`, `fast` with the tolerance
given, by default the spec default of `evaluation.fastTolerance`). Exit status 2 on bad input, named.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import evaluation_times  # noqa: E402
import recording_archive  # noqa: E402
import tool_report_share  # noqa: E402

WALL = re.compile(r"pipeline wall time (\d+) s, exit (\d+)")
VLLM = re.compile(r"^vllm (\S+) ")
CLOCK = re.compile(r"^(\d\d:\d\d:\d\d)\s+(starting the model server|warming up the model|evolving)")


class InputError(ValueError):
    """What is wrong with the input, and where."""


def recording_folder(where: Path, scratch: Path) -> Path:
    """The recording's folder (the one holding spec.json), unpacking a .tgz into `scratch`."""
    if recording_archive.is_archive(where):
        try:
            recording_archive.unpack(where, scratch)
        except recording_archive.ArchiveError as exc:
            raise InputError(str(exc)) from None
        found = sorted(p.parent for p in scratch.rglob("spec.json"))
        if not found:
            raise InputError(f"{where}: no recording inside (no spec.json)")
        return found[0]
    if not (where / "spec.json").is_file():
        raise InputError(f"{where}: not a recording's folder (no spec.json)")
    return where


def model_files(name: str) -> dict[str, Any]:
    """The model's exact file: the GGUF that scripts/prepare_model.py pins by sha256, and how it was served."""
    import prepare_model

    model = prepare_model.MODELS.get(name)
    if model is None:
        return {"model": name, "pinned": False}
    return {"model": name, "pinned": True, "gguf": model.gguf_name, "sha256": model.sha256,
            "packages": list(model.chunk_modules), "prepareRecipe": prepare_model.RECIPE,
            "api": model.api, "dtype": "bfloat16 (dequantized from the GGUF by scripts/prepare_model.py)"}


def states(programs: list[Any], fast_tolerance: float) -> dict[str, dict[str, int]]:
    """Programs per task and recorded state, with generations (pure)."""
    from cudanalyst.trajectory.states import STATES, program_state

    out: dict[str, dict[str, int]] = {}
    for p in programs:
        row = out.setdefault(p.task, {s: 0 for s in (*STATES, "unknown")})
        row[program_state(p, fast_tolerance) or "unknown"] += 1
    return dict(sorted(out.items()))


def baseline_copies(programs: list[Any], fast_tolerance: float) -> dict[str, int]:
    """Per recorded state, the programs whose source is their task's baseline up to whitespace and comments: the
    baseline itself and the agent's unchanged resubmissions of it (pure). A frozen copy gives `pass` and
    `fastVsFrozen` nothing to gain that the baseline would not."""
    from cudanalyst.tasks import UnknownTaskError, get_task
    from cudanalyst.tasks.source_text import same_code
    from cudanalyst.trajectory.states import STATES, program_state

    out = {s: 0 for s in (*STATES, "unknown")}
    for p in programs:
        try:
            baseline = get_task(p.task).baseline_source
        except UnknownTaskError:
            continue
        if same_code(baseline, p.source):
            out[program_state(p, fast_tolerance) or "unknown"] += 1
    return out


def device_calls(logs: list[Path]) -> dict[str, Any]:
    """The device calls' figures from their console logs (pure in the files' text)."""
    calls = []
    for log in logs:
        text = log.read_text(errors="replace")
        wall = WALL.search(text)
        vllm = next((m.group(1) for line in text.splitlines() if (m := VLLM.match(line))), None)
        clock = {m.group(2): m.group(1) for line in text.splitlines() if (m := CLOCK.match(line))}
        calls.append({"log": log.name, "parent": log.parent.name, "pipelineSeconds": int(wall.group(1)) if wall else None,
                      "exit": int(wall.group(2)) if wall else None, "vllm": vllm,
                      "serverStarted": clock.get("starting the model server"),
                      "serverReady": clock.get("warming up the model"), "evolving": clock.get("evolving")})
    seconds = [c["pipelineSeconds"] for c in calls if c["pipelineSeconds"] is not None]
    return {"calls": calls, "pipelineSeconds": sum(seconds), "withoutWallLine": len(calls) - len(seconds)}


def provenance(folder: Path, consoles: list[Path], fast_tolerance: float) -> dict[str, Any]:
    from cudanalyst.trajectory import TrajectoryError, load_trajectory

    spec = json.loads((folder / "spec.json").read_text())
    try:
        trajectory = load_trajectory(tool_report_share.trajectory_uri(str(folder), folder))
    except (ValueError, OSError, TrajectoryError) as exc:
        raise InputError(f"{folder}: {exc} (a recording writes trajectory/ when every task has its iterations)") \
            from exc
    progress = {}
    for path in sorted((folder / "progress").glob("*.json")):
        p = json.loads(path.read_text())
        progress[p.get("task", path.stem)] = {"checkpoint": p.get("checkpoint"), "iterations": p.get("iterations")}
    lines = evaluation_times.read_lines(folder)
    passes = Counter(path.parent.parent.name for path in folder.rglob("evaluations/pass-*.jsonl"))
    by_state = states(trajectory.programs, fast_tolerance)
    totals = Counter()
    for row in by_state.values():
        totals.update(row)
    model = spec.get("spec", {}).get("model", {}).get("model")  # spec.json: {name, spec} (recording.prepare_store)
    return {
        "recording": spec.get("name") or folder.name,
        "spec": spec,
        "model": model_files(model or ""),
        "programs": len(trajectory.programs),
        "generations": dict(sorted(Counter(str(p.generation) for p in trajectory.programs).items(),
                                   key=lambda kv: int(kv[0]))),
        "fastTolerance": fast_tolerance,
        "states": {"total": dict(totals), "byTask": by_state,
                   "baselineCopies": baseline_copies(trajectory.programs, fast_tolerance)},
        "progress": progress,
        "passesPerTask": dict(sorted(passes.items())),
        "evaluations": evaluation_times.summary(lines) if lines else None,
        "tools": tool_report_share.shares(trajectory.programs, tool_report_share.TARGET),
        "device": device_calls(consoles),
    }


def markdown(p: dict[str, Any]) -> str:
    """The provenance as a page section (pure)."""
    m = p["model"]
    s = p["states"]
    head = ["broken", "wrong", "correct", "fast", "unknown"]
    rows = [f"| {task} | " + " | ".join(str(r[h]) for h in head) + f" | {sum(r.values())} |"
            for task, r in s["byTask"].items()]
    out = [f"# Recording `{p['recording']}`: provenance", "",
           f"- **Model:** `{m['model']}`" + (f", the GGUF `{m['gguf']}` (sha256 `{m['sha256']}`), {m['dtype']}, "
                                              f"prepare recipe {m['prepareRecipe']}" if m.get("pinned") else
                                              " (not pinned by scripts/prepare_model.py)"),
           f"- **Programs:** {p['programs']} in generations "
           + ", ".join(f"{g} ({n})" for g, n in p["generations"].items()),
           f"- **States** (`fast`: speedup over the baseline > 1 + {p['fastTolerance']:g}):", "",
           "| task | " + " | ".join(head) + " | all |", "|---|" + "---|" * (len(head) + 1), *rows,
           "| all | " + " | ".join(str(s["total"].get(h, 0)) for h in head) + f" | {p['programs']} |",
           "| of them, the baseline's source (up to whitespace and comments) | "
           + " | ".join(str(s["baselineCopies"].get(h, 0)) for h in head)
           + f" | {sum(s['baselineCopies'].values())} |", ""]
    out += ["## The GPU tools (over programs labelled `compile` or better)", ""]
    for t in p["tools"]["tools"].values():
        failed = ", ".join(f"{k} {v}" for k, v in sorted(t["failed"].items())) or "none"
        share = "n/a" if t["share"] is None else f"{t['share']:.1%}"
        out.append(f"- {t['label']}: {t['usable']} of {t['compiled']} carry the tool's real output ({share}); "
                   f"ok {t['ok']}, failed by cause: {failed}, not run {t['notRun']}")
    if p["tools"]["compiledButContractBroken"]:
        out.append(f"- nvcc built {p['tools']['compiledButContractBroken']} program(s) that broke the task's contract "
                   "(their reports carry the program's own error)")
    e = p["evaluations"]
    out += ["", "## Time", ""]
    if e:
        out.append(f"- Evaluations: {e['evaluations']} ({e['repeats']} repeats answered from an earlier one), "
                   f"{e['compiled']} of programs that compiled, repeats left out: wall median {e['wall']['median']} s, "
                   f"p90 {e['wall']['p90']} s")
        for name, t in e["tools"].items():
            out.append(f"  - {name}: ran median {t['ran']['median']} s, waited median {t['waited']['median']} s "
                       f"({t['measured']} timed)")
    d = p["device"]
    if d["calls"]:
        versions = sorted({c["vllm"] for c in d["calls"] if c["vllm"]})
        out.append(f"- Device calls: {len(d['calls'])}, {d['pipelineSeconds']} s of `cudanalyst record` in all"
                   + (f" ({d['withoutWallLine']} log(s) without the wall-time line)" if d["withoutWallLine"] else "")
                   + (f"; vLLM {', '.join(versions)}" if versions else ""))
    out.append("- Passes per task (a device call cut short resumes in a new pass): "
               + ", ".join(f"{k} {v}" for k, v in p["passesPerTask"].items()))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--console", type=Path, action="append", default=[])
    ap.add_argument("--fast-tolerance", type=float, default=None)
    args = ap.parse_args(argv)
    if args.fast_tolerance is None:
        from cudanalyst.api.spec import EvaluationSpec

        args.fast_tolerance = EvaluationSpec().fast_tolerance
    missing = [str(c) for c in args.console if not c.is_file()]
    if missing:
        print(f"recording_provenance: --console: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cudanalyst-provenance-") as scratch:
        try:
            folder = recording_folder(args.recording, Path(scratch))
            result = provenance(folder, args.console, args.fast_tolerance)
        except (InputError, json.JSONDecodeError) as exc:
            print(f"recording_provenance: {exc}", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "provenance.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (args.out / "provenance.md").write_text(markdown(result))
    print(markdown(result), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
