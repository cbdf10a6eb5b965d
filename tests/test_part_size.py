"""scripts/device/part_size.py: the part a device call can carry beside the working tree (tracked files and
untracked ones git does not ignore), and a clear refusal when the tree leaves too little room."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from script_support import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device" / "part_size.py"
MIB = 1024 * 1024


def load():
    return load_script(SCRIPT, "part_size")


def repo(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text(".models/\n")
    return root


def run(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)], capture_output=True, text=True,
                          env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CEILING_DIRECTORIES": str(root.parent)})


def test_the_tree_rounded_up_is_taken_off_the_call() -> None:
    part_size = load()
    assert part_size.part_mib(0) == 61
    assert part_size.part_mib(1) == 60          # a byte of tree costs a whole MiB
    assert part_size.part_mib(19 * MIB) == 42   # the tree of 2026-12-02
    assert part_size.part_mib(19 * MIB + 1) == 41


def test_untracked_files_count_and_ignored_ones_do_not(tmp_path: Path) -> None:
    root = repo(tmp_path)
    (root / "docs").mkdir()
    (root / "docs" / "result.bin").write_bytes(b"x" * (5 * MIB))
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    (root / "recordings").mkdir()
    (root / "recordings" / "trajectory.json").write_bytes(b"x" * (11 * MIB))   # untracked: it travels
    (root / ".models").mkdir()
    (root / ".models" / "part").write_bytes(b"x" * (40 * MIB))                 # ignored: carried only when named
    first = run(root)
    assert first.returncode == 0, first.stderr
    assert int(first.stdout) == 61 - 17  # 5 MiB + 11 MiB + .gitignore, rounded up
    (root / "recordings" / "trajectory.json").unlink()
    assert int(run(root).stdout) == 61 - 6


def test_a_tree_too_big_for_a_part_is_refused_naming_the_untracked_folders(tmp_path: Path) -> None:
    root = repo(tmp_path)
    (root / "recordings").mkdir()
    (root / "recordings" / "big").write_bytes(b"x" * (55 * MIB))
    result = run(root)
    assert result.returncode == 2 and result.stdout == ""
    assert "recordings (55.0 MiB)" in result.stderr and "at least 8" in result.stderr


def test_a_folder_that_is_no_checkout_is_refused(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result.returncode == 2 and "not a git checkout" in result.stderr
