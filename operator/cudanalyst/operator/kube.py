"""The few Kubernetes API calls the operator makes itself (kopf does the watching and status patches).

Creation is idempotent: a 409 means the child already exists under its deterministic name, which is
success (a restarted operator creates nothing twice).
"""

from __future__ import annotations

import json
import os
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from cudanalyst.api import API_GROUP, API_VERSION, PLURAL


class Kube:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    @classmethod
    def from_environment(cls) -> Kube:
        """In a pod: the service account; elsewhere: $KUBECONFIG or ~/.kube/config (as kopf logs in)."""
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException:
            # $KUBECONFIG as it is now, not as it was when the kubernetes package was imported.
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None,
                                    client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    def close(self) -> None:
        self.api.close()

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> bool:
        """True when created now, False when it already existed."""
        return _create(self.core.create_namespaced_config_map, namespace, body)

    def create_job(self, namespace: str, body: dict[str, Any]) -> bool:
        return _create(self.batch.create_namespaced_job, namespace, body)

    def set_job_suspend(self, namespace: str, name: str, suspend: bool) -> bool:
        """False when the Job does not exist (finished and cleaned up, or not created yet)."""
        try:
            _release(self.batch.patch_namespaced_job(name, namespace, {"spec": {"suspend": suspend}},
                                                     _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The AttributionRun as the API server holds it now; None when it is gone."""
        try:
            return dict(self.custom.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_run_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        """A merge patch of the run's status subresource (as kopf sends); False when the run is gone."""
        try:
            _release(self.custom.patch_namespaced_custom_object_status(
                API_GROUP, API_VERSION, namespace, PLURAL, name, {"status": status},
                _content_type="application/merge-patch+json", _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True


def api_message(exc: ApiException) -> str:
    """The API server's own words for a refused call (its Status message), else the exception's reason."""
    try:
        message = json.loads(exc.body or "{}").get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return str(message or exc.reason or exc)


def _create(create: Any, namespace: str, body: dict[str, Any]) -> bool:
    """Create idempotently: a 409 (already there, e.g. made before a restart) counts as success."""
    try:
        _release(create(namespace, body, _preload_content=False))
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise
    return True


def _release(response: Any) -> None:
    """Read an unparsed response to its end and hand its connection back to the pool: otherwise every later
    call opens a new TLS connection (a handshake each, which dominated the operator's CPU at scale)."""
    try:
        response.read()
    finally:
        release = getattr(response, "release_conn", None)
        if release is not None:
            release()
