"""API keys of `serve: endpoint` models: read once from the runner's environment, checked, then forgotten.

The spec names only where a key is (`models.<role>.apiKey.env`, and on a cluster the Secret the operator
puts into that variable of the runner pod). The shard reads every key before anything else, removes the
variables from its own environment (so no child process: nvcc, the GPU workers, the feedback tools, a
local vLLM server, inherits them) and asks each endpoint whether it takes its key. A missing or refused
key stops the shard with exit 2 before any unit is spent, naming the model and the field. The key lives on
in `Endpoint.api_key` only, which is never printed (its repr hides it) nor written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

import httpx

from cudanalyst.api import AttributionRunSpec, ModelSpec

ROLES = ("planner", "coder", "summarizer")
PROBE_TIMEOUT_S = 30.0


class CredentialError(ValueError):
    """A key is missing or refused: the run cannot start (exit 2). The message names the model and the field."""


def models_by_field(spec: AttributionRunSpec) -> list[tuple[str, ModelSpec]]:
    """(field path, model) of each role's model, named where the user wrote it (a coder that defaults to the
    planner is the planner's field); a model used by several roles once."""
    out: list[tuple[str, ModelSpec]] = []
    for role in ROLES:
        given = getattr(spec.models, role)
        field, model = (f"spec.models.{role}", given) if given is not None else ("spec.models.planner",
                                                                                spec.models.planner)
        if all(f != field for f, _ in out):
            out.append((field, model))
    return out


def _name(model: ModelSpec) -> str:
    return f"model {model.model or '(the endpoint default)'} at {model.endpoint}"


def read_keys(spec: AttributionRunSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{variable: key} for every model with an apiKey; CredentialError for the first one missing."""
    env = os.environ if environ is None else environ
    keys: dict[str, str] = {}
    for field, model in models_by_field(spec):
        ref = model.api_key
        if ref is None or model.serve != "endpoint":
            continue
        value = env.get(ref.env, "").strip()
        if not value:
            where = (f"on a cluster the operator fills it from key {ref.secret_key!r} of Secret {ref.secret_name!r} "
                     "in the run's namespace: check that the Secret has that key") if ref.secret_name else (
                     f"set it in the environment of `cudanalyst run` or the runner; on a cluster give "
                     f"{field}.apiKey.secretName")
            raise CredentialError(f"{field}.apiKey: {_name(model)} needs an API key, but the environment variable "
                                  f"{ref.env} is not set ({where})")
        keys[ref.env] = value
    return keys


def key_names(spec: AttributionRunSpec) -> list[str]:
    """The environment variables that hold the spec's keys."""
    return sorted({m.api_key.env for _, m in models_by_field(spec) if m.api_key is not None})


def forget_keys(spec: AttributionRunSpec, environ: MutableMapping[str, str] | None = None) -> None:
    """Remove the key variables from this process's environment, so that no child inherits them."""
    env = os.environ if environ is None else environ
    for name in key_names(spec):
        env.pop(name, None)


def redact(text: str, *keys: str) -> str:
    """`text` with every key in it replaced: a server's error message may quote what it was sent."""
    for key in keys:
        if key:
            text = text.replace(key, "***")
    return text


def key_of(model: ModelSpec, keys: Mapping[str, str]) -> str:
    return keys.get(model.api_key.env, "") if model.api_key is not None else ""


def base_url(model: ModelSpec) -> str:
    assert model.endpoint is not None
    base = model.endpoint.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def check_keys(spec: AttributionRunSpec, keys: Mapping[str, str], timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Ask every endpoint model's server for its model list with the model's key (or none): a 401 or 403 is
    a refused key, raised as CredentialError. Anything else (unreachable, no /models route) is left to the
    requests, which retry and report it as they always do."""
    seen: set[tuple[str, str]] = set()
    for field, model in models_by_field(spec):
        if model.serve != "endpoint":
            continue
        key = key_of(model, keys)
        ident = (base_url(model), key)
        if ident in seen:
            continue
        seen.add(ident)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            resp = httpx.get(f"{ident[0]}/models", headers=headers, timeout=timeout_s)
        except httpx.HTTPError:
            continue
        if resp.status_code in (401, 403):
            said = redact(resp.text.strip().replace("\n", " ")[:300], key)
            if model.api_key is None:
                raise CredentialError(f"{field}.apiKey: {_name(model)} refused a request without a key "
                                      f"({resp.status_code}: {said}); give {field}.apiKey")
            raise CredentialError(f"{field}.apiKey: {_name(model)} refused the key in {model.api_key.env} "
                                  f"({resp.status_code}: {said})")
