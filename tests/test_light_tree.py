"""scripts/device/light_tree.sh: what a device call carries leaves docs/results/ behind, except what the GPU reads.

Every device call carries the working tree beside its part (64 MiB in all), and the archived runs grow it by about
2 MB each; `on` takes the rest of docs/results/ out of the index for the calls (nothing changes on disk), `off`
puts it back, and nothing staged is ever lost to it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device" / "light_tree.sh"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def carried(repo: Path) -> set[str]:
    """What the device tool carries: tracked files, and untracked ones git does not ignore."""
    return set(git(repo, "ls-files").split()) | set(git(repo, "ls-files", "--others", "--exclude-standard").split())


def light(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def make_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    files = ["src/a.py", "docs/results/study-2026-12-02/recordings/rec.tar.xz",
             "docs/results/study-2026-12-02/in-progress/run.tar.xz", "docs/results/study-2026-12-02/runs/main/x.json",
             "docs/results/study-2026-12-02/README.md", "docs/results/old/report.html",
             "docs/results/study-2026-12-02/recordings-extra/y.txt",
             "docs/results/policy-2026-12-04/recordings/pc-all-s0.tar.xz",
             "docs/results/policy-2026-12-04/measured/pc-all-s0.jsonl", "docs/results/policy-2026-12-04/README.md",
             "docs/results/policy-2026-12-09/recordings/pcg-all-s0.tar.xz", "docs/results/policy-2026-12-09/README.md"]
    for f in files:
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / f).write_text(f)
    git(repo, "init", "-q")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return repo


def test_on_leaves_the_rest_of_docs_results_behind_and_off_restores_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    before = carried(repo)
    on = light(repo, "on")
    assert on.returncode == 0, on.stderr
    assert carried(repo) == {"src/a.py", "docs/results/study-2026-12-02/recordings/rec.tar.xz",
                             "docs/results/study-2026-12-02/in-progress/run.tar.xz",
                             # the policy comparison's recordings in progress and its measured rows: policy.sh
                             # restores them there and measures only what has no rows yet
                             "docs/results/policy-2026-12-04/recordings/pc-all-s0.tar.xz",
                             "docs/results/policy-2026-12-04/measured/pc-all-s0.jsonl",
                             # a later comparison's, in a folder of its own date
                             "docs/results/policy-2026-12-09/recordings/pcg-all-s0.tar.xz"}
    # A KEEP path is a folder, not a prefix of a name: recordings-extra/ stays behind.
    assert (repo / "docs/results/old/report.html").read_text() == "docs/results/old/report.html"  # still on disk
    assert light(repo, "status").stdout.startswith("on: 6 files")
    assert light(repo, "on").returncode == 2  # twice would lose the list of what to restore
    # A commit now would delete what was left behind from the repository: refused until `off`.
    commit = subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm",
                             "x"], capture_output=True, text=True)
    assert commit.returncode != 0 and "light_tree.sh is on" in commit.stderr
    off = light(repo, "off")
    assert off.returncode == 0, off.stderr
    assert carried(repo) == before
    assert git(repo, "status", "--porcelain") == ""  # index and exclude as they were
    assert light(repo, "status").stdout.strip() == "off"
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


def test_keep_names_what_travels(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    assert light(repo, "on", KEEP="docs/results/old").returncode == 0
    assert {p for p in carried(repo) if p.startswith("docs/")} == {"docs/results/old/report.html"}
    assert light(repo, "off").returncode == 0 and git(repo, "status", "--porcelain") == ""


def test_on_refuses_with_staged_changes_which_off_would_drop(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "src/a.py").write_text("changed")
    git(repo, "add", "src/a.py")
    refused = light(repo, "on")
    assert refused.returncode == 2 and "staged" in refused.stderr
    assert git(repo, "diff", "--cached", "--name-only").split() == ["src/a.py"]
    assert light(repo, "bogus").returncode == 2
