"""Helpers of the operator's end-to-end tests on the real control plane (tests/cluster/test_e2e_*.py).

The chart is installed once per cluster; the operator runs as a local process that authenticates as the
chart's ServiceAccount (a real token), and the harness plays each runner pod by running its shard locally.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from cp_cluster import REPO, Cluster, wait_for
from cp_harness import PodHarness
from cp_process import free_port, log_tail

from cudanalyst.api import API_GROUP, API_VERSION, PLURAL

CHART = REPO / "charts" / "cudanalyst"
RELEASE = "cudanalyst"
CHART_NAMESPACE = "cudanalyst"
OPERATOR_SA = "cudanalyst-operator"  # the chart's <fullname>-operator for release "cudanalyst"
RUNNER_SA = "cudanalyst-runner"
CRD_NAME = f"{PLURAL}.{API_GROUP}"
RUN_LABEL = f"{API_GROUP}/run"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
GPU_SELECTOR = {"nvidia.com/gpu.product": "NVIDIA-H200"}

_installed: set[str] = set()


def install_chart(cluster: Cluster) -> None:
    """`helm install` of the chart into namespace `cudanalyst`, once per cluster; waits for the CRD."""
    if cluster.server in _installed:
        return
    cluster.helm("install", RELEASE, str(CHART), "--namespace", CHART_NAMESPACE, "--create-namespace")
    _installed.add(cluster.server)
    wait_crd(cluster)


def wait_crd(cluster: Cluster, deadline_s: float = 60) -> None:
    def established() -> bool:
        done = cluster.kubectl("get", "crd", CRD_NAME, "-o",
                               "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False)
        return done.stdout.strip() == "True"

    wait_for(established, deadline_s, f"CRD {CRD_NAME} to be Established")
    # Served a moment after Established: wait until a list works.
    wait_for(lambda: cluster.kubectl("get", PLURAL, "-A", check=False).returncode == 0, 30,
             f"{PLURAL} to be served")


# --- the operator as a local process ------------------------------------------------------------


class OperatorProcess:
    """`python -m cudanalyst.operator.main` with a kubeconfig of its own (the chart's SA token)."""

    def __init__(self, kubeconfig: Path, log: Path, *, namespaces: str = "", status_interval: float = 1.0,
                 retry_interval: float = 3.0, extra_env: dict[str, str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "CUDANALYST_NAMESPACES": namespaces,
            "CUDANALYST_STATUS_INTERVAL": str(status_interval),
            "CUDANALYST_RETRY_INTERVAL": str(retry_interval),
            "CUDANALYST_HEALTH_PORT": str(self.health_port),
            "CUDANALYST_METRICS_PORT": str(self.metrics_port),
            **(extra_env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, deadline_s: float = 60) -> OperatorProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "cudanalyst.operator.main"], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(self.healthy, deadline_s, f"the operator's /healthz (log {self.log})", interval_s=0.3)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.tail()}") from None
        return self

    def healthy(self) -> bool:
        if not self.alive():
            raise RuntimeError(f"the operator exited with status {self.proc and self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as when a node dies under the operator."""
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, grace_s: float = 15) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines) if self.log.exists() else "(no log)"


# --- runs ----------------------------------------------------------------------------------------


def run_body(name: str, output: Path | str, planner: dict[str, Any], *, shards: int = 2,
             suspend: bool = False, generation: int = 0, tasks: tuple[str, ...] = ("sum_reduction",)) -> dict[str, Any]:
    """The smallest useful run over the bundled trajectory: 1 task, 1 generation, 1 program, 2 players,
    1 rollout, 1 sample, no controls = 4 units, in `shards` GPU pods on the kwok nodes."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "AttributionRun",
        "metadata": {"name": name},
        "spec": {
            "trajectory": {"uri": "builtin://example", "generations": [generation], "programsPerGeneration": 1,
                           "tasks": list(tasks)},
            "players": ["debugger", "analyzer"],
            "feedback": {"mode": "raw"},
            "planning": "explicit",
            "controls": [],
            "models": {"planner": planner},
            "sampling": {"rollouts": 1, "samplesPerCoalition": 1, "temperature": 0.8, "maxTokens": 16, "seed": 0},
            "attribution": {"metrics": ["compiled", "pass", "fast"], "estimator": "exact", "confidence": 0.95},
            "resources": {"shards": shards, "gpusPerShard": 1, "image": "registry.invalid/cudanalyst-runner:e2e",
                          "nodeSelector": dict(GPU_SELECTOR)},
            "output": {"uri": str(output)},
            "suspend": suspend,
        },
    }


class Runs:
    """The AttributionRuns of one namespace through the CustomObjects API."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes import client

        self.co = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.ns = namespace

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.co.create_namespaced_custom_object(API_GROUP, API_VERSION, self.ns, PLURAL, body))

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.co.get_namespaced_custom_object(API_GROUP, API_VERSION, self.ns, PLURAL, name))

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.co.patch_namespaced_custom_object(API_GROUP, API_VERSION, self.ns, PLURAL, name, body))

    def delete(self, name: str) -> None:
        self.co.delete_namespaced_custom_object(API_GROUP, API_VERSION, self.ns, PLURAL, name)

    def jobs(self, name: str) -> list[Any]:
        return list(self.batch.list_namespaced_job(self.ns, label_selector=f"{RUN_LABEL}={name}").items)

    def wait(self, name: str, check: Callable[[dict[str, Any]], Any], deadline_s: float, what: str,
             operator: OperatorProcess | None = None) -> dict[str, Any]:
        """Polls the run until `check(run)` is truthy; the timeout names the status and the operator's log."""
        last: dict[str, Any] = {}

        def probe() -> Any:
            nonlocal last
            last = self.get(name)
            return last if check(last) else None

        try:
            return dict(wait_for(probe, deadline_s, f"run {self.ns}/{name}: {what}", interval_s=0.3))
        except TimeoutError as exc:
            log = f"\noperator log:\n{operator.tail()}" if operator else ""
            raise TimeoutError(f"{exc}\nstatus: {json.dumps(last.get('status'), indent=1)}{log}") from None


def condition(run: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (run.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def is_true(run: dict[str, Any], kind: str) -> bool:
    return condition(run, kind).get("status") == "True"


# --- playing the runner pods ----------------------------------------------------------------------


def runner_spec_file(runs: Runs, name: str, folder: Path) -> Path:
    """The spec the pods mount: the ConfigMap's spec.json, written to a file the local runner reads."""
    cm = runs.core.read_namespaced_config_map(f"{name}-spec", runs.ns)
    path = folder / f"{runs.ns}-{name}-spec.json"
    path.write_text(cm.data["spec.json"])
    return path


def run_shard(spec: Path, shard: int, of: int, log: Path, env: dict[str, str] | None = None,
              timeout_s: float = 300) -> int:
    """`cudanalyst-runner --spec ... --shard I --of N --stage all` as the pod would run it."""
    runner = shutil.which("cudanalyst-runner") or "cudanalyst-runner"
    with log.open("ab") as out:
        done = subprocess.run([runner, "--spec", str(spec), "--shard", str(shard), "--of", str(of), "--stage", "all"],
                              stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                              timeout=timeout_s, check=False)
    return done.returncode


def play_pods(runs: Runs, harness: PodHarness, name: str, shards: int, folder: Path,
              only: set[int] | None = None, env: dict[str, str] | None = None) -> dict[int, int]:
    """Waits for the run's pods to be Running on kwok nodes, runs each one's shard locally, then ends the
    pod with the shard's exit status (`only`: just those shards). Returns {shard: exit status}. The pods' shards
    run side by side, as pods on their nodes do; each pod is ended as soon as its own shard has ended."""
    pods = harness.running_pods(runs.ns, f"{RUN_LABEL}={name}", len(only) if only else shards, deadline_s=90)
    spec = runner_spec_file(runs, name, folder)
    mine = {int(pod.metadata.annotations[INDEX_ANNOTATION]): pod for pod in pods}
    mine = {shard: pod for shard, pod in mine.items() if only is None or shard in only}
    codes: dict[int, int] = {}
    with ThreadPoolExecutor(max(1, len(mine)), thread_name_prefix=f"pod-{name}") as pool:
        futures = {pool.submit(run_shard, spec, shard, shards, folder / f"{name}-shard-{shard}.log", env): shard
                   for shard, pod in mine.items()}
        for fut in as_completed(futures):  # the API calls stay on this thread
            shard = futures[fut]
            codes[shard] = code = fut.result()
            harness.finish(runs.ns, mine[shard].metadata.name, succeeded=code == 0, exit_code=code or 1)
    return codes


def deadline_left(end: float) -> float:
    return max(1.0, end - time.monotonic())
