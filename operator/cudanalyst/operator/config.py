"""The operator's own settings, read once from its environment (the chart sets them)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field


class ConfigError(ValueError):
    """An environment variable of the operator holds a value it cannot use."""


@dataclass(frozen=True)
class OperatorConfig:
    # Namespaces to watch; empty means cluster-wide.
    namespaces: tuple[str, ...] = ()
    runner_service_account: str = "cudanalyst-runner"
    # Retries of one shard's pod for failures that are not infrastructure (those are ignored).
    backoff_limit_per_index: int = 2
    # Seconds between safety-net refreshes of a running run (progress from the store, and anything missed):
    # changes of its Job and Pods are followed at once, on their events.
    status_interval: float = 60.0
    # Seconds between new attempts to start a run stalled on its trajectory or store.
    retry_interval: float = 60.0
    metrics_port: int = 8080
    health_port: int = 8081
    image_pull_policy: str = "IfNotPresent"
    runner_stage: str = "all"
    # Labels every runner pod gets, e.g. for the chart's NetworkPolicy.
    runner_pod_labels: dict[str, str] = field(default_factory=dict)
    # Kueue is installed: follow the Workloads of queued runs' Jobs (kueue.py). Off, a run that names a
    # queue stalls, since suspending it would need its Workload.
    kueue: bool = False
    # Where runner pods keep vLLM's compiled artefacts between pods (issue 32): s3://bucket/prefix or a folder on a
    # volume they mount; the runner fetches it before its model server starts. Empty: each pod compiles anew.
    vllm_cache_uri: str = ""


def _int(env: Mapping[str, str], name: str, default: int, low: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected an integer") from None
    if value < low:
        raise ConfigError(f"{name}={raw!r}: must be at least {low}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a number of seconds") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r}: must be positive")
    return value


def _labels(env: Mapping[str, str], name: str) -> dict[str, str]:
    raw = env.get(name, "").strip()
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{name}: {item!r} is not key=value")
        out[key] = value
    return out


def _cache_uri(env: Mapping[str, str], name: str) -> str:
    raw = env.get(name, "").strip()
    if raw and not (raw.startswith(("s3://", "/", "file://"))):
        raise ConfigError(f"{name}={raw!r}: expected s3://bucket/prefix or an absolute folder (a mounted volume)")
    return raw


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw not in ("true", "false"):
        raise ConfigError(f"{name}={raw!r}: expected true or false")
    return raw == "true"


def load_config(env: Mapping[str, str] | None = None) -> OperatorConfig:
    """Read CUDANALYST_* variables; a bad value raises ConfigError naming the variable."""
    env = os.environ if env is None else env
    namespaces = tuple(n.strip() for n in env.get("CUDANALYST_NAMESPACES", "").split(",") if n.strip())
    policy = env.get("CUDANALYST_IMAGE_PULL_POLICY", "IfNotPresent")
    if policy not in ("Always", "IfNotPresent", "Never"):
        raise ConfigError(f"CUDANALYST_IMAGE_PULL_POLICY={policy!r}: expected Always, IfNotPresent or Never")
    stage = env.get("CUDANALYST_RUNNER_STAGE", "all")
    if stage not in ("all", "llm", "kernels"):
        raise ConfigError(f"CUDANALYST_RUNNER_STAGE={stage!r}: expected all, llm or kernels")
    return OperatorConfig(
        namespaces=namespaces,
        runner_service_account=env.get("CUDANALYST_RUNNER_SERVICE_ACCOUNT", "cudanalyst-runner"),
        backoff_limit_per_index=_int(env, "CUDANALYST_BACKOFF_LIMIT_PER_INDEX", 2),
        status_interval=_float(env, "CUDANALYST_STATUS_INTERVAL", 60.0),
        retry_interval=_float(env, "CUDANALYST_RETRY_INTERVAL", 60.0),
        metrics_port=_int(env, "CUDANALYST_METRICS_PORT", 8080, low=1),
        health_port=_int(env, "CUDANALYST_HEALTH_PORT", 8081, low=1),
        image_pull_policy=policy,
        runner_stage=stage,
        runner_pod_labels=_labels(env, "CUDANALYST_RUNNER_POD_LABELS"),
        kueue=_bool(env, "CUDANALYST_KUEUE", False),
        vllm_cache_uri=_cache_uri(env, "CUDANALYST_RUNNER_VLLM_CACHE_URI"),
    )
