"""Starts the test control plane one component at a time: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok with fake GPU nodes.

Plain Python (no pytest), so that benchmarks can start the same cluster; tests/cluster/conftest.py
wraps each step in a session fixture. Binaries come from scripts/build-control-plane.sh.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cp_pki import KeyPair, Pki, make_pki
from cp_process import Component, ComponentError, free_port, http_probe

REPO = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO / "scripts" / "control-plane" / "versions.env"
BUILD_SCRIPT = "scripts/build-control-plane.sh"
STAGES_FILE = Path(__file__).with_name("kwok-stages.yaml")
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "helm")

# The in-cluster service-account issuer; tokens requested in tests are for this audience.
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
GPU_RESOURCE = "nvidia.com/gpu"


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    versions: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path}:{number}: expected KEY=VALUE, got {line!r}")
        versions[key.strip()] = value.strip()
    return versions


def bin_dir(versions: dict[str, str] | None = None) -> Path:
    """Where the build script puts the binaries (same rule as the script's cache_root)."""
    k8s = (versions or read_versions())["K8S_VERSION"]
    from cudanalyst.cache import cache_root

    return cache_root() / "control-plane" / k8s / "bin"


def missing_binaries(folder: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(folder / b, os.X_OK)]


def wait_for(check: Callable[[], Any], deadline_s: float, what: str, interval_s: float = 0.2) -> Any:
    """Polls `check` until it returns something truthy; raises TimeoutError naming `what` and the
    last value or error seen."""
    end = time.monotonic() + deadline_s
    last: object = None
    while time.monotonic() < end:
        try:
            value = check()
        except Exception as e:  # the last error is the useful part of the timeout message
            last = e
        else:
            if value:
                return value
            last = value
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {deadline_s:.0f} s waiting for {what}; last seen: {last!r}")


# --- kubeconfigs ---------------------------------------------------------------------------------


def write_kubeconfig(path: Path, server: str, ca: Path, *, user: str,
                     client: KeyPair | None = None, token: str | None = None) -> Path:
    user_entry: dict[str, str] = {}
    if client is not None:
        user_entry = {"client-certificate": str(client.cert), "client-key": str(client.key)}
    if token is not None:
        user_entry = {"token": token}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cudanalyst-test", "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode(),
        }}],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": user, "context": {"cluster": "cudanalyst-test", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


# --- components ----------------------------------------------------------------------------------


@dataclass
class Etcd:
    component: Component
    client_url: str


def start_etcd(bins: Path, workdir: Path, deadline_s: float = 60) -> Etcd:
    client, peer = free_port(), free_port()
    client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    comp = Component("etcd", [
        str(bins / "etcd"), "--name=test", f"--data-dir={workdir / 'etcd-data'}",
        f"--listen-client-urls={client_url}", f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=test={peer_url}", "--log-level=warn",
        # A test cluster loses nothing worth keeping on a crash; fsync would dominate start-up.
        "--unsafe-no-fsync",
    ], workdir / "logs" / "etcd.log").start()
    try:
        comp.wait_ready(http_probe(f"{client_url}/health", expect=lambda b: '"health":"true"' in b), deadline_s)
    except BaseException:
        comp.stop(grace_s=2)  # it never became ready: nothing to shut down gracefully
        raise
    return Etcd(comp, client_url)


@dataclass
class ApiServer:
    component: Component
    url: str
    pki: Pki
    admin_kubeconfig: Path
    workdir: Path

    def client_kubeconfig(self, name: str, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig with a client certificate for `user` in `groups`."""
        pair = self.pki.client(name, user, groups)
        return write_kubeconfig(self.workdir / f"{name}.kubeconfig", self.url, self.pki.ca.cert,
                                user=user, client=pair)


def start_apiserver(bins: Path, workdir: Path, etcd: Etcd, deadline_s: float = 120) -> ApiServer:
    pki = make_pki(workdir / "pki")
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    comp = Component("kube-apiserver", [
        str(bins / "kube-apiserver"),
        f"--etcd-servers={etcd.client_url}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
        f"--tls-cert-file={pki.serving.cert}", f"--tls-private-key-file={pki.serving.key}",
        f"--client-ca-file={pki.ca.cert}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={SA_ISSUER}", f"--api-audiences={SA_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}", f"--service-account-signing-key-file={pki.sa_key}",
        "--service-cluster-ip-range=10.96.0.0/16",
        # Loopback cannot be a Service endpoint, so the apiserver must not publish its own address.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true", "--profiling=false",
        f"--cert-dir={workdir / 'apiserver-certs'}",
    ], workdir / "logs" / "kube-apiserver.log").start()
    admin_pair = pki.client("admin", "cudanalyst-test-admin", ("system:masters",))
    admin = write_kubeconfig(workdir / "admin.kubeconfig", url, pki.ca.cert,
                             user="cudanalyst-test-admin", client=admin_pair)
    try:
        comp.wait_ready(http_probe(f"{url}/readyz", ca_file=pki.ca.cert, cert=(admin_pair.cert, admin_pair.key),
                                   expect=lambda b: b.strip() == "ok"), deadline_s)
    except BaseException:
        comp.stop(grace_s=2)  # it never became ready: nothing to shut down gracefully
        raise
    return ApiServer(comp, url, pki, admin, workdir)


def _healthz_component(name: str, argv: list[str], workdir: Path, port: int, deadline_s: float) -> Component:
    comp = Component(name, argv, workdir / "logs" / f"{name}.log").start()
    try:
        # The component's serving certificate is self-signed in --cert-dir; only readiness matters.
        comp.wait_ready(http_probe(f"https://127.0.0.1:{port}/healthz", insecure=True,
                                   expect=lambda b: b.strip() == "ok"), deadline_s)
    except BaseException:
        comp.stop(grace_s=2)  # it never became ready: nothing to shut down gracefully
        raise
    return comp


def start_controller_manager(bins: Path, workdir: Path, api: ApiServer, deadline_s: float = 120) -> Component:
    kubeconfig = api.client_kubeconfig("controller-manager", "system:kube-controller-manager")
    port = free_port()
    return _healthz_component("kube-controller-manager", [
        str(bins / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        # Each controller acts as its own service account, as in kubeadm clusters, so RBAC is real.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={api.pki.sa_key}", f"--root-ca-file={api.pki.ca.cert}",
        "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--cert-dir={workdir / 'controller-manager-certs'}",
        "--service-cluster-ip-range=10.96.0.0/16", "--allocate-node-cidrs=false",
    ], workdir, port, deadline_s)


def start_scheduler(bins: Path, workdir: Path, api: ApiServer, deadline_s: float = 120) -> Component:
    kubeconfig = api.client_kubeconfig("scheduler", "system:kube-scheduler")
    port = free_port()
    return _healthz_component("kube-scheduler", [
        str(bins / "kube-scheduler"),
        f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--cert-dir={workdir / 'scheduler-certs'}",
    ], workdir, port, deadline_s)


def start_kwok(bins: Path, workdir: Path, api: ApiServer, deadline_s: float = 60) -> Component:
    kubeconfig = api.client_kubeconfig("kwok", "kwok-controller", ("system:masters",))
    port = free_port()
    comp = Component("kwok", [
        str(bins / "kwok"), f"--kubeconfig={kubeconfig}", f"--config={STAGES_FILE}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION[0]}={KWOK_NODE_ANNOTATION[1]}",
        "--node-lease-duration-seconds=40", "--cidr=10.244.0.0/16", "--node-ip=10.240.0.1",
        f"--server-address=127.0.0.1:{port}",
    ], workdir / "logs" / "kwok.log").start()
    try:
        comp.wait_ready(http_probe(f"http://127.0.0.1:{port}/healthz"), deadline_s)
    except BaseException:
        comp.stop(grace_s=2)  # it never became ready: nothing to shut down gracefully
        raise
    return comp


def gpu_node(name: str, gpus: int, product: str) -> dict[str, Any]:
    """A Node object that kwok manages, advertising `gpus` NVIDIA GPUs as the device plugin would."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti",
                 GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1]},
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "type": "kwok", "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
            },
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


# --- the assembled cluster -----------------------------------------------------------------------


@dataclass
class Cluster:
    """What tests use: the admin kubeconfig, clients, kubectl, and identities for RBAC tests."""

    api: ApiServer
    bins: Path
    workdir: Path
    components: list[Component] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.api.admin_kubeconfig

    @property
    def server(self) -> str:
        return self.api.url

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A new `kubernetes.client.ApiClient` (admin unless another kubeconfig is given)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    def kubectl(self, *args: str, input: str | None = None, kubeconfig: Path | None = None,
                check: bool = True, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        """Runs the kubectl built with the cluster; raises with kubectl's stderr when it fails."""
        argv = [str(self.bins / "kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout_s)
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, argv, done.stdout,
                                                f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def helm(self, *args: str, check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        home = self.workdir / "helm"
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HELM_CACHE_HOME": str(home / "cache"),
               "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
        argv = [str(self.bins / "helm"), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, argv, done.stdout,
                                                f"helm {' '.join(args)} failed: {done.stderr}")
        return done

    def service_account_token(self, namespace: str, name: str, expiration_s: int = 3600) -> str:
        """A bound token for an existing service account, from the TokenRequest API."""
        from kubernetes import client

        with self.api_client() as api:
            request = client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[SA_ISSUER], expiration_seconds=expiration_s))
            answer = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request)
        return str(answer.status.token)

    def impersonate(self, namespace: str, service_account: str) -> Path:
        """A kubeconfig that authenticates as the service account itself (a real token, not
        impersonation headers), so RBAC decides exactly as it would for a pod."""
        token = self.service_account_token(namespace, service_account)
        path = self.workdir / f"sa-{namespace}-{service_account}.kubeconfig"
        return write_kubeconfig(path, self.server, self.api.pki.ca.cert,
                                user=f"system:serviceaccount:{namespace}:{service_account}", token=token)

    def add_gpu_nodes(self, count: int, gpus: int = 8, prefix: str = "kwok-gpu",
                      product: str = "NVIDIA-H200", deadline_s: float = 60) -> list[str]:
        """Creates fake GPU nodes that kwok manages and waits until they are Ready."""
        from kubernetes import client

        names = [f"{prefix}-{i}" for i in range(count)]
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            for name in names:
                core.create_node(gpu_node(name, gpus, product))

            def all_ready() -> bool:
                for name in names:
                    node = core.read_node(name)
                    ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
                    if not ready or ready[0].status != "True":
                        return False
                return True

            wait_for(all_ready, deadline_s, f"kwok to make nodes {names} Ready")
        return names


def start_cluster(bins: Path, workdir: Path, components: list[Component]) -> Cluster:
    """Starts etcd -> kube-apiserver -> kube-controller-manager -> kube-scheduler -> kwok in workdir (no nodes yet).

    Each component is appended to `components` as soon as it is up, so that the caller's clean-up stops what did
    start when a later one fails; the returned Cluster holds that same list."""
    etcd = start_etcd(bins, workdir)
    components.append(etcd.component)
    api = start_apiserver(bins, workdir, etcd)
    components.append(api.component)
    for start in (start_controller_manager, start_scheduler, start_kwok):
        components.append(start(bins, workdir, api))
    return Cluster(api, bins, workdir, components)


def tear_down(components: list[Component], workdir: Path, keep: bool) -> None:
    """Stops the components newest first, then removes workdir unless it is to be kept (then says where it is)."""
    for comp in reversed(components):
        comp.stop()
    if keep:
        print(f"work folder kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def check_alive(components: list[Component]) -> None:
    """Raises naming every component that has exited (a test failing oddly may be why)."""
    dead = [c for c in components if not c.alive()]
    if dead:
        from cp_process import log_tail

        raise ComponentError("; ".join(f"{c.name} has exited; last lines of {c.log}:\n{log_tail(c.log)}"
                                       for c in dead))
