"""The bundled example trajectory: readable by the trajectory loader, small, with programs that follow
the task contracts, and reports that agree with what nvcc says today."""

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

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trajectory():  # noqa: ANN201
    return load_trajectory("builtin://example")


def test_shape_and_size(trajectory) -> None:  # noqa: ANN001
    programs = trajectory.programs
    assert len(programs) == 48
    assert trajectory.manifest.tasks == ["atax", "conv2d", "gemm", "jacobi-2d"]
    assert trajectory.manifest.generations == [0, 10, 20]
    assert trajectory.manifest.players == ["debugger", "analyzer", "profiler"]
    for task in trajectory.manifest.tasks:
        for g in (0, 10, 20):
            assert len([p for p in programs if p.task == task and p.generation == g]) == 4
    total = sum(f.stat().st_size for f in builtin_path("example").iterdir())
    assert total < 300 * 1024


def test_lineage_points_backwards(trajectory) -> None:  # noqa: ANN001
    by_id = {p.program_id: p for p in trajectory.programs}
    for p in trajectory.programs:
        if p.generation == 0:
            assert p.parent_id is None and p.context.history == []
        else:
            parent = by_id[p.parent_id]
            assert parent.task == p.task and parent.generation < p.generation
            assert p.context.history and all(h.startswith("g") for h in p.context.history)


def test_mix_of_outcomes_and_honest_reports(trajectory) -> None:  # noqa: ANN001
    programs = trajectory.programs
    failed = [p for p in programs if not p.metrics["compiled"]]
    assert 2 <= len(failed) <= 10
    assert any(p.metrics["compiled"] and not p.metrics["correct"] for p in programs)  # breaks the contract
    for p in programs:
        assert set(p.feedback) == {"debugger", "analyzer", "profiler"}
        assert p.metrics["estimated"] is True
        if p.metrics["correct"]:
            assert "ESTIMATED, no GPU at recording time" in p.feedback["profiler"]
            assert contract_problems(get_task(p.task), p.source) == []
        if not p.metrics["compiled"]:
            assert "FAILED to compile" in p.feedback["debugger"] and "Not compiled" in p.feedback["analyzer"]
    checks = {
        line.split("[")[1].split("]")[0]
        for p in programs
        for line in p.feedback["analyzer"].splitlines()
        if "] " in line and line.strip().startswith("line ")
    }
    assert {"uncoalesced", "restrict", "bank-conflict", "divergence"} <= checks


def _recorded_nvcc(trajectory) -> str:  # noqa: ANN001
    head = trajectory.programs[0].feedback["debugger"].splitlines()[0]
    return head.split("nvcc ")[1].split(",")[0]


def test_recorded_compile_status_matches_nvcc_now(trajectory) -> None:  # noqa: ANN001
    try:
        find_toolchain()
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no nvcc: {exc}")
    for p in [q for q in trajectory.programs if q.generation == 20]:
        result = compile_task_source(get_task(p.task), p.source)
        assert result.ok == p.metrics["compiled"], p.program_id


@pytest.mark.slow
def test_bundled_files_are_what_the_script_generates(trajectory) -> None:  # noqa: ANN001
    try:
        version = find_toolchain().version
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no nvcc: {exc}")
    if version != _recorded_nvcc(trajectory):
        pytest.skip(
            f"reports were recorded with nvcc {_recorded_nvcc(trajectory)}, this machine has {version}"
        )
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_example_trajectory.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


def test_manifest_is_plain_json() -> None:
    manifest = json.loads((builtin_path("example") / "trajectory.json").read_text())
    assert manifest["format"] == "cudanalyst" and manifest["version"] == 1
