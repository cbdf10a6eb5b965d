"""Batched generation through the OpenAI-compatible API (vLLM's server, local or remote).

All requests of a stage are put in flight at once, bounded by a semaphore, so vLLM's scheduler sees
the whole batch and its prefix cache serves the shared prompt heads. Connection errors, timeouts,
429 and 5xx are retried with exponential backoff; other 4xx are final (a prompt longer than the
context will not get shorter). A request that fails carries its reason instead of raising, so one
bad prompt never costs the rest of the shard. After an endpoint has refused connections through a
whole retry cycle the remaining requests fail fast with the same reason instead of each waiting out
its own retries.

A hosted endpoint (`serve: endpoint`) has limits of its own: a 429 or 5xx waits at least what its
`Retry-After` asks, and such answers are waited out, however many, until the endpoint has given nothing
but them for `outage_s`; then every request of the batch ends `unavailable` (units stay pending, a rerun
resumes them). While it waits, `on_stall` hears the reason (and None once a request gets through). A key
the endpoint refuses (401, 403) ends the batch at once (`refused`). Requests in flight are bounded by the
endpoint's share of its spec's maxConcurrency as well as by `concurrency`.

A server of ours (started by the runner or by `cudanalyst run`, not `hosted`) gets every request at once, up to
`ours_concurrency` when that is set: its scheduler queues what it cannot run, so the GPU never waits on our bound
(issue 32). Its requests carry `priority` (planner 0 before coder 1; serving.py starts it with vLLM's priority
scheduling), so a plan that unblocks a coder request never waits in the server's queue behind coder requests.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import openai
from openai import AsyncOpenAI

from cudanalyst.runner.llm.credentials import redact
from cudanalyst.runner.llm.serving import Endpoint, cpu_build

log = logging.getLogger("cudanalyst.runner.llm")

ErrorKind = Literal["prompt-too-long", "unreachable", "server-error", "timeout", "rejected", "refused",
                    "unavailable"]
_CONTEXT_HINTS = ("maximum context length", "context length", "longer than the maximum", "too long",
                  "max_model_len", "maximum model length", "exceeds")


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt with n samples. `prompt` is a list of chat messages (api chat) or a string (completion)."""

    key: str
    prompt: list[dict[str, str]] | str
    n: int
    seed: int | None  # None: the request names no seed (vLLM then samples it with the batch)
    max_tokens: int
    temperature: float = 0.8
    top_p: float = 0.95
    stop: list[str] | None = None
    role: str = ""  # planner, coder or summarizer: whose tokens these are in the run's accounting


# vLLM's priority scheduling: lower values first. Plans unblock coder requests, summaries unblock plans.
ROLE_PRIORITY = {"summarizer": 0, "planner": 0, "coder": 1}


@dataclass
class GenerationResult:
    """The n completions of a request, or the error that ended it."""

    key: str
    texts: list[str] = field(default_factory=list)
    finish_reasons: list[str | None] = field(default_factory=list)
    completion_tokens: list[int | None] = field(default_factory=list)
    prompt_tokens: int | None = None
    # The server's own usage fields (all n choices), for the run's token accounting; None when it sent none.
    usage_prompt: int | None = None
    usage_completion: int | None = None
    model: str = ""
    seed: int | None = 0
    attempts: int = 0
    latency_s: float = 0.0
    error: str | None = None
    error_kind: ErrorKind | None = None
    role: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ClientSettings:
    concurrency: int = 64
    retries: int = 4
    backoff_s: float = 0.5
    backoff_max_s: float = 20.0
    timeout_s: float = 600.0
    # vLLM returns the generated token ids per choice when asked; other servers ignore or reject it.
    vllm_token_ids: bool = True
    # How long a hosted endpoint may answer nothing but 429/5xx before its requests give up (units stay pending).
    outage_s: float = 900.0
    on_stall: Callable[[str | None], None] | None = field(default=None, compare=False)
    # Hears every answered request (its usage fields), for the run's token accounting; must be quick.
    meter: Callable[[GenerationResult], None] | None = field(default=None, compare=False)
    # Requests in flight to a server of ours (not hosted): None keeps `concurrency` for every endpoint.
    ours_concurrency: int | None = None
    # Counts requests held back by the bound and at the server, per role (timeline.InFlight).
    inflight: Any = field(default=None, compare=False)


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, openai.APIConnectionError | openai.APITimeoutError | openai.RateLimitError):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


def _waitable(exc: Exception) -> bool:
    """An answer of an endpoint over its limits or briefly down: a hosted endpoint's outage is waited out."""
    return isinstance(exc, openai.RateLimitError) or (isinstance(exc, openai.APIStatusError) and exc.status_code >= 500)


def retry_after(exc: Exception, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait (Retry-After in seconds or as an HTTP date, or retry-after-ms)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def classify(exc: Exception) -> tuple[ErrorKind, str]:
    """Error kind and a one-line reason for a failed request."""
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", f"request timed out: {exc}"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return "unreachable", f"endpoint unreachable: {type(cause).__name__}: {cause}"
    if isinstance(exc, openai.APIStatusError):
        msg = _error_message(exc)
        if exc.status_code in (400, 413) and any(h in msg.lower() for h in _CONTEXT_HINTS):
            return "prompt-too-long", f"prompt longer than the model's context: {msg}"
        if exc.status_code >= 500:
            return "server-error", f"server error {exc.status_code}: {msg}"
        if exc.status_code in (401, 403):
            return "refused", f"the endpoint refused the request's key ({exc.status_code}): {msg}"
        if exc.status_code == 429:
            return "server-error", f"rate limited (429): {msg}"
        return "rejected", f"request rejected with {exc.status_code}: {msg}"
    return "server-error", f"{type(exc).__name__}: {exc}"


def _error_message(exc: openai.APIStatusError) -> str:
    body: Any = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:2000]
        if body.get("message"):
            return str(body["message"])[:2000]
    return str(exc)[:2000]


def _backoff(attempt: int, settings: ClientSettings, rng: random.Random) -> float:
    # Full jitter: many requests failing together must not retry together.
    return rng.uniform(0, min(settings.backoff_max_s, settings.backoff_s * 2 ** min(attempt, 30)))


class _Breaker:
    """Remembers that the endpoint refused connections after a full retry cycle, refused the key, or has been
    unavailable for longer than the outage allowance; and since when it has answered only 429/5xx."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.kind: ErrorKind = "unreachable"
        self.outage_since: float | None = None
        self.plain = False  # the server refused vLLM's return_token_ids: the batch sends OpenAI's fields only
        self.no_priority = False  # the server was started without priority scheduling: send no priority

    def trip(self, kind: ErrorKind, reason: str) -> None:
        if self.reason is None:
            self.kind, self.reason = kind, reason


OnResult = Callable[[GenerationResult], None]
# Given a finished request, the request that follows from it (or None): runs in a worker thread.
FollowUp = Callable[[GenerationResult], "GenerationRequest | None"]


async def _one(
    client: AsyncOpenAI, endpoint: Endpoint, req: GenerationRequest, settings: ClientSettings,
    sem: asyncio.Semaphore, breaker: _Breaker, rng: random.Random, on_result: OnResult | None,
) -> GenerationResult:
    result = GenerationResult(req.key, model=endpoint.model, seed=req.seed, role=req.role)
    extra: dict[str, Any] = {"seed": req.seed} if req.seed is not None else {}
    if settings.vllm_token_ids:
        extra["return_token_ids"] = True
    if not endpoint.hosted and req.role in ROLE_PRIORITY:
        extra["priority"] = ROLE_PRIORITY[req.role]
    counter = settings.inflight
    if counter is not None:
        counter.move(req.role, None, "queued")
    async with sem:
        if counter is not None:
            counter.move(req.role, "queued", "sent")
        t0 = time.monotonic()
        attempt = 0
        while True:
            if breaker.reason is not None:
                result.error_kind, result.error = breaker.kind, breaker.reason
                break
            if breaker.plain:
                extra.pop("return_token_ids", None)
            if breaker.no_priority:
                extra.pop("priority", None)
            result.attempts = attempt + 1
            try:
                if isinstance(req.prompt, str):
                    resp = await client.completions.create(
                        model=endpoint.model, prompt=req.prompt, n=req.n, max_tokens=req.max_tokens,
                        temperature=req.temperature, top_p=req.top_p, stop=req.stop, extra_body=extra,
                    )
                    choices = sorted(resp.choices, key=lambda c: c.index)
                    result.texts = [c.text for c in choices]
                else:
                    resp = await client.chat.completions.create(  # type: ignore[call-overload]
                        model=endpoint.model, messages=req.prompt, n=req.n, max_tokens=req.max_tokens,
                        temperature=req.temperature, top_p=req.top_p, stop=req.stop, extra_body=extra,
                    )
                    choices = sorted(resp.choices, key=lambda c: c.index)
                    result.texts = [c.message.content or "" for c in choices]
                result.finish_reasons = [c.finish_reason for c in choices]
                result.completion_tokens = [_token_count(c) for c in choices]
                if resp.usage is not None:
                    result.prompt_tokens = resp.usage.prompt_tokens
                    result.usage_prompt, result.usage_completion = resp.usage.prompt_tokens, resp.usage.completion_tokens
                    if len(choices) == 1 and result.completion_tokens[0] is None:
                        result.completion_tokens = [resp.usage.completion_tokens]
                result.error = result.error_kind = None
                if breaker.outage_since is not None:
                    breaker.outage_since = None
                    if settings.on_stall is not None:
                        settings.on_stall(None)
                break
            except Exception as exc:  # noqa: BLE001 - every failure becomes the request's recorded reason
                kind, reason = classify(exc)
                result.error_kind, result.error = kind, redact(reason, endpoint.api_key)
                if kind == "rejected" and "return_token_ids" in extra and "return_token_ids" in reason:
                    breaker.plain = True  # a hosted API that checks its arguments: ask again without it, at once
                    continue
                if kind == "rejected" and "priority" in extra and "priorit" in reason.lower():
                    breaker.no_priority = True  # a server of ours started without priority scheduling (extraArgs)
                    continue
                if kind == "refused":
                    breaker.trip(kind, f"{endpoint.model} at {endpoint.base_url}: {result.error}")
                    break
                now = time.monotonic()
                wait = _backoff(attempt, settings, rng)
                if endpoint.hosted and _waitable(exc):
                    since = breaker.outage_since = breaker.outage_since or now
                    if now - since >= settings.outage_s:
                        breaker.trip("unavailable", f"{endpoint.model} at {endpoint.base_url} answered only errors "
                                     f"for {now - since:.0f} s (the outage allowance); last: {result.error}")
                        continue  # ends this request with the breaker's reason
                    asked = retry_after(exc)
                    # At least what the server asked, plus jitter so that the waiting requests do not return at once.
                    wait = max(wait, asked + rng.uniform(0, min(1.0, asked / 4 + 0.1))) if asked is not None else wait
                    if settings.on_stall is not None:
                        settings.on_stall(f"{endpoint.model} at {endpoint.base_url}: {result.error}, for "
                                          f"{now - since:.0f} s; waiting {wait:.1f} s")
                elif not _retryable(exc) or attempt >= settings.retries:
                    if result.error_kind == "unreachable":
                        breaker.trip("unreachable", result.error)
                    break
                attempt += 1
                await asyncio.sleep(wait)
        result.latency_s = time.monotonic() - t0
    if counter is not None:
        counter.move(req.role, "sent", None)
    if settings.meter is not None and result.ok:
        settings.meter(result)
    if on_result is not None:
        # Records are written as each request finishes, so a killed shard keeps what it finished.
        await asyncio.to_thread(on_result, result)
    return result


def _token_count(choice: Any) -> int | None:
    ids = getattr(choice, "token_ids", None)
    if ids is None and getattr(choice, "model_extra", None):
        ids = choice.model_extra.get("token_ids")
    return len(ids) if isinstance(ids, list) else None


class _Batch:
    """What the requests of one call share: the HTTP client, the concurrency bound, the breaker."""

    def __init__(self, endpoint: Endpoint, settings: ClientSettings | None) -> None:
        self.endpoint = endpoint
        self.settings = settings or ClientSettings()
        own = self.settings.ours_concurrency if not endpoint.hosted else None
        limit = own or self.settings.concurrency
        bound = min(limit, endpoint.max_concurrency or limit)
        self.sem = asyncio.Semaphore(bound)
        self.breaker = _Breaker()
        self.rng = random.Random(0)
        # vLLM without --api-key takes any key; "EMPTY" is what its documentation sends.
        self.client = AsyncOpenAI(
            base_url=endpoint.base_url, api_key=endpoint.api_key or "EMPTY", max_retries=0,
            timeout=self.settings.timeout_s,
        )

    async def one(self, req: GenerationRequest, on_result: OnResult | None) -> GenerationResult:
        return await _one(self.client, self.endpoint, req, self.settings, self.sem, self.breaker, self.rng, on_result)


async def generate_async(
    endpoint: Endpoint, requests: Sequence[GenerationRequest], settings: ClientSettings | None = None,
    on_result: OnResult | None = None,
) -> list[GenerationResult]:
    """Results in the order of `requests`; never raises for a failed request."""
    batch = _Batch(endpoint, settings)
    try:
        return list(await asyncio.gather(*(batch.one(r, on_result) for r in requests)))
    finally:
        await batch.client.close()


def generate(
    endpoint: Endpoint, requests: Sequence[GenerationRequest], settings: ClientSettings | None = None,
    on_result: OnResult | None = None,
) -> list[GenerationResult]:
    """Synchronous front of `generate_async` for callers outside an event loop."""
    if not requests:
        return []
    return asyncio.run(generate_async(endpoint, requests, settings, on_result))


WARM_UP_PROMPT = "Write a CUDA kernel that adds two float vectors."


def warm_up(endpoint: Endpoint, temperature: float, top_p: float, requests: int = 16, samples: int = 3) -> float:
    """A short burst of sampled requests right after a server is healthy, with the run's sampling settings.

    vLLM compiles some kernels (top-p sampling, slot mapping) on their first use: seconds during which
    the first real batch stalls. Paid here, they are part of start-up. Returns the seconds it took;
    a failure is only logged (the real requests say what is wrong)."""
    prompt: list[dict[str, str]] | str = (
        [{"role": "user", "content": WARM_UP_PROMPT}] if endpoint.api == "chat" else WARM_UP_PROMPT)
    batch = [GenerationRequest(f"warm-up-{i}", prompt, samples, i, 8, temperature, top_p) for i in range(requests)]
    started = time.monotonic()
    results = generate(endpoint, batch, ClientSettings(concurrency=requests, retries=1, timeout_s=120.0))
    if failed := [r for r in results if not r.ok]:
        log.warning("warm-up of %s: %d of %d requests failed: %s", endpoint.model, len(failed), len(results),
                    failed[0].error)
    return time.monotonic() - started


def warming(temperature: float, top_p: float, short: str,
            say: Callable[[str], None] = lambda _: None) -> Callable[[Endpoint], float]:
    """The warm-up a server of `cudanalyst run` or `record` gets once healthy (start_local_server's `warm_up`),
    said on the console. On the CPU build a short burst will do: the burst exists to compile GPU kernels, and on
    two cores the full one costs half a minute of the quickstart's five."""
    def run(endpoint: Endpoint) -> float:
        say(f"warming up the model ({short})")
        burst = {"requests": 2, "samples": 2} if cpu_build() else {}
        return warm_up(endpoint, temperature, top_p, **burst)
    return run


async def generate_chained_async(
    endpoint: Endpoint, first: Sequence[GenerationRequest], follow_up: FollowUp,
    direct: Sequence[GenerationRequest] = (), settings: ClientSettings | None = None,
    on_result: OnResult | None = None,
) -> None:
    """Each request of `first`, then at once the request `follow_up` makes of its result (e.g. a plan,
    then the coder request that shows it), next to the `direct` requests that need no first step. Every
    request is in flight as soon as it can be, so no request waits for the slowest of another phase.
    `on_result` gets the results of the follow-up and direct requests (not of the first ones)."""
    batch = _Batch(endpoint, settings)

    async def chain(req: GenerationRequest) -> None:
        nxt = await asyncio.to_thread(follow_up, await batch.one(req, None))
        if nxt is not None:
            await batch.one(nxt, on_result)

    try:
        await asyncio.gather(*(chain(r) for r in first), *(batch.one(r, on_result) for r in direct))
    finally:
        await batch.client.close()


def generate_chained(
    endpoint: Endpoint, first: Sequence[GenerationRequest], follow_up: FollowUp,
    direct: Sequence[GenerationRequest] = (), settings: ClientSettings | None = None,
    on_result: OnResult | None = None,
) -> None:
    """Synchronous front of `generate_chained_async`."""
    if first or direct:
        asyncio.run(generate_chained_async(endpoint, first, follow_up, direct, settings, on_result))
