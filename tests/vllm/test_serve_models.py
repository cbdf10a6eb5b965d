"""scripts/serve_models.py for real: a comparison's model served by vLLM (the CPU build, the tiny chat model) on the
fixed port its recordings name, answering a chat request under the name they use, until SIGTERM stops it whole."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml
from tiny_vllm import CONTEXT, HEALTH_TIMEOUT_S, SERVER_ARGS

from cudanalyst.comparison import ComparisonSpec, recordings

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "serve_models.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_large_model_answers_on_its_fixed_port_under_the_recordings_name_until_stopped(
        tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    port = free_port()
    model = {"model": str(tiny_models["tiny-llama"]), "serve": "local", "api": "chat", "maxModelLen": CONTEXT,
             "dtype": "float32", "extraArgs": SERVER_ARGS}
    doc = {"name": "pc", "policy": "policy.yaml", "tasks": ["bicg"], "seeds": [0], "iterations": 2, "parallel": 1,
           "arms": ["all"], "large": model, "small": {**model}, "sharedServers": {"large": port, "small": free_port()}}
    path = tmp_path / "comparison.yaml"
    path.write_text(yaml.safe_dump(doc))
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(path), "--which", "large", "--log-dir",
                             str(tmp_path / "logs"), "--ready", str(ready)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ})
    try:
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        assert ready.exists(), proc.stdout.read() if proc.poll() is not None else "not ready in time"
        url = f"http://127.0.0.1:{port}/v1"
        assert ready.read_text().split() == [url]
        # The name every recording of the comparison sends (the `all` arm's, as `specs` writes it).
        class Learned:  # only its players are read for the `all` arm
            players = ["debugger", "analyzer", "profiler"]
        named = recordings(ComparisonSpec.model_validate(doc), Learned())["pc-all-s0"]["spec"]["model"]
        assert named["endpoint"] == url
        reply = httpx.post(f"{url}/chat/completions", timeout=120, json={
            "model": named["model"], "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "healthy after" in out and "stopping the servers" in out
    with socket.socket() as s:  # the server went with it: the port is free again
        s.bind(("127.0.0.1", port))

