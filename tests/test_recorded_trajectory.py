"""The trajectory recorded on the H200 (issue 14), shipped as builtin://recorded-h200-2026-11-30, and the gzipped
programs file it ships in (docs/results/recorded-h200-2026-11-30/)."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from cudanalyst.trajectory import TrajectoryError, freeze, load_trajectory

RECORDED = "builtin://recorded-h200-2026-11-30"
TASKS = {"gemm", "2mm", "atax", "bicg", "mvt", "gesummv", "syrk", "conv2d"}


def test_the_recording_ships_with_its_gpu_feedback() -> None:
    traj = load_trajectory(RECORDED)
    assert set(traj.manifest.tasks) == TASKS and len(traj.programs) == 355
    assert traj.manifest.source["gpu"] is True
    # Generations are windows of 10 OpenEvolve iterations; 0, 10 and 20 hold several programs of every task.
    per = Counter((p.task, p.generation) for p in traj.programs)
    assert traj.manifest.generations == [0, 10, 20, 30, 40, 50, 60]
    assert all(per[(task, g)] >= 3 for task in TASKS for g in (0, 10, 20, 40)), per
    assert all(set(p.feedback) == {"debugger", "analyzer", "profiler"} for p in traj.programs)
    compiled = [p for p in traj.programs if p.metrics["compiled"] == 1.0]
    assert len(compiled) == 108
    # Every program that compiled was run on the GPU: the profiler report is the GPU's, never the no-GPU note.
    assert all("Profiler report: task" in p.feedback["profiler"] and "on the GPU" in p.feedback["profiler"]
               for p in compiled)
    assert sum("Section: GPU Speed Of Light" in p.feedback["profiler"] for p in compiled) == 15  # Nsight Compute
    assert all(p.context.prompt for p in traj.programs if p.parent_id)  # what the agent was shown


def test_the_attribution_example_plans_48_frozen_programs_over_it() -> None:
    from cudanalyst.api import load_run
    from cudanalyst.planned_run import plan_run

    run = load_run(str(Path(__file__).parents[1] / "examples" / "h200-recorded-attribution.yaml"))
    assert run.spec.trajectory.uri == RECORDED
    frozen = freeze(load_trajectory(RECORDED).programs, run.spec.trajectory.generations,
                    run.spec.trajectory.programs_per_generation, run.spec.sampling.seed)
    assert len(frozen) == 48
    assert len(plan_run(run).units) == 1584


def test_a_gzipped_programs_file_is_read_and_a_torn_one_named(tmp_path: Path) -> None:
    example = load_trajectory("builtin://example")
    plain = (Path(__import__("cudanalyst").__file__).parent / "data" / "trajectories" / "example" / "programs.jsonl")
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "programs.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    assert [p.program_id for p in load_trajectory(str(folder)).programs] == [p.program_id for p in example.programs]
    (folder / "programs.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(TrajectoryError, match=r"programs.jsonl.gz: not a gzipped text file"):
        load_trajectory(str(folder))
