"""GPU quota with a real Kueue (issue 18): Kueue v0.17.0's controller manager, its CRDs and its webhooks (cp_kueue.py)
beside the real control plane; the operator (CUDANALYST_KUEUE=true, the chart's RBAC with kueue.enabled=true)
follows the Workloads of queued runs; kwok's GPU nodes hold 32 GPUs, the ClusterQueue's quota is 8.

The invariants are checked on what the API server says happened, not on timing: a watch on the runner pods keeps the
largest number of GPUs of Running pods at any moment; the field manager that last set each Job's spec.suspend says
who unsuspended it (Kueue, on admission; never the operator).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cp_cluster import GPU_RESOURCE, REPO, Cluster, wait_for
from cp_harness import PodHarness
from cp_kueue import API, GROUP, VERSION, Kueue
from e2e_support import (
    CHART,
    CHART_NAMESPACE,
    OPERATOR_SA,
    RELEASE,
    RUN_LABEL,
    OperatorProcess,
    Runs,
    condition,
    install_chart,
    is_true,
    play_pods,
    run_body,
)

pytestmark = [pytest.mark.cluster, pytest.mark.vllm]

QUOTA = 8
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# The field manager Kueue's client writes with (from its user agent, "kueue/v0.17.0 ...").
KUEUE_MANAGER = "kueue"


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kueue_operator(cluster: Cluster, kueue: Kueue, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator as the chart's ServiceAccount, with the chart's Kueue RBAC (kueue.enabled=true) and
    CUDANALYST_KUEUE=true, as `helm install --set kueue.enabled=true` deploys it."""
    install_chart(cluster)
    cluster.helm("upgrade", RELEASE, str(CHART), "--namespace", CHART_NAMESPACE, "--reuse-values",
                 "--set", "kueue.enabled=true")
    kubeconfig = cluster.impersonate(CHART_NAMESPACE, OPERATOR_SA)
    log = tmp_path_factory.mktemp("operator-kueue") / "operator.log"
    op = OperatorProcess(kubeconfig, log, status_interval=60.0, extra_env={"CUDANALYST_KUEUE": "true"}).start()
    yield op
    op.stop()
    cluster.helm("upgrade", RELEASE, str(CHART), "--namespace", CHART_NAMESPACE, "--reuse-values",
                 "--set", "kueue.enabled=false")


@pytest.fixture
def queue(cluster: Cluster, kueue: Kueue, namespace: str) -> Iterator[str]:
    """A ResourceFlavor for the kwok GPU nodes, a ClusterQueue with QUOTA nvidia.com/gpu (CPU and memory ample, so
    only GPUs bind), no preemption, and the LocalQueue `gpu-research` (the examples' queue) in the namespace."""
    flavor, cq = f"gpu-{namespace}", f"gpus-{namespace}"
    objects = [
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": flavor},
         "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H200"}}},
        {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"},
            "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU_RESOURCE], "flavors": [{
                "name": flavor, "resources": [{"name": "cpu", "nominalQuota": "1000"},
                                              {"name": "memory", "nominalQuota": "100Ti"},
                                              {"name": GPU_RESOURCE, "nominalQuota": QUOTA}]}]}]}},
        {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": "gpu-research", "namespace": namespace},
         "spec": {"clusterQueue": cq}},
    ]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def active(kind: str, name: str, ns: str | None = None) -> bool:
        where = ["-n", ns] if ns else []
        done = cluster.kubectl("get", kind, name, *where, "-o",
                               "jsonpath={.status.conditions[?(@.type=='Active')].status}", check=False)
        return done.stdout.strip() == "True"

    wait_for(lambda: active("clusterqueues.kueue.x-k8s.io", cq), 60, f"ClusterQueue {cq} to be Active")
    wait_for(lambda: active("localqueues.kueue.x-k8s.io", "gpu-research", namespace), 60,
             "LocalQueue gpu-research to be Active")
    yield "gpu-research"
    # The namespace (and its Workloads) goes after this test; the cluster-wide queue and flavor go now.
    cluster.kubectl("delete", "clusterqueues.kueue.x-k8s.io", cq, "--wait=false", check=False)
    cluster.kubectl("delete", "resourceflavors.kueue.x-k8s.io", flavor, "--wait=false", check=False)


@pytest.fixture
def priorities(cluster: Cluster, kueue: Kueue, namespace: str) -> Iterator[dict[str, str]]:
    names = {"low": f"low-{namespace}", "high": f"high-{namespace}"}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": names["low"]}, "value": 100},
        {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": names["high"]}, "value": 10000},
    ]))
    yield names
    for name in names.values():
        cluster.kubectl("delete", "workloadpriorityclasses.kueue.x-k8s.io", name, "--wait=false", check=False)


@pytest.fixture
def batch_priorities(cluster: Cluster, kueue: Kueue) -> Iterator[dict[str, int]]:
    """The WorkloadPriorityClasses examples/batch names (its kustomization says the cluster admin makes them)."""
    classes = {"research": 100, "research-high": 1000}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}
        for name, value in classes.items()]))
    yield classes
    for name in classes:
        cluster.kubectl("delete", "workloadpriorityclasses.kueue.x-k8s.io", name, "--wait=false", check=False)


class GpuMeter:
    """Watches the runner pods of a namespace and keeps the most GPUs that Running pods held at one moment (a pod
    being deleted no longer counts: its Job has let it go)."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.ns = namespace
        self.running: dict[str, int] = {}
        self.most = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> GpuMeter:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(10)

    def _see(self, pod: Any, deleted: bool) -> None:
        name = pod.metadata.name
        limits = (pod.spec.containers[0].resources.limits or {}) if pod.spec.containers else {}
        if deleted or pod.status.phase != "Running" or pod.metadata.deletion_timestamp:
            self.running.pop(name, None)
        else:
            self.running[name] = int(limits.get(GPU_RESOURCE, 0))
        self.most = max(self.most, sum(self.running.values()))

    def _loop(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        try:
            version = ""
            while not self._stop.is_set():
                if not version:  # start, or the watch's version expired (410): list again
                    listed = self.core.list_namespaced_pod(self.ns, label_selector=RUN_LABEL)
                    self.running.clear()
                    for pod in listed.items:
                        self._see(pod, False)
                    version = listed.metadata.resource_version
                try:
                    for event in watch.Watch().stream(self.core.list_namespaced_pod, self.ns, label_selector=RUN_LABEL,
                                                      resource_version=version, timeout_seconds=2):
                        pod = event["object"]
                        version = pod.metadata.resource_version
                        self._see(pod, event["type"] == "DELETED")
                except ApiException as exc:
                    if exc.status != 410:
                        raise
                    version = ""
        except BaseException as exc:  # reported by check(), in the test's thread
            self.error = exc

    def check(self) -> int:
        if self.error is not None:
            raise AssertionError(f"the GPU watch failed: {self.error!r}")
        return self.most


# --- helpers -------------------------------------------------------------------------------------


def queued_run(name: str, out: Path, planner: dict[str, Any], *, shards: int = 1, gpus: int = 4,
               priority: str | None = None, suspend: bool = False) -> dict[str, Any]:
    body = run_body(name, out, planner, shards=shards, suspend=suspend)
    body["spec"]["resources"] |= {"gpusPerShard": gpus, "queueName": "gpu-research"}
    if priority:
        body["metadata"]["labels"] = {PRIORITY_LABEL: priority}
    return body


def job_of(runs: Runs, name: str) -> Any | None:
    jobs = runs.jobs(name)
    assert len(jobs) <= 1, [j.metadata.name for j in jobs]
    return jobs[0] if jobs else None


def workloads(runs: Runs, name: str) -> list[dict[str, Any]]:
    """The run's Workloads: those owned by its Job (Kueue names them job-<job>-<hash>)."""
    items = runs.co.list_namespaced_custom_object(GROUP, VERSION, runs.ns, "workloads")["items"]
    return [w for w in items if any(ref.get("kind") == "Job" and ref.get("name") == f"{name}-runner"
                                    for ref in w["metadata"].get("ownerReferences") or [])]


def workload_condition(workload: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (workload.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def admitted(runs: Runs, name: str) -> bool:
    """Kueue admitted the run's Workload and unsuspended its Job."""
    job = job_of(runs, name)
    found = workloads(runs, name)
    return bool(job is not None and job.spec.suspend is False and found
                and workload_condition(found[0], "Admitted").get("status") == "True")


def waiting(runs: Runs, name: str) -> bool:
    """Queued as Kueue and the operator both say: a pending Workload, a suspended Job without pods, condition
    Queued with reason WaitingForAdmission, and status.queue naming that Workload."""
    run = runs.get(name)
    job = job_of(runs, name)
    found = workloads(runs, name)
    queued = condition(run, "Queued")
    status_queue = (run.get("status") or {}).get("queue") or {}
    return bool(job is not None and job.spec.suspend is True and found
                and workload_condition(found[0], "QuotaReserved").get("status") != "True"
                and queued.get("status") == "True" and queued.get("reason") == "WaitingForAdmission"
                and status_queue.get("workload") == found[0]["metadata"]["name"]
                and status_queue.get("state") == "Pending"
                and not runs.core.list_namespaced_pod(runs.ns, label_selector=f"{RUN_LABEL}={name}").items)


def suspend_manager(job: Any) -> str:
    """The field manager that owns the Job's spec.suspend now (the last one to set it)."""
    for entry in job.metadata.managed_fields or []:
        fields = entry.fields_v1 or {}
        if "f:suspend" in (fields.get("f:spec") or {}):
            return str(entry.manager)
    return ""


def play_when_admitted(runs: Runs, harness: PodHarness, name: str, shards: int, folder: Path) -> None:
    wait_for(lambda: admitted(runs, name), 120, f"Kueue to admit {name}")
    codes = play_pods(runs, harness, name, shards, folder)
    assert set(codes.values()) == {0}, [p.read_text()[-2000:] for p in folder.glob(f"{name}-shard-*.log")]


def play_all(runs: Runs, harness: PodHarness, names: list[str], shards: int, folder: Path,
             operator: OperatorProcess) -> list[str]:
    """Plays each run as Kueue admits it (whichever comes first), to Ready; returns the order of admission."""
    order: list[str] = []
    while len(order) < len(names):
        name = wait_for(lambda: next((n for n in names if n not in order and admitted(runs, n)), None), 180,
                        f"Kueue to admit one of {sorted(set(names) - set(order))}")
        play_when_admitted(runs, harness, name, shards, folder)
        runs.wait(name, lambda r: is_true(r, "Ready"), 120, "Ready", operator)
        order.append(name)
    return order


def create_admitted(runs: Runs, bodies: list[dict[str, Any]]) -> None:
    """One at a time, each admitted before the next: which runs hold the quota is then known."""
    for body in bodies:
        runs.create(body)
        wait_for(lambda n=body["metadata"]["name"]: admitted(runs, n), 60,  # type: ignore[misc]
                 f"Kueue to admit {body['metadata']['name']}")


def batch_runs(namespace: str, out: Path, planner: dict[str, Any]) -> list[dict[str, Any]]:
    """examples/batch as `kubectl apply -k` would apply it (kustomize: the batch label, names, queue and GPU asks),
    in the test's namespace, with each run's work shrunk to 4 units that a CPU machine plays in seconds: the
    spec's model, trajectory and sampling are the test's; its resources, labels and queue are the example's."""
    from subprocess import run as sh

    from cp_cluster import bin_dir

    built = sh([str(bin_dir() / "kubectl"), "kustomize", str(REPO / "examples" / "batch")], capture_output=True,
               text=True, check=True).stdout
    out_runs = []
    for doc in yaml.safe_load_all(built):
        if not doc or doc.get("kind") != "AttributionRun":
            continue
        resources = doc["spec"]["resources"]
        assert resources.get("queueName") == "gpu-research", doc["metadata"]["name"]
        body = run_body(doc["metadata"]["name"], out, planner, shards=resources["shards"])
        body["metadata"]["labels"] = doc["metadata"].get("labels") or {}
        body["spec"]["resources"] |= {k: resources[k] for k in (
            "shards", "gpusPerShard", "memory", "nodeSelector", "tolerations", "queueName") if k in resources}
        out_runs.append(body)
    return out_runs


# --- tests ---------------------------------------------------------------------------------------


def test_kueue_webhooks_are_called_by_the_api_server(cluster: Cluster, kueue: Kueue, queue: str,
                                                     namespace: str) -> None:
    # Validating webhook: a label selector the CRD's schema lets through, Kueue's own validation refuses.
    bad = {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": f"bad-{namespace}"}, "spec": {
        "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": []}]},
        "resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": [{
            "name": "any", "resources": [{"name": GPU_RESOURCE, "nominalQuota": 1}]}]}]}}
    done = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert done.returncode != 0 and 'admission webhook "vclusterqueue.kb.io" denied' in done.stderr, done.stderr
    # Mutating webhook: a Job with a queue label is suspended on creation.
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe", "labels": {QUEUE_LABEL: queue}},
           "spec": {"suspend": False, "template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "registry.invalid/probe", "resources": {"limits": {GPU_RESOURCE: "1"}}}]}}}}
    made = yaml.safe_load(cluster.kubectl("create", "-n", namespace, "-o", "yaml", "-f", "-",
                                          input=yaml.safe_dump(job)).stdout)
    assert made["spec"]["suspend"] is True


def test_batch_never_runs_more_gpus_than_the_quota_and_every_run_completes(
        cluster: Cluster, kueue_operator: OperatorProcess, queue: str, batch_priorities: dict[str, int],
        planner: dict[str, Any], runs: Runs, harness: PodHarness, tmp_path: Path) -> None:
    bodies = batch_runs(runs.ns, tmp_path / "store", planner)
    names = [b["metadata"]["name"] for b in bodies]
    asked = sum(b["spec"]["resources"]["shards"] * b["spec"]["resources"]["gpusPerShard"] for b in bodies)
    assert len(bodies) == 5 and asked > QUOTA, asked  # the batch asks for more than the quota holds
    started = time.monotonic()
    with cluster.api_client() as api, GpuMeter(api, runs.ns) as meter:
        for body in bodies:
            runs.create(body)
        # Kueue admits what fits; the others wait, and say so (the operator quotes Kueue's reason).
        per_run = bodies[0]["spec"]["resources"]["shards"] * bodies[0]["spec"]["resources"]["gpusPerShard"]
        fits = QUOTA // per_run
        first = wait_for(lambda: (lambda a: a if len(a) == fits else None)([n for n in names if admitted(runs, n)]),
                         120, f"Kueue to admit {fits} runs")
        waiting_runs = [n for n in names if n not in first]
        for name in waiting_runs:
            wait_for(lambda n=name: waiting(runs, n), 60, f"{name} to wait for admission")  # type: ignore[misc]
        status = runs.wait(waiting_runs[-1], lambda r: "insufficient" in r["status"]["queue"]["message"], 60,
                           "Kueue's reason in status.queue", kueue_operator)["status"]
        assert GPU_RESOURCE in status["queue"]["message"] and status["queue"]["workload"] in status["message"]
        assert status["phase"] == "Queued"
        for name in first:
            runs.wait(name, lambda r: r["status"]["phase"] == "Running", 60, "Running", kueue_operator)
        table = cluster.kubectl("get", "ar", "-n", runs.ns).stdout.splitlines()
        rows = {line.split()[0]: line.split() for line in table[1:]}
        assert {rows[n][2] for n in waiting_runs} == {"Queued"}, table
        assert {rows[n][2] for n in first} == {"Running"}, table

        # Play each admitted run to the end; finishing one frees its GPUs for the next in the queue.
        assert sorted(play_all(runs, harness, names, per_run, tmp_path, kueue_operator)) == sorted(names)
        assert meter.check() == QUOTA  # the quota was used in full, and never exceeded
    for name in names:
        run = runs.get(name)
        assert run["status"]["phase"] == "Succeeded" and run["status"]["queue"]["workload"]
        priority_class = run["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]
        assert run["status"]["queue"]["priority"] == batch_priorities[priority_class]
        assert run["metadata"]["labels"]["cudanalyst.dev/batch"] == "gemm-feedback-2026"
        job = job_of(runs, name)
        assert job is not None and suspend_manager(job) == KUEUE_MANAGER, job.metadata.managed_fields
    print(f"batch of {len(names)} runs through a quota of {QUOTA} GPUs: {time.monotonic() - started:.0f} s")


def test_workload_priority_class_decides_the_order(
        cluster: Cluster, kueue_operator: OperatorProcess, queue: str, priorities: dict[str, str],
        planner: dict[str, Any], runs: Runs, harness: PodHarness, tmp_path: Path) -> None:
    out = tmp_path / "store"
    create_admitted(runs, [queued_run(n, out, planner, priority=priorities["low"]) for n in ("fill-a", "fill-b")])
    # Submitted in this order: two low-priority runs, then a high-priority one last.
    for name, level in (("wait-c", "low"), ("wait-d", "low"), ("urgent", "high")):
        runs.create(queued_run(name, out, planner, priority=priorities[level]))
    for name in ("wait-c", "wait-d", "urgent"):
        wait_for(lambda n=name: waiting(runs, n), 60, f"{name} to wait for admission")  # type: ignore[misc]
    queue_status = runs.get("urgent")["status"]["queue"]
    assert queue_status["priorityClass"] == priorities["high"] and queue_status["priority"] == 10000
    assert workloads(runs, "urgent")[0]["spec"]["priorityClassRef"]["name"] == priorities["high"]

    # fill-a completes: its 4 GPUs go to the high-priority run, not to the runs that waited longer.
    play_when_admitted(runs, harness, "fill-a", 1, tmp_path)
    wait_for(lambda: admitted(runs, "urgent"), 60, "Kueue to admit the high-priority run")
    assert waiting(runs, "wait-c") and waiting(runs, "wait-d")


def test_suspend_and_resume_of_an_admitted_run_go_through_kueue(
        cluster: Cluster, kueue_operator: OperatorProcess, queue: str, planner: dict[str, Any], runs: Runs,
        harness: PodHarness, tmp_path: Path) -> None:
    out = tmp_path / "store"
    with cluster.api_client() as api, GpuMeter(api, runs.ns) as meter:
        create_admitted(runs, [queued_run(n, out, planner) for n in ("x", "y")])
        runs.create(queued_run("z", out, planner))
        wait_for(lambda: waiting(runs, "z"), 60, "z to wait for admission")
        harness.running_pods(runs.ns, f"{RUN_LABEL}=x", 1)
        job_uid = job_of(runs, "x").metadata.uid

        # Suspend: the operator deactivates the Workload; Kueue evicts it, suspends the Job and gives its GPUs to z.
        runs.patch("x", {"spec": {"suspend": True}})
        run = runs.wait("x", lambda r: is_true(r, "Suspended"), 60, "Suspended", kueue_operator)
        assert run["status"]["queue"]["state"] == "Inactive"
        workload = workloads(runs, "x")[0]
        assert workload["spec"]["active"] is False
        evicted = workload_condition(workload, "Evicted")
        assert evicted.get("status") == "True" and evicted.get("reason") == "Deactivated", workload["status"]
        assert job_of(runs, "x").spec.suspend is True
        wait_for(lambda: not runs.core.list_namespaced_pod(runs.ns, label_selector=f"{RUN_LABEL}=x").items, 60,
                 "the pods of the suspended run to go")
        wait_for(lambda: admitted(runs, "z"), 60, "Kueue to give x's GPUs to z")

        # Resume while y and z hold the whole quota: x goes back in the queue, and its Job stays suspended.
        runs.patch("x", {"spec": {"suspend": False}})
        wait_for(lambda: waiting(runs, "x"), 60, "x to wait for admission again")
        workload = workloads(runs, "x")[0]
        assert workload["spec"]["active"] is True
        assert workload_condition(workload, "Admitted").get("status") != "True"
        job = job_of(runs, "x")
        assert job.metadata.uid == job_uid and job.spec.suspend is True
        assert suspend_manager(job) == KUEUE_MANAGER  # Kueue suspended it; the operator never touched it

        # GPUs free up (y completes): Kueue admits x again and unsuspends the same Job.
        play_when_admitted(runs, harness, "y", 1, tmp_path)
        wait_for(lambda: admitted(runs, "x"), 60, "Kueue to admit x again")
        harness.running_pods(runs.ns, f"{RUN_LABEL}=x", 1)
        job = job_of(runs, "x")
        assert job.metadata.uid == job_uid and suspend_manager(job) == KUEUE_MANAGER
        runs.wait("x", lambda r: r["status"]["phase"] == "Running" and r["status"]["queue"]["state"] == "Admitted",
                  60, "Running again", kueue_operator)
        assert meter.check() <= QUOTA
    # The Job's managed fields above are the proof that the operator switched the Workload, never the Job
    # (its log line can scroll out of the captured tail on a loaded machine, so it is not asserted).


def test_run_suspended_from_the_start_is_queued_only_when_resumed(
        cluster: Cluster, kueue_operator: OperatorProcess, queue: str, planner: dict[str, Any], runs: Runs,
        tmp_path: Path) -> None:
    runs.create(queued_run("later", tmp_path / "store", planner, suspend=True))
    run = runs.wait("later", lambda r: is_true(r, "Suspended"), 60, "Suspended", kueue_operator)
    assert not runs.jobs("later") and not workloads(runs, "later") and run["status"]["queue"]["name"] == queue
    runs.patch("later", {"spec": {"suspend": False}})
    wait_for(lambda: admitted(runs, "later"), 60, "Kueue to admit the resumed run")
    assert suspend_manager(job_of(runs, "later")) == KUEUE_MANAGER


def test_run_deleted_while_queued_leaves_nothing(
        cluster: Cluster, kueue_operator: OperatorProcess, queue: str, planner: dict[str, Any], runs: Runs,
        tmp_path: Path) -> None:
    out = tmp_path / "store"
    create_admitted(runs, [queued_run(n, out, planner) for n in ("a", "b")])
    runs.create(queued_run("gone", out, planner))
    wait_for(lambda: waiting(runs, "gone"), 60, "gone to wait for admission")
    workload = workloads(runs, "gone")[0]["metadata"]["name"]
    runs.delete("gone")

    def nothing_left() -> bool:
        from kubernetes.client.exceptions import ApiException

        with contextlib.suppress(ApiException):
            runs.get("gone")
            return False
        label = f"{RUN_LABEL}=gone"
        return not (runs.jobs("gone") or workloads(runs, "gone")
                    or runs.core.list_namespaced_config_map(runs.ns, label_selector=label).items
                    or runs.core.list_namespaced_pod(runs.ns, label_selector=label).items)

    wait_for(nothing_left, 90, f"the run, its Job, ConfigMap and Workload {workload} to go")
    assert admitted(runs, "a") and admitted(runs, "b")  # the others are untouched


def test_operator_restarted_while_runs_wait_creates_nothing_twice_and_all_complete(
        cluster: Cluster, kueue_operator: OperatorProcess, queue: str, planner: dict[str, Any], runs: Runs,
        harness: PodHarness, tmp_path: Path) -> None:
    out = tmp_path / "store"
    names = ["r1", "r2", "r3", "r4"]
    create_admitted(runs, [queued_run(n, out, planner) for n in names[:2]])
    for name in names[2:]:
        runs.create(queued_run(name, out, planner))
    for name in names[2:]:
        wait_for(lambda n=name: waiting(runs, n), 60, f"{name} to wait")  # type: ignore[misc]
    uids = {n: job_of(runs, n).metadata.uid for n in names}
    workload_names = {n: workloads(runs, n)[0]["metadata"]["name"] for n in names}

    kueue_operator.kill()  # SIGKILL while two runs wait: no cleanup, no last status write
    play_when_admitted(runs, harness, "r1", 1, tmp_path)  # r1 completes with the operator down,
    wait_for(lambda: admitted(runs, "r3") or admitted(runs, "r4"), 60,  # and Kueue admits a waiting run
             "Kueue to admit r3 or r4 with the operator down")
    time.sleep(1)
    kueue_operator.start()

    runs.wait("r1", lambda r: is_true(r, "Ready"), 120, "Ready after the restart", kueue_operator)
    play_all(runs, harness, names[1:], 1, tmp_path, kueue_operator)
    for name in names:
        assert [j.metadata.uid for j in runs.jobs(name)] == [uids[name]]
        assert [w["metadata"]["name"] for w in workloads(runs, name)] == [workload_names[name]]
    events = runs.core.list_namespaced_event(runs.ns, field_selector="reason=JobCreated").items
    assert sorted(e.involved_object.name for e in events) == names, [e.message for e in events]
