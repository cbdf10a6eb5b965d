"""Each policy comparison's page (docs/results/policy-DATE/README.md) is what its kept rows and recordings give.

Rebuilt with the command its preface gives (scripts/policy_comparison.py analyse over the measured rows, the kept
recordings' archives and their times), into a temporary folder: README.md byte for byte, comparison.json up to
float noise. A change to the analysis, the preface or a kept file shows here as a diff to look at; the page is then
regenerated with that command.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from numbers_support import same_numbers

ROOT = Path(__file__).resolve().parents[1]
# Every comparison's page with a preface (the preface gives the command that writes the page).
PAGES = sorted(p.parent.relative_to(ROOT) for p in ROOT.glob("docs/results/policy-*/preface.md"))


def test_the_pages_are_found() -> None:
    assert Path("docs/results/policy-2026-12-04") in PAGES


def _preface_arguments(page: Path) -> list[str]:
    text = (ROOT / page / "preface.md").read_text().replace("\n", " ")
    found = re.search(r"`python3 scripts/policy_comparison\.py (analyse [^`]+)`", text)
    assert found, "the preface gives the command that writes the page"
    return found.group(1).split()


@pytest.mark.parametrize("page", PAGES, ids=str)
def test_the_policy_page_is_what_its_rows_and_recordings_give(page: Path, tmp_path: Path) -> None:
    args = _preface_arguments(page)
    out = args.index("--out") + 1
    assert args[out] == str(page)
    args[out] = str(tmp_path)
    proc = subprocess.run([sys.executable, "scripts/policy_comparison.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "README.md").read_text() == (ROOT / page / "README.md").read_text()
    same_numbers(json.loads((tmp_path / "comparison.json").read_text()),
                 json.loads((ROOT / page / "comparison.json").read_text()))
