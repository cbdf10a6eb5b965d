"""The chart and the CRDs on the real control plane: helm lint, template and install; both CRDs (generated
and the chart's) accepted by the API server; every example applied (server-side dry run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from cp_cluster import REPO, Cluster, read_versions
from e2e_support import CHART, CHART_NAMESPACE, CRD_NAME, OPERATOR_SA, RELEASE, install_chart

pytestmark = pytest.mark.cluster

EXAMPLES = REPO / "examples"


def test_helm_lint_and_template(cluster: Cluster) -> None:
    lint = cluster.helm("lint", str(CHART), "--strict")
    assert "0 chart(s) failed" in lint.stdout, lint.stdout
    # Offline, helm assumes an old cluster; render for the one under test.
    kube = f"--kube-version={read_versions()['K8S_VERSION']}"
    rendered = cluster.helm("template", RELEASE, str(CHART), "--namespace", CHART_NAMESPACE, kube).stdout
    kinds = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(rendered) if d}
    assert ("CustomResourceDefinition", CRD_NAME) in kinds
    assert ("ServiceAccount", OPERATOR_SA) in kinds
    assert ("ClusterRole", OPERATOR_SA) in kinds and ("ClusterRoleBinding", OPERATOR_SA) in kinds
    assert ("Deployment", OPERATOR_SA) in kinds
    # A value the schema refuses fails the render, naming the value.
    bad = cluster.helm("template", RELEASE, str(CHART), "--set", "securityContext.runAsNonRoot=false", kube,
                      check=False)
    assert bad.returncode != 0 and "runAsNonRoot" in bad.stderr, bad.stderr


def test_helm_install_creates_the_crd_rbac_and_deployment(cluster: Cluster) -> None:
    install_chart(cluster)
    status = cluster.helm("status", RELEASE, "--namespace", CHART_NAMESPACE, "-o", "json").stdout
    assert '"status":"deployed"' in status.replace(" ", "")
    for kind, name in (("serviceaccount", OPERATOR_SA), ("serviceaccount", "cudanalyst-runner"),
                       ("deployment", OPERATOR_SA)):
        cluster.kubectl("get", kind, name, "-n", CHART_NAMESPACE)
    cluster.kubectl("get", "clusterrole", OPERATOR_SA)
    # The chart's RBAC, as the API server judges it for the operator's service account.
    sa = f"system:serviceaccount:{CHART_NAMESPACE}:{OPERATOR_SA}"
    for verb, resource in (("create", "jobs.batch"), ("patch", "attributionruns.cudanalyst.dev/status"),
                           ("watch", "pods"), ("create", "configmaps"), ("create", "events")):
        assert cluster.kubectl("auth", "can-i", verb, resource, "--as", sa, "-n", "default").stdout.strip() == "yes"
    for verb, resource in (("get", "secrets"), ("delete", "jobs.batch"), ("delete", "attributionruns.cudanalyst.dev")):
        denied = cluster.kubectl("auth", "can-i", verb, resource, "--as", sa, "-n", "default", check=False)
        assert denied.stdout.strip() == "no", (verb, resource)


def test_chart_crd_and_generated_crd_are_accepted(cluster: Cluster) -> None:
    install_chart(cluster)  # the chart's CRD is in place and Established (install_chart waits for it)
    served = cluster.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout
    assert '"resource-policy": "keep"' in served or "helm.sh/resource-policy" in served
    # The generated CRD over the chart's: the API server compiles its schema and every CEL rule.
    done = cluster.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server",
                           "-f", str(REPO / "manifests" / "crd.yaml"))
    assert CRD_NAME in done.stdout
    # A CRD with a CEL rule that does not compile is refused by the same API server (the check is real).
    crd = yaml.safe_load((REPO / "manifests" / "crd.yaml").read_text())
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = [
        {"rule": "self.spec.nosuchfield.exists(", "message": "broken"}]
    broken = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(crd), check=False)
    assert broken.returncode != 0 and "x-kubernetes-validations" in broken.stderr, broken.stderr


# Not cluster objects: feedback policies (read by `cudanalyst policy`/`record --policy`, or inline in a
# recording) and the policy comparison's design (scripts/policy_comparison.py). tests/test_policy.py checks them.
NOT_APPLIED = ("policy",)


def _example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*.yaml")
                  if p.name != "kustomization.yaml" and p.relative_to(EXAMPLES).parts[0] not in NOT_APPLIED)


@pytest.mark.parametrize("path", _example_files(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_is_accepted(cluster: Cluster, namespace: str, path: Path) -> None:
    install_chart(cluster)
    # Server-side dry run: schema, defaults and CEL are the API server's; the trajectories are not reachable here.
    done = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path), "-o", "yaml")
    obj = yaml.safe_load(done.stdout)
    if obj["kind"] == "TrajectoryRecording":  # the second kind (issue 14)
        assert obj["spec"]["tasks"] and obj["spec"]["population"] > 0, path
    else:
        assert obj["kind"] == "AttributionRun" and obj["spec"]["players"], path
    assert obj["spec"]["evaluation"]["fastTolerance"] == pytest.approx(0.12)  # defaults come from the schema


def test_example_batch_kustomization_is_accepted(cluster: Cluster) -> None:
    install_chart(cluster)
    cluster.kubectl("create", "namespace", "cudanalyst-runs", check=False)
    done = cluster.kubectl("apply", "--dry-run=server", "-k", str(EXAMPLES / "batch"), "-o", "name")
    names = sorted(done.stdout.split())
    assert len(names) == len(list((EXAMPLES / "batch").glob("gemm-*.yaml"))), names
    assert all(n.startswith("attributionrun.cudanalyst.dev/") for n in names), names


def test_example_with_an_edit_the_schema_refuses_is_rejected(cluster: Cluster, namespace: str) -> None:
    install_chart(cluster)
    doc = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
    doc["spec"]["resources"]["shards"] = 0
    done = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(doc),
                           check=False)
    assert done.returncode != 0 and "spec.resources.shards" in done.stderr, done.stderr
    with pytest.raises(subprocess.CalledProcessError):
        cluster.kubectl("get", "ar", "quickstart", "-n", namespace)
