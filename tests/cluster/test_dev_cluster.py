"""scripts/dev-cluster.sh: the test control plane kept running for a person, the chart installed, the operator's
and the runs' pods played here. The full `up`/`down` runs on the real control plane (marker cluster)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cp_cluster import REPO, bin_dir, missing_binaries

SCRIPT = REPO / "scripts" / "dev-cluster.sh"


def load_module():  # scripts/dev_cluster.py is a script, not a package module
    spec = importlib.util.spec_from_file_location("dev_cluster", REPO / "scripts" / "dev_cluster.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_bad_usage_exits_2():
    done = subprocess.run(["bash", str(SCRIPT), "sideways"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage" in done.stderr


def test_status_of_a_cluster_that_is_not_running(tmp_path):
    pytest.importorskip("kubernetes", reason="the operator extra is needed: pip install -e '.[operator]'")
    done = subprocess.run(["bash", str(SCRIPT), "status", "--state", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "not running" in done.stdout


def test_a_runner_pod_is_played_with_its_own_command_line(tmp_path):
    pytest.importorskip("kubernetes", reason="the operator extra is needed: pip install -e '.[operator]'")
    dev = load_module()
    container = SimpleNamespace(command=["cudanalyst-runner"], args=[
        "--spec", "/etc/cudanalyst/spec.json", "--shard", "$(JOB_COMPLETION_INDEX)", "--of", "3", "--stage", "all"])
    pod = SimpleNamespace(spec=SimpleNamespace(containers=[container]),
                          metadata=SimpleNamespace(annotations={"batch.kubernetes.io/job-completion-index": "2"}))
    argv = dev.runner_argv(pod, tmp_path / "spec.json")
    assert argv == ["cudanalyst-runner", "--spec", str(tmp_path / "spec.json"), "--shard", "2", "--of", "3",
                    "--stage", "all"]


@pytest.mark.cluster
def test_up_installs_the_chart_and_runs_the_operator_then_down_stops_everything(tmp_path):
    if missing_binaries(bin_dir()):
        pytest.skip("control-plane binaries not built; run scripts/build-control-plane.sh first")
    pytest.importorskip("kubernetes", reason="the operator extra is needed: pip install -e '.[operator]'")
    state = tmp_path / "state"
    up = subprocess.run(["bash", str(SCRIPT), "up", "--state", str(state)], capture_output=True, text=True,
                        timeout=900)
    try:
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        line = up.stdout.strip().splitlines()[-1]
        assert line.startswith(f"export KUBECONFIG={state / 'kubeconfig'} PATH=")
        env = {**os.environ, "KUBECONFIG": str(state / "kubeconfig"), "PATH": f"{bin_dir()}:{os.environ['PATH']}"}

        def run(*argv: str) -> str:
            done = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, env=env)
            assert done.returncode == 0, done.stderr
            return done.stdout

        assert len(run("kubectl", "get", "nodes", "-o", "name").split()) == 2
        assert "cudanalyst" in run("helm", "list", "-n", "cudanalyst", "-q").split()
        assert "attributionruns" in run("kubectl", "api-resources", "--api-group", "cudanalyst.dev")
        assert run("kubectl", "get", "serviceaccount", "cudanalyst-runner", "-n", "default", "-o", "name")
        again = subprocess.run(["bash", str(SCRIPT), "up", "--state", str(state)], capture_output=True, text=True,
                               timeout=120)
        assert again.returncode == 0 and "already running" in again.stdout  # a second up finds it
        pids = [int(p["pid"]) for p in json.loads((state / "state.json").read_text())["processes"]]
    finally:
        down = subprocess.run(["bash", str(SCRIPT), "down", "--state", str(state)], capture_output=True, text=True,
                              timeout=120)
    assert down.returncode == 0, down.stderr
    assert not [p for p in pids if Path(f"/proc/{p}").exists()
                and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
