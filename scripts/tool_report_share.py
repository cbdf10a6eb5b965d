#!/usr/bin/env python3
"""Per GPU tool, the share of a recording's compiled programs whose report is the tool's real output (issue 28).

    python scripts/tool_report_share.py RECORDING [--target 0.95] [--json FILE]

RECORDING is a recording's output folder (`<output.uri>/<name>/`, holding `trajectory/`), a trajectory folder, a
`run-NAME.tgz` that `scripts/device/pipeline.sh` brought back, or `builtin://NAME`. Counted over the programs the
harness labels `compile` or better (`trajectory.toolruns.count_tools`): nvcc built them and the task's contract held.
A program that nvcc built but that broke the contract (its kernel is missing or has the wrong parameters) has no
kernel any tool can launch; it is labelled `fail`, its reports carry its own error, and it is counted on a line of
its own, with the share over every program nvcc built beside the target's:
- compute-sanitizer: a report from a launched kernel (`ok`);
- Nsight Compute: its counters (`ok`), or the event timings with the reason counters were denied.
Each tool's failures are listed by cause. Exit status: 0 when both shares reach the target, 1 when one does not,
2 on bad input (a folder with no trajectory, named).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recording_archive  # noqa: E402

TARGET = 0.95


def trajectory_uri(where: str, scratch: Path) -> str:
    """The trajectory folder inside what was given (unpacking a .tgz into `scratch`)."""
    if where.startswith("builtin://"):
        return where
    path = Path(where)
    if recording_archive.is_archive(path):
        recording_archive.unpack(path, scratch)
        found = sorted(p.parent for p in scratch.rglob("programs.jsonl*") if p.parent.name == "trajectory")
        if not found:
            raise ValueError(f"{where}: no trajectory/programs.jsonl inside (was the recording imported?)")
        return str(found[0])
    for folder in (path / "trajectory", path):
        if any((folder / name).is_file() for name in ("programs.jsonl", "programs.jsonl.gz")):
            return str(folder)
    raise ValueError(f"{where}: neither a trajectory folder nor a recording's output folder with trajectory/ "
                     "(a recording writes it at its end, after every task's last iteration)")


def broke_contract(program: Any) -> bool:
    return (program.metrics or {}).get("contract") == 0


def shares(programs: list[Any], target: float) -> dict[str, Any]:
    from cudanalyst.trajectory.toolruns import LABELS, compiled, count_tools

    held = [p for p in programs if not broke_contract(p)]
    built = count_tools(programs)
    out: dict[str, Any] = {"programs": len(programs), "target": target, "tools": {},
                           "compiledButContractBroken": sum(1 for p in programs if compiled(p) and broke_contract(p))}
    for tool, c in count_tools(held).items():
        share = c.share()
        out["tools"][tool] = {**c.to_dict(), "label": LABELS[tool], "share": share,
                              "met": share is not None and share >= target,
                              "overEveryBuiltProgram": {**built[tool].to_dict(), "share": built[tool].share()}}
    out["met"] = all(t["met"] for t in out["tools"].values())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recording", help="recording output folder, trajectory folder, run-NAME.tgz or builtin://NAME")
    p.add_argument("--target", type=float, default=TARGET, help="the share each tool must reach (default 0.95)")
    p.add_argument("--json", type=Path, help="also write the counts here as JSON")
    args = p.parse_args(argv)
    from cudanalyst.trajectory import TrajectoryError, load_trajectory

    with tempfile.TemporaryDirectory(prefix="cudanalyst-shares-") as scratch:
        try:
            trajectory = load_trajectory(trajectory_uri(args.recording, Path(scratch)))
        except (ValueError, OSError, TrajectoryError) as exc:  # ArchiveError is a ValueError
            print(f"tool_report_share: {exc}", file=sys.stderr)
            return 2
    result = shares(trajectory.programs, args.target)
    tasks = sorted({x.task for x in trajectory.programs})
    print(f"{trajectory.uri}: {result['programs']} programs of {len(tasks)} task(s) ({', '.join(tasks)})")
    what = {"compute-sanitizer": "a report from a launched kernel",
            "nsight-compute": "counters, or event timings with the reason counters were denied"}
    for tool, t in result["tools"].items():
        failed = ", ".join(f"{k} {v}" for k, v in sorted(t["failed"].items(), key=lambda kv: -kv[1])) or "none"
        share = "n/a (no compiled program)" if t["share"] is None else f"{t['share']:.1%}"
        print(f"{t['label']}: {t['usable']} of {t['compiled']} compiled programs carry {what[tool]}: {share} "
              f"(target {args.target:.0%}: {'met' if t['met'] else 'NOT met'}); ok {t['ok']}, failed by cause: "
              f"{failed}; not run {t['notRun']}")
    if result["compiledButContractBroken"]:
        print(f"not counted above: {result['compiledButContractBroken']} program(s) that nvcc built but that broke the "
              "task's contract (label fail: no kernel a tool can launch; their reports carry the program's own error)")
        for t in result["tools"].values():
            every = t["overEveryBuiltProgram"]
            print(f"  {t['label']} over every program nvcc built: {every['usable']} of {every['compiled']}"
                  + ("" if every["share"] is None else f" ({every['share']:.1%})"))
    print("both targets met" if result["met"] else "targets NOT met")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
