"""The batched client's retry and error rules, against a loopback HTTP stand-in for one function's test.

(The real server is exercised in tests/vllm/; here each failure mode is produced on demand.)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cudanalyst.runner.llm.client import ClientSettings, GenerationRequest, generate, generate_chained
from cudanalyst.runner.llm.serving import Endpoint, free_port

FAST = ClientSettings(concurrency=4, retries=3, backoff_s=0.01, backoff_max_s=0.05, timeout_s=5)


class Script:
    """What the stand-in answers: a list of (status, body or None for a good completion, delay)."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, str | None, float]] = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()


def completion(req: dict) -> dict:
    n = req.get("n", 1)
    return {"id": "c", "object": "text_completion", "created": 0, "model": req["model"],
            "choices": [{"index": i, "text": f"sample {i}", "finish_reason": "length", "token_ids": [1] * (i + 1)}
                        for i in reversed(range(n))],  # out of order on purpose
            "usage": {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}}


@pytest.fixture
def standin() -> Iterator[tuple[Endpoint, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with script.lock:
                script.requests.append(body)
                status, text, delay = script.answers.pop(0) if script.answers else (200, None, 0.0)
            prompt = str(body.get("prompt", ""))
            if prompt.startswith("sleep:"):  # a request that says how slow its answer is
                delay = max(delay, float(prompt.removeprefix("sleep:")))
            time.sleep(delay)
            payload = json.dumps(completion(body) if text is None else {"error": {"message": text}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Endpoint(f"http://127.0.0.1:{server.server_port}/v1", "m", "completion"), script
    finally:
        server.shutdown()
        server.server_close()


def req(key: str, n: int = 1) -> GenerationRequest:
    return GenerationRequest(key, "prompt text", n=n, seed=11, max_tokens=8)


def test_samples_come_back_in_index_order_with_token_counts_and_seed(standin) -> None:
    endpoint, script = standin
    seen: list[str] = []
    [res] = generate(endpoint, [req("a", n=3)], FAST, on_result=lambda r: seen.append(r.key))
    assert res.ok and res.texts == ["sample 0", "sample 1", "sample 2"]
    assert res.completion_tokens == [1, 2, 3] and res.prompt_tokens == 7 and res.seed == 11
    assert seen == ["a"]
    sent = script.requests[0]
    assert sent["n"] == 3 and sent["seed"] == 11 and sent["return_token_ids"] is True


def test_5xx_is_retried_then_succeeds(standin) -> None:
    endpoint, script = standin
    script.answers = [(503, "overloaded", 0.0), (500, "oops", 0.0)]
    [res] = generate(endpoint, [req("a")], FAST)
    assert res.ok and res.attempts == 3


def test_5xx_until_retries_run_out_is_a_server_error(standin) -> None:
    endpoint, script = standin
    script.answers = [(502, "bad gateway", 0.0)] * 10
    [res] = generate(endpoint, [req("a")], FAST)
    assert not res.ok and res.error_kind == "server-error" and res.attempts == 4 and "502" in (res.error or "")


def test_context_overflow_is_final_and_named(standin) -> None:
    endpoint, script = standin
    script.answers = [(400, "This model's maximum context length is 2048 tokens. However, ...", 0.0)]
    [res, other] = generate(endpoint, [req("a"), req("b")], ClientSettings(concurrency=1, retries=3))
    assert res.error_kind == "prompt-too-long" and res.attempts == 1
    assert "maximum context length is 2048" in (res.error or "")
    assert other.ok  # one bad prompt never costs the others


def test_other_4xx_is_rejected_without_retry(standin) -> None:
    endpoint, script = standin
    script.answers = [(404, "The model `m` does not exist.", 0.0)]
    [res] = generate(endpoint, [req("a")], FAST)
    assert res.error_kind == "rejected" and res.attempts == 1 and "does not exist" in (res.error or "")


def test_timeouts_are_retried_and_then_reported(standin) -> None:
    endpoint, script = standin
    script.answers = [(200, None, 1.5)] * 3
    [res] = generate(endpoint, [req("a")], ClientSettings(retries=2, backoff_s=0.01, timeout_s=0.5))
    assert res.error_kind == "timeout" and res.attempts == 3


def test_refused_connections_stop_the_batch_after_one_retry_cycle() -> None:
    endpoint = Endpoint(f"http://127.0.0.1:{free_port()}/v1", "m", "chat")
    msgs = [{"role": "user", "content": "x"}]
    requests = [GenerationRequest(str(i), msgs, 1, i, 8) for i in range(20)]
    results = generate(endpoint, requests, ClientSettings(concurrency=1, retries=3, backoff_s=0.01))
    assert all(r.error_kind == "unreachable" for r in results)
    assert results[0].attempts == 4
    assert sum(r.attempts for r in results[1:]) == 0  # failed fast on the breaker


def test_a_follow_up_leaves_as_soon_as_its_first_request_is_answered(standin) -> None:
    endpoint, script = standin
    started = time.monotonic()
    seen: list[tuple[str, float]] = []

    def follow_up(res):  # a plan, then the coder request that shows it; no follow-up for "none"
        assert res.ok
        return None if res.key == "none" else GenerationRequest(f"{res.key}-code", "sleep:0", n=2, seed=3, max_tokens=8)

    first = [GenerationRequest(k, p, n=1, seed=1, max_tokens=8) for k, p in (("fast", "sleep:0"), ("slow", "sleep:1.5"), ("none", "x"))]
    generate_chained(endpoint, first, follow_up, [GenerationRequest("direct", "sleep:0", n=1, seed=2, max_tokens=8)], FAST,
                     on_result=lambda r: seen.append((r.key, time.monotonic() - started)))
    keys = [k for k, _ in seen]
    assert sorted(keys) == ["direct", "fast-code", "slow-code"]  # follow-ups and direct ones, each once
    when = dict(seen)
    assert when["fast-code"] < 1.0 <= 1.5 <= when["slow-code"]  # fast's follow-up did not wait for slow
    assert len(script.requests) == 6 and {r["n"] for r in script.requests if r["prompt"] == "sleep:0"} >= {2}


def test_warm_up_sends_a_short_sampled_burst_with_the_run_settings(standin) -> None:
    from cudanalyst.runner.llm.client import warm_up

    endpoint, script = standin
    seconds = warm_up(endpoint, temperature=0.7, top_p=0.9, requests=5, samples=3)
    assert seconds >= 0 and len(script.requests) == 5
    assert all(r["n"] == 3 and r["top_p"] == 0.9 and r["temperature"] == 0.7 and r["max_tokens"] == 8
               for r in script.requests)
    assert sorted(r["seed"] for r in script.requests) == [0, 1, 2, 3, 4]


def test_a_failed_warm_up_is_logged_not_raised(standin, caplog) -> None:
    from cudanalyst.runner.llm.client import warm_up

    endpoint, script = standin
    script.answers = [(400, '{"error": {"message": "bad"}}', 0.0)] * 4
    with caplog.at_level("WARNING", logger="cudanalyst.runner.llm"):
        warm_up(endpoint, temperature=0.8, top_p=0.95, requests=2)
    assert "warm-up" in caplog.text and "2 of 2 requests failed" in caplog.text


def test_a_server_of_ours_hears_priorities_and_takes_every_request_at_once(standin) -> None:
    """Issue 32: plans before coder requests in the server's queue; no client bound below the server's own."""
    from dataclasses import replace

    from cudanalyst.runner.llm.timeline import InFlight

    endpoint, script = standin
    counter = InFlight()
    peak: list[int] = []
    original = counter.move

    def move(role: str, old: str | None, new: str | None) -> None:
        original(role, old, new)
        peak.append(sum(v for (state, _), v in counter.now.items() if state == "sent"))

    counter.move = move  # type: ignore[method-assign]
    ours = replace(FAST, concurrency=1, ours_concurrency=8, inflight=counter)
    requests = [GenerationRequest(f"p{i}", "sleep:0.3", 1, i, 8, role="planner") for i in range(4)]
    requests += [GenerationRequest(f"c{i}", "sleep:0.3", 2, i, 8, role="coder") for i in range(4)]
    assert all(r.ok for r in generate(endpoint, requests, ours))
    assert sorted((r["n"], r["priority"]) for r in script.requests) == [(1, 0)] * 4 + [(2, 1)] * 4
    assert max(peak) > 1  # concurrency=1 bounds hosted endpoints only: the eight overlapped
    assert all(v == 0 for v in counter.now.values())  # every request counted out again
    script.requests.clear()
    hosted = replace(endpoint, hosted=True)
    assert all(r.ok for r in generate(hosted, requests[:2], ours))
    assert all("priority" not in r for r in script.requests)  # a hosted API gets OpenAI's fields only


def test_a_server_that_refuses_priorities_is_asked_without_them(standin) -> None:
    endpoint, script = standin
    script.answers = [(400, "Got priority 1 but Priority scheduling is not enabled.", 0.0)]
    [res] = generate(endpoint, [GenerationRequest("c", "x", 1, 1, 8, role="coder")], FAST)
    assert res.ok and len(script.requests) == 2  # asked again at once, not counted as a retry
    assert "priority" in script.requests[0] and "priority" not in script.requests[1]
