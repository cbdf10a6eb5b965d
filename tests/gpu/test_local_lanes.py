"""`cudanalyst run` over two GPUs (issue 15): one kernel-stage process per GPU, each verifying and timing on its own.

Needs two GPUs; skipped with the reason elsewhere. The run folder's LLM stage is written by the test (every
candidate is its task's baseline, always correct), so no model is needed: the lanes' kernel stages are what
is checked. The whole pipeline over two GPUs (servers included) is what bench/pipeline.py --gpus 1,2 runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from gpu_support import gpu_only
from lanes_support import SUMMARY, kernel_summaries, kernels_only_spec, write_candidates

from cudanalyst.runner.local.gpus import visible_gpus

GPUS = visible_gpus()
pytestmark = [*gpu_only, pytest.mark.skipif(len(GPUS) < 2, reason=f"needs two GPUs; {len(GPUS)} visible here")]


def test_each_gpu_verifies_and_times_its_own_lane(tmp_path):
    spec = kernels_only_spec(tmp_path, programs=4, shards=2)
    units = write_candidates(spec)
    env = {**os.environ, "COLUMNS": "2000", "TMPDIR": str(tmp_path), "CUDANALYST_COMPILE_CACHE": str(tmp_path / "cc")}
    res = subprocess.run([sys.executable, "-m", "cudanalyst", "run", str(spec), "--stage", "kernels", "--gpus", "2"],
                         capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    summaries = kernel_summaries(res.stderr)
    # One process per GPU, with its own shards (the spec's 2 on each) and that GPU alone in its environment.
    assert {s: gpu for s, (_, _, gpu) in summaries.items()} == {"0-2": GPUS[0], "1-3": GPUS[1]}, res.stderr[-4000:]
    assert [summaries[s][:2] for s in ("0-2", "1-3")] == [(units // 2, units // 2)] * 2
    # Each lane timed its correct candidates on its GPU ("timing N correct ones" in its summary).
    # (The summary lines only: the console's progress lines say "kernel stage:" too.)
    lines = [m.group(0) for m in SUMMARY.finditer(res.stderr)]
    assert len(lines) == 2, res.stderr[-4000:]
    for line in lines:
        assert f"timing {units // 2} correct ones" in line, line
    records = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "quickstart" / "outcomes").glob("*.json")]
    assert len(records) == units
    assert all(r["label"] in ("pass", "fast") and r["evaluatedUpTo"] == "fast" and r["speedup"] for r in records), \
        [r["reason"] for r in records if r["label"] not in ("pass", "fast")][:3]
