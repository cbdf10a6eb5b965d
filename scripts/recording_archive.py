#!/usr/bin/env python3
"""A recording's folder kept in git between sessions, and brought back on the next GPU machine.

Ignored folders (.device/runs/) do not outlive a session's machine: two sessions of recordings were lost with
them. So a recording in progress is committed under docs/results/<study>/recordings/NAME.tar.xz, and the next
session's first call resumes it. xz, because its window takes out what the checkpoints repeat (every checkpoint
holds every program so far): the 2026-12-02 recording at 347 of 480 iterations was 3.95 MB as the device's .tgz
and 0.18 MB as .tar.xz. Standard library only: `restore` runs on the GPU machine, which may have no xz.

    python3 scripts/recording_archive.py keep .device/runs/run-NAME.tgz docs/results/study-2026-12-02/recordings
        -> docs/results/study-2026-12-02/recordings/NAME.tar.xz (members sorted, so the same folder packs the same);
           an archive of several folders (scripts/device/policy.sh's) gives one NAME.tar.xz each, its top-level
           files (times-NAME.tsv) copied beside them
    python3 scripts/recording_archive.py restore NAME /tmp/runs [--root DIR]
        -> /tmp/runs/NAME from DIR/.device/runs/run-NAME.tgz (this session's copy) or else the newest
           DIR/docs/results/*/recordings/NAME.tar.xz (or .../in-progress/NAME.tar.xz: a study's run folder kept
           between sessions, the same way); nothing to restore is not an error (a first pass)

    python3 scripts/recording_archive.py snapshot NAME /tmp/runs $OUT/run-NAME.tgz
        -> a .tgz of /tmp/runs/NAME while the recording still writes to it (scripts/device/detached.sh): its
           progress/ first, so every checkpoint the snapshot's progress names was whole before the checkpoints
           were read; files that vanish while it reads (a store's temporary files) are passed over

Exit 2 on bad input: an archive that is not a tar, one to keep that holds no folder, or one to restore that holds
anything but the one folder NAME/.
"""

from __future__ import annotations

import argparse
import io
import lzma
import sys
import tarfile
from pathlib import Path

# What the scripts that read a recording take as its archive: the device's .tgz and the kept .tar.xz.
SUFFIXES = (".tgz", ".tar.gz", ".tar.xz")


class ArchiveError(ValueError):
    pass


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith(SUFFIXES)


def unpack(path: Path, scratch: Path) -> Path:
    """A recording's archive unpacked into `scratch` (returned); for the scripts that read one
    (evaluation_times, tool_report_share, recording_provenance)."""
    try:
        with tarfile.open(path) as tar:
            tar.extractall(scratch, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"{path}: not a readable tar archive ({exc})") from None
    return scratch


def member_names(path: Path) -> list[str]:
    """The names an archive holds, without unpacking it (what a page needs to know of a kept recording)."""
    try:
        with tarfile.open(path) as tar:
            return tar.getnames()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"{path}: not a readable tar archive ({exc})") from None


def folder_name(tar: tarfile.TarFile, where: str) -> str:
    """The one top folder every member lies in."""
    tops = {m.name.lstrip("./").split("/", 1)[0] for m in tar.getmembers() if m.name.lstrip("./")}
    if len(tops) != 1:
        raise ArchiveError(f"{where}: holds {len(tops)} top-level entries ({', '.join(sorted(tops)[:3])}), not one folder")
    return tops.pop()


def keep(source: Path, dest_dir: Path) -> list[Path]:
    """Repack a device archive as dest_dir/NAME.tar.xz, one per top-level folder (run-NAME.tgz holds one;
    scripts/device/policy.sh's policy-runs-GLOB.tgz one per recording), with its top-level files (the policy
    recordings' times-NAME.tsv) copied beside them; returns what it wrote."""
    try:
        with tarfile.open(source) as tar:
            # Read in the archive's order: a gzip stream read out of order is decompressed again from its start
            # for every step back (54 s for the 2026-12-02 recording, against under a second in order).
            members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar]  # type: ignore[union-attr]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveError(f"{source}: not a readable tar archive ({exc})") from None
    folders: dict[str, list[tuple[tarfile.TarInfo, bytes | None]]] = {}
    loose: list[tuple[str, bytes]] = []
    for m, data in members:
        path = m.name.lstrip("./")
        if not path:
            continue
        if "/" not in path and m.isfile():
            loose.append((path, data or b""))
        else:
            folders.setdefault(path.split("/", 1)[0], []).append((m, data))
    if not folders:
        raise ArchiveError(f"{source}: holds no folder (a recording's archive holds NAME/)")
    dest_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, entries in sorted(folders.items()):
        entries.sort(key=lambda entry: entry[0].name.lstrip("./"))
        dest = dest_dir / f"{name}.tar.xz"
        partial = dest.with_name(dest.name + ".partial")
        with tarfile.open(partial, "w:xz", preset=9 | lzma.PRESET_EXTREME) as out:
            for m, data in entries:
                out.addfile(m, io.BytesIO(data) if data is not None else None)
        partial.replace(dest)  # a kept archive is whole or absent
        written.append(dest)
    for name, data in loose:
        (dest_dir / name).write_bytes(data)
        written.append(dest_dir / name)
    return written


# Where committed copies lie: recordings, and run folders that have to outlive a session (a study's role resumed in
# a later session: scripts/device/study.sh).
KEPT_UNDER = ("recordings", "in-progress")


def saved_copies(name: str, root: Path) -> list[Path]:
    """Where a recording (or a run folder) may be, first choice first: this session's device copy, then the newest
    committed one."""
    committed = sorted((p for under in KEPT_UNDER for p in root.glob(f"docs/results/*/{under}/{name}.tar.xz")),
                       key=lambda p: p.parts[-3], reverse=True)
    return [p for p in [root / ".device" / "runs" / f"run-{name}.tgz", *committed] if p.is_file() and p.stat().st_size]


def restore(name: str, dest: Path, root: Path) -> Path | None:
    """Unpack the first saved copy of `name` into dest/; None when there is none (or dest/NAME exists already)."""
    if (dest / name).exists():
        return None  # this warm machine's own copy is newer than anything saved
    for saved in saved_copies(name, root):
        try:
            with tarfile.open(saved) as tar:
                found = folder_name(tar, str(saved))
                if found != name:
                    raise ArchiveError(f"{saved}: holds the folder {found}, not {name}")
                dest.mkdir(parents=True, exist_ok=True)
                tar.extractall(dest, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ArchiveError(f"{saved}: not a readable tar archive ({exc})") from None
        return saved
    return None


def snapshot(name: str, runs: Path, dest: Path) -> int:
    """A .tgz of runs/NAME as it is now, progress first; returns the files it holds."""
    folder = runs / name
    if not (folder / "spec.json").is_file():
        raise ArchiveError(f"{folder}: not a recording's folder (no spec.json)")
    # The store writes a checkpoint whole, then the progress that names it: read in the other order, a snapshot's
    # progress could name a checkpoint it holds only half of.
    first = [folder / "spec.json", *sorted((folder / "progress").rglob("*"))]
    taken = set(first)
    # A study run's candidates of units that have their outcome: resuming does not read them, and with them a
    # finished run of 5,610 units went over the 16 MiB a file the device tool brings back (scripts/device/study.sh
    # leaves them out the same way).
    done = {p.stem for p in (folder / "outcomes").glob("*.json")}
    rest = sorted(p for p in folder.rglob("*")
                  if p not in taken and not (p.parent == folder / "candidates" and p.stem in done))
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    count = 0
    with tarfile.open(partial, "w:gz", compresslevel=6) as out:
        for path in first + rest:
            try:
                if path.is_file():
                    out.add(path, arcname=path.relative_to(runs).as_posix(), recursive=False)
                    count += 1
            except FileNotFoundError:  # replaced or removed while we read: the next snapshot has it
                continue
    partial.replace(dest)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="recording_archive.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    k = sub.add_parser("keep", help="repack a device archive as DIR/NAME.tar.xz, one per folder in it")
    k.add_argument("source", type=Path)
    k.add_argument("dest_dir", type=Path)
    r = sub.add_parser("restore", help="unpack the saved copy of NAME into DEST")
    r.add_argument("name")
    r.add_argument("dest", type=Path)
    r.add_argument("--root", type=Path, default=Path("."), help="the checkout (default: here)")
    n = sub.add_parser("snapshot", help="a .tgz of RUNS/NAME while the recording still writes to it")
    n.add_argument("name")
    n.add_argument("runs", type=Path)
    n.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "keep":
            for path in keep(args.source, args.dest_dir):
                print(f"kept {path}")
        elif args.command == "snapshot":
            print(f"snapshot of {args.name}: {snapshot(args.name, args.runs, args.dest)} files in {args.dest}")
        else:
            saved = restore(args.name, args.dest, args.root)
            print(f"resuming {args.name} from {saved}" if saved else f"{args.name}: no saved copy restored")
    except ArchiveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
