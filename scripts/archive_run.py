#!/usr/bin/env python3
"""Archive a finished run folder compactly, e.g. to keep it in git under docs/results/ or to bring it back
from a GPU machine: spec.json, plan.json, report/ (report.json and the self-contained report.html; not the figures,
which report.html holds inline) and the outcome records as one outcomes.jsonl.gz (sorted by unit key, so an archive
is reproducible). `cudanalyst report` and `cudanalyst study` read an archived folder
as they read the run folder (src/cudanalyst/runfolder.py). Candidates, plans and feedback are left out.

    python3 scripts/archive_run.py runs/study-implicit-1-5b docs/results/study-2026-11-30/runs/study-implicit-1-5b

Exit 2 when the source is not a run folder (no spec.json, or no outcome records) or the destination exists.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path


def archive(src: Path, dest: Path) -> int:
    records = sorted((src / "outcomes").glob("*.json"))
    if not (src / "spec.json").is_file() or not records:
        print(f"error: {src}: not a run folder with outcomes (spec.json and outcomes/*.json)", file=sys.stderr)
        return 2
    if dest.exists():
        print(f"error: {dest}: already exists; archives are not merged", file=sys.stderr)
        return 2
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("spec.json", "plan.json"):
        if (src / name).is_file():
            shutil.copy2(src / name, tmp / name)
    if (src / "report").is_dir():
        # Not the figures: report.html holds each of them inline, and an archive in git travels with every device
        # call (its bytes come off each model part's size). `cudanalyst report` on the archive writes them again.
        shutil.copytree(src / "report", tmp / "report", ignore=shutil.ignore_patterns("*.png"))
    lines = [json.dumps(json.loads(f.read_text()), sort_keys=True) for f in records]
    # mtime=0: the same records give the same bytes.
    with open(tmp / "outcomes.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(("\n".join(lines) + "\n").encode())
    tmp.rename(dest)  # never half-written
    print(f"{dest}: {len(lines)} outcomes")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(archive(Path(sys.argv[1]), Path(sys.argv[2])))
