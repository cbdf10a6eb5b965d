"""An endpoint's API key on the real control plane (issue 34): the run names a Secret, the operator puts a reference
to it (never its value) into the runner pods' environment, and the pods, played by the harness with what a kubelet
would give them, authenticate to vLLM started with --api-key (tests/tiny_vllm.py: tiny_keyed_server) and finish the
run. The operator's own pod has no such reference, its ServiceAccount may not read Secrets, and nothing it wrote (Job,
ConfigMap, status, log) holds the key."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cp_cluster import Cluster
from cp_harness import PodHarness
from e2e_support import (
    CHART_NAMESPACE,
    OPERATOR_SA,
    RUN_LABEL,
    OperatorProcess,
    Runs,
    is_true,
    play_pods,
    run_body,
)
from tiny_vllm import TINY_API_KEY

pytestmark = [pytest.mark.cluster, pytest.mark.vllm]

SHARDS = 2
UNITS = 4  # 1 program x 4 coalitions of 2 players x 1 rollout x 1 sample
SECRET = "llm-gateway"
VAR = "GATEWAY_API_KEY"


def kubelet_env(runs: Runs, pod: Any) -> dict[str, str]:
    """The runner container's variables that come from Secrets, resolved as the kubelet resolves them (the test
    reads the Secret with its own admin credentials; the operator never does)."""
    out = {}
    for entry in pod.spec.containers[0].env or []:
        ref = entry.value_from.secret_key_ref if entry.value_from else None
        if ref is None:
            continue
        secret = runs.core.read_namespaced_secret(ref.name, runs.ns)
        if ref.key in (secret.data or {}):
            out[entry.name] = base64.b64decode(secret.data[ref.key]).decode()
    return out


def test_the_runner_pods_get_the_key_from_a_secret_and_the_operator_never_has_it(
        cluster: Cluster, operator: OperatorProcess, runs: Runs, harness: PodHarness, tiny_keyed_server: Any,
        tmp_path: Path) -> None:
    runs.core.create_namespaced_secret(runs.ns, {"metadata": {"name": SECRET}, "stringData": {"api-key": TINY_API_KEY}})
    planner = {"endpoint": tiny_keyed_server.endpoint.base_url, "model": "tiny", "api": "chat",
               "apiKey": {"env": VAR, "secretName": SECRET}}
    out = tmp_path / "store"
    runs.create(run_body("keyed", out, planner, shards=SHARDS))
    pods = harness.running_pods(runs.ns, f"{RUN_LABEL}=keyed", SHARDS)
    for pod in pods:
        entry = next(e for e in pod.spec.containers[0].env if e.name == VAR)
        ref = entry.value_from.secret_key_ref
        assert entry.value is None and (ref.name, ref.key) == (SECRET, "api-key")
    resolved = kubelet_env(runs, pods[0])
    assert resolved == {VAR: TINY_API_KEY}
    # What the operator made refers to the Secret and holds no key.
    from kubernetes.client import ApiClient

    made = ApiClient().sanitize_for_serialization([runs.jobs("keyed")[0], pods[0],
                                                   runs.core.read_namespaced_config_map("keyed-spec", runs.ns)])
    assert TINY_API_KEY not in json.dumps(made) and SECRET in json.dumps(made)

    codes = play_pods(runs, harness, "keyed", SHARDS, tmp_path, env=resolved)
    assert codes == {0: 0, 1: 0}, [p.read_text()[-2000:] for p in tmp_path.glob("keyed-shard-*.log")]
    run = runs.wait("keyed", lambda r: is_true(r, "Ready"), 120, "Ready", operator)
    assert run["status"]["progress"]["done"] == UNITS
    usage = json.loads((out / "keyed" / "report" / "report.json").read_text())["usage"]
    assert usage["stages"]["planner"]["requests"] == UNITS  # the keyed endpoint answered every plan

    # The operator's own pod: the chart's Deployment names neither the Secret nor the variable...
    deployed = cluster.kubectl("get", "deployments,pods", "-n", CHART_NAMESPACE, "-o", "json").stdout
    assert OPERATOR_SA in deployed  # it is there to look at
    assert SECRET not in deployed and VAR not in deployed and TINY_API_KEY not in deployed
    # ...its ServiceAccount may not read a Secret (the chart's RBAC: it references them, the kubelet resolves)...
    for verb in ("get", "list", "watch"):
        can = cluster.kubectl("auth", "can-i", verb, "secrets", "-n", runs.ns,
                              f"--as=system:serviceaccount:{CHART_NAMESPACE}:{OPERATOR_SA}", check=False)
        assert can.stdout.strip() == "no", (verb, can.stdout, can.stderr)
    # ...and the operator process (which plays that pod here) has no key in its environment, log or status.
    assert VAR not in operator.env and TINY_API_KEY not in operator.env.values()
    assert TINY_API_KEY not in operator.text() and TINY_API_KEY not in json.dumps(runs.get("keyed"))
    assert [p for p in out.rglob("*") if p.is_file() and TINY_API_KEY.encode() in p.read_bytes()] == []
