"""The study's published page (docs/results/study-2026-11-30/) is what `cudanalyst study` makes from the archived
runs beside it: regenerating it gives the same README and numbers, so the page and the code cannot drift apart
(rerun the command in its preface after changing src/cudanalyst/analysis/study.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudanalyst.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results" / "study-2026-11-30"


def test_the_published_study_regenerates_from_its_archived_runs(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "study"
    out.mkdir()
    monkeypatch.chdir(ROOT)  # the page names the specs as its preface's command does, from the repository root
    runs = PAGE.relative_to(ROOT) / "runs"
    code = cli(["study", "examples/study/", "--runs", str(runs), "--run",
                f"main={runs / 'h200-outcomes'}", "--out", str(out), "--date", "2026-11-30",
                "--preface", str(PAGE / "preface.md")])
    assert code == 0
    # Report links are relative to --out, so only they differ.
    page = (PAGE / "README.md").read_text()
    made = (out / "README.md").read_text()
    assert [line for line in made.splitlines() if "[report](" not in line] == \
        [line for line in page.splitlines() if "[report](" not in line]
    assert json.loads((out / "study.json").read_text())["rows"] == json.loads((PAGE / "study.json").read_text())["rows"]
    # The page's headline claim is what the numbers say.
    row = next(r for r in json.loads((PAGE / "study.json").read_text())["rows"]
               if r["metric"] == "pass" and r["copies"] == "count" and r["verdict"] == "agrees")
    assert row["high"] < 0 and row["programs"] == 48
