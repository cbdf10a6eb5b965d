"""One missing permission fails loudly: the operator, as a service account whose Role is the chart's rules
minus `create` on Jobs, cannot start a run, and says so (on the run's Stalled condition, in its log, in
its error metric), creating no Job and marking nothing as started. (That the chart's full rules suffice
is shown by test_e2e_run.py.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cp_cluster import Cluster, read_versions, wait_for
from e2e_support import CHART, OPERATOR_SA, RELEASE, OperatorProcess, Runs, condition, install_chart, run_body

pytestmark = pytest.mark.cluster

PLANNER = {"endpoint": "http://127.0.0.1:9/v1", "model": "tiny"}
SA = "operator-without-jobs-create"


def chart_rules(cluster: Cluster) -> list[dict[str, Any]]:
    rendered = cluster.helm("template", RELEASE, str(CHART), f"--kube-version={read_versions()['K8S_VERSION']}").stdout
    role = next(d for d in yaml.safe_load_all(rendered)
                if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == OPERATOR_SA)
    return list(role["rules"])


@pytest.fixture
def crippled_operator(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    install_chart(cluster)
    rules = chart_rules(cluster)
    jobs = [r for r in rules if "jobs" in r["resources"]]
    assert len(jobs) == 1 and "create" in jobs[0]["verbs"]
    jobs[0]["verbs"] = [v for v in jobs[0]["verbs"] if v != "create"]
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "cudanalyst-runner"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": SA}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": SA},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
         "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": namespace}]},
    ]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objects))
    op = OperatorProcess(cluster.impersonate(namespace, SA), tmp_path / "operator.log", namespaces=namespace).start()
    yield op
    op.stop()


def test_a_missing_permission_fails_loudly(cluster: Cluster, namespace: str,
                                          crippled_operator: OperatorProcess, tmp_path: Path) -> None:
    op = crippled_operator
    with cluster.api_client() as api:
        runs = Runs(api, namespace)
        runs.create(run_body("denied", tmp_path / "store", PLANNER))
        # The start handler's create of the Job is refused: kopf logs the API server's 403 and retries.
        denied = (r'jobs\.batch is forbidden: User \\?"system:serviceaccount:[^"\\]+:' + SA
                  + r'\\?" cannot create resource \\?"jobs\\?"')
        wait_for(lambda: re.search(denied, op.text()), 60,
                 f"the operator to log the forbidden Job creation\n{op.tail()}")
        assert re.search(r"ERROR kopf\.objects: Handler 'start' failed with an exception and will try again in \d+ "
                         r"seconds: \(403\)", op.text()), op.tail()
        metrics = op.metrics()
        assert re.search(r'cudanalyst_reconcile_errors_total\{handler="start",reason="ForbiddenException"\} [1-9]',
                         metrics), metrics
        assert runs.jobs("denied") == []
        # What `kubectl describe ar denied` shows: Stalled, Forbidden, in the API server's words.
        stalled = wait_for(lambda: condition(runs.get("denied"), "Stalled") or None, 30,
                           f"the run to show the refusal\n{op.tail()}")
        assert (stalled["status"], stalled["reason"]) == ("True", "Forbidden"), stalled
        assert 'cannot create resource "jobs"' in stalled["message"] and "RBAC" in stalled["message"], stalled
        run = runs.get("denied")
        assert not (run.get("status") or {}).get("startTime")  # not marked as started
        # What it could do, it did: the spec ConfigMap (allowed) exists; a retry will find it (409 = success).
        runs.core.read_namespaced_config_map("denied-spec", namespace)
        assert op.alive() and op.healthy()
