"""The Indexed Job and spec ConfigMap built from a run (pure functions, no cluster)."""

from __future__ import annotations

import json
from typing import Any

from cudanalyst.api import parse_run
from cudanalyst.operator.config import OperatorConfig
from cudanalyst.operator.jobs import child_labels, owner_view, runner_job, spec_configmap


def make_run(**spec: Any) -> Any:
    body: dict[str, Any] = {
        "apiVersion": "cudanalyst.dev/v1alpha1",
        "kind": "AttributionRun",
        "metadata": {"name": "gemm", "namespace": "lab", "labels": {
            "cudanalyst.dev/batch": "b7", "kueue.x-k8s.io/priority-class": "high",
            "app.kubernetes.io/instance": "argo-app", "argocd.argoproj.io/instance": "x"}},
        "spec": {
            "trajectory": {"uri": "s3://bucket/traj/", "generations": [10]},
            "players": ["debugger", "analyzer"],
            "models": {"planner": {"model": "/models/p"}},
            "output": {"uri": "s3://bucket/runs/"},
            **spec,
        },
    }
    return parse_run(body)


CONFIG = OperatorConfig(runner_service_account="runner-sa", backoff_limit_per_index=3,
                        runner_pod_labels={"cudanalyst.dev/egress": "runner"})


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


def test_indexed_job_runs_one_pod_per_shard_with_the_runner_command() -> None:
    job = runner_job(make_run(resources={"shards": 4, "gpusPerShard": 2}), CONFIG)
    assert job["metadata"]["name"] == "gemm-runner"
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    assert spec["backoffLimitPerIndex"] == 3
    container = pod_spec(job)["containers"][0]
    assert container["command"] == ["cudanalyst-runner"]
    assert container["args"] == ["--spec", "/etc/cudanalyst/spec.json", "--shard", "$(JOB_COMPLETION_INDEX)",
                                 "--of", "4", "--stage", "all"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert pod_spec(job)["serviceAccountName"] == "runner-sa"
    assert pod_spec(job)["automountServiceAccountToken"] is False


def test_pod_failure_policy_ignores_disruptions_and_fails_the_index_on_invalid_input() -> None:
    rules = runner_job(make_run(), CONFIG)["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailIndex"
    assert rules[1]["onExitCodes"] == {"containerName": "runner", "operator": "In", "values": [2]}


def test_labels_pass_through_except_gitops_tracking() -> None:
    run = make_run(resources={"queueName": "gpu-queue"})
    labels = child_labels(run)
    assert labels["cudanalyst.dev/batch"] == "b7"
    assert labels["kueue.x-k8s.io/priority-class"] == "high"
    assert labels["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert labels["cudanalyst.dev/run"] == "gemm"
    assert "app.kubernetes.io/instance" not in labels and "argocd.argoproj.io/instance" not in labels
    job = runner_job(run, CONFIG)
    assert job["metadata"]["labels"] == labels
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["cudanalyst.dev/egress"] == "runner" and pod_labels["cudanalyst.dev/run"] == "gemm"
    view = owner_view({"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {
        "name": "gemm", "namespace": "lab", "uid": "u1", "labels": run.metadata.labels}})
    assert "app.kubernetes.io/instance" not in view["metadata"]["labels"]
    assert view["metadata"]["uid"] == "u1"


def test_queued_run_starts_suspended_so_kueue_can_admit_it() -> None:
    assert runner_job(make_run(resources={"queueName": "q"}), CONFIG)["spec"]["suspend"] is True
    assert runner_job(make_run(), CONFIG)["spec"]["suspend"] is False
    assert runner_job(make_run(suspend=True), CONFIG)["spec"]["suspend"] is True


def test_scheduling_fields_reach_the_pod() -> None:
    run = make_run(resources={"nodeSelector": {"nvidia.com/gpu.product": "H200"},
                              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                              "priorityClassName": "research", "cpu": "8", "memory": "64Gi"},
                   ttlSecondsAfterFinished=600)
    job = runner_job(run, CONFIG)
    pod = pod_spec(job)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "H200"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["priorityClassName"] == "research"
    resources = pod["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "8", "memory": "64Gi"}
    assert resources["limits"]["memory"] == "64Gi"
    assert job["spec"]["ttlSecondsAfterFinished"] == 600


def test_no_gpu_request_when_gpus_per_shard_is_zero() -> None:
    job = runner_job(make_run(resources={"gpusPerShard": 0}), CONFIG)
    assert "nvidia.com/gpu" not in json.dumps(job)


def test_s3_credentials_only_as_a_secret_reference() -> None:
    run = make_run(s3={"endpoint": "http://minio.store:9000", "region": "eu-1", "credentialsSecret": "s3-creds"})
    job = runner_job(run, CONFIG)
    pod = pod_spec(job)
    assert {"name": "s3-credentials", "secret": {"secretName": "s3-creds"}} in pod["volumes"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["CUDANALYST_S3_CREDENTIALS_DIR"] == "/var/run/secrets/cudanalyst/s3"
    assert env["AWS_ENDPOINT_URL_S3"] == "http://minio.store:9000"
    assert not any("SECRET" in name and value for name, value in env.items() if name != "CUDANALYST_S3_CREDENTIALS_DIR")


def test_pod_is_non_root_without_capabilities() -> None:
    pod = pod_spec(runner_job(make_run(), CONFIG))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]["securityContext"]
    assert container["capabilities"] == {"drop": ["ALL"]} and container["allowPrivilegeEscalation"] is False


def test_configmap_holds_the_spec_the_runner_reads() -> None:
    run = make_run()
    cm = spec_configmap(run)
    assert cm["metadata"]["name"] == "gemm-spec"
    doc = json.loads(cm["data"]["spec.json"])
    assert "status" not in doc
    again = parse_run(doc)
    assert again.spec == run.spec and again.metadata.name == "gemm"


def test_an_endpoint_key_reaches_the_runner_pod_as_a_secret_reference_only() -> None:
    models = {"planner": {"endpoint": "https://gw.example/v1", "model": "big",
                          "apiKey": {"env": "GW_KEY", "secretName": "llm-gateway", "secretKey": "token"}},
              "coder": {"endpoint": "https://other.example/v1", "model": "small", "apiKey": {}},  # local key only
              "summarizer": {"endpoint": "https://gw.example/v1", "model": "big",
                             "apiKey": {"env": "GW_KEY", "secretName": "llm-gateway", "secretKey": "token"}}}
    job = runner_job(make_run(models=models), CONFIG)
    env = [e for e in pod_spec(job)["containers"][0]["env"] if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]]
    # One entry per variable; optional, so that a missing Secret reaches the runner's exit 2 naming the field.
    assert env == [{"name": "GW_KEY", "valueFrom": {"secretKeyRef": {"name": "llm-gateway", "key": "token",
                                                                     "optional": True}}}]
    assert "volumes" in pod_spec(job) and "llm-gateway" not in json.dumps(pod_spec(job)["volumes"])


def test_runner_pods_are_told_where_vllms_compiled_artefacts_are_kept() -> None:
    from dataclasses import replace

    from cudanalyst.operator.config import ConfigError, load_config

    def env(config: OperatorConfig) -> dict[str, Any]:
        return {e["name"]: e.get("value") for e in pod_spec(runner_job(make_run(), config))["containers"][0]["env"]}

    assert "CUDANALYST_VLLM_CACHE_URI" not in env(CONFIG)  # none set: each pod compiles anew
    cached = replace(CONFIG, vllm_cache_uri="s3://bucket/vllm-cache")
    assert env(cached)["CUDANALYST_VLLM_CACHE_URI"] == "s3://bucket/vllm-cache"
    assert load_config({"CUDANALYST_RUNNER_VLLM_CACHE_URI": "/cache/vllm"}).vllm_cache_uri == "/cache/vllm"
    try:
        load_config({"CUDANALYST_RUNNER_VLLM_CACHE_URI": "bucket/x"})
    except ConfigError as exc:
        assert "CUDANALYST_RUNNER_VLLM_CACHE_URI" in str(exc)
    else:
        raise AssertionError("a relative cache URI was accepted")


def test_runner_pods_wait_out_a_store_that_is_briefly_down(monkeypatch: Any) -> None:
    # The chaos bench (issue 33): a shard gave up after the store client's 3 attempts (about a second) and only the
    # Job's retries saved the run. Runner pods get more attempts; the runner's store reads them.
    from cudanalyst.store import MAX_ATTEMPTS_ENV, S3Settings

    env = {e["name"]: e.get("value") for e in pod_spec(runner_job(make_run(), CONFIG))["containers"][0]["env"]}
    assert int(env[MAX_ATTEMPTS_ENV]) >= 10
    spec = make_run().spec.s3
    monkeypatch.setenv(MAX_ATTEMPTS_ENV, env[MAX_ATTEMPTS_ENV])
    assert S3Settings.from_spec(spec).max_attempts == int(env[MAX_ATTEMPTS_ENV])
    monkeypatch.delenv(MAX_ATTEMPTS_ENV)
    assert S3Settings.from_spec(spec).max_attempts == 3  # elsewhere (the CLI, the operator) a store error is quick
    monkeypatch.setenv(MAX_ATTEMPTS_ENV, "many")
    try:
        S3Settings.from_spec(spec)
    except ValueError as exc:
        assert MAX_ATTEMPTS_ENV in str(exc)
    else:
        raise AssertionError("a bad attempt count was accepted")
