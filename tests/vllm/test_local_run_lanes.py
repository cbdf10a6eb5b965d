"""`cudanalyst run` over two lanes end to end, with real vLLM (CPU build) and the tiny model.

CUDA_VISIBLE_DEVICES names two GPUs; this machine has none (vLLM's CPU build ignores the variable, and kernels
are compiled only), so what is checked is the lanes' wiring on real processes: a model server per lane, each
lane's shards against its own server, one kernel-stage process per lane pinned to its GPU, every unit once,
the report. The same run on two real GPUs is what bench/pipeline.py --gpus 1,2 measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from llm_support import tiny_quickstart


def small_run(tmp_path: Path, tiny_models: dict[str, Path], *, shards: int, rollouts: int, max_tokens: int,
              visible: str, **model: object) -> tuple[Path, dict[str, str]]:
    """Two programs of one task, two players, implicit planning, on the tiny model (with `model`'s fields), and the
    environment `cudanalyst run` gets: CUDA_VISIBLE_DEVICES `visible`, one summary a line, temporary files (the
    kept logs among them) under tmp_path."""
    spec = tiny_quickstart(
        tmp_path / "run.yaml", tiny_models,
        trajectory={"uri": "builtin://example", "generations": [0], "programsPerGeneration": 2, "tasks": ["sum_reduction"]},
        players=["debugger", "analyzer"], planning="implicit", controls=[],
        sampling={"rollouts": rollouts, "samplesPerCoalition": 1, "maxTokens": max_tokens, "temperature": 0.8,
                  "seed": 0},
        resources={"shards": shards, "gpusPerShard": 0},
    )
    if model:
        data = yaml.safe_load(spec.read_text())
        data["spec"]["models"]["planner"].update(model)
        spec.write_text(yaml.safe_dump(data))
    work = tmp_path / "tmp"
    work.mkdir()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible, "COLUMNS": "2000", "TMPDIR": str(work)}
    env.pop("CUDANALYST_GPUS", None)
    return spec, env


def test_a_run_over_two_lanes_takes_every_unit_once_each_lane_on_its_gpu(tmp_path, tiny_models):
    spec, env = small_run(tmp_path, tiny_models, shards=1, rollouts=1, max_tokens=16, visible="0,1")
    res = subprocess.run([sys.executable, "-m", "cudanalyst", "run", str(spec), "--output", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=1500, env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "2 shard(s) on 2 GPUs (0, 1)" in res.stderr  # the spec's one shard on each GPU
    # A model server per lane, each started on its GPU (the log's notes say which).
    assert "starting the model server (tiny-llama-base, vLLM) on GPU 0" in res.stderr
    assert "starting the model server (tiny-llama-base, vLLM) on GPU 1" in res.stderr
    # One kernel-stage process per lane, with its shard and its GPU alone.
    kernel_lines = sorted(line for line in res.stderr.splitlines() if "-kernels: kernel stage:" in line)
    assert [line.split(":")[0] for line in kernel_lines] == ["shard-0-kernels", "shard-1-kernels"], res.stderr[-4000:]
    assert kernel_lines[0].endswith("CUDA_VISIBLE_DEVICES=0)") and kernel_lines[1].endswith("CUDA_VISIBLE_DEVICES=1)")
    folder = tmp_path / "runs" / "quickstart"
    units = json.loads((folder / "plan.json").read_text())["units"]
    assert units == 2 * 4  # two programs x 2^2 coalitions x one sample
    outcomes = list((folder / "outcomes").glob("*.json"))
    assert len(outcomes) == units and len(list((folder / "candidates").glob("*.json"))) == units
    assert (folder / "report" / "report.json").is_file()


def test_two_servers_on_one_lane_start_together_and_share_its_shards(tmp_path, tiny_models):
    """`cudanalyst run --servers-per-gpu 2` (issue 32): the lane's model served by two vLLM servers started together,
    the lane's two shards dealt one to each (each set's spec names its own server), both servers generating, every
    unit once, the report. On this machine the lane is unpinned (no GPU), so no KV cache size is set: what the
    servers' GPU share does is sharing_gpu's unit test, and its effect on the H200 bench/pipeline.py's `servers2`."""
    # No GPU visible: one unpinned lane. Each server's log names the requests it received.
    spec, env = small_run(tmp_path, tiny_models, shards=2, rollouts=2, max_tokens=32, visible="",
                          extraArgs=["--enable-log-requests"])
    timings = tmp_path / "timings.json"
    res = subprocess.run([sys.executable, "-m", "cudanalyst", "run", str(spec), "--output", str(tmp_path / "runs"),
                          "--servers-per-gpu", "2", "--timings", str(timings), "--keep-logs"],
                         capture_output=True, text=True, timeout=1500, env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    for k in (1, 2):
        assert f"starting the model server (tiny-llama-base, vLLM) (server {k} of 2)" in res.stderr, res.stderr[-4000:]
    logs = Path(next(line for line in res.stderr.splitlines() if line.startswith("logs kept: ")).split(": ", 1)[1])
    urls = [json.loads((logs / name).read_text())["spec"]["models"]["planner"]["endpoint"]
            for name in ("spec-llm-cpu.json", "spec-llm-cpu-server1.json")]
    assert len(set(urls)) == 2, urls  # each set of shards against its own server
    # Both servers answered requests (the shards' 8 units each, beside the warm-up's).
    for log in (logs / "vllm-tiny-llama-base.log", logs / "server1" / "vllm-tiny-llama-base.log"):
        assert log.read_text(errors="replace").count("Received request") >= 8, log
    # The meter sampled both (a stage this short may fall between its 2 s samples: their counts are not checked).
    by_server = json.loads(timings.read_text())["server"]["generatedByServer"]
    assert sorted(by_server) == sorted(u.removesuffix("/v1") for u in urls)
    folder = tmp_path / "runs" / "quickstart"
    units = json.loads((folder / "plan.json").read_text())["units"]
    assert units == 2 * 4 * 2  # two programs x 2^2 coalitions x two rollouts
    assert len(list((folder / "outcomes").glob("*.json"))) == units
    assert (folder / "report" / "report.json").is_file()
