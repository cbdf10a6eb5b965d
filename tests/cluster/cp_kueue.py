"""Kueue's controller manager beside the test control plane (issue 18), installed from its own manifests.

What the build script copied out of the module `sigs.k8s.io/kueue` (`<cache>/kueue-config/`) is applied as
upstream's kustomization would (namespace `kueue-system`, name prefix `kueue-`, the CRDs' conversion webhooks,
the webhooks' namespace selectors), with two differences that come from running on loopback:

- The webhook Service is an ExternalName Service for `localhost`. The API server reaches a webhook through its
  Service: a ClusterIP (nothing routes it here: no kube-proxy) or, with aggregator routing, an endpoint (and
  endpoints may not be loopback addresses). For an ExternalName Service it dials that name at the webhook's
  port, keeping the Service's DNS name as the TLS server name. So the webhooks stay exactly upstream's, each
  `service:` reference gets the port Kueue listens on, and the serving certificate (the fixture's, signed by
  the cluster CA, which is the caBundle) names `kueue-webhook-service.kueue-system.svc`.
- Internal certificate management is off (it would make certificates only for an in-cluster Service). Kueue
  then reads its metrics certificate from the fixed path /etc/kueue/metrics/certs (cmd/kueue/main.go), where a
  pod mounts a Secret. Here the process gets a private mount namespace in which an overlay on /etc adds that
  folder; the host's /etc is not touched. The on-demand visibility API is off: it is an aggregated API server
  (APIService), which the API server cannot route to loopback either, and it also wants a fixed path (/visibility).

Kueue authenticates with a client certificate as `kueue-controller-manager`, bound to the roles upstream binds
to its ServiceAccount, so its RBAC is the real one.
"""

from __future__ import annotations

import base64
import copy
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cp_cluster import ApiServer, Cluster, wait_for
from cp_process import Component, free_port, http_probe

NAMESPACE = "kueue-system"
NAME_PREFIX = "kueue-"
WEBHOOK_SERVICE = f"{NAME_PREFIX}webhook-service"
MANAGER_USER = "kueue-controller-manager"
API = "kueue.x-k8s.io/v1beta2"
GROUP, VERSION = API.split("/")
# The only integration the runs need; the other webhooks stay registered and Kueue answers them with no-ops.
FRAMEWORKS = ["batch/job"]


def manifests_dir(bins: Path) -> Path:
    """Where scripts/build-control-plane.sh copies Kueue's manifests (beside bin/)."""
    return bins.parent / "kueue-config"


def missing(bins: Path) -> list[str]:
    out = [] if os.access(bins / "kueue", os.X_OK) else [str(bins / "kueue")]
    if not (manifests_dir(bins) / "crd" / "kustomization.yaml").is_file():
        out.append(str(manifests_dir(bins)))
    return out


def mount_namespace_problem() -> str | None:
    """Why the fixture cannot give Kueue a private mount namespace with an overlay on /etc; None when it can."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"kueue-overlay-probe-{os.getpid()}"
    (probe / "upper" / "probe").mkdir(parents=True, exist_ok=True)
    (probe / "work").mkdir(exist_ok=True)
    try:
        done = subprocess.run([*_unshare(), "sh", "-c", _overlay_script(probe) + " && test -d /etc/probe"],
                              capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if done.returncode != 0:
        return f"cannot mount an overlay on /etc in a private mount namespace: {done.stderr.strip()[-300:]}"
    return None


def _unshare() -> list[str]:
    # As root a mount namespace is enough; otherwise a user namespace maps us to root inside it.
    base = ["unshare", "--mount", "--propagation", "private"]
    return base if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", *base[1:]]


def _overlay_script(folder: Path) -> str:
    return (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={folder}/upper,workdir={folder}/work /etc")


# --- manifests -----------------------------------------------------------------------------------


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _service_ref(ref: dict[str, Any], port: int) -> dict[str, Any]:
    return {**ref, "namespace": NAMESPACE, "name": WEBHOOK_SERVICE, "port": port}


def crds(config: Path, ca_bundle: str, port: int) -> list[dict[str, Any]]:
    """Upstream's CRDs, with the conversion webhooks its kustomization enables (the `patches:` entries)."""
    folder = config / "crd"
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    conversions: dict[str, dict[str, Any]] = {}
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load((folder / entry["path"]).read_text())
        conversions[patch["metadata"]["name"]] = patch["spec"]["conversion"]
    out = []
    for entry in kustomization["resources"]:
        for crd in _documents(folder / Path(entry).name):
            conversion = copy.deepcopy(conversions.get(crd["metadata"]["name"]))
            if conversion:
                client = conversion["webhook"]["clientConfig"]
                client["service"] = _service_ref(client["service"], port)
                client["caBundle"] = ca_bundle
                crd["spec"]["conversion"] = conversion
            out.append(crd)
    return out


def webhook_configurations(config: Path, ca_bundle: str, port: int) -> list[dict[str, Any]]:
    """Upstream's webhook configurations with its kustomization's patches (namespace selectors) applied."""
    folder = config / "webhook"
    docs = _documents(folder / "manifests.yaml")
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load(entry["patch"])
        target = next(d for d in docs if d["kind"] == patch["kind"] and d["metadata"]["name"] == patch["metadata"]["name"])
        hooks = {w["name"]: w for w in target["webhooks"]}
        for change in patch.get("webhooks") or []:
            hooks[change["name"]].update({k: v for k, v in change.items() if k != "name"})
    for doc in docs:
        doc["metadata"]["name"] = NAME_PREFIX + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            hook["clientConfig"] = {"service": _service_ref(hook["clientConfig"]["service"], port),
                                    "caBundle": ca_bundle}
    return docs


def rbac(config: Path) -> list[dict[str, Any]]:
    """Every role upstream binds to the manager's ServiceAccount (its ClusterRole, the Role for Secrets in its
    namespace, leader election, metrics auth), bound here to the user Kueue authenticates as."""
    folder = config / "rbac"
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs = [d for entry in kustomization["resources"] for d in _documents(folder / entry)]

    def for_manager(doc: dict[str, Any]) -> bool:
        return doc["kind"] in ("RoleBinding", "ClusterRoleBinding") and any(
            s.get("kind") == "ServiceAccount" and s.get("name") == "controller-manager" for s in doc.get("subjects") or [])

    def placed(doc: dict[str, Any]) -> dict[str, Any]:
        meta = {"name": NAME_PREFIX + doc["metadata"]["name"]}
        if doc["kind"] in ("Role", "RoleBinding"):
            meta["namespace"] = NAMESPACE
        return {**doc, "metadata": meta}

    bindings = [d for d in docs if for_manager(d)]
    wanted = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings}
    out = [placed(d) for d in docs if (d["kind"], d["metadata"]["name"]) in wanted]
    for binding in bindings:
        out.append({**placed(binding),
                    "roleRef": {**binding["roleRef"], "name": NAME_PREFIX + binding["roleRef"]["name"]},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MANAGER_USER}]})
    if ("ClusterRole", "manager-role") not in wanted:
        raise ValueError(f"{folder}: no binding of the manager's ClusterRole manager-role found")
    return out


def base_objects() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE},
         "spec": {"type": "ExternalName", "externalName": "localhost"}},
    ]


def manager_configuration(*, webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path) -> dict[str, Any]:
    """Upstream's controller_manager_config.yaml, bound to loopback, one replica, fixture certificates."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "controller": {"groupKindConcurrency": {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5,
                                                "LocalQueue.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 1,
                                                "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": FRAMEWORKS},
    }


# --- the running Kueue ---------------------------------------------------------------------------


@dataclass
class Kueue:
    component: Component
    webhook_port: int
    health_port: int
    webhooks: list[dict[str, Any]]

    def webhook_names(self) -> list[tuple[str, str]]:
        return [(d["kind"], d["metadata"]["name"]) for d in self.webhooks]


def _apply(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    input=yaml.safe_dump_all(objects, sort_keys=False), timeout_s=120)


def _established(cluster: Cluster, names: list[str]) -> bool:
    done = cluster.kubectl("get", "crd", *names, "-o",
                           "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Established')].status}{' '}{end}",
                           check=False)
    return done.returncode == 0 and done.stdout.split() == ["True"] * len(names)


def start_kueue(bins: Path, workdir: Path, api: ApiServer, cluster: Cluster, deadline_s: float = 180) -> Kueue:
    """Installs Kueue's objects, starts its manager, then its webhooks, and checks one answers the API server."""
    config = manifests_dir(bins)
    folder = workdir / "kueue"
    certs = folder / "webhook-certs"
    metrics = folder / "etc-overlay" / "upper" / "kueue" / "metrics" / "certs"
    for d in (certs, metrics, folder / "etc-overlay" / "work"):
        d.mkdir(parents=True, exist_ok=True)
    service_dns = f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"
    webhook_pair = api.pki.server("kueue-webhook", service_dns, ips=("127.0.0.1",),
                                  dns=(service_dns, f"{service_dns}.cluster.local", "localhost"))
    metrics_pair = api.pki.server("kueue-metrics", "kueue-metrics", ips=("127.0.0.1",), dns=("localhost",))
    for pair, target in ((webhook_pair, certs), (metrics_pair, metrics)):
        shutil.copy(pair.cert, target / "tls.crt")
        shutil.copy(pair.key, target / "tls.key")
    ca_bundle = base64.b64encode(api.pki.ca.cert.read_bytes()).decode()

    webhook_port, health_port, metrics_port = free_port(), free_port(), free_port()
    crd_objects = crds(config, ca_bundle, webhook_port)
    _apply(cluster, base_objects() + rbac(config) + crd_objects)
    names = [c["metadata"]["name"] for c in crd_objects]
    wait_for(lambda: _established(cluster, names), 180, "Kueue's CRDs to be Established")

    config_file = folder / "controller_manager_config.yaml"
    config_file.write_text(yaml.safe_dump(manager_configuration(
        webhook_port=webhook_port, health_port=health_port, metrics_port=metrics_port, cert_dir=certs)))
    kubeconfig = api.client_kubeconfig("kueue", MANAGER_USER)
    kueue_argv = [str(bins / "kueue"), f"--config={config_file}", f"--kubeconfig={kubeconfig}",
                  "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2"]
    script = _overlay_script(folder / "etc-overlay") + ' && exec "$@"'
    comp = Component("kueue", [*_unshare(), "sh", "-c", script, "kueue", *kueue_argv],
                     workdir / "logs" / "kueue.log").start()
    try:
        comp.wait_ready(http_probe(f"http://127.0.0.1:{health_port}/readyz", expect=lambda b: b.strip() == "ok"),
                        deadline_s)
        # The webhooks go in only now: with failurePolicy Fail they would refuse Jobs while Kueue starts.
        hooks = webhook_configurations(config, ca_bundle, webhook_port)
        _apply(cluster, hooks)
        wait_for(lambda: _job_webhook_answers(cluster), 60,
                 "Kueue's Job webhook to answer the API server (a dry-run Job with a queue label comes back suspended)")
    except BaseException:
        comp.stop(grace_s=2)
        raise
    return Kueue(comp, webhook_port, health_port, hooks)


def _job_webhook_answers(cluster: Cluster) -> bool:
    """A server-side dry run of a Job with a queue label and suspend: false. Only Kueue's mutating webhook, called
    by the API server through the Service, makes it come back suspended."""
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "kueue-webhook-probe", "namespace": "default",
                     "labels": {"kueue.x-k8s.io/queue-name": "probe"}},
        "spec": {"suspend": False, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "registry.invalid/probe"}]}}},
    }
    done = cluster.kubectl("create", "--dry-run=server", "-o", "yaml", "-f", "-", input=yaml.safe_dump(job),
                           check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip())
    return bool(yaml.safe_load(done.stdout)["spec"].get("suspend"))


def stop_kueue(kueue: Kueue, cluster: Cluster) -> None:
    """Webhook configurations out first: with failurePolicy Fail, a stopped Kueue would refuse every Job."""
    for kind, name in kueue.webhook_names():
        cluster.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)
    kueue.component.stop()
