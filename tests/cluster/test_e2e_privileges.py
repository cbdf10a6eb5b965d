"""Least privilege, proven by the real API server (issue 33, part 3).

- Pod Security Admission: the runner and recorder pods that the operator's Jobs make are admitted in a namespace
  labelled `pod-security.kubernetes.io/enforce: restricted` (the API server's own PodSecurity plugin judges them;
  a pod missing one setting is refused in the same namespace, so the check is live). So is the chart's operator pod.
- RBAC: SubjectAccessReviews for the operator's ServiceAccount, cluster-wide install and namespaced install: the
  verbs its handlers call are allowed, a list of dangerous ones is denied (Secrets anywhere, pods/exec, deletes,
  impersonation, RBAC escalation, anything in a namespace it does not watch).
- The chart's NetworkPolicy, rendered and applied; it selects the runner and recorder pods and nothing else. kwok has no network plugin, so
  nothing enforces it here: what it allows is asserted from the stored object (and stated in docs/operator.md).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cp_cluster import Cluster, read_versions, wait_for
from cp_harness import PodHarness
from e2e_support import (
    CHART,
    CHART_NAMESPACE,
    OPERATOR_SA,
    RELEASE,
    RUN_LABEL,
    RUNNER_SA,
    OperatorProcess,
    Runs,
    install_chart,
    is_true,
    run_body,
)

from cudanalyst.api import API_GROUP, API_VERSION
from cudanalyst.api.recording import RECORDING_PLURAL

pytestmark = pytest.mark.cluster

PLANNER = {"endpoint": "http://127.0.0.1:9/v1", "model": "tiny"}  # never reached: the pods are not played
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}
RECORDING_LABEL = f"{API_GROUP}/recording"


def kube_version() -> str:
    return f"--kube-version={read_versions()['K8S_VERSION']}"


def selector_text(selector: dict[str, Any]) -> str:
    """A LabelSelector object as the `labelSelector` query text (so the API server evaluates it)."""
    parts = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        op, values = expr["operator"], ",".join(expr.get("values") or [])
        parts.append({"Exists": expr["key"], "DoesNotExist": f"!{expr['key']}",
                      "In": f"{expr['key']} in ({values})", "NotIn": f"{expr['key']} notin ({values})"}[op])
    return ",".join(parts)


def recording_body(name: str, output: Path) -> dict[str, Any]:
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "TrajectoryRecording", "metadata": {"name": name},
            "spec": {"tasks": ["conv2d"], "model": {**PLANNER, "serve": "endpoint"}, "iterations": 1,
                     "population": 4, "seed": 1, "maxTokens": 32, "output": {"uri": str(output)},
                     "resources": {"gpusPerShard": 1, "image": "registry.invalid/cudanalyst-runner:e2e",
                                   "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}}}}


def label_restricted(runs: Runs) -> None:
    runs.core.patch_namespace(runs.ns, {"metadata": {"labels": RESTRICTED}})


# --- Pod Security Admission -----------------------------------------------------------------------------


def test_runner_and_recorder_pods_are_admitted_under_restricted_pod_security(
        cluster: Cluster, operator: OperatorProcess, runs: Runs, harness: PodHarness, tmp_path: Path) -> None:
    label_restricted(runs)
    # The check is live: a pod without seccompProfile, and one that may escalate, are refused here.
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
             "spec": {"containers": [{"name": "c", "image": "registry.invalid/x",
                                      "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                                          "capabilities": {"drop": ["ALL"]}}}]}}
    refused = cluster.kubectl("create", "--dry-run=server", "-n", runs.ns, "-f", "-", input=yaml.safe_dump(probe),
                              check=False)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr
    assert "seccompProfile" in refused.stderr, refused.stderr

    runs.create(run_body("psa", tmp_path / "store", PLANNER, shards=2))
    runs.co.create_namespaced_custom_object(API_GROUP, API_VERSION, runs.ns, RECORDING_PLURAL,
                                            recording_body("psa-rec", tmp_path / "rec"))

    # Admitted: the Job controller made them (a refused pod leaves a FailedCreate event and no pod) and kwok ran them.
    pods = harness.running_pods(runs.ns, f"{RUN_LABEL}=psa", 2, deadline_s=90)
    pods += harness.running_pods(runs.ns, f"{RECORDING_LABEL}=psa-rec", 1, deadline_s=90)
    for pod in pods:
        spec = pod.spec
        assert spec.automount_service_account_token is False, pod.metadata.name
        assert spec.service_account_name == RUNNER_SA
        assert not any(v.projected for v in spec.volumes or []), "no service-account token volume"
        assert spec.security_context.run_as_non_root and spec.security_context.run_as_user == 1000
        assert spec.security_context.seccomp_profile.type == "RuntimeDefault"
        for container in spec.containers:
            sc = container.security_context
            assert sc.allow_privilege_escalation is False and sc.capabilities.drop == ["ALL"]
            assert not any(m.mount_path.startswith("/var/run/secrets") for m in container.volume_mounts or [])
    events = runs.core.list_namespaced_event(runs.ns).items
    assert not [e.message for e in events if e.reason == "FailedCreate"], "a pod was refused"
    # The pods can run before the operator's status patch lands (the handler writes it when it returns): wait for it.
    run = runs.wait("psa", lambda r: (r.get("status") or {}).get("phase") == "Running", 60, "phase Running", operator)
    assert not is_true(run, "Stalled"), run["status"]


def test_the_operator_pod_of_the_chart_is_admitted_under_restricted(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("label", "namespace", namespace, *(f"{k}={v}" for k, v in RESTRICTED.items()))
    rendered = cluster.helm("template", RELEASE, str(CHART), "--namespace", CHART_NAMESPACE, kube_version()).stdout
    deployment = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator-probe", "labels": template["metadata"]
                                                           .get("labels", {})},
           "spec": {**template["spec"], "serviceAccountName": "default"}}
    done = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(pod),
                           check=False)
    assert done.returncode == 0, done.stderr
    assert "PodSecurity" not in done.stderr, done.stderr  # not even a warning


# --- RBAC: SubjectAccessReviews ---------------------------------------------------------------------------

# (verb, group, resource, subresource): what the handlers call (lifecycle.py, kube.py, recording.py, kopf's
# watches, finalizer and status patches, events).
MUST = [
    ("get", API_GROUP, "attributionruns", ""), ("list", API_GROUP, "attributionruns", ""),
    ("watch", API_GROUP, "attributionruns", ""), ("patch", API_GROUP, "attributionruns", ""),
    ("patch", API_GROUP, "attributionruns", "status"), ("get", API_GROUP, "attributionruns", "status"),
    ("get", API_GROUP, "trajectoryrecordings", ""), ("list", API_GROUP, "trajectoryrecordings", ""), ("watch", API_GROUP, "trajectoryrecordings", ""),
    ("patch", API_GROUP, "trajectoryrecordings", ""), ("patch", API_GROUP, "trajectoryrecordings", "status"),
    ("get", "batch", "jobs", ""), ("list", "batch", "jobs", ""), ("watch", "batch", "jobs", ""),
    ("create", "batch", "jobs", ""), ("patch", "batch", "jobs", ""),
    ("list", "", "pods", ""), ("watch", "", "pods", ""),
    ("create", "", "configmaps", ""), ("create", "", "events", ""),
]
# What it must never do in any namespace, watched or not.
MUST_NOT = [
    ("get", "", "secrets", ""), ("list", "", "secrets", ""), ("watch", "", "secrets", ""),
    ("create", "", "secrets", ""),
    ("create", "", "pods", "exec"), ("get", "", "pods", "exec"), ("create", "", "pods", "attach"),
    ("create", "", "pods", "portforward"), ("get", "", "pods", "log"), ("create", "", "pods", ""),
    ("delete", "", "pods", ""), ("create", "", "pods", "eviction"), ("patch", "", "pods", ""),
    ("delete", "batch", "jobs", ""), ("update", "batch", "jobs", ""), ("deletecollection", "batch", "jobs", ""),
    ("create", "batch", "cronjobs", ""),
    ("delete", API_GROUP, "attributionruns", ""), ("create", API_GROUP, "attributionruns", ""),
    ("update", API_GROUP, "attributionruns", ""), ("delete", API_GROUP, "trajectoryrecordings", ""),
    ("get", "", "configmaps", ""), ("update", "", "configmaps", ""), ("delete", "", "configmaps", ""),
    ("create", "", "serviceaccounts", "token"), ("impersonate", "", "serviceaccounts", ""),
    ("create", "rbac.authorization.k8s.io", "roles", ""), ("create", "rbac.authorization.k8s.io", "rolebindings", ""),
    ("bind", "rbac.authorization.k8s.io", "clusterroles", ""),
    ("escalate", "rbac.authorization.k8s.io", "roles", ""),
    ("patch", "kueue.x-k8s.io", "workloads", ""),  # only with kueue.enabled
    ("delete", "", "events", ""),
]
# Cluster-scoped: never, in either mode.
MUST_NOT_CLUSTER = [
    ("list", "", "nodes", ""), ("list", "", "namespaces", ""), ("create", "", "namespaces", ""),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("impersonate", "", "users", ""), ("create", "certificates.k8s.io", "certificatesigningrequests", ""),
    ("list", "", "secrets", ""),  # across all namespaces
]


class Reviews:
    """SubjectAccessReviews for one ServiceAccount, as the API server's authorizer (RBAC) decides them."""

    def __init__(self, api_client: Any, namespace: str, name: str) -> None:
        from kubernetes import client

        self.authz = client.AuthorizationV1Api(api_client)
        self.user = f"system:serviceaccount:{namespace}:{name}"
        self.groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]

    def allowed(self, verb: str, group: str, resource: str, subresource: str, namespace: str) -> bool:
        attrs = {"verb": verb, "group": group, "resource": resource, "subresource": subresource}
        if namespace:
            attrs["namespace"] = namespace
        review = self.authz.create_subject_access_review(
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
             "spec": {"user": self.user, "groups": self.groups, "resourceAttributes": attrs}})
        return bool(review.status.allowed)

    def wrong(self, checks: list[tuple[str, str, str, str]], namespace: str, expect: bool) -> list[str]:
        """The checks whose answer is not `expect`, named as `kubectl auth can-i` would read them."""
        return [f"{verb} {resource}{'/' + sub if sub else ''}.{group or 'core'} in {namespace or '<cluster>'}"
                for verb, group, resource, sub in checks
                if self.allowed(verb, group, resource, sub, namespace) != expect]


def test_cluster_wide_install_grants_what_the_operator_needs_and_no_more(cluster: Cluster) -> None:
    install_chart(cluster)
    with cluster.api_client() as api:
        sar = Reviews(api, CHART_NAMESPACE, OPERATOR_SA)
        for ns in ("default", "some-team", ""):  # "" = every namespace (the watches of a cluster-wide operator)
            assert sar.wrong(MUST, ns, True) == [], ns
        for ns in ("default", "kube-system", CHART_NAMESPACE, "some-team"):
            assert sar.wrong(MUST_NOT, ns, False) == [], ns
        assert sar.wrong(MUST_NOT_CLUSTER, "", False) == []


@pytest.fixture
def namespaced_release(cluster: Cluster) -> Iterator[tuple[str, str, list[str]]]:
    """A second release of the chart, namespaced: it watches two namespaces (Roles there, nothing cluster-wide but
    what the first release owns already: the CRDs and user roles are left out)."""
    install_chart(cluster)  # the CRDs
    tag = uuid.uuid4().hex[:6]
    release, home = f"cudanalyst-ns{tag}", f"cudanalyst-ns{tag}"
    watched = [f"lab-a-{tag}", f"lab-b-{tag}"]
    for ns in watched:
        cluster.kubectl("create", "namespace", ns)
    cluster.helm("install", release, str(CHART), "--namespace", home, "--create-namespace",
                 "--set", "crds.install=false", "--set", "rbac.userRoles=false",
                 "--set", f"watchNamespaces={{{','.join(watched)}}}")
    yield release, home, watched
    cluster.helm("uninstall", release, "--namespace", home)
    for ns in (*watched, home):
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_namespaced_install_grants_only_the_watched_namespaces(cluster: Cluster,
                                                               namespaced_release: tuple[str, str, list[str]]) -> None:
    release, home, watched = namespaced_release
    rendered = cluster.helm("get", "manifest", release, "--namespace", home).stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered) if d}
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds, kinds
    with cluster.api_client() as api:
        sar = Reviews(api, home, f"{release}-operator")
        for ns in watched:
            assert sar.wrong(MUST, ns, True) == [], ns
            assert sar.wrong(MUST_NOT, ns, False) == [], ns
        # Nothing at all outside the watched namespaces, and no cluster-wide list (its watches are per namespace).
        for ns in ("default", "kube-system", home, CHART_NAMESPACE):
            assert sar.wrong(MUST + MUST_NOT, ns, False) == [], ns
        assert sar.wrong(MUST + MUST_NOT_CLUSTER, "", False) == []


def test_kueue_rules_only_when_kueue_is_enabled(cluster: Cluster) -> None:
    on = cluster.helm("template", RELEASE, str(CHART), "--set", "kueue.enabled=true", kube_version()).stdout
    off = cluster.helm("template", RELEASE, str(CHART), kube_version()).stdout

    def workload_rules(text: str) -> list[dict[str, Any]]:
        role = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "ClusterRole"
                    and d["metadata"]["name"] == OPERATOR_SA)
        return [r for r in role["rules"] if "workloads" in r["resources"]]

    assert workload_rules(off) == []
    assert [sorted(r["verbs"]) for r in workload_rules(on)] == [["get", "list", "patch", "watch"]]


# --- NetworkPolicy ------------------------------------------------------------------------------------------


def test_network_policy_is_applied_and_selects_the_runner_pods(
        cluster: Cluster, operator: OperatorProcess, runs: Runs, harness: PodHarness, tmp_path: Path) -> None:
    rendered = cluster.helm(
        "template", RELEASE, str(CHART), "--namespace", runs.ns, kube_version(),
        "--set", "networkPolicy.objectStore.cidrs={10.20.0.0/16}", "--set", "networkPolicy.objectStore.ports={9000}",
        "--set", "networkPolicy.modelEndpoints.cidrs={10.30.0.5/32}", "--set", "networkPolicy.modelEndpoints.ports={8000}",
        "--show-only", "templates/networkpolicy.yaml").stdout
    policies = [d for d in yaml.safe_load_all(rendered) if d]
    assert [p["metadata"]["name"] for p in policies] == ["cudanalyst-runner"]
    cluster.kubectl("apply", "-n", runs.ns, "-f", "-", input=rendered)  # a real create, validated by the server
    stored = yaml.safe_load(cluster.kubectl("get", "networkpolicy", "cudanalyst-runner", "-n", runs.ns,
                                            "-o", "yaml").stdout)["spec"]
    assert sorted(stored["policyTypes"]) == ["Egress", "Ingress"]
    assert not stored.get("ingress")  # no ingress at all
    egress = stored["egress"]
    dns, store, models = egress
    assert sorted((p["protocol"], p["port"]) for p in dns["ports"]) == [("TCP", 53), ("UDP", 53)]
    assert dns["to"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kube-system"}
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert store == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 9000}]}
    assert models == {"to": [{"ipBlock": {"cidr": "10.30.0.5/32"}}], "ports": [{"protocol": "TCP", "port": 8000}]}

    # It selects exactly the operator's pods, runner and recorder: the API server evaluates the policy's own selector.
    runs.create(run_body("netpol", tmp_path / "store", PLANNER, shards=2))
    runs.co.create_namespaced_custom_object(API_GROUP, API_VERSION, runs.ns, RECORDING_PLURAL,
                                            recording_body("netpol-rec", tmp_path / "rec"))
    runs.core.create_namespaced_pod(runs.ns, {  # a pod of someone else, which the policy must leave alone
        "metadata": {"name": "bystander", "labels": {"app.kubernetes.io/component": "runner"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}]}})
    pods = harness.running_pods(runs.ns, f"{RUN_LABEL}=netpol", 2, deadline_s=90)
    pods += harness.running_pods(runs.ns, f"{RECORDING_LABEL}=netpol-rec", 1, deadline_s=90)
    selected = runs.core.list_namespaced_pod(runs.ns, label_selector=selector_text(stored["podSelector"])).items
    assert sorted(p.metadata.name for p in selected) == sorted(p.metadata.name for p in pods)
    # The chart's default: HTTPS anywhere for the store, nothing for models.
    default = next(d for d in yaml.safe_load_all(cluster.helm(
        "template", RELEASE, str(CHART), kube_version(), "--show-only", "templates/networkpolicy.yaml").stdout) if d)
    rules = copy.deepcopy(default["spec"]["egress"])
    assert rules[1] == {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    assert len(rules) == 2
    wait_for(lambda: runs.get("netpol").get("status", {}).get("phase") == "Running", 30, "run Running")
