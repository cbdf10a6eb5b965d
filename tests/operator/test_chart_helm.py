"""The chart rendered by helm: the plain install matches it, and the rendered objects keep their promises."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cudanalyst.operator import manifests

ROOT = Path(__file__).resolve().parents[2]

try:
    HELM = manifests.find_helm()
except manifests.HelmNotFound:
    HELM = ""

pytestmark = pytest.mark.skipif(
    not HELM, reason="helm is built from Go modules by scripts/build-control-plane.sh (issue 6) and is not here")


def template(*sets: str) -> list[dict[str, Any]]:
    args = [HELM, "template", "cd", str(ROOT / "charts/cudanalyst"), "--namespace", "ops",
            "--kube-version", manifests.KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def kinds(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def test_plain_install_matches_the_chart() -> None:
    assert (ROOT / manifests.INSTALL).read_text() == manifests.render(ROOT), \
        "manifests/install.yaml is stale: python -m cudanalyst.operator.manifests --write"


def test_cluster_wide_install() -> None:
    by = kinds(template())
    crd = by["CustomResourceDefinition"][0]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    deploy = by["Deployment"][0]
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"] == {"type": "Recreate"}
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]["securityContext"]
    assert container["readOnlyRootFilesystem"] is True and container["capabilities"] == {"drop": ["ALL"]}
    role = next(r for r in by["ClusterRole"] if r["metadata"]["name"].endswith("-operator"))
    resources = {res for rule in role["rules"] for res in rule["resources"]}
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert "secrets" not in resources and "delete" not in verbs and "*" not in verbs
    assert {r["metadata"]["name"] for r in by["ClusterRole"]} >= {"cudanalyst-editor", "cudanalyst-viewer"}
    runner_sa = [sa for sa in by["ServiceAccount"] if sa["metadata"]["name"] == "cudanalyst-runner"]
    assert runner_sa and runner_sa[0]["automountServiceAccountToken"] is False
    policy = by["NetworkPolicy"][0]
    assert policy["spec"]["ingress"] == [] and policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    # Runner and recorder pods alike, by the label the operator always sets (jobs.py, recording.py).
    assert policy["spec"]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/managed-by": "cudanalyst-operator"},
        "matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In", "values": ["runner", "recorder"]}]}
    assert "ServiceMonitor" not in by


def test_namespaced_install_uses_roles_only() -> None:
    by = kinds(template("watchNamespaces={lab-a,lab-b}", "metrics.serviceMonitor.enabled=true"))
    assert sorted(r["metadata"]["namespace"] for r in by["Role"]) == ["lab-a", "lab-b"]
    assert not any(r["metadata"]["name"].endswith("-operator") for r in by.get("ClusterRole", []))
    assert "ClusterRoleBinding" not in by
    env = {e["name"]: e.get("value") for e in by["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CUDANALYST_NAMESPACES"] == "lab-a,lab-b"
    assert sorted(p["metadata"]["namespace"] for p in by["NetworkPolicy"]) == ["lab-a", "lab-b"]
    assert by["ServiceMonitor"]


def test_values_schema_is_enforced_by_helm() -> None:
    out = subprocess.run([HELM, "template", "cd", str(ROOT / "charts/cudanalyst"), "--set", "image.digest=latest",
                          "--kube-version", manifests.KUBE_VERSION],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "digest" in out.stderr


def test_kueue_enabled_grants_workloads_and_tells_the_operator() -> None:
    def operator_parts(docs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
        by = kinds(docs)
        role = next(r for r in by["ClusterRole"] if r["metadata"]["name"].endswith("-operator"))
        env = {e["name"]: e.get("value", "") for e in by["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["env"]}
        return [r for r in role["rules"] if "workloads" in r["resources"]], env

    rules, env = operator_parts(template())
    assert rules == [] and env["CUDANALYST_KUEUE"] == "false"  # off by default: no access to Kueue's objects
    rules, env = operator_parts(template("kueue.enabled=true"))
    assert env["CUDANALYST_KUEUE"] == "true"
    assert rules == [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch", "patch"]}]
