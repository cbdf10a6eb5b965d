#!/usr/bin/env python3
"""Write the list of a packed folder's parts into each of its parts, so the GPU machine can say which are missing.

A wheelhouse or a model travels as DIR/p00 .. DIR/pNN, one part a device call (scripts/device/stash.sh). A call that
fails to start its machine, or a machine lost between calls, leaves a part out without a sound, and the joined file
is then torn. Each part folder gets the same `PARTS` file: one line per part, its file name and sha256, so that
`stash.sh` says after every part what is still missing and `stash.sh --check` refuses a torn set before any work.

    python3 scripts/device/parts_manifest.py .models/qwen2.5-coder-1.5b-instruct    # pack_model.sh does this

Exit 2 when DIR holds no part folders or a part folder holds other than one part file.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

MANIFEST = "PARTS"


def part_files(folder: Path) -> list[Path]:
    """The one part file of each part folder pNN, in order (pure over the listing; raises ValueError)."""
    parts = sorted(p for p in folder.iterdir() if p.is_dir() and p.name[:1] == "p" and p.name[1:].isdigit())
    if not parts:
        raise ValueError(f"{folder}: no part folders p00 .. pNN")
    files = []
    for p in parts:
        inside = [f for f in p.iterdir() if f.name != MANIFEST]
        if len(inside) != 1 or not inside[0].is_file():
            raise ValueError(f"{p}: expected one part file, found {sorted(f.name for f in inside)}")
        files.append(inside[0])
    return files


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: parts_manifest.py DIR", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    try:
        files = part_files(folder)
    except (ValueError, FileNotFoundError, NotADirectoryError) as exc:
        print(f"parts_manifest: {exc}", file=sys.stderr)
        return 2
    text = "".join(f"{f.name} {sha256(f)}\n" for f in files)
    for f in files:
        (f.parent / MANIFEST).write_text(text)
    print(f"parts_manifest: {len(files)} parts listed in each {folder}/pNN/{MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
