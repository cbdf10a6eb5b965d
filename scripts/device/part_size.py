#!/usr/bin/env python3
"""The largest part (MiB) that the device tool can carry beside this working tree in one call.

A stash call carries the working tree (tracked files, and untracked ones git does not ignore) and one part, 64 MiB
in all. The tree grows as results are committed (docs/results held 19 MB on 2026-12-02, and a study's archived runs
add several more), so a fixed part size stops fitting one day, and then every stash call of a session is refused.
`scripts/device/pack_model.sh` sizes its parts from this, and the wheelhouse is split with it:

    bash ../shared/gpu-wheelhouse/build.sh OUTDIR "$(python3 scripts/device/part_size.py)"

Exit 2, naming the largest untracked folders, when too little room is left for a part worth a call.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

CALL_MIB = 64      # what one device call carries (.library/device/README.md)
RESERVE_MIB = 3    # the device tool's own packing, and a file or two written between the sizing and the calls
MIN_PART_MIB = 8   # below this a model of 1 GB takes over 125 calls: free the tree instead
MIB = 1024 * 1024


def carried_files(root: Path) -> tuple[list[Path], list[Path]]:
    """The files a call carries from `root`: (tracked, untracked but not ignored)."""
    def listed(*args: str) -> list[Path]:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", *args], check=True, capture_output=True).stdout
        return [root / p for p in out.decode().split("\0") if p]
    return listed(), listed("--others", "--exclude-standard")


def size(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink())


def part_mib(tree_bytes: int) -> int:
    """Whole MiB left for a part beside a tree of `tree_bytes` (pure)."""
    return (CALL_MIB - RESERVE_MIB) - -(-tree_bytes // MIB)  # the tree rounded up


def biggest_folders(untracked: list[Path], root: Path, count: int = 3) -> list[tuple[str, int]]:
    by_top: dict[str, int] = {}
    for p in untracked:
        top = p.relative_to(root).parts[0]
        by_top[top] = by_top.get(top, 0) + (p.stat().st_size if p.is_file() else 0)
    return sorted(by_top.items(), key=lambda kv: -kv[1])[:count]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="the checkout")
    args = ap.parse_args(argv)
    try:
        tracked, untracked = carried_files(args.root)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        print(f"part_size: {args.root}: not a git checkout ({exc})", file=sys.stderr)
        return 2
    tree = size(tracked) + size(untracked)
    mib = part_mib(tree)
    if mib < MIN_PART_MIB:
        folders = ", ".join(f"{name} ({n / MIB:.1f} MiB)" for name, n in biggest_folders(untracked, args.root))
        print(f"part_size: the working tree takes {tree / MIB:.1f} MiB of a call's {CALL_MIB}, leaving {mib} MiB for "
              f"a part (at least {MIN_PART_MIB} needed); untracked: {folders or 'none'}", file=sys.stderr)
        return 2
    print(mib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
