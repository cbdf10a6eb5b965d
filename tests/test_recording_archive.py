"""scripts/recording_archive.py: a recording in progress kept in git as NAME.tar.xz, and restored on the next
machine (ignored folders did not outlive a session: two sessions of recordings were lost with .device/runs/)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "recording_archive.py"


def archive(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def device_tgz(tmp_path: Path, name: str, marker: str) -> Path:
    """A recording folder as the device brings it back: run-NAME.tgz holding NAME/ with repeated checkpoints."""
    src = tmp_path / f"src-{marker}"
    program = ("__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n" * 200) + marker
    for n in (2, 4, 6):
        folder = src / name / "openevolve" / "gemm" / "checkpoints" / f"checkpoint_{n}" / "programs"
        folder.mkdir(parents=True)
        for p in range(n):
            (folder / f"p{p}.json").write_text(program + str(p))
    (src / name / "spec.json").write_text(json.dumps({"name": name}))
    tgz = tmp_path / f"run-{name}-{marker}.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(src / name, arcname=name)
    return tgz


def files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_kept_recording_is_restored_whole_on_the_next_machine(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    kept = root / "docs" / "results" / "study-x" / "recordings"
    tgz = device_tgz(tmp_path, "rec-a", "one")
    done = archive(["keep", str(tgz), str(kept)])
    assert done.returncode == 0, done.stderr
    xz = kept / "rec-a.tar.xz"
    assert xz.is_file() and not list(kept.glob("*.partial"))
    assert xz.stat().st_size < tgz.stat().st_size  # the repeated checkpoints cost xz next to nothing
    first = xz.read_bytes()
    assert archive(["keep", str(tgz), str(kept)]).returncode == 0 and xz.read_bytes() == first  # reproducible

    restored = archive(["restore", "rec-a", str(tmp_path / "runs"), "--root", str(root)])
    assert restored.returncode == 0 and "resuming rec-a from" in restored.stdout and "rec-a.tar.xz" in restored.stdout
    with tarfile.open(tgz) as tar:
        tar.extractall(tmp_path / "expected", filter="data")
    assert files(tmp_path / "runs" / "rec-a") == files(tmp_path / "expected" / "rec-a")


def test_this_sessions_copy_wins_and_a_warm_machines_own_folder_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    assert archive(["keep", str(device_tgz(tmp_path, "rec-b", "committed")),
                    str(root / "docs" / "results" / "s" / "recordings")]).returncode == 0
    (root / ".device" / "runs").mkdir(parents=True)
    device_tgz(tmp_path, "rec-b", "newer").rename(root / ".device" / "runs" / "run-rec-b.tgz")
    runs = tmp_path / "runs"
    out = archive(["restore", "rec-b", str(runs), "--root", str(root)])
    assert out.returncode == 0 and "run-rec-b.tgz" in out.stdout
    assert (runs / "rec-b" / "openevolve/gemm/checkpoints/checkpoint_6/programs/p0.json").read_text().endswith("newer0")
    (runs / "rec-b" / "spec.json").write_text("the warm machine's own")
    again = archive(["restore", "rec-b", str(runs), "--root", str(root)])
    assert again.returncode == 0 and "no saved copy restored" in again.stdout
    assert (runs / "rec-b" / "spec.json").read_text() == "the warm machine's own"
    nothing = archive(["restore", "rec-c", str(tmp_path / "empty"), "--root", str(root)])
    assert nothing.returncode == 0 and not (tmp_path / "empty").exists()  # a first pass: nothing saved yet


def test_an_archive_of_several_recordings_is_kept_one_per_folder_and_each_restores(tmp_path: Path) -> None:
    # scripts/device/policy.sh brings the policy comparison's recordings back in one policy-runs-GLOB.tgz, with
    # each recording's times-NAME.tsv at its top: kept one .tar.xz a recording, the times beside them.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x").write_text("x")
    (tmp_path / "b" / "y").write_text("y")
    (tmp_path / "times-a.tsv").write_text("a\t120\n")
    two = tmp_path / "policy-runs-pc-all-_.tgz"
    with tarfile.open(two, "w:gz") as tar:
        tar.add(tmp_path / "a", arcname="a")
        tar.add(tmp_path / "b", arcname="b")
        tar.add(tmp_path / "times-a.tsv", arcname="times-a.tsv")
    root = tmp_path / "checkout"
    kept = root / "docs" / "results" / "policy-x" / "recordings"
    out = archive(["keep", str(two), str(kept)])
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in kept.iterdir()) == ["a.tar.xz", "b.tar.xz", "times-a.tsv"]
    assert (kept / "times-a.tsv").read_text() == "a\t120\n"
    for name, file in (("a", "x"), ("b", "y")):
        assert archive(["restore", name, str(tmp_path / "runs"), "--root", str(root)]).returncode == 0
        assert (tmp_path / "runs" / name / file).read_text() == file


def test_an_archive_that_holds_no_recording_is_refused_with_exit_2_and_nothing_written(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    flat = tmp_path / "run-flat.tgz"
    (tmp_path / "only.txt").write_text("x")
    with tarfile.open(flat, "w:gz") as tar:
        tar.add(tmp_path / "only.txt", arcname="only.txt")
    out = archive(["keep", str(flat), str(kept)])
    assert out.returncode == 2 and "run-flat.tgz" in out.stderr and "holds no folder" in out.stderr
    assert not kept.exists()
    junk = tmp_path / "run-junk.tgz"
    junk.write_text("not a tar")
    bad = archive(["keep", str(junk), str(kept)])
    assert bad.returncode == 2 and "run-junk.tgz" in bad.stderr and "not a readable tar" in bad.stderr
    root = tmp_path / "checkout"
    (root / "docs" / "results" / "s" / "recordings").mkdir(parents=True)
    (root / "docs" / "results" / "s" / "recordings" / "rec-d.tar.xz").write_text("torn")
    torn = archive(["restore", "rec-d", str(tmp_path / "runs"), "--root", str(root)])
    assert torn.returncode == 2 and "rec-d.tar.xz" in torn.stderr


def test_a_snapshot_of_a_live_recording_reads_its_progress_first_and_passes_over_vanished_files(
        tmp_path: Path, monkeypatch) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    import recording_archive

    runs = tmp_path / "runs"
    folder = runs / "rec-e"
    for rel in ("spec.json", "progress/gemm.json", "openevolve/gemm/checkpoints/checkpoint_2/metadata.json",
                "openevolve/gemm/checkpoints/checkpoint_2/programs/p.json", "openevolve/gemm/.tmp-vanishing"):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(rel)
    real_add = tarfile.TarFile.add

    def add(self, name, arcname=None, recursive=True, **kw):  # the store's temporary file is renamed meanwhile
        if str(name).endswith(".tmp-vanishing"):
            raise FileNotFoundError(name)
        return real_add(self, name, arcname=arcname, recursive=recursive, **kw)

    monkeypatch.setattr(tarfile.TarFile, "add", add)
    dest = tmp_path / "out" / "run-rec-e.tgz"
    assert recording_archive.snapshot("rec-e", runs, dest) == 4
    with tarfile.open(dest) as tar:
        names = tar.getnames()
    assert names[:2] == ["rec-e/spec.json", "rec-e/progress/gemm.json"]  # before any checkpoint is read
    assert "rec-e/openevolve/gemm/.tmp-vanishing" not in names and not list(dest.parent.glob("*.partial"))
    monkeypatch.undo()
    root = tmp_path / "checkout"
    (root / ".device" / "runs").mkdir(parents=True)
    dest.rename(root / ".device" / "runs" / "run-rec-e.tgz")
    out = archive(["restore", "rec-e", str(tmp_path / "again"), "--root", str(root)])
    assert out.returncode == 0 and (tmp_path / "again" / "rec-e" / "progress" / "gemm.json").is_file()
    bad = archive(["snapshot", "rec-none", str(runs), str(tmp_path / "x.tgz")])
    assert bad.returncode == 2 and "rec-none" in bad.stderr and not (tmp_path / "x.tgz").exists()


def test_a_run_folder_kept_in_progress_restores_and_the_newest_study_wins(tmp_path: Path) -> None:
    # A study's role resumed in a later session (scripts/device/study.sh) is kept under in-progress/, not recordings/.
    root = tmp_path / "checkout"
    for study, marker in (("study-2026-11-30", "older"), ("study-2026-12-02", "newer")):
        kept = root / "docs" / "results" / study / ("recordings" if marker == "older" else "in-progress")
        assert archive(["keep", str(device_tgz(tmp_path, "role-a", marker)), str(kept)]).returncode == 0
    out = archive(["restore", "role-a", str(tmp_path / "runs"), "--root", str(root)])
    assert out.returncode == 0 and "study-2026-12-02/in-progress/role-a.tar.xz" in out.stdout
    program = tmp_path / "runs" / "role-a" / "openevolve/gemm/checkpoints/checkpoint_2/programs/p0.json"
    assert program.read_text().endswith("newer0")


def test_a_snapshot_of_a_study_run_leaves_out_the_candidates_of_units_with_an_outcome(tmp_path: Path) -> None:
    # As scripts/device/study.sh packs: resuming reads no candidate whose unit has its outcome, and a finished run's
    # candidates took its snapshot over the 16 MiB a file that the device tool brings back.
    folder = tmp_path / "runs" / "study-x"
    for rel in ("spec.json", "secret.json", "outcomes/u1.json", "candidates/u1.json", "candidates/u2.json"):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(rel)
    dest = tmp_path / "run-study-x.tgz"
    out = archive(["snapshot", "study-x", str(tmp_path / "runs"), str(dest)])
    assert out.returncode == 0, out.stderr
    with tarfile.open(dest) as tar:
        names = set(tar.getnames())
    assert "study-x/candidates/u2.json" in names and "study-x/outcomes/u1.json" in names
    assert "study-x/candidates/u1.json" not in names and "study-x/secret.json" in names
