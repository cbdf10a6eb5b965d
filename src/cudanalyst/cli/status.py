"""`cudanalyst status NAME`: a cluster run's conditions, progress and results, read through the Kubernetes API.

The AttributionRun is read with the kubernetes client (kubeconfig, or the in-cluster service account);
its status gives conditions, progress and the headline values. When status.reportUri can be read
(the local S3 credential chain, or a shared folder), the report object adds the per-generation tables.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cudanalyst.api import API_GROUP, API_VERSION, PLURAL
from cudanalyst.cli.common import EXIT_FAILURE, EXIT_INVALID

OPERATOR_HINT = "the kubernetes client is not installed: pip install 'cudanalyst[operator]'"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show a cluster run's conditions, progress and results", description=__doc__)
    p.add_argument("name", help="the AttributionRun's name")
    p.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's, else 'default')")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--s3-endpoint", default=None, help="S3 endpoint for the report (default: the run's spec.s3)")
    p.add_argument("--no-report", action="store_true", help="do not read the report object")
    p.set_defaults(handler=run)


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _client(args: argparse.Namespace) -> tuple[Any, str]:
    """A CustomObjectsApi and the namespace to use; raises RuntimeError when no configuration works."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    namespace = args.namespace
    try:
        config.load_kube_config(config_file=args.kubeconfig, context=args.context)
        if namespace is None:
            _, active = config.list_kube_config_contexts(config_file=args.kubeconfig)
            if args.context:
                contexts, _ = config.list_kube_config_contexts(config_file=args.kubeconfig)
                active = next((c for c in contexts if c["name"] == args.context), active)
            namespace = (active or {}).get("context", {}).get("namespace")
    except (ConfigException, FileNotFoundError) as exc:
        if args.kubeconfig or args.context:
            raise RuntimeError(f"cannot use kubeconfig {args.kubeconfig or ''} {args.context or ''}: {exc}") from None
        try:
            config.load_incluster_config()
        except ConfigException:
            raise RuntimeError(f"no Kubernetes configuration: {exc} (set KUBECONFIG or pass --kubeconfig)") from None
        if namespace is None:
            try:
                with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
                    namespace = f.read().strip()
            except OSError:
                namespace = None
    return client.CustomObjectsApi(), namespace or "default"


def run(args: argparse.Namespace) -> int:
    try:
        import kubernetes  # noqa: F401
    except ModuleNotFoundError:
        return _fail(OPERATOR_HINT, EXIT_INVALID)  # a missing extra: invalid set-up
    import urllib3
    from kubernetes.client.exceptions import ApiException
    from rich.console import Console

    from cudanalyst.report.status_view import print_status

    try:
        api, namespace = _client(args)
    except RuntimeError as exc:
        return _fail(str(exc), EXIT_FAILURE)
    try:
        obj = api.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, args.name)
    except ApiException as exc:
        if exc.status == 404:
            return _fail(f"attributionrun {args.name!r} not found in namespace {namespace!r}", EXIT_INVALID)
        return _fail(f"reading attributionrun {args.name!r} in namespace {namespace!r}: {exc.status} {exc.reason}",
                     EXIT_FAILURE)
    except (urllib3.exceptions.HTTPError, OSError) as exc:  # refused, TLS, DNS: name the server
        host = getattr(api.api_client.configuration, "host", "?")
        return _fail(f"cannot reach the Kubernetes API at {host}: {exc.__class__.__name__}: {exc}", EXIT_FAILURE)
    print_status(obj, Console(), with_report=not args.no_report, s3_endpoint=args.s3_endpoint)
    return 0
