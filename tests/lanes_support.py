"""Shared by the lane tests (CPU and GPU): a run folder whose LLM stage is done, so `cudanalyst run --stage
kernels` has candidates to take; every candidate is the task's baseline kernel (always correct, so a GPU times it)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from cudanalyst.api import load_run
from cudanalyst.outcomes import UnitCandidate, unit_identity
from cudanalyst.planned_run import plan_run
from cudanalyst.runfolder import run_store
from cudanalyst.runner.units import UnitStore
from cudanalyst.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"shard-([\d-]+)-kernels: kernel stage: (\d+) of (\d+) candidates.*CUDA_VISIBLE_DEVICES=([^)]*)\)")


def kernels_only_spec(tmp_path: Path, programs: int = 2, shards: int = 1) -> Path:
    """The quickstart's design over `programs` frozen programs of conv2d, its model an endpoint that the kernel
    stage never calls (no model needs to exist here)."""
    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    data["spec"]["trajectory"]["programsPerGeneration"] = programs
    data["spec"]["models"] = {"planner": {"model": "m", "serve": "endpoint", "endpoint": "http://127.0.0.1:9/v1"}}
    data["spec"]["resources"] = {"shards": shards, "gpusPerShard": 1}
    data["spec"]["output"] = {"uri": str(tmp_path / "runs")}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def write_candidates(spec: Path) -> int:
    """One candidate record per unit, as the LLM stage writes them; returns how many."""
    run = load_run(spec)
    plan = plan_run(run)
    store = UnitStore(run_store(run))
    for unit in plan.units:
        record = UnitCandidate(**unit_identity(unit, run.metadata.name), completion="(written by the test)",
                                 code=get_task(unit.task).baseline_source)
        store.write_candidate(record)
    return len(plan.units)


def kernel_summaries(stderr: str) -> dict[str, tuple[int, int, str]]:
    """{shards of a kernel-stage process: (outcomes written, candidates taken, its CUDA_VISIBLE_DEVICES)}."""
    return {m.group(1): (int(m.group(2)), int(m.group(3)), m.group(4)) for m in SUMMARY.finditer(stderr)}
