"""Shared test setup: plugins every test module may use."""

import sys
import tempfile
from pathlib import Path

import pytest

# tests/ holds plugin modules (s3_server) that pytest imports by name.
sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["s3_server"]


@pytest.fixture(autouse=True)
def _temporary_files_in_tmp_path(tmp_path, monkeypatch):
    """What this process makes with tempfile (a worker's folder and log, a server's log folder) goes to the
    test's own tmp_path, which pytest removes in time, not to /tmp, where a test that forgets it leaves it.
    Subprocesses keep the environment's TMPDIR: a test that starts one passes its own (see test_local_run_vllm)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
