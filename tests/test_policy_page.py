"""The policy comparison's page (docs/results/policy-2026-12-04/README.md) is what its kept rows and recordings give.

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

from numbers_support import same_numbers

ROOT = Path(__file__).resolve().parents[1]
PAGE = Path("docs/results/policy-2026-12-04")


def _preface_arguments() -> list[str]:
    text = (ROOT / PAGE / "preface.md").read_text().replace("\n", " ")
    found = re.search(r"`python3 scripts/policy_comparison\.py (analyse [^`]+)`", text)
    assert found, "the preface gives the command that writes the page"
    return found.group(1).split()


def test_the_policy_page_is_what_its_rows_and_recordings_give(tmp_path: Path) -> None:
    args = _preface_arguments()
    out = args.index("--out") + 1
    assert args[out] == str(PAGE)
    args[out] = str(tmp_path)
    proc = subprocess.run([sys.executable, "scripts/policy_comparison.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "README.md").read_text() == (ROOT / PAGE / "README.md").read_text()
    same_numbers(json.loads((tmp_path / "comparison.json").read_text()),
                 json.loads((ROOT / PAGE / "comparison.json").read_text()))
