"""A loopback stand-in for a hosted OpenAI-compatible API: a key, rate limits and outages on demand.

It answers chat completions (and /v1/models) the way a gateway in front of a hosted model does: 401 to a
wrong or missing key; 429 with `Retry-After` for the first `rate_limited` requests; 500 for the next
`server_errors`; then real answers with `usage` fields (503 to everything once `outage_after` answers are given,
until the test lifts it). The answer to a coder prompt is the program the
prompt shows (its first ```cuda block), so the kernel stage has something that compiles.

It counts what a test must check: successful answers per request (a request answered twice would be a
unit paid twice), tokens it reported, requests that came back before the `Retry-After` it gave them, and
the most requests it had in flight at once.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FENCE = re.compile(r"```cuda\n(.*?)```", re.S)
COMPLETION_TOKENS_PER_CHOICE = 17


@dataclass
class HostedApi:
    key: str = ""
    model: str = "hosted-coder"
    rate_limited: int = 0
    retry_after_s: int = 1
    server_errors: int = 0
    answer_delay_s: float = 0.05  # so that concurrent requests overlap and the in-flight count means something
    outage_after: int | None = None  # after this many successful answers, 503 to everything (a long outage)
    strict: bool = False  # refuse arguments OpenAI's API does not have (vLLM's return_token_ids), as hosted APIs do
    lock: threading.Lock = field(default_factory=threading.Lock)
    answered: Counter[str] = field(default_factory=Counter)  # request identity -> successful answers
    statuses: Counter[int] = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    early: int = 0  # retries that came before the Retry-After given to that request had passed
    in_flight: int = 0
    max_in_flight: int = 0
    authorizations: set[str] = field(default_factory=set)
    _told: dict[str, float] = field(default_factory=dict)
    base_url: str = ""

    def identity(self, body: dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps([body.get("messages"), body.get("seed")], sort_keys=True).encode()).hexdigest()

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(body.get("messages"))
        messages = body.get("messages") or []
        shown = FENCE.search(str(messages[-1].get("content", ""))) if messages else None
        content = f"```cuda\n{shown.group(1)}```" if shown else "1. Keep the kernel as it is."
        n = int(body.get("n") or 1)
        usage = {"prompt_tokens": len(text) // 4, "completion_tokens": n * COMPLETION_TOKENS_PER_CHOICE}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return {"id": "hosted", "object": "chat.completion", "created": 0, "model": self.model, "usage": usage,
                "choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                            for i in range(n)]}

    def handle(self, path: str, auth: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            self.authorizations.add(auth)
        if self.key and auth != f"Bearer {self.key}":
            return 401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}, {}
        if path.rstrip("/") == "/v1/models":
            return 200, {"object": "list", "data": [{"id": self.model, "object": "model"}]}, {}
        assert body is not None
        if self.strict and "return_token_ids" in body:
            return 400, {"error": {"message": "Unrecognized request argument supplied: return_token_ids",
                                   "type": "invalid_request_error"}}, {}
        ident = self.identity(body)
        with self.lock:
            now = time.monotonic()
            if now < self._told.get(ident, 0.0):
                self.early += 1
            if self.rate_limited > 0:
                self.rate_limited -= 1
                self._told[ident] = now + self.retry_after_s
                return 429, {"error": {"message": "Rate limit reached, retry later", "type": "requests"}}, {
                    "Retry-After": str(self.retry_after_s)}
            if self.server_errors > 0:
                self.server_errors -= 1
                return 500, {"error": {"message": "The server had an error while processing your request"}}, {}
            if self.outage_after is not None and sum(self.answered.values()) >= self.outage_after:
                return 503, {"error": {"message": "The service is temporarily unavailable"}}, {}
        reply = self.reply(body)
        with self.lock:
            self.answered[ident] += 1
            self.prompt_tokens += reply["usage"]["prompt_tokens"]
            self.completion_tokens += reply["usage"]["completion_tokens"]
        return 200, reply, {}


@contextmanager
def serving(api: HostedApi) -> Iterator[HostedApi]:
    """The API on a free loopback port for the duration of the block (`api.base_url` ends in /v1)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, body: dict[str, Any] | None) -> None:
            with api.lock:
                api.in_flight += 1
                api.max_in_flight = max(api.max_in_flight, api.in_flight)
            try:
                time.sleep(api.answer_delay_s)
                status, payload, headers = api.handle(self.path, self.headers.get("Authorization", ""), body)
            finally:
                with api.lock:
                    api.in_flight -= 1
            with api.lock:
                api.statuses[status] += 1
            data = json.dumps(payload).encode()
            self.send_response(status)
            for k, v in {"Content-Type": "application/json", "Content-Length": str(len(data)), **headers}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer(None)

        def do_POST(self) -> None:
            self._answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    api.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
