"""Session fixtures for a real Kubernetes control plane on loopback (issue 6).

Started in order and stopped in reverse: etcd -> kube-apiserver -> kube-controller-manager ->
kube-scheduler -> kwok (+ fake GPU nodes). `cluster` is what tests use; `harness` ends pods. `kueue` (module
scope) adds Kueue's controller manager for the modules that ask for it.
The binaries come from scripts/build-control-plane.sh; without them every test here is skipped.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cp_cluster import (  # noqa: E402
    BUILD_SCRIPT,
    ApiServer,
    Cluster,
    Etcd,
    bin_dir,
    check_alive,
    missing_binaries,
    start_apiserver,
    start_controller_manager,
    start_etcd,
    start_kwok,
    start_scheduler,
    wait_for,
)
from cp_harness import PodHarness  # noqa: E402
from cp_kueue import Kueue, missing, mount_namespace_problem, start_kueue, stop_kueue  # noqa: E402
from cp_process import Component  # noqa: E402
from e2e_support import CHART_NAMESPACE, OPERATOR_SA, RUNNER_SA, OperatorProcess, Runs, install_chart  # noqa: E402

GPU_NODES = 4
GPUS_PER_NODE = 8


@pytest.fixture(scope="session")
def control_plane_bins() -> Path:
    folder = bin_dir()
    missing = missing_binaries(folder)
    if missing:
        pytest.skip(f"control-plane binaries not built ({', '.join(missing)} missing in {folder}); "
                    f"run {BUILD_SCRIPT} first")
    if importlib.util.find_spec("kubernetes") is None:
        pytest.skip("the kubernetes Python client is not installed; run: pip install -e '.[operator]'")
    return folder


@pytest.fixture(scope="session")
def control_plane_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("control-plane")


@pytest.fixture(scope="session")
def etcd(control_plane_bins: Path, control_plane_dir: Path) -> Iterator[Etcd]:
    server = start_etcd(control_plane_bins, control_plane_dir)
    yield server
    server.component.stop()


@pytest.fixture(scope="session")
def kube_apiserver(control_plane_bins: Path, control_plane_dir: Path, etcd: Etcd) -> Iterator[ApiServer]:
    api = start_apiserver(control_plane_bins, control_plane_dir, etcd)
    yield api
    api.component.stop()


@pytest.fixture(scope="session")
def kube_controller_manager(control_plane_bins: Path, control_plane_dir: Path,
                            kube_apiserver: ApiServer) -> Iterator[Component]:
    comp = start_controller_manager(control_plane_bins, control_plane_dir, kube_apiserver)
    yield comp
    comp.stop()


@pytest.fixture(scope="session")
def kube_scheduler(control_plane_bins: Path, control_plane_dir: Path,
                   kube_apiserver: ApiServer) -> Iterator[Component]:
    comp = start_scheduler(control_plane_bins, control_plane_dir, kube_apiserver)
    yield comp
    comp.stop()


@pytest.fixture(scope="session")
def kwok(control_plane_bins: Path, control_plane_dir: Path, kube_apiserver: ApiServer,
         kube_controller_manager: Component, kube_scheduler: Component) -> Iterator[Component]:
    comp = start_kwok(control_plane_bins, control_plane_dir, kube_apiserver)
    yield comp
    comp.stop()


@pytest.fixture(scope="session")
def cluster(control_plane_bins: Path, control_plane_dir: Path, etcd: Etcd, kube_apiserver: ApiServer,
            kube_controller_manager: Component, kube_scheduler: Component, kwok: Component) -> Cluster:
    """The running cluster with GPU_NODES fake nodes of GPUS_PER_NODE `nvidia.com/gpu` each."""
    c = Cluster(kube_apiserver, control_plane_bins, control_plane_dir,
                [etcd.component, kube_apiserver.component, kube_controller_manager, kube_scheduler, kwok])
    # The controller-manager is working once its service-account controller has acted.
    wait_for(lambda: c.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0,
             60, "the controller-manager to create the default service account")
    c.add_gpu_nodes(GPU_NODES, GPUS_PER_NODE)
    return c


@pytest.fixture(scope="module")
def kueue(cluster: Cluster, control_plane_bins: Path, control_plane_dir: Path) -> Iterator[Kueue]:
    """Kueue's controller manager with its CRDs and webhooks (cp_kueue.py), for the modules that ask for it; its
    webhook configurations go when the module ends, so other modules see a cluster without Kueue."""
    absent = missing(control_plane_bins)
    if absent:
        pytest.skip(f"Kueue is not built ({', '.join(absent)} missing); run {BUILD_SCRIPT} first")
    problem = mount_namespace_problem()
    if problem:
        pytest.skip(f"Kueue reads its metrics certificate from /etc/kueue/metrics/certs, which the fixture provides "
                    f"in a private mount namespace: {problem}")
    k = start_kueue(control_plane_bins, control_plane_dir, cluster.api, cluster)
    cluster.components.append(k.component)  # check_alive names it too if it dies mid-test
    yield k
    cluster.components.remove(k.component)
    stop_kueue(k, cluster)


@pytest.fixture
def core_v1(cluster: Cluster) -> Iterator[Any]:
    from kubernetes import client

    with cluster.api_client() as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def harness(core_v1: Any) -> PodHarness:
    return PodHarness(core_v1)


@pytest.fixture
def namespace(cluster: Cluster, core_v1: Any) -> Iterator[str]:
    """A fresh namespace per test (with its default service account), deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core_v1.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: core_v1.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
             30, f"the default service account in namespace {name}")
    yield name
    check_alive(cluster.components)  # a component that died mid-test explains odd failures
    core_v1.delete_namespace(name)


@pytest.fixture(scope="module")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory,
             request: pytest.FixtureRequest) -> Iterator[OperatorProcess]:
    """The operator (one per test module), cluster-wide, authenticated as the chart's ServiceAccount: the
    chart's RBAC must do. Its safety-net timer is at the deployed default (60 s), so what the tests see
    comes from Job and Pod events."""
    install_chart(cluster)
    kubeconfig = cluster.impersonate(CHART_NAMESPACE, OPERATOR_SA)
    log = tmp_path_factory.mktemp(f"operator-{request.module.__name__}") / "operator.log"
    op = OperatorProcess(kubeconfig, log, status_interval=60.0).start()
    yield op
    op.stop()


@pytest.fixture
def runs(cluster: Cluster, namespace: str) -> Iterator[Runs]:
    with cluster.api_client() as api:
        runs = Runs(api, namespace)
        # The chart makes the runner's ServiceAccount in its own namespace; a namespace of runs needs one too.
        runs.core.create_namespaced_service_account(namespace, {"metadata": {"name": RUNNER_SA}})
        yield runs


@pytest.fixture(scope="session")
def planner(tiny_chat_server: Any) -> dict[str, Any]:
    """A real vLLM server (CPU build) with the tiny model; the runs use it as `serve: endpoint`. It is the session's
    one chat server (tests/tiny_vllm.py): the modules that play runner pods (test_e2e_run, test_e2e_kueue,
    test_e2e_recording) and the LLM-stage tests share it rather than each start one."""
    return {"endpoint": tiny_chat_server.endpoint.base_url, "model": "tiny", "api": "chat"}
