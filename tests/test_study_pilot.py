"""The study's pilot page (docs/results/study-2026-12-02/pilot/) is what its shipped outcomes give.

Issue 29: "The page's tables can be recomputed from the shipped outcomes, with a test that rebuilds them." The pilot's
page is rebuilt here with the command its preface gives, in a copy of the checkout's layout (the spec's trajectory URI
is relative: the first recording's trajectory is unpacked from its kept archive, as a user would), and must come out
byte for byte: every table, the sizing section and study.json. A change to the generator that changes the page shows
here as a diff to look at, and the page is then regenerated with that command.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from numbers_support import same_numbers

from cudanalyst.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
STUDY = Path("docs/results/study-2026-12-02")
PILOT = STUDY / "pilot"


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("checkout")
    shutil.copytree(ROOT / PILOT, root / PILOT, ignore=shutil.ignore_patterns("README.md", "study.json"))
    # The trajectory as the pilot ran on it (16 tasks, 372 programs): the kept recording has grown since.
    with tarfile.open(ROOT / PILOT / "recording-trajectory.tar.xz") as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("study-real-1-5b/trajectory")]
        tar.extractall(root / "recordings", members=members, filter="data")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        code = cli(["study", str(PILOT / "specs"), "--runs", str(PILOT / "runs"), "--out", str(PILOT), "--date",
                    "2026-12-02", "--effect", "0.15", "--preface", str(PILOT / "preface.md")])
    assert code == 0
    return root / PILOT


def test_the_pilot_page_is_what_its_outcomes_give(rebuilt: Path) -> None:
    shipped = (ROOT / PILOT / "README.md").read_text()
    assert (rebuilt / "README.md").read_text() == shipped
    same_numbers(json.loads((rebuilt / "study.json").read_text()), json.loads((ROOT / PILOT / "study.json").read_text()))


def test_the_pilot_page_says_what_it_replays_and_sizes_from_its_own_run(rebuilt: Path) -> None:
    page = json.loads((rebuilt / "study.json").read_text())
    # Read where the trajectory resolved: the recording's own description, not "could not be read".
    assert "unreadable" not in page["replayed"] and page["replayed"]["tasks"] == 16
    assert page["runs"]["main"]["outcomes"] == 1980 and page["runs"]["main"]["folder"] == "runs/study-real-main"
    sizing = page["sizing"]
    assert sizing["comparisons"] == page["holmFamily"] and sizing["effect"] == 0.15 and sizing["rollouts"] == 1
    drawn = page["frozen"]["drawn"]
    assert sum(sum(row.values()) for row in drawn.values()) == 60 and len(drawn) == 16


def test_a_zero_difference_prints_one_sign_whatever_the_last_bits() -> None:
    from cudanalyst.analysis.study import _fmt

    # An estimate of equal rates (+-1e-17 by numpy's summation order) is the zero it is; a bound just below zero
    # keeps its sign, which says the interval reaches below it.
    assert _fmt(-1e-17) == _fmt(1e-17) == _fmt(0.0) == "+0.000"
    assert _fmt(-0.0004) == "-0.000" and _fmt(0.0004) == "+0.000" and _fmt(None) == "n/a"
