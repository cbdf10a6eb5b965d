"""`cudanalyst record` (OpenEvolve itself, our evaluator) against a model server that does not answer: the task
stops with the cause said, and no iteration is counted (issue 30: on the H200 a shared server went down and four
recordings went on "finishing" tasks with no child). Nothing listens on the endpoint's port."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.skipif(importlib.util.find_spec("openevolve") is None,
                                reason="OpenEvolve is not installed (the `record` extra)")


def closed_port() -> int:
    with socket.socket() as s:  # bound and closed again: nothing listens there for the test's few seconds
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_iterations_the_model_never_answered_stop_the_task_and_are_not_checkpointed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    spec = {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "TrajectoryRecording", "metadata": {"name": "down"},
            "spec": {"tasks": ["conv2d"], "iterations": 2, "islands": 1, "population": 8, "seed": 3, "maxTokens": 64,
                     "model": {"model": "tiny", "serve": "endpoint",
                               "endpoint": f"http://127.0.0.1:{closed_port()}/v1"},
                     "output": {"uri": str(store)}}}
    path = tmp_path / "down.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = subprocess.run([sys.executable, "-m", "cudanalyst", "record", str(path)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TMPDIR": str(tmp_path), "COLUMNS": "300"})
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said
    assert "did not answer an iteration; stopped at its last checkpoint" in said, said
    assert "run again to resume" in said
    task_log = next(tmp_path.glob("cudanalyst-record-down-*/task-conv2d.log")).read_text()
    assert "the model did not answer" in task_log and "stopped at checkpoint 0" in task_log
    # Nothing was counted: no progress, no checkpoint, so the next pass starts from the baseline again.
    assert not (store / "down" / "progress").exists()
    assert not list((store / "down").glob("openevolve/conv2d/checkpoints/*"))
    assert json.loads((store / "down" / "spec.json").read_text())["name"] == "down"
