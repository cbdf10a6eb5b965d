"""The shard's model servers: at most one local vLLM server at a time, reused between phases.

Phases that want the same model spec share one server; a different spec stops the running server
before the next starts (one model on the GPU at a time). A spec that failed to serve fails at once
when asked for again, instead of costing another health deadline. `serve: endpoint` models need no
server. Base models without a chat template are spoken to through the completion API.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cudanalyst.api import ModelSpec
from cudanalyst.runner.llm.client import ClientSettings
from cudanalyst.runner.llm.credentials import key_of
from cudanalyst.runner.llm.serving import (
    DEFAULT_HEALTH_TIMEOUT_S,
    Endpoint,
    LocalServer,
    ServingError,
    remote_endpoint,
    shard_share,
)
from cudanalyst.runner.llm.serving import start_local_server as _start_local_server
from cudanalyst.runner.weights import WeightsError, resolve_model_path
from cudanalyst.store import S3Settings

log = logging.getLogger("cudanalyst.runner.llm")


@dataclass(frozen=True)
class StageSettings:
    health_timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S
    client: ClientSettings = field(default_factory=ClientSettings)
    server_env: dict[str, str] = field(default_factory=dict)
    log_dir: str | None = None
    weights_cache: Path | None = None
    s3: S3Settings | None = None
    # {variable: key} of the endpoint models (credentials.read_keys), never written anywhere.
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    shard: int = 0  # which shard, of how many: each takes its share of a model's maxConcurrency
    shards: int = 1
    served_here: frozenset[str] = frozenset()  # endpoints `cudanalyst run` serves (serving.SERVED_HERE_ANNOTATION)


def has_chat_template(model_path: str) -> bool:
    """Whether a local model folder ships a chat template (else it is a base model: completion API)."""
    folder = Path(model_path)
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return bool(config.get("chat_template"))


class ModelServers:
    """At most one local vLLM server at a time, reused while consecutive phases want the same model."""

    def __init__(self, settings: StageSettings, seed: int,
                 start: Callable[..., Any] = _start_local_server,
                 warm_up: Callable[[Endpoint], Any] | None = None) -> None:
        self.settings = settings
        self.seed = seed
        self._start = start
        self._warm_up = warm_up  # called once per server started, after it is healthy
        self._key: str | None = None
        self._ctx: Any = None
        self._server: LocalServer | None = None
        self.served_seconds = 0.0  # GPU-seconds: wall time served x tensor-parallel size
        self._since = 0.0
        self._gpus = 1
        self._failed: dict[str, str] = {}

    def endpoint(self, spec: ModelSpec) -> Endpoint:
        share = shard_share(spec.max_concurrency, self.settings.shard, self.settings.shards)
        if spec.serve == "endpoint":
            return remote_endpoint(spec, key_of(spec, self.settings.api_keys), share, self.settings.served_here)
        return replace(self._local(spec), max_concurrency=share)

    def _local(self, spec: ModelSpec) -> Endpoint:
        key = spec.model_dump_json()
        if self._server is not None and key == self._key:
            return self._server.endpoint
        if key in self._failed:  # a later phase on the same model: fail at once, not after another deadline
            raise ServingError(self._failed[key])
        self.stop()
        try:
            return self._start_server(spec, key)
        except ServingError as exc:
            self._failed[key] = str(exc)
            raise

    def _start_server(self, spec: ModelSpec, key: str) -> Endpoint:
        assert spec.model is not None
        try:
            path = resolve_model_path(spec.model, self.settings.s3, self.settings.weights_cache)
        except WeightsError as exc:
            raise ServingError(str(exc)) from None
        name = Path(spec.model.rstrip("/")).name or "model"
        if spec.api == "chat" and not has_chat_template(path):
            # A base model: vLLM would refuse every chat request, so speak completion to it.
            log.warning("%s has no chat template: using the completion API", spec.model)
            spec = spec.model_copy(update={"api": "completion"})
        ctx = self._start(path, spec, served_name=name, seed=self.seed,
                          health_timeout_s=self.settings.health_timeout_s,
                          env=self.settings.server_env, log_dir=self.settings.log_dir,
                          s3=self.settings.s3,  # the run's S3 settings reach an s3:// compile-cache store too
                          warm_up=self._warm_up)  # before the compile cache is kept: it compiles kernels there
        self._server = ctx.__enter__()  # raises ServingError (the server already stopped) when not healthy
        self._ctx = ctx
        self._key = key
        self._since = time.monotonic()
        self._gpus = spec.tensor_parallel_size
        assert self._server is not None
        return self._server.endpoint

    def stop(self) -> None:
        if self._ctx is not None:
            self.served_seconds += (time.monotonic() - self._since) * self._gpus
            ctx, self._ctx, self._server, self._key = self._ctx, None, None, None
            ctx.__exit__(None, None, None)


@contextmanager
def stopping(servers: ModelServers) -> Iterator[ModelServers]:
    try:
        yield servers
    finally:
        servers.stop()


