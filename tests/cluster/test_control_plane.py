"""The test control plane itself behaves like a real cluster: schema pruning, Indexed Jobs whose
pods bind to fake GPU nodes, pods that end only when the harness says so, garbage collection,
RBAC for service-account tokens, and the helm binary."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from cp_cluster import GPU_RESOURCE, Cluster, read_versions, wait_for
from cp_harness import PodHarness

pytestmark = pytest.mark.cluster

GROUP = "test.cudanalyst.dev"


def _job(name: str, *, completions: int, gpus: int = 1, owner: dict[str, Any] | None = None,
         backoff_limit: int = 0) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if owner:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": completions,
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
                    "containers": [{
                        "name": "runner",
                        "image": "registry.invalid/cudanalyst-runner:test",  # never pulled: kwok runs nothing
                        "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                    }],
                },
            },
        },
    }


def _job_condition(batch: Any, namespace: str, name: str, kind: str) -> bool:
    job = batch.read_namespaced_job(name, namespace)
    return any(c.type == kind and c.status == "True" for c in job.status.conditions or [])


@pytest.fixture
def batch_v1(cluster: Cluster) -> Any:
    from kubernetes import client

    with cluster.api_client() as api:
        yield client.BatchV1Api(api)


def test_gpu_nodes_advertise_gpus(core_v1: Any) -> None:
    nodes = core_v1.list_node(label_selector="type=kwok").items
    assert len(nodes) == 4
    for node in nodes:
        assert node.status.allocatable[GPU_RESOURCE] == "8"
        assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
        ready = {c.type: c.status for c in node.status.conditions}
        assert ready["Ready"] == "True", node.metadata.name


def test_crd_is_accepted_and_its_schema_prunes_undeclared_fields(cluster: Cluster, namespace: str) -> None:
    from kubernetes import client

    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                    },
                }},
            }],
        },
    }
    with cluster.api_client() as api:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
        ext = client.ApiextensionsV1Api(api)
        wait_for(lambda: any(c.type == "Established" and c.status == "True"
                             for c in ext.read_custom_resource_definition(f"widgets.{GROUP}").status.conditions or []),
                 30, "the Widget CRD to be Established")
        objects = client.CustomObjectsApi(api)
        body = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "w1"},
                "spec": {"size": 3, "undeclared": "dropped"}}
        # Discovery of a new CRD can lag Established by a moment; retry the first create.
        wait_for(lambda: objects.create_namespaced_custom_object(GROUP, "v1", namespace, "widgets", body),
                 30, "the first Widget to be created")
        objects.patch_namespaced_custom_object_status(
            GROUP, "v1", namespace, "widgets", "w1", {"status": {"phase": "Ready", "undeclaredToo": 1}})
        stored = objects.get_namespaced_custom_object(GROUP, "v1", namespace, "widgets", "w1")
    assert stored["spec"] == {"size": 3}
    assert stored["status"] == {"phase": "Ready"}
    assert "widgets" in cluster.kubectl("api-resources", f"--api-group={GROUP}", "-o", "name").stdout


def test_indexed_job_pods_bind_to_gpu_nodes_and_complete_only_when_the_harness_says(
        cluster: Cluster, namespace: str, core_v1: Any, batch_v1: Any, harness: PodHarness) -> None:
    batch_v1.create_namespaced_job(namespace, _job("shards", completions=3))
    pods = harness.running_pods(namespace, "app=shards", 3)

    gpu_nodes = {n.metadata.name for n in core_v1.list_node(label_selector="nvidia.com/gpu.present=true").items}
    assert {p.spec.node_name for p in pods} <= gpu_nodes
    indexes = sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert indexes == ["0", "1", "2"]
    for pod in pods:
        assert pod.spec.containers[0].resources.limits[GPU_RESOURCE] == "1"
        assert pod.spec.containers[0].resources.requests[GPU_RESOURCE] == "1"  # defaulted from limits

    # Pods keep running until the harness ends them. kwok's default stages would complete a Job's
    # pod as soon as it runs; once kwok has ended the first pod, the other two are still running.
    first, *rest = pods
    harness.finish(namespace, first.metadata.name, succeeded=True)
    harness.wait_phase(namespace, first.metadata.name, {"Succeeded"})
    phases = {p.metadata.name: p.status.phase
              for p in core_v1.list_namespaced_pod(namespace, label_selector="app=shards").items}
    assert phases == {first.metadata.name: "Succeeded"} | {p.metadata.name: "Running" for p in rest}
    assert not _job_condition(batch_v1, namespace, "shards", "Complete")

    for pod in rest:
        harness.finish(namespace, pod.metadata.name, succeeded=True)
    wait_for(lambda: _job_condition(batch_v1, namespace, "shards", "Complete"), 60, "Job shards to complete")
    job = batch_v1.read_namespaced_job("shards", namespace)
    assert job.status.succeeded == 3
    assert job.status.completed_indexes == "0-2"
    exit_codes = {p.status.container_statuses[0].state.terminated.exit_code
                  for p in core_v1.list_namespaced_pod(namespace, label_selector="app=shards").items}
    assert exit_codes == {0}


def test_harness_failure_fails_the_job(cluster: Cluster, namespace: str, batch_v1: Any,
                                       harness: PodHarness) -> None:
    batch_v1.create_namespaced_job(namespace, _job("doomed", completions=1, backoff_limit=0))
    (pod,) = harness.running_pods(namespace, "app=doomed", 1)
    harness.finish(namespace, pod.metadata.name, succeeded=False, exit_code=3, reason="OOMKilled")
    failed = harness.wait_phase(namespace, pod.metadata.name, {"Failed"})
    terminated = failed.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "OOMKilled")
    wait_for(lambda: _job_condition(batch_v1, namespace, "doomed", "Failed"), 60, "Job doomed to fail")


def test_scheduler_keeps_a_pod_pending_when_no_node_has_enough_gpus(
        cluster: Cluster, namespace: str, core_v1: Any, batch_v1: Any) -> None:
    batch_v1.create_namespaced_job(namespace, _job("too-big", completions=1, gpus=9))

    def unschedulable() -> str | None:
        pods = core_v1.list_namespaced_pod(namespace, label_selector="app=too-big").items
        for pod in pods:
            for cond in pod.status.conditions or []:
                if cond.type == "PodScheduled" and cond.reason == "Unschedulable":
                    return str(cond.message)
        return None

    message = wait_for(unschedulable, 60, "the scheduler to report the 9-GPU pod unschedulable")
    assert f"Insufficient {GPU_RESOURCE}" in message


def test_deleting_the_owner_garbage_collects_the_job(cluster: Cluster, namespace: str, core_v1: Any,
                                                     batch_v1: Any, harness: PodHarness) -> None:
    from kubernetes.client.exceptions import ApiException

    owner = core_v1.create_namespaced_config_map(namespace, {"metadata": {"name": "run-owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "run-owner", "uid": owner.metadata.uid}
    batch_v1.create_namespaced_job(namespace, _job("owned", completions=1, owner=ref))
    harness.running_pods(namespace, "app=owned", 1)

    core_v1.delete_namespaced_config_map("run-owner", namespace)

    def job_gone() -> bool:
        try:
            batch_v1.read_namespaced_job("owned", namespace)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for(job_gone, 60, "the garbage collector to delete Job owned")
    # The Job's pods go too (the Job owns them), through kwok's delete stage.
    wait_for(lambda: not core_v1.list_namespaced_pod(namespace, label_selector="app=owned").items,
             60, "the pods of Job owned to be deleted")


def test_service_account_token_is_subject_to_rbac(cluster: Cluster, namespace: str, core_v1: Any) -> None:
    from kubernetes import client

    core_v1.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    kubeconfig = cluster.impersonate(namespace, "reader")

    denied = cluster.kubectl("get", "pods", "-n", namespace, kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0
    assert f"system:serviceaccount:{namespace}:reader" in denied.stderr and "forbidden" in denied.stderr

    with cluster.api_client() as api:
        rbac = client.RbacAuthorizationV1Api(api)
        rbac.create_namespaced_role(namespace, {"metadata": {"name": "pod-reader"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]})
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]})
    allowed = wait_for(
        lambda: cluster.kubectl("get", "pods", "-n", namespace, kubeconfig=kubeconfig, check=False).returncode == 0,
        30, "RBAC to allow the reader service account to list pods")
    assert allowed
    # Still nothing beyond the role: secrets stay forbidden.
    assert cluster.kubectl("get", "secrets", "-n", namespace, kubeconfig=kubeconfig, check=False).returncode != 0


def test_kubectl_and_server_report_the_pinned_version(cluster: Cluster) -> None:
    import json

    versions = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    pinned = read_versions()["K8S_VERSION"]
    assert versions["serverVersion"]["gitVersion"] == pinned
    assert versions["clientVersion"]["gitVersion"] == pinned


def test_helm_binary_runs(control_plane_bins: Path) -> None:
    done = subprocess.run([str(control_plane_bins / "helm"), "version", "--short"],
                          capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.strip().startswith(read_versions()["HELM_VERSION"])
