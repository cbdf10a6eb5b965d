"""The bundled example trajectory: cut from a real H200 recording (issue 28), readable by the trajectory loader,
small, with reports the tools really wrote, and exactly what the cut script makes from the archived recording."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
from cudanalyst.runner.kernels.compile.toolchain import ToolchainNotFoundError, find_toolchain
from cudanalyst.tasks import get_task
from cudanalyst.tasks.conformance import contract_problems
from cudanalyst.trajectory import builtin_path, load_trajectory
from cudanalyst.trajectory.toolruns import tool_runs

ROOT = Path(__file__).resolve().parent.parent
RECORDING = "docs/results/recorded-h200-feedback-2026-12-01/run-recorded-h200-feedback.tgz"
CUT = ["--generations", "0,3,6", "--per-cell", "2"]  # as the example's README says it was cut


@pytest.fixture(scope="module")
def trajectory():  # noqa: ANN201
    return load_trajectory("builtin://example")


def test_shape_and_size(trajectory) -> None:  # noqa: ANN001
    programs = trajectory.programs
    assert trajectory.manifest.generations == [0, 3, 6]
    assert set(trajectory.manifest.players) == {"debugger", "analyzer", "profiler"}
    # Every new family, 2 or more tasks each (DL operators, XSBench, NPB).
    families = {get_task(t).family for t in trajectory.manifest.tasks}
    assert {"dl", "xsbench", "npb"} <= families, families
    for task in trajectory.manifest.tasks:
        for g in (0, 3, 6):
            assert len([p for p in programs if p.task == task and p.generation == g]) <= 2
    assert 30 <= len(programs) <= 60
    total = sum(f.stat().st_size for f in builtin_path("example").iterdir())
    assert total < 400 * 1024


def test_lineage_points_backwards(trajectory) -> None:  # noqa: ANN001
    by_id = {p.program_id: p for p in trajectory.programs}
    for p in trajectory.programs:
        if p.parent_id is not None:  # a parent the cut left out is None, never a dangling id
            parent = by_id[p.parent_id]
            assert parent.task == p.task and parent.generation <= p.generation


def test_reports_are_the_tools_real_output(trajectory) -> None:  # noqa: ANN001
    programs = trajectory.programs
    assert trajectory.manifest.source["gpu"] is True and trajectory.manifest.source["recording"]
    assert any(not p.metrics["compiled"] for p in programs) and any(p.metrics.get("correct") for p in programs)
    for p in programs:
        assert set(p.feedback) == {"debugger", "analyzer", "profiler"}
        assert "ESTIMATED" not in p.feedback["profiler"]  # the hand-written example's invented numbers
        runs = tool_runs(p)
        launchable = p.metrics["compiled"] and p.metrics.get("contract") != 0
        for tool, run in runs.items():
            if launchable:
                assert run.status == "ok", (p.program_id, tool, run)
            if run.status == "failed":  # only the program's own failures, with its error: feedback
                assert run.cause in ("not-launchable", "program-failed"), (p.program_id, tool, run)
        if p.metrics.get("correct") and p.metrics.get("contract") != 0:
            assert contract_problems(get_task(p.task), p.source) == []
            assert "compute-sanitizer (memcheck" in p.feedback["debugger"]
            assert "Event timings" in p.feedback["profiler"] and "Section" in p.feedback["profiler"]
        if not p.metrics["compiled"]:
            assert "FAILED to compile" in p.feedback["debugger"]
    assert "hand" not in (builtin_path("example") / "README.md").read_text().lower()


def _recorded_nvcc(trajectory) -> str:  # noqa: ANN001
    head = trajectory.programs[0].feedback["debugger"].splitlines()
    return next(line for line in head if "nvcc " in line).split("nvcc ")[1].split(",")[0]


def test_recorded_compile_status_matches_nvcc_now(trajectory) -> None:  # noqa: ANN001
    try:
        find_toolchain()
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no nvcc: {exc}")
    for p in [q for q in trajectory.programs if q.generation == 6]:
        result = compile_task_source(get_task(p.task), p.source)
        assert result.ok == bool(p.metrics["compiled"]), p.program_id


def test_bundled_files_are_what_the_cut_makes_from_the_archived_recording(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cut_example_trajectory.py"), RECORDING, "--to",
         str(tmp_path / "example"), *CUT],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    made, bundled = tmp_path / "example", builtin_path("example")
    assert (made / "programs.jsonl").read_bytes() == (bundled / "programs.jsonl").read_bytes()
    manifests = [json.loads((folder / "trajectory.json").read_text()) for folder in (made, bundled)]
    for m in manifests:  # the command names its own --to folder
        assert m["source"].pop("cutBy").startswith("python scripts/cut_example_trajectory.py " + RECORDING)
    assert manifests[0] == manifests[1]
    readme = (builtin_path("example") / "README.md").read_text()
    assert RECORDING in readme and " ".join(CUT) in readme


def test_manifest_is_plain_json() -> None:
    manifest = json.loads((builtin_path("example") / "trajectory.json").read_text())
    assert manifest["format"] == "cudanalyst" and manifest["version"] == 1
