"""`cudanalyst-operator`: run the kopf operator with the settings from its environment.

One replica with `strategy: Recreate` (standalone, no peering): kopf handlers are idempotent and the
deterministic child names make a brief overlap harmless, so HA through peering buys nothing here.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import kopf

from cudanalyst.operator.config import ConfigError, load_config
from cudanalyst.operator.handlers import build_registry
from cudanalyst.operator.lifecycle import Services

log = logging.getLogger("cudanalyst.operator")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print("\nEnvironment: CUDANALYST_NAMESPACES (comma-separated; empty = cluster-wide), "
              "CUDANALYST_RUNNER_SERVICE_ACCOUNT, CUDANALYST_STATUS_INTERVAL, CUDANALYST_METRICS_PORT, "
              "CUDANALYST_HEALTH_PORT, CUDANALYST_BACKOFF_LIMIT_PER_INDEX, CUDANALYST_IMAGE_PULL_POLICY, "
              "CUDANALYST_RUNNER_POD_LABELS (k=v,...), CUDANALYST_RUNNER_STAGE, CUDANALYST_RETRY_INTERVAL, "
              "CUDANALYST_KUEUE (true: follow Kueue Workloads of queued runs), "
              "CUDANALYST_RUNNER_VLLM_CACHE_URI (s3://bucket/prefix or a mounted folder: vLLM's compiled artefacts)")
        return 0
    if argv:
        print(f"cudanalyst-operator: unexpected arguments {argv!r}; it is configured by environment variables",
              file=sys.stderr)
        return 2
    try:
        config = load_config()
    except ConfigError as exc:
        print(f"cudanalyst-operator: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    services = Services(config)
    registry = build_registry(services)
    services.metrics.serve(config.metrics_port)
    asyncio.run(kopf.operator(
        registry=registry,
        standalone=True,
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        liveness_endpoint=f"http://0.0.0.0:{config.health_port}/healthz",
    ))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
