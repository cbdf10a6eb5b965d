"""`cudanalyst status NAME` against a real kube-apiserver (with etcd) and the generated CRD.

The control-plane binaries come from scripts/build-control-plane.sh; without them the tests are
skipped, saying so. Only etcd and the apiserver are started: status reads one object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apiserver_crd import apiserver_with_crd  # status reads one object: no controllers, no nodes

from cudanalyst.api import API_GROUP, API_VERSION, PLURAL
from cudanalyst.report import build_report
from cudanalyst.report.demo import demo_spec, write_demo_run
from cudanalyst.store import open_store

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with apiserver_with_crd(tmp_path_factory.mktemp("apiserver")) as path:
        yield path


@pytest.fixture
def custom(kubeconfig: Path) -> Iterator[Any]:
    from kubernetes import client, config

    with config.new_client_from_config(config_file=str(kubeconfig)) as c:
        yield client.CustomObjectsApi(c), client.CoreV1Api(c)


@pytest.fixture
def namespace(custom: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    custom[1].create_namespace({"metadata": {"name": name}})
    return name


def status_cli(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "cudanalyst", "status", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def create_run(custom: Any, namespace: str, name: str, output_uri: str, status: dict[str, Any]) -> None:
    api = custom[0]
    body = demo_spec(name=name, output_uri=output_uri)
    api.create_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, body)
    # Through the status subresource, as the operator writes it (undeclared fields would be pruned).
    api.patch_namespaced_custom_object_status(API_GROUP, API_VERSION, namespace, PLURAL, name, {"status": status})


def status_of(report: dict[str, Any], not_evaluated: list[str]) -> dict[str, Any]:
    pooled = [g for g in report["attribution"]["games"] if g["pooled"] and g["evaluated"]]
    banzhaf = [{"player": p, "metric": g["metric"], "generation": "pooled", "value": e["value"], "low": e["low"],
                "high": e["high"]} for g in pooled for p, e in g["banzhaf"].items()]
    return {
        "phase": "Succeeded", "observedGeneration": 1,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "288/288 units; report written"},
            {"type": "Reconciling", "status": "False", "reason": "Done", "message": ""},
            {"type": "Stalled", "status": "False", "reason": "Done", "message": ""},
        ],
        "progress": {"done": 288, "total": 288, "percent": 100.0, "text": "288/288", "failures": 0,
                     "llm": {"done": 288, "total": 288}, "kernels": {"done": 288, "total": 288}},
        "gpuSeconds": 173.0, "jobName": "demo-runner",
        "results": {"topPlayer": "debugger", "metric": "compiled", "confidence": 0.95, "banzhaf": banzhaf,
                    "notEvaluated": not_evaluated},
    }


def test_status_prints_conditions_progress_and_both_tables(custom: Any, namespace: str, kubeconfig: Path,
                                                           tmp_path: Path) -> None:
    store = open_store(str(tmp_path)).child("demo/")
    write_demo_run(store, demo_spec(output_uri=str(tmp_path)), gpu=False)
    report = build_report(store)
    status = status_of(report, ["pass", "fast"])
    status["reportUri"] = (tmp_path / "demo" / "report" / "report.json").as_uri()
    create_run(custom, namespace, "demo", str(tmp_path), status)

    proc = status_cli(kubeconfig, "demo", "-n", namespace)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"{namespace}/demo: phase Succeeded" in out
    assert "288/288 units (100.0%)" in out and "LLM 288/288, kernels 288/288" in out and "GPU time: 173 s" in out
    assert "288/288 units; report written" in out  # the Ready condition's message
    compiled = report["attribution"]["games"]
    debugger = next(g for g in compiled if g["pooled"] and g["metric"] == "compiled")["banzhaf"]["debugger"]
    assert f"{debugger['value']:+.3f} [{debugger['low']:+.3f}, {debugger['high']:+.3f}]" in out
    assert "pass (not evaluated)" in out and "fast (not evaluated)" in out
    # From the report object: one table per generation.
    assert "generation 10" in out and "generation 20" in out
    assert "report not reachable" not in out


def test_status_says_when_the_report_cannot_be_read(custom: Any, namespace: str, kubeconfig: Path,
                                                    tmp_path: Path) -> None:
    status = {"phase": "Running", "progress": {"done": 3, "total": 10, "percent": 30.0, "text": "3/10"},
              "reportUri": (tmp_path / "nowhere" / "report.json").as_uri()}
    create_run(custom, namespace, "half", str(tmp_path), status)
    proc = status_cli(kubeconfig, "half", "--namespace", namespace)
    assert proc.returncode == 0, proc.stderr
    assert "phase Running" in proc.stdout and "3/10 units (30.0%)" in proc.stdout
    assert "no results yet" in proc.stdout
    assert "report not reachable" in proc.stdout and "nowhere" in proc.stdout


def test_unknown_run_exits_2_naming_it(namespace: str, kubeconfig: Path) -> None:
    proc = status_cli(kubeconfig, "no-such-run", "-n", namespace)
    assert proc.returncode == 2
    assert "'no-such-run' not found in namespace" in proc.stderr and namespace in proc.stderr


def test_unreachable_cluster_names_the_server(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes", reason="the kubernetes client is needed: pip install -e '.[operator]'")
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: k, user: u, namespace: ns1}}]\n")
    proc = status_cli(config, "demo")
    assert proc.returncode == 1
    assert "cannot reach the Kubernetes API at https://127.0.0.1:9" in proc.stderr


def test_status_reads_the_operators_bare_attribution_object(custom: Any, namespace: str, kubeconfig: Path,
                                                            tmp_path: Path) -> None:
    store = open_store(str(tmp_path)).child("demo/")
    write_demo_run(store, demo_spec(output_uri=str(tmp_path)), gpu=True)
    report = build_report(store)
    # What the operator's aggregate step writes: the attribution result alone.
    bare = tmp_path / "operator" / "report.json"
    bare.parent.mkdir()
    bare.write_text(json.dumps(report["attribution"]))
    status = status_of(report, [])
    status["reportUri"] = bare.as_uri()
    create_run(custom, namespace, "bare", str(tmp_path), status)
    proc = status_cli(kubeconfig, "bare", "-n", namespace)
    assert proc.returncode == 0, proc.stderr
    assert "generation 10" in proc.stdout and "generation 20" in proc.stdout
    assert "not evaluated" not in proc.stdout and "report not reachable" not in proc.stdout
