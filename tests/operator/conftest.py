"""Fixtures for the operator's kmock tests: kubeconfig pointing at kmock, resources, a trajectory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import kubernetes.config.kube_config
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness import declare_resources, write_kubeconfig, write_trajectory  # noqa: E402


@pytest.fixture
def kube(kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """kmock with the built-in resources and the AttributionRun CRD; KUBECONFIG points kopf and the
    kubernetes client at it."""
    declare_resources(kmock)
    path = str(write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url)))
    monkeypatch.setenv("KUBECONFIG", path)
    # The kubernetes package reads $KUBECONFIG once, at import; kopf's client login uses that value.
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", path)
    return kmock


@pytest.fixture
def trajectory(tmp_path: Path) -> str:
    return write_trajectory(tmp_path / "trajectory")


@pytest.fixture
def output(tmp_path: Path) -> str:
    (tmp_path / "out").mkdir()
    return (tmp_path / "out").as_uri() + "/"
