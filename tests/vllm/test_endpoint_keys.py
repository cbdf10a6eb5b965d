"""Endpoints that want a key (issue 34), against real vLLM (CPU build) started with --api-key and serving the tiny
chat model (tests/tiny_vllm.py: tiny_keyed_server). The right key completes a run; a wrong or missing one exits 2
before any unit, naming the model and the field; the key is in no file of the run folder or the logs. Mixed
serving: a keyed endpoint planner with a coder `cudanalyst run` serves itself, and the reverse, in one run each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from llm_support import MAX_MODEL_LEN
from tiny_vllm import TINY_API_KEY

VAR = "TINY_GATEWAY_KEY"
UNITS = 4  # 1 program x 4 coalitions of 2 players x 1 rollout x 1 sample


def keyed(server: Any) -> dict[str, Any]:
    return {"endpoint": server.endpoint.base_url, "model": "tiny", "api": "chat", "apiKey": {"env": VAR},
            "price": {"inputPerMillion": 1.0, "outputPerMillion": 3.0}}


LOCAL = {"model": "tiny-llama", "serve": "local", "api": "chat", "maxModelLen": MAX_MODEL_LEN, "dtype": "float32",
         "gpuMemoryUtilization": 0.1}


def spec_file(tmp_path: Path, name: str, planner: dict[str, Any], coder: dict[str, Any] | None = None) -> Path:
    models = {"planner": planner} | ({"coder": coder} if coder else {})
    doc = {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": name},
           "spec": {"trajectory": {"uri": "builtin://example", "generations": [0], "programsPerGeneration": 1,
                                   "tasks": ["sum_reduction"]},
                    "players": ["debugger", "analyzer"], "planning": "explicit", "models": models,
                    "sampling": {"rollouts": 1, "samplesPerCoalition": 1, "maxTokens": 32, "seed": 0},
                    "resources": {"shards": 1, "gpusPerShard": 0}, "output": {"uri": str(tmp_path / "runs")}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def environment(tmp: Path, key: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != VAR} | {"TMPDIR": str(tmp)}
    return env | ({VAR: key} if key is not None else {})


def cudanalyst(spec: Path, tmp: Path, key: str | None) -> subprocess.CompletedProcess[str]:
    tmp.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "cudanalyst", "run", str(spec)], capture_output=True, text=True,
                          env=environment(tmp, key), timeout=1500)


def holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_the_right_key_completes_a_run_and_is_in_no_file(tmp_path: Path, tiny_keyed_server: Any) -> None:
    spec = spec_file(tmp_path, "keyed", keyed(tiny_keyed_server))
    done = cudanalyst(spec, tmp_path / "work", TINY_API_KEY)
    assert done.returncode == 0, done.stderr[-4000:]
    folder = tmp_path / "runs" / "keyed"
    assert len(list((folder / "outcomes").glob("*.json"))) == UNITS
    usage = json.loads((folder / "report" / "report.json").read_text())["usage"]
    assert usage["stages"]["planner"]["requests"] == usage["stages"]["coder"]["requests"] == UNITS
    assert usage["stages"]["coder"]["promptTokens"] > 0 and usage["cost"] > 0  # the server's own usage fields
    assert "tokens, planner (tiny)" in done.stderr

    # The shard as a pod runs it, verbose, its logs kept: the key is in none of them, nor in the run folder.
    logs = tmp_path / "logs"
    logs.mkdir()
    again = spec_file(tmp_path, "keyed-logs", keyed(tiny_keyed_server))
    with (logs / "shard.log").open("w") as log:
        code = subprocess.run([sys.executable, "-m", "cudanalyst.runner.shard", "--spec", str(again), "--shard", "0",
                               "--of", "1", "--stage", "all", "--log-dir", str(logs), "-v"], stdout=log,
                              stderr=subprocess.STDOUT, env=environment(tmp_path / "work", TINY_API_KEY),
                              timeout=1500).returncode
    assert code == 0, (logs / "shard.log").read_text()[-3000:]
    assert "LLM stage:" in (logs / "shard.log").read_text()  # the log is the shard's, with its summary
    for root in (tmp_path / "runs", logs, tmp_path / "work"):
        assert holding(root, TINY_API_KEY) == [], root
    assert TINY_API_KEY not in done.stdout + done.stderr


def test_a_wrong_or_missing_key_exits_2_before_any_unit_naming_the_model(tmp_path: Path,
                                                                         tiny_keyed_server: Any) -> None:
    spec = spec_file(tmp_path, "refused", keyed(tiny_keyed_server))
    wrong = "sk-not-the-key-0000"
    refused = cudanalyst(spec, tmp_path / "work", wrong)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "spec.models.planner.apiKey" in refused.stderr and "model tiny" in refused.stderr
    assert VAR in refused.stderr and "401" in refused.stderr and wrong not in refused.stderr
    missing = cudanalyst(spec, tmp_path / "work", None)
    assert missing.returncode == 2 and "spec.models.planner.apiKey" in missing.stderr
    assert f"the environment variable {VAR} is not set" in missing.stderr
    assert not (tmp_path / "runs").exists()  # not a unit, not even the run folder

    # The runner, as a pod runs it (the Secret's key in its environment), stops the same way.
    shard = subprocess.run([sys.executable, "-m", "cudanalyst.runner.shard", "--spec", str(spec), "--shard", "0",
                            "--of", "1"], capture_output=True, text=True, env=environment(tmp_path / "work", wrong),
                           timeout=600)
    assert shard.returncode == 2, shard.stderr[-3000:]
    assert "spec.models.planner.apiKey" in shard.stderr and "model tiny" in shard.stderr
    folder = tmp_path / "runs" / "refused"
    for kind in ("candidates", "errors", "outcomes", "plans"):
        assert not list((folder / kind).glob("*.json")), kind
    progress = json.loads((folder / "progress" / "shard-0.json").read_text())
    assert progress["state"] == "failed" and "spec.models.planner.apiKey" in progress["failures"][0]["reason"]
    assert holding(tmp_path, wrong) == []


def test_an_endpoint_planner_with_a_local_coder_and_the_reverse(tmp_path: Path, tiny_keyed_server: Any) -> None:
    work = tmp_path / "work"  # the run's TMPDIR: its own vLLM server is given a short folder for its sockets
    work.mkdir()
    mixed_runs(tmp_path, work, tiny_keyed_server)


def mixed_runs(tmp_path: Path, work: Path, tiny_keyed_server: Any) -> None:
    for name, planner, coder in (("endpoint-planner", keyed(tiny_keyed_server), LOCAL),
                                 ("local-planner", LOCAL, keyed(tiny_keyed_server))):
        spec = spec_file(tmp_path, name, planner, coder)
        done = cudanalyst(spec, work / name[:5], TINY_API_KEY)
        assert done.returncode == 0, (name, done.stderr[-8000:])
        assert "starting the model server (tiny-llama, vLLM)" in done.stderr  # the local one, started by the run
        folder = tmp_path / "runs" / name
        candidates = [json.loads(p.read_text()) for p in (folder / "candidates").glob("*.json")]
        assert len(candidates) == UNITS
        usage = json.loads((folder / "report" / "report.json").read_text())["usage"]["stages"]
        assert usage["planner"]["requests"] == usage["coder"]["requests"] == UNITS
        # The tokens of each stage are counted under its own model; only the endpoint's has a price.
        priced = "planner" if name == "endpoint-planner" else "coder"
        assert usage[priced]["cost"] is not None and usage[priced]["model"] == "tiny"
        other = "coder" if priced == "planner" else "planner"
        assert usage[other]["cost"] is None
        assert holding(folder, TINY_API_KEY) == []


def test_the_server_starts_where_the_temp_folder_is_too_deep_for_its_sockets(tiny_keyed_server: Any) -> None:
    """vLLM binds its IPC sockets at TMPDIR/<uuid4>; the keyed server's TMPDIR is past a socket path's 107
    characters, and it is healthy because it was given a short folder for them, removed when it stops."""
    import httpx

    assert len(str(tiny_keyed_server.deep_tmpdir)) + 37 > 107
    rpc = tiny_keyed_server.rpc_dir
    assert rpc is not None and rpc.is_dir() and len(str(rpc)) + 37 <= 107
    reply = httpx.get(f"{tiny_keyed_server.endpoint.root}/v1/models",
                      headers={"Authorization": f"Bearer {TINY_API_KEY}"}, timeout=30)
    assert reply.status_code == 200 and reply.json()["data"][0]["id"] == "tiny"
