"""Shared test setup: plugins every test module may use."""

import sys
import tempfile
from pathlib import Path

import pytest

# tests/ holds plugin modules (s3_server, tiny_vllm) that pytest imports by name.
sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["s3_server", "tiny_vllm"]


@pytest.fixture(autouse=True)
def _temporary_files_in_tmp_path(tmp_path, monkeypatch):
    """What this process makes with tempfile (a worker's folder and log, a server's log folder) goes to the
    test's own tmp_path, which pytest removes in time, not to /tmp, where a test that forgets it leaves it.
    Subprocesses keep the environment's TMPDIR: a test that starts one passes its own (see test_local_run_vllm)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """tests/cluster last. Its control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok: about 15 % of
    a core when idle) is session-scoped, so it ran on under every test collected after it; last, it stops with the
    session. The session's vLLM server, shared with tests/vllm, then serves both in one stretch."""
    cluster = Path(__file__).parent / "cluster"
    items.sort(key=lambda item: cluster in Path(str(item.fspath)).parents)  # a stable sort keeps the rest in order
