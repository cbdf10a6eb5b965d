"""`cudanalyst record` (OpenEvolve itself, our evaluator) against a stand-in model whose every answer holds no
program: each iteration is the agent's and taken, so the task has its iterations and the recording imports.

OpenEvolve fails a run none of whose iterations gave a candidate (its EvolutionFailedError, for an endpoint that
never answered); the recorder stops at a model that does not answer before that (tests/test_record_model_down.py),
so what reaches it here is the agent's own answers. On the CPU rehearsal of the pcg comparison (2026-12-05) the tiny
model gave no code in all four iterations of a task, and the recorder said "failed ... run again to resume"."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hosted_api import HostedApi, serving

pytestmark = pytest.mark.skipif(importlib.util.find_spec("openevolve") is None,
                                reason="OpenEvolve is not installed (the `record` extra)")


class NoProgram(HostedApi):
    """Answers every request with nothing (OpenEvolve takes an answer without a fenced block as the whole program, so
    only an empty one holds no program in its full-rewrite mode)."""

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().reply(body)
        for choice in answer["choices"]:
            choice["message"]["content"] = ""
        return answer


def test_a_pass_whose_answers_held_no_program_finishes_its_task_and_imports(tmp_path: Path) -> None:
    store = tmp_path / "store"
    api = NoProgram()
    with serving(api):
        spec = {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "TrajectoryRecording", "metadata": {"name": "quiet"},
                "spec": {"tasks": ["conv2d"], "iterations": 2, "islands": 1, "population": 8, "seed": 3,
                         "maxTokens": 64, "model": {"model": api.model, "serve": "endpoint", "endpoint": api.base_url},
                         "output": {"uri": str(store)}}}
        path = tmp_path / "quiet.yaml"
        path.write_text(yaml.safe_dump(spec))
        proc = subprocess.run([sys.executable, "-m", "cudanalyst", "record", str(path)], capture_output=True,
                              text=True, timeout=600, env={**os.environ, "TMPDIR": str(tmp_path), "COLUMNS": "300"})
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    assert "conv2d failed" not in said, said
    # The model was asked every iteration and answered each one.
    assert sum(api.answered.values()) >= 2
    text = (store / "quiet" / "openevolve" / "conv2d" / "iterations.jsonl").read_text()
    log = [json.loads(x) for x in text.splitlines() if x.strip()]
    assert [(e["iteration"], e["child"], e["cause"]) for e in log] == [(1, None, "agent"), (2, None, "agent")]
    assert all(e["error"] == "No valid code found in response" for e in log)
    assert json.loads((store / "quiet" / "progress" / "conv2d.json").read_text())["checkpoint"] == 2
    assert "iterations: 2, 0 with a child; without one: 2 the agent's answer held no usable program" in said
    trajectory = json.loads((store / "quiet" / "trajectory" / "trajectory.json").read_text())
    assert trajectory["source"]["recording"] == "quiet"
