"""A run with a new spec's metrics, against kmock: the operator's status carries both fast metrics (the paper's,
fastVsBaseline, and ours, fastVsFrozen), their Banzhaf values and the samples reaching each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import (
    NS,
    RUNS,
    condition,
    eventually,
    operator_running,
    run_body,
    run_status,
    set_job_status,
    write_outcomes,
)

pytestmark = pytest.mark.asyncio


def label_of(coalition: tuple[str, ...]) -> str:
    # The debugger makes kernels correct; with the profiler they beat their frozen program.
    if "debugger" in coalition:
        return "fast" if "profiler" in coalition else "pass"
    return "compile"


def fields_of(coalition: tuple[str, ...]) -> dict[str, Any]:
    # The analyzer's correct kernels beat the task's baseline, whatever they do against the frozen program.
    correct = "debugger" in coalition
    return {"fast_vs_baseline": ("analyzer" in coalition) if correct else None,
            "speedup_vs_baseline": (1.5 if "analyzer" in coalition else 0.9) if correct else None}


async def test_the_status_carries_both_fast_metrics(kube: Any, trajectory: str, output: str, tmp_path: Path) -> None:
    body = run_body("r1", trajectory, output, attribution={"bootstrap": 0})  # no metrics: the new default
    kube.objects[RUNS, NS, "r1"] = body
    async with operator_running():
        await eventually(lambda: run_status(kube, "r1").get("phase") == "Running")
        total = write_outcomes(body, label_of, fields_of)
        await set_job_status(kube, "r1-runner", {"active": 0, "succeeded": 2,
                                                 "conditions": [{"type": "Complete", "status": "True"}]})
        await eventually(lambda: run_status(kube, "r1").get("phase") == "Succeeded")
    results = run_status(kube, "r1")["results"]
    assert results["notEvaluated"] == []
    pooled = {(v["player"], v["metric"]): v["value"] for v in results["banzhaf"] if v["generation"] == "pooled"}
    # fastVsFrozen needs debugger and profiler (0.5 each); fastVsBaseline debugger and analyzer (0.5 each).
    assert (pooled[("debugger", "fastVsFrozen")], pooled[("profiler", "fastVsFrozen")]) == (0.5, 0.5)
    assert (pooled[("analyzer", "fastVsFrozen")], pooled[("profiler", "fastVsBaseline")]) == (0.0, 0.0)
    assert (pooled[("debugger", "fastVsBaseline")], pooled[("analyzer", "fastVsBaseline")]) == (0.5, 0.5)
    assert not any(metric == "fast" for _, metric in pooled)
    # Samples: the game (no control arms here) is 8 coalitions of equal units; every sample compiles, the debugger
    # is in 4 coalitions, with the profiler (or the analyzer) in 2.
    game = total
    reached = {c["metric"]: (c["reached"], c["units"]) for c in results["reached"]}
    assert reached == {"compiled": (game, game), "pass": (game // 2, game),
                       "fastVsBaseline": (game // 4, game), "fastVsFrozen": (game // 4, game)}
    message = condition(kube, "r1", "Succeeded")["message"]
    assert f"fastVsBaseline {game // 4}" in message and f"fastVsFrozen {game // 4}" in message
    report = json.loads((tmp_path / "out" / "r1" / "report" / "report.json").read_text())
    assert report["metrics"] == ["compiled", "pass", "fastVsBaseline", "fastVsFrozen"]
