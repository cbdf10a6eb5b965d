#!/usr/bin/env python3
"""Where a recording's evaluations spent their time: the GPU tools running, or waiting for the tools' queue.

    python scripts/evaluation_times.py RECORDING... [--pass PREFIX] [--json FILE]

RECORDING is a recording's output folder (`<output.uri>/<name>/`), a `run-NAME.tgz` that
`scripts/device/pipeline.sh` brought back or a `NAME.tar.xz` kept in git; several are pooled (the recordings of one
job side by side, say). `--pass PREFIX` keeps the passes whose start time begins so (`20261205T14`: those started in
that hour), so one session's passes of a resumed recording can be told from another's. It reads the evaluations'
logs the recorder keeps beside each task's checkpoints (`openevolve/<task>/evaluations/pass-*.jsonl`, one line per
evaluation; recordings from before 2026-12-01 have none). Over the evaluations of programs that compiled, repeats
left out, it prints the median and 90th percentile of the wall time per evaluation, and per GPU tool of the seconds
it ran and waited for a slot, with the share of the evaluations' wall time each took. Exit status 2 when there is no
log to read (named).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recording_archive  # noqa: E402


def read_lines(root: Path, prefix: str = "") -> list[dict[str, Any]]:
    """Every evaluation line under a recording folder, of the passes whose start time begins with `prefix`."""
    out = []
    for path in sorted(root.rglob(f"evaluations/pass-{prefix}*.jsonl")):
        for text in path.read_text().splitlines():
            if text.strip():
                out.append(json.loads(text))
    return out


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures the script prints, from the evaluation lines (pure)."""
    # A repeat (the same source evaluated before) took the first evaluation's result: no tool ran again.
    built = [x for x in lines if x.get("compiled") and not x.get("repeat")]
    walls = np.array([float(x["seconds"]) for x in built]) if built else np.zeros(0)
    total = float(walls.sum())

    def spread(values: list[float]) -> dict[str, float | None]:
        if not values:
            return {"median": None, "p90": None, "sum": 0.0}
        a = np.array(values)
        return {"median": round(float(np.median(a)), 3), "p90": round(float(np.percentile(a, 90)), 3),
                "sum": round(float(a.sum()), 3)}

    tools: dict[str, Any] = {}
    for name in sorted({t for x in built for t in x.get("tools", {})}):
        runs = [x["tools"][name] for x in built if x.get("tools", {}).get(name, {}).get("seconds") is not None]
        ran = spread([float(r["seconds"]) for r in runs])
        waited = spread([float(r.get("waitedSeconds") or 0.0) for r in runs])
        tools[name] = {"measured": len(runs), "ran": ran, "waited": waited,
                       "ranShare": round(ran["sum"] / total, 3) if total else None,
                       "waitedShare": round(waited["sum"] / total, 3) if total else None}
        counted = [(int(r["passes"]), float(r["seconds"])) for r in runs if r.get("passes")]
        if counted:
            tools[name]["passes"] = spread([float(n) for n, _ in counted])
            tools[name]["perPass"] = per_pass(counted)
    return {"evaluations": len(lines), "repeats": sum(bool(x.get("repeat")) for x in lines), "compiled": len(built),
            "wall": spread(list(walls)), "tools": tools}


def per_pass(counted: list[tuple[int, float]]) -> dict[str, float] | None:
    """The least-squares line seconds = start + perPass x passes over Nsight Compute's runs: whether its time is its
    replay passes or its start (process, injection, inputs); None without two distinct pass counts (pure)."""
    if len({n for n, _ in counted}) < 2:
        return None
    slope, intercept = np.polyfit([n for n, _ in counted], [t for _, t in counted], 1)
    return {"start": round(float(intercept), 3), "perPass": round(float(slope), 4)}


def render(s: dict[str, Any]) -> str:
    def fmt(d: dict[str, Any]) -> str:
        return "-" if d["median"] is None else f"median {d['median']:.1f} s, p90 {d['p90']:.1f} s"

    out = [f"{s['evaluations']} evaluations ({s['repeats']} repeats of a source evaluated before, answered from "
           f"it), {s['compiled']} others of programs that compiled: wall {fmt(s['wall'])}"]
    for name, t in s["tools"].items():
        share = "" if t["ranShare"] is None else (f" ({t['ranShare']:.0%} of the evaluations' wall running, "
                                                  f"{t['waitedShare']:.0%} waiting)")
        out.append(f"  {name}: {t['measured']} timed; ran {fmt(t['ran'])}; waited for a slot {fmt(t['waited'])}{share}")
        if "passes" in t:
            line = t["perPass"]
            fit = "" if line is None else f"; fitted: {line['start']:.1f} s + {line['perPass']:.3f} s a pass"
            out.append(f"    replay passes median {t['passes']['median']:.0f}, p90 {t['passes']['p90']:.0f}{fit}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recording", nargs="+", help="recording folders or archives, pooled")
    ap.add_argument("--pass", dest="prefix", default="", metavar="PREFIX",
                    help="only the passes whose start time begins so (e.g. 20261205T14)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    lines: list[dict[str, Any]] = []
    for where in map(Path, args.recording):
        with tempfile.TemporaryDirectory() as scratch:
            root = where
            if recording_archive.is_archive(where):
                try:
                    root = recording_archive.unpack(where, Path(scratch))
                except recording_archive.ArchiveError as exc:
                    print(f"evaluation_times: {exc}", file=sys.stderr)
                    return 2
            elif not where.is_dir():
                print(f"evaluation_times: {where}: not a recording folder or its archive "
                      f"({', '.join(recording_archive.SUFFIXES)})", file=sys.stderr)
                return 2
            lines += read_lines(root, args.prefix)
    if not lines:
        which = f"pass-{args.prefix}*.jsonl" if args.prefix else "pass-*.jsonl"
        print(f"evaluation_times: {', '.join(args.recording)}: no evaluations' log "
              f"(openevolve/<task>/evaluations/{which}); recordings from before 2026-12-01 keep none", file=sys.stderr)
        return 2
    s = summary(lines)
    print(render(s))
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
