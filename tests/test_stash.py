"""scripts/device/stash.sh and parts_manifest.py: a set of parts left incomplete is said, never joined torn.

A session stashes a wheelhouse and each model in parts, one a device call. This session's first call was refused
("no device machine could be started right now") and the rest of the batch went on: the wheelhouse lacked its first
part, which only the job's first step found. Each part now carries its set's list (PARTS), so every stash call says
what is still missing and `stash.sh --check` refuses the set before any work.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

DEVICE = Path(__file__).resolve().parents[1] / "scripts" / "device"


def pack(checkout: Path, folder: str, name: str, count: int) -> None:
    for i in range(count):
        part = checkout / folder / f"p{i:02d}"
        part.mkdir(parents=True)
        (part / f"{name}{i:02d}").write_bytes(os.urandom(1000 + i))
    done = subprocess.run(["python3", str(DEVICE / "parts_manifest.py"), str(checkout / folder)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def stash(checkout: Path, store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(DEVICE / "stash.sh"), *args], cwd=checkout, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "CUDANALYST_STASH": str(store)})


def test_each_part_says_what_is_missing_and_check_refuses_until_whole(tmp_path: Path) -> None:
    checkout, store = tmp_path / "checkout", tmp_path / "stash"
    pack(checkout, ".models/tiny", "tiny.gguf.part", 3)
    pack(checkout, ".wheelhouse", "part", 2)
    assert stash(checkout, store, "--check").returncode == 9  # nothing stashed yet
    first = stash(checkout, store, ".models/tiny/p00")
    assert first.returncode == 0
    assert "model tiny: 2 of 3 parts missing: tiny.gguf.part01 (absent) tiny.gguf.part02 (absent)" in first.stdout
    stash(checkout, store, ".models/tiny/p02")
    stash(checkout, store, ".wheelhouse/p00")
    stash(checkout, store, ".wheelhouse/p01")
    check = stash(checkout, store, "--check")
    assert check.returncode == 9
    assert "wheelhouse: whole (2 parts)" in check.stdout
    assert "model tiny: 1 of 3 parts missing: tiny.gguf.part01 (absent)" in check.stdout
    assert stash(checkout, store, "--check", "wheelhouse").returncode == 0  # one set asked for alone
    last = stash(checkout, store, ".models/tiny/p01")
    assert "model tiny: whole (3 parts)" in last.stdout
    assert stash(checkout, store, "--check").returncode == 0
    # The list itself never joins the set: the device joins `*.part*` (models) and `part*` (the wheelhouse).
    assert sorted(p.name for p in (store / "models" / "tiny").iterdir()) == [
        "PARTS", "tiny.gguf.part00", "tiny.gguf.part01", "tiny.gguf.part02"]


def test_a_torn_part_is_said(tmp_path: Path) -> None:
    checkout, store = tmp_path / "checkout", tmp_path / "stash"
    pack(checkout, ".models/tiny", "tiny.gguf.part", 2)
    for i in range(2):
        stash(checkout, store, f".models/tiny/p{i:02d}")
    (store / "models" / "tiny" / "tiny.gguf.part01").write_bytes(b"short")
    check = stash(checkout, store, "--check", "tiny")
    assert check.returncode == 9 and "tiny.gguf.part01 (torn)" in check.stdout


def test_parts_without_a_list_are_stashed_as_before(tmp_path: Path) -> None:
    checkout, store = tmp_path / "checkout", tmp_path / "stash"
    (checkout / ".models/old/p00").mkdir(parents=True)
    (checkout / ".models/old/p00/old.gguf.part00").write_bytes(b"x" * 10)
    assert stash(checkout, store, ".models/old/p00").returncode == 0
    assert stash(checkout, store, "--check", "old").returncode == 0
    assert stash(checkout, store, ".elsewhere/p00").returncode == 2


def test_the_manifest_refuses_a_folder_that_is_not_a_packed_set(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "two" / "p00").mkdir(parents=True)
    (tmp_path / "two" / "p00" / "a").write_text("a")
    (tmp_path / "two" / "p00" / "b").write_text("b")
    for folder in ("empty", "two", "absent"):
        done = subprocess.run(["python3", str(DEVICE / "parts_manifest.py"), str(tmp_path / folder)],
                              capture_output=True, text=True)
        assert done.returncode == 2 and folder in done.stderr


def wheelhouse(checkout: Path, work: Path) -> None:
    """A wheelhouse as prepare.sh packs it: a tar of wheels, split into parts, with its list."""
    (work / "wheels").mkdir(parents=True)
    (work / "wheels" / "gguf-0-py3-none-any.whl").write_bytes(os.urandom(3000))
    blob = subprocess.run(["tar", "cf", "-", "-C", str(work / "wheels"), "."], capture_output=True, check=True).stdout
    for i in range(2):
        part = checkout / ".wheelhouse" / f"p{i:02d}"
        part.mkdir(parents=True)
        (part / f"part{i:02d}").write_bytes(blob[i * len(blob) // 2:(i + 1) * len(blob) // 2])
    subprocess.run(["python3", str(DEVICE / "parts_manifest.py"), str(checkout / ".wheelhouse")], check=True)


def test_a_whole_model_converts_in_the_background_while_the_batch_goes_on(tmp_path: Path) -> None:
    # The eleventh session's call 1 spent 98 s converting the 0.5B after its parts were stashed; once the wheelhouse
    # (gguf comes with vLLM's wheels: the device found that out) and a model are whole, the stash call starts that
    # conversion (convert_ahead.sh, detached) and call 1 waits on its lock instead.
    checkout, store, work = tmp_path / "checkout", tmp_path / "stash", tmp_path / "work"
    pack(checkout, ".models/tiny", "tiny.gguf.part", 2)
    wheelhouse(checkout, work)
    (checkout / ".device" / "wheels").mkdir(parents=True)
    (checkout / ".device" / "wheels" / "pydantic-0-py3-none-any.whl").write_bytes(b"")
    calls = work / "python-calls"
    stub = work / "python3"  # stands for the machine's python: pip and prepare_model.py (tested on their own)
    stub.write_text(f'#!/bin/bash\necho "$*" >> {calls}\n')
    stub.chmod(0o755)
    site = work / "site"
    env = {**os.environ, "CUDANALYST_STASH": str(store), "DETACHED_DIR": str(work / "detached"),
           "CONVERT_PY": str(stub), "CONVERT_SITE": str(site), "CUDANALYST_GGUF_DIR": str(work),
           "CUDANALYST_CACHE": str(work / "cache")}

    def call(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(DEVICE / "stash.sh"), *args], cwd=checkout, capture_output=True,
                              text=True, timeout=60, env={**env, **extra})

    assert "converting" not in call(".models/tiny/p00").stdout
    assert "converting" not in call(".models/tiny/p01", STASH_CONVERT="0").stdout  # whole, but turned off
    assert "converting" not in call(".models/tiny/p01").stdout  # whole, but no wheelhouse yet: gguf is in it
    assert "converting" not in call(".wheelhouse/p00").stdout
    assert not (work / "detached").exists()
    last = call(".wheelhouse/p01")  # the wheelhouse's last part starts the model that was waiting for it
    assert "wheelhouse: whole (2 parts)" in last.stdout and "model tiny: converting in the background" in last.stdout
    waited = subprocess.run(["bash", str(DEVICE / "detached.sh"), "wait", "convert-tiny", "30"], capture_output=True,
                            text=True, timeout=60, env=env)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    console = (work / "detached" / "convert-tiny" / "console.log").read_text()
    assert "convert_ahead: tiny converted" in console, console
    lines = calls.read_text().splitlines()
    assert lines[0].startswith("-m pip install") and f"--target {site / 'own'} .device/wheels/pydantic" in lines[0]
    assert f"--target {site / 'vllm'} {site / 'wheelhouse'}/gguf-0-py3-none-any.whl" in lines[1]
    assert (site / "wheelhouse" / "gguf-0-py3-none-any.whl").read_bytes() == \
        (work / "wheels" / "gguf-0-py3-none-any.whl").read_bytes()
    assert lines[2] == f"scripts/prepare_model.py tiny --gguf {work / 'tiny.gguf'}"
    parts = sorted((store / "models" / "tiny").glob("tiny.gguf.part*"))
    assert (work / "tiny.gguf").read_bytes() == b"".join(p.read_bytes() for p in parts)
    # Started once: a part sent again (a re-sent batch) leaves the finished job alone.
    assert "converting" not in call(".models/tiny/p01").stdout


def test_no_conversion_starts_without_the_carried_wheels(tmp_path: Path) -> None:
    checkout, store = tmp_path / "checkout", tmp_path / "stash"
    pack(checkout, ".models/tiny", "tiny.gguf.part", 1)
    done = subprocess.run(["bash", str(DEVICE / "stash.sh"), ".models/tiny/p00"], cwd=checkout, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "CUDANALYST_STASH": str(store),
                                                      "DETACHED_DIR": str(tmp_path / "detached")})
    assert done.returncode == 0 and "model tiny: whole (1 parts)" in done.stdout
    assert "converting" not in done.stdout and not (tmp_path / "detached").exists()
