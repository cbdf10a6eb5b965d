"""A fault-injecting HTTP proxy in front of an S3 endpoint (moto's server), for the chaos bench (issue 33).

Every request is forwarded as is (the signature covers the host header, which the proxy keeps), and its answer
returned as is, unless a fault is on:

- `down(seconds)`: the listening socket is closed; connections are refused, as for an unreachable store;
- `errors(seconds, status)`: every request is answered 500 InternalError or 503 SlowDown (S3's throttling) without
  reaching the store.

It counts the successful PUTs of each key, so a bench can tell a unit written twice from one written once.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ERROR_BODIES = {
    500: ("InternalError", "We encountered an internal error. Please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
}


class FaultProxy:
    def __init__(self, upstream: str, port: int = 0) -> None:
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.error_status = 0
        self.error_until = 0.0
        self.puts: Counter[str] = Counter()
        self.requests = 0
        self.is_down = False
        self.faulted = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = port
        self._serve()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                return

            def _any(self) -> None:
                if proxy.is_down:  # a kept-alive connection from before the outage: drop it, unanswered
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy._lock:
                    proxy.requests += 1
                    status = proxy.error_status if time.monotonic() < proxy.error_until else 0
                    if status:
                        proxy.faulted += 1
                if status:
                    code, message = ERROR_BODIES[status]
                    text = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                            f"<Message>{message}</Message></Error>").encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                    return
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                if self.command == "PUT" and 200 <= resp.status < 300:
                    with proxy._lock:
                        proxy.puts[urlsplit(self.path).path] += 1
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler, bind_and_activate=False)
        server.allow_reuse_address = True
        server.daemon_threads = True
        server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.server_bind()
        server.server_activate()
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()

    def _close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def down(self, seconds: float) -> None:
        """Unreachable for `seconds` (blocks that long): connections are refused, then it listens again."""
        self.is_down = True
        self._close()
        time.sleep(seconds)
        for _ in range(50):  # the port may linger a moment
            try:
                self._serve()
                self.is_down = False
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the S3 proxy could not listen on port {self.port} again")

    def errors(self, seconds: float, status: int = 500) -> None:
        """Every request answered `status` (500 InternalError, 503 SlowDown) for `seconds`, from now."""
        with self._lock:
            self.error_status = status
            self.error_until = time.monotonic() + seconds

    def stop(self) -> None:
        self._close()
