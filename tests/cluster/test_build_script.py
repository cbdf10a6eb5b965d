"""scripts/build-control-plane.sh: refuses bad input with exit 2, names the piece that fails to build
(exit 1, nothing half-written), and builds nothing on a second run (Kueue and its manifests included)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cp_cluster import BINARIES, REPO, VERSIONS_FILE

SCRIPT = REPO / "scripts" / "build-control-plane.sh"
needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="the Go toolchain is not installed")


def _run(*args: str, env: dict[str, str] | None = None, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {})})


@needs_go
def test_unknown_option_is_refused_with_exit_2() -> None:
    done = _run("--rebuild-everything")
    assert done.returncode == 2
    assert "usage:" in done.stderr


@needs_go
def test_versions_file_missing_a_key_is_refused_naming_it(tmp_path: Path) -> None:
    versions = tmp_path / "versions.env"
    versions.write_text("\n".join(line for line in VERSIONS_FILE.read_text().splitlines()
                                  if not line.startswith("KWOK_VERSION")))
    done = _run(env={"CUDANALYST_CONTROL_PLANE_VERSIONS": str(versions), "CUDANALYST_CACHE": str(tmp_path)})
    assert done.returncode == 2
    assert "KWOK_VERSION" in done.stderr and str(versions) in done.stderr
    assert not (tmp_path / "control-plane").exists()  # refused before touching the cache


@needs_go
def test_versions_file_without_kueue_is_refused_naming_it(tmp_path: Path) -> None:
    versions = tmp_path / "versions.env"
    versions.write_text(re.sub(r"^KUEUE_VERSION=.*$", "", VERSIONS_FILE.read_text(), flags=re.M))
    done = _run(env={"CUDANALYST_CONTROL_PLANE_VERSIONS": str(versions), "CUDANALYST_CACHE": str(tmp_path)})
    assert done.returncode == 2
    assert "KUEUE_VERSION" in done.stderr
    assert not (tmp_path / "control-plane").exists()


@needs_go
def test_a_piece_that_cannot_be_built_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    versions = tmp_path / "versions.env"
    versions.write_text(re.sub(r"^ETCD_VERSION=.*$", "ETCD_VERSION=v3.99.0-nonexistent",
                               VERSIONS_FILE.read_text(), flags=re.M))
    done = _run(env={"CUDANALYST_CONTROL_PLANE_VERSIONS": str(versions), "CUDANALYST_CACHE": str(tmp_path)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed to build etcd from go.etcd.io/etcd/server/v3@v3.99.0-nonexistent" in done.stderr
    bins = next((tmp_path / "control-plane").glob("*/bin"))
    assert sorted(p.name for p in bins.iterdir()) == []  # no binary, no temporary file


@pytest.mark.cluster
def test_second_run_builds_nothing(control_plane_bins: Path) -> None:
    done = _run(timeout_s=60)
    assert done.returncode == 0, done.stderr
    assert "done: nothing to build" in done.stdout
    for piece in (*BINARIES, "kueue", "kueue-manifests"):
        assert f"cached:   {piece} " in done.stdout
    # Kueue's own manifests, which the fixtures install, sit beside the binaries.
    config = control_plane_bins.parent / "kueue-config"
    assert (config / "crd" / "kueue.x-k8s.io_workloads.yaml").is_file()
    assert (config / "webhook" / "manifests.yaml").is_file() and (config / "rbac" / "role.yaml").is_file()
    assert _run("--check", timeout_s=60).returncode == 0
    assert _run("--bin-dir").stdout.strip() == str(control_plane_bins)
