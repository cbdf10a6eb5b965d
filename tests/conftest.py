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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """tests/cluster last in one process. Its control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok:
    about 15 % of a core when idle) is session-scoped, so it ran on under every test collected after it; last, it
    stops with the session. The session's vLLM server, shared with tests/vllm, then serves both in one stretch.
    Under pytest-xdist (pyproject's addopts) one worker takes every cluster test (one control plane, not one a
    worker), and takes them first: the other worker runs the rest meanwhile, where last they would be a tail that
    one worker runs alone."""
    cluster_dir = Path(__file__).parent / "cluster"
    cluster = {item for item in items if cluster_dir in Path(str(item.fspath)).parents}
    first = hasattr(config, "workerinput")
    items.sort(key=lambda item: (item in cluster) != first)  # a stable sort keeps the rest in order
    for item in cluster:
        item.add_marker(pytest.mark.xdist_group("cluster"))
