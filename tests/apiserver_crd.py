"""A real etcd + kube-apiserver with the generated AttributionRun CRD established: for tests that read and
write AttributionRuns but need no controllers or nodes. Skips, naming the build script, without binaries."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "cluster"))

from cp_cluster import bin_dir, start_apiserver, start_etcd, wait_for  # noqa: E402

from cudanalyst.api import API_GROUP, API_VERSION, PLURAL  # noqa: E402
from cudanalyst.crd import build_crd  # noqa: E402

NEEDED = ("etcd", "kube-apiserver")


@contextlib.contextmanager
def apiserver_with_crd(work: Path, namespace: str = "default") -> Iterator[Path]:
    """Yield the admin kubeconfig once the CRD is established and served in `namespace`."""
    bins = bin_dir()
    missing = [b for b in NEEDED if not os.access(bins / b, os.X_OK)]
    if missing:
        pytest.skip(f"control-plane binaries not built ({', '.join(missing)} missing in {bins}); "
                    "run scripts/build-control-plane.sh first")
    pytest.importorskip("kubernetes", reason="the kubernetes client is needed: pip install -e '.[operator]'")
    from kubernetes import client, config

    etcd = start_etcd(bins, work)
    try:
        api = start_apiserver(bins, work, etcd)
        try:
            with config.new_client_from_config(config_file=str(api.admin_kubeconfig)) as c:
                ext = client.ApiextensionsV1Api(c)
                ext.create_custom_resource_definition(build_crd())
                wait_for(lambda: any(x.type == "Established" and x.status == "True" for x in
                                     ext.read_custom_resource_definition(f"{PLURAL}.{API_GROUP}").status.conditions
                                     or []), 60, "the AttributionRun CRD to be established")
                co = client.CustomObjectsApi(c)
                # The CRD is served a moment after Established; wait until a list works.
                wait_for(lambda: co.list_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL)
                         is not None, 30, "the AttributionRun resource to be served")
            yield api.admin_kubeconfig
        finally:
            api.component.stop()
    finally:
        etcd.component.stop()
