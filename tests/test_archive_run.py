"""scripts/archive_run.py and the readers of an archived run folder (outcomes.jsonl.gz instead of outcomes/)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cudanalyst.api import load_run
from cudanalyst.report.load import ReportError, load_outcomes, load_run_folder
from cudanalyst.store import open_store

ROOT = Path(__file__).resolve().parents[1]
PILOT = ROOT / "docs" / "results" / "h200-outcomes-2026-11-30" / "outcomes.jsonl.gz"


def run_folder(tmp: Path) -> Path:
    folder = tmp / "runs" / "h200-outcomes"
    (folder / "outcomes").mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps(load_run(str(ROOT / "examples" / "h200-outcomes.yaml")).to_dict()))
    (folder / "plan.json").write_text(json.dumps({"units": 2640}))
    for line in gzip.decompress(PILOT.read_bytes()).decode().splitlines():
        record = json.loads(line)
        (folder / "outcomes" / f"{record['key']}.json").write_text(line)
    return folder


def archive(src: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "archive_run.py"), str(src), str(dest)],
                          capture_output=True, text=True)


def test_an_archived_folder_reads_as_the_run_folder(tmp_path: Path) -> None:
    src = run_folder(tmp_path)
    dest = tmp_path / "archive" / "h200-outcomes"
    done = archive(src, dest)
    assert done.returncode == 0, done.stderr
    assert not (dest / "outcomes").exists() and (dest / "plan.json").is_file()
    original = sorted(load_outcomes(open_store(str(src))), key=lambda r: r.key)
    archived = sorted(load_outcomes(open_store(str(dest))), key=lambda r: r.key)
    assert len(archived) == 2640 and archived == original
    assert load_run_folder(open_store(str(dest))).run.metadata.name == "h200-outcomes"
    # Reproducible: the same folder gives the same bytes.
    again = tmp_path / "again"
    assert archive(src, again).returncode == 0
    assert (again / "outcomes.jsonl.gz").read_bytes() == (dest / "outcomes.jsonl.gz").read_bytes()


def test_an_archive_keeps_the_report_but_not_the_figures_its_page_holds_inline(tmp_path: Path) -> None:
    # An archive in git travels with every device call: the figures are in report.html already.
    src = run_folder(tmp_path)
    (src / "report").mkdir()
    for name, data in (("report.json", "{}"), ("report.html", "<img src='data:image/png;base64,AA'>"),
                       ("attribution.png", "png")):
        (src / "report" / name).write_text(data)
    dest = tmp_path / "archive" / "h200-outcomes"
    assert archive(src, dest).returncode == 0
    assert sorted(p.name for p in (dest / "report").iterdir()) == ["report.html", "report.json"]


def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = archive(empty, tmp_path / "out")
    assert done.returncode == 2 and "not a run folder" in done.stderr and not (tmp_path / "out").exists()
    src = run_folder(tmp_path)
    (tmp_path / "taken").mkdir()
    done = archive(src, tmp_path / "taken")
    assert done.returncode == 2 and "already exists" in done.stderr


def test_a_torn_archive_is_named_with_its_line(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "outcomes.jsonl.gz").write_bytes(gzip.compress(b'{"key": "a"}\n{not json\n'))
    with pytest.raises(ReportError, match=r"outcomes.jsonl.gz: line 2"):
        load_outcomes(open_store(str(folder)))
    (folder / "outcomes.jsonl.gz").write_bytes(b"plain text")
    with pytest.raises(ReportError, match="not a gzip file"):
        load_outcomes(open_store(str(folder)))
