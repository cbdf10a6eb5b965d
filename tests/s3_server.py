"""Pytest plugin: a real S3 endpoint on loopback (moto's server mode), reached through boto3.

Registered in tests/conftest.py with ``pytest_plugins = ["s3_server"]``. Fixtures:

- ``s3_endpoint`` (session): one ``moto.server`` process on a free 127.0.0.1 port, as an
  :class:`S3Endpoint` (url, region, access key, secret key; ``.client()`` gives a boto3 client).
- ``s3_bucket``: a fresh, empty bucket per test; yields its name.
- ``s3_settings``: :class:`cudanalyst.store.S3Settings` pointing at the endpoint (no retries,
  short timeouts, so failures show at once).
- ``s3_store``: ``open_store("s3://<fresh bucket>/", s3_settings)``.

The server runs in its own process (not a thread of the test process) so it behaves like a
remote endpoint: tests go over HTTP, and moto's process-wide settings (authentication) cannot
leak into the tests' process. ``start_moto_server()`` is public for tests that need a server of
their own, e.g. one that enforces credentials.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

REGION = "us-east-1"


@dataclass
class S3Endpoint:
    url: str
    region: str = REGION
    access_key_id: str = "testing"
    secret_access_key: str = "testing"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log: Any = field(default=None, repr=False)
    _client: Any = field(default=None, repr=False)

    def client(self, access_key_id: str | None = None, secret_access_key: str | None = None) -> Any:
        """A boto3 S3 client for this endpoint (the default one is built once and reused)."""
        if access_key_id is None and secret_access_key is None:
            if self._client is None:
                self._client = self._new_client(self.access_key_id, self.secret_access_key)
            return self._client
        return self._new_client(access_key_id or self.access_key_id, secret_access_key or self.secret_access_key)

    def _new_client(self, access_key_id: str, secret_access_key: str) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.url,
            region_name=self.region,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def post(self, path: str, body: bytes = b"") -> bytes:
        """POST to moto's control API (e.g. /moto-api/reset-auth)."""
        req = urllib.request.Request(self.url + path, data=body, method="POST",
                                     headers={"Content-Type": "text/plain"})  # form bodies are parsed away
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.read()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.log is not None:
            self.log.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto_server(env: dict[str, str] | None = None, attempts: int = 3) -> S3Endpoint:
    """Start ``python -m moto.server`` on a free loopback port and wait until it answers."""
    last_error = ""
    for _ in range(attempts):  # a port taken between free_port() and bind: try another
        port = free_port()
        proc_env = {**os.environ, **(env or {})}
        # The server logs every request: a file, never an unread pipe, which would fill and
        # block the server mid-test.
        log = tempfile.TemporaryFile()  # noqa: SIM115 -- lives as long as the server; closed in stop()
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=proc_env,
        )
        endpoint = S3Endpoint(url=f"http://127.0.0.1:{port}", process=proc, log=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                last_error = log.read().decode(errors="replace")[-2000:]
                break
            try:
                with urllib.request.urlopen(endpoint.url + "/moto-api/data.json", timeout=1):
                    return endpoint
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        else:
            last_error = "did not answer within 30 s"
        endpoint.stop()
    raise RuntimeError(f"could not start moto's S3 server: {last_error}")


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    endpoint = start_moto_server()
    try:
        yield endpoint
    finally:
        endpoint.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: S3Endpoint) -> str:
    name = f"test-{uuid.uuid4().hex[:16]}"
    s3_endpoint.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_settings(s3_endpoint: S3Endpoint) -> Any:
    from cudanalyst.store import S3Settings

    return S3Settings(
        endpoint=s3_endpoint.url,
        region=s3_endpoint.region,
        access_key_id=s3_endpoint.access_key_id,
        secret_access_key=s3_endpoint.secret_access_key,
        max_attempts=1,
        connect_timeout=2,
        read_timeout=30,
    )


@pytest.fixture
def s3_store(s3_bucket: str, s3_settings: Any) -> Any:
    from cudanalyst.store import open_store

    return open_store(f"s3://{s3_bucket}/", s3_settings)
