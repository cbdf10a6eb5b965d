"""Batched generation through the OpenAI-compatible API (vLLM's server, local or remote).

All requests of a stage are put in flight at once, bounded by a semaphore, so vLLM's scheduler sees
the whole batch and its prefix cache serves the shared prompt heads. Connection errors, timeouts,
429 and 5xx are retried with exponential backoff; other 4xx are final (a prompt longer than the
context will not get shorter). A request that fails carries its reason instead of raising, so one
bad prompt never costs the rest of the shard. After an endpoint has refused connections through a
whole retry cycle the remaining requests fail fast with the same reason instead of each waiting out
its own retries.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import openai
from openai import AsyncOpenAI

from cudanalyst.runner.llm.serving import Endpoint

log = logging.getLogger("cudanalyst.runner.llm")

ErrorKind = Literal["prompt-too-long", "unreachable", "server-error", "timeout", "rejected"]
_CONTEXT_HINTS = ("maximum context length", "context length", "longer than the maximum", "too long",
                  "max_model_len", "maximum model length", "exceeds")


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt with n samples. `prompt` is a list of chat messages (api chat) or a string (completion)."""

    key: str
    prompt: list[dict[str, str]] | str
    n: int
    seed: int
    max_tokens: int
    temperature: float = 0.8
    top_p: float = 0.95
    stop: list[str] | None = None


@dataclass
class GenerationResult:
    """The n completions of a request, or the error that ended it."""

    key: str
    texts: list[str] = field(default_factory=list)
    finish_reasons: list[str | None] = field(default_factory=list)
    completion_tokens: list[int | None] = field(default_factory=list)
    prompt_tokens: int | None = None
    model: str = ""
    seed: int = 0
    attempts: int = 0
    latency_s: float = 0.0
    error: str | None = None
    error_kind: ErrorKind | None = None

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


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, openai.APIConnectionError | openai.APITimeoutError | openai.RateLimitError):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


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
    return rng.uniform(0, min(settings.backoff_max_s, settings.backoff_s * 2**attempt))


class _Breaker:
    """Remembers that the endpoint refused connections after a full retry cycle."""

    def __init__(self) -> None:
        self.reason: str | None = None


OnResult = Callable[[GenerationResult], None]
# Given a finished request, the request that follows from it (or None): runs in a worker thread.
FollowUp = Callable[[GenerationResult], "GenerationRequest | None"]


async def _one(
    client: AsyncOpenAI, endpoint: Endpoint, req: GenerationRequest, settings: ClientSettings,
    sem: asyncio.Semaphore, breaker: _Breaker, rng: random.Random, on_result: OnResult | None,
) -> GenerationResult:
    result = GenerationResult(req.key, model=endpoint.model, seed=req.seed)
    extra: dict[str, Any] = {"seed": req.seed}
    if settings.vllm_token_ids:
        extra["return_token_ids"] = True
    async with sem:
        t0 = time.monotonic()
        for attempt in range(settings.retries + 1):
            if breaker.reason is not None:
                result.error_kind, result.error = "unreachable", breaker.reason
                break
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
                    if len(choices) == 1 and result.completion_tokens[0] is None:
                        result.completion_tokens = [resp.usage.completion_tokens]
                result.error = result.error_kind = None
                break
            except Exception as exc:  # noqa: BLE001 - every failure becomes the request's recorded reason
                result.error_kind, result.error = classify(exc)
                if not _retryable(exc) or attempt == settings.retries:
                    if result.error_kind == "unreachable":
                        breaker.reason = result.error
                    break
                await asyncio.sleep(_backoff(attempt, settings, rng))
        result.latency_s = time.monotonic() - t0
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
        self.sem = asyncio.Semaphore(self.settings.concurrency)
        self.breaker = _Breaker()
        self.rng = random.Random(0)
        self.client = AsyncOpenAI(
            base_url=endpoint.base_url, api_key="EMPTY", max_retries=0, timeout=self.settings.timeout_s,
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
