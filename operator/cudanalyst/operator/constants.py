"""Names the operator gives to things: its own prefixes, labels and the deterministic child names."""

from __future__ import annotations

from cudanalyst.api import API_GROUP, API_VERSION, PLURAL

# Our own prefix for the finalizer, kopf's progress annotations and our labels (never kopf.zalando.org).
PREFIX = API_GROUP
FINALIZER = f"{PREFIX}/finalizer"
RUN_LABEL = f"{PREFIX}/run"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "cudanalyst-operator"

# Kueue reads these from the Job: the LocalQueue and the WorkloadPriorityClass.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"

RUN_RESOURCE = (API_GROUP, API_VERSION, PLURAL)
RUN_API_VERSION = f"{API_GROUP}/{API_VERSION}"

RUNNER_CONTAINER = "runner"
SPEC_MOUNT = "/etc/cudanalyst"
SPEC_FILE = "spec.json"
CREDENTIALS_MOUNT = "/var/run/secrets/cudanalyst/s3"

# Exit status of `cudanalyst-runner` for invalid input (the CLI convention): retrying cannot help.
RUNNER_INVALID_INPUT_EXIT = 2


def job_name(run: str) -> str:
    """The run's one Indexed Job. Run names are at most 52 characters, so this stays a DNS label."""
    return f"{run}-runner"


def configmap_name(run: str) -> str:
    """The ConfigMap holding the run's spec for the runner pods."""
    return f"{run}-spec"
