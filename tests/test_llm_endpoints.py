"""Endpoints behind a gateway (issue 34): the key, Retry-After, the outage allowance, the concurrency bound and
the usage fields, against the loopback stand-in of a hosted API (tests/hosted_api.py). vLLM started with
--api-key is in tests/vllm/test_endpoint_keys.py; a whole run through the stand-in in test_hosted_run.py."""

from __future__ import annotations

import pytest
from hosted_api import COMPLETION_TOKENS_PER_CHOICE, HostedApi, serving

from cudanalyst.api import AttributionRun, ModelSpec
from cudanalyst.runner.kernels.workers.worker import scrubbed_environment
from cudanalyst.runner.llm.client import ClientSettings, GenerationRequest, generate
from cudanalyst.runner.llm.credentials import CredentialError, check_keys, forget_keys, read_keys, redact
from cudanalyst.runner.llm.serving import Endpoint, remote_endpoint, shard_share

KEY = "sk-test-3f9a0c"
FAST = ClientSettings(concurrency=8, retries=2, backoff_s=0.01, backoff_max_s=0.05, timeout_s=10)


def requests(count: int, n: int = 2) -> list[GenerationRequest]:
    return [GenerationRequest(f"r{i}", [{"role": "user", "content": f"question {i}"}], n, i, 32, role="coder")
            for i in range(count)]


def hosted(api: HostedApi, key: str = KEY, bound: int | None = None) -> Endpoint:
    return Endpoint(api.base_url, api.model, "chat", key, bound, hosted=True)


def run_with(planner: dict, coder: dict | None = None) -> AttributionRun:
    models = {"planner": planner} | ({"coder": coder} if coder else {})
    return AttributionRun.model_validate({
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": "gw"},
        "spec": {"trajectory": {"uri": "builtin://example", "generations": [0]}, "players": ["debugger"],
                 "models": models, "output": {"uri": "/tmp/unused"}}})


def test_the_key_goes_as_a_bearer_token_and_usage_comes_back_per_request() -> None:
    with serving(HostedApi(key=KEY)) as api:
        results = generate(hosted(api), requests(3), FAST)
    assert all(r.ok for r in results), [r.error for r in results]
    assert api.authorizations == {f"Bearer {KEY}"}
    assert sum(r.usage_completion or 0 for r in results) == api.completion_tokens == 3 * 2 * COMPLETION_TOKENS_PER_CHOICE
    assert sum(r.usage_prompt or 0 for r in results) == api.prompt_tokens > 0
    assert {r.role for r in results} == {"coder"}
    assert "sk-" not in repr(hosted(api))  # an endpoint printed or logged hides its key


def test_429_waits_at_least_retry_after_and_500s_are_waited_out_on_a_hosted_endpoint() -> None:
    heard: list[str | None] = []
    settings = ClientSettings(concurrency=8, retries=1, backoff_s=0.01, backoff_max_s=0.05, timeout_s=10,
                              on_stall=heard.append)
    # More 500s than `retries` allows: a hosted endpoint's errors are waited out, not counted against a request.
    with serving(HostedApi(key=KEY, rate_limited=4, retry_after_s=1, server_errors=6)) as api:
        results = generate(hosted(api), requests(4), settings)
    assert all(r.ok for r in results), [r.error for r in results]
    assert api.statuses[429] == 4 and api.statuses[500] == 6
    assert api.early == 0  # no request came back before the Retry-After it was given
    assert sorted(api.answered.values()) == [1, 1, 1, 1]  # every request answered once
    assert any(h and "429" in h for h in heard) and None in heard  # the wait was reported, and its end


def test_an_outage_longer_than_the_allowance_ends_every_request_unavailable() -> None:
    settings = ClientSettings(concurrency=4, retries=1, backoff_s=0.01, backoff_max_s=0.05, timeout_s=10,
                              outage_s=0.5)
    with serving(HostedApi(key=KEY, server_errors=10_000)) as api:
        results = generate(hosted(api), requests(6), settings)
    assert {r.error_kind for r in results} == {"unavailable"}
    assert all("outage allowance" in (r.error or "") and "500" in (r.error or "") for r in results)
    assert not api.answered


def test_a_local_server_keeps_the_retry_count() -> None:
    # Not hosted (a server of ours): its 500s are not waited out, as before.
    with serving(HostedApi(server_errors=10_000)) as api:
        results = generate(Endpoint(api.base_url, api.model, "chat"), requests(1), FAST)
    assert results[0].error_kind == "server-error" and results[0].attempts == FAST.retries + 1


def test_a_refused_key_ends_the_batch_as_refused_without_the_key_in_the_reason() -> None:
    with serving(HostedApi(key=KEY)) as api:
        results = generate(hosted(api, key="sk-wrong-123"), requests(5), FAST)
    assert {r.error_kind for r in results} == {"refused"}
    assert all("401" in (r.error or "") and "sk-wrong-123" not in (r.error or "") for r in results)
    assert api.statuses[401] <= FAST.concurrency  # no retries: the batch stops at the first answers
    assert not api.answered


def test_the_concurrency_bound_holds_requests_in_flight() -> None:
    with serving(HostedApi(key=KEY, answer_delay_s=0.3)) as api:
        assert all(r.ok for r in generate(hosted(api, bound=2), requests(8), FAST))
    assert api.max_in_flight <= 2
    with serving(HostedApi(key=KEY, answer_delay_s=0.3)) as api:
        assert all(r.ok for r in generate(hosted(api), requests(8), FAST))
    assert api.max_in_flight > 2  # without the bound the same batch overlaps more (FAST allows 8)


def test_a_shards_share_of_the_bound() -> None:
    assert [shard_share(10, i, 4) for i in range(4)] == [3, 3, 2, 2]
    assert [shard_share(2, i, 4) for i in range(4)] == [1, 1, 1, 1]  # at least one each
    assert shard_share(None, 0, 4) is None
    spec = ModelSpec(endpoint="https://gw.example/v1", model="m", max_concurrency=5)
    assert remote_endpoint(spec, "k", 3).max_concurrency == 3 and remote_endpoint(spec).hosted
    # A server `cudanalyst run` started itself and handed over as an endpoint keeps the retry count.
    assert not remote_endpoint(spec, served_here={"https://gw.example/v1"}).hosted


def test_a_missing_key_names_the_model_the_field_and_the_variable() -> None:
    run = run_with({"endpoint": "https://gw.example/v1", "model": "qwen-72b",
                    "apiKey": {"env": "GW_KEY", "secretName": "llm-gateway"}},
                   {"endpoint": "https://other.example", "model": "coder-7b", "apiKey": {}})
    with pytest.raises(CredentialError) as info:
        read_keys(run.spec, {"CUDANALYST_API_KEY": "x"})
    text = str(info.value)
    assert text.startswith("spec.models.planner.apiKey:") and "qwen-72b" in text and "GW_KEY" in text
    assert "llm-gateway" in text  # on a cluster: which Secret should have filled it
    with pytest.raises(CredentialError, match=r"spec\.models\.coder\.apiKey: model coder-7b .*CUDANALYST_API_KEY"):
        read_keys(run.spec, {"GW_KEY": "a"})
    assert read_keys(run.spec, {"GW_KEY": "a", "CUDANALYST_API_KEY": "b"}) == {"GW_KEY": "a", "CUDANALYST_API_KEY": "b"}
    env = {"GW_KEY": "a", "CUDANALYST_API_KEY": "b", "HOME": "/h"}
    forget_keys(run.spec, env)
    assert env == {"HOME": "/h"}  # no child of the runner inherits a key


def test_check_keys_names_a_refused_key_and_an_endpoint_that_wants_one() -> None:
    with serving(HostedApi(key=KEY)) as api:
        keyed = run_with({"endpoint": api.base_url, "model": "qwen-72b", "apiKey": {"env": "GW_KEY"}})
        check_keys(keyed.spec, {"GW_KEY": KEY})  # taken: no error
        with pytest.raises(CredentialError) as info:
            check_keys(keyed.spec, {"GW_KEY": "sk-wrong-9"})
        assert str(info.value).startswith("spec.models.planner.apiKey:") and "qwen-72b" in str(info.value)
        assert "GW_KEY" in str(info.value) and "401" in str(info.value) and "sk-wrong-9" not in str(info.value)
        unkeyed = run_with({"endpoint": api.base_url, "model": "qwen-72b"})
        with pytest.raises(CredentialError, match=r"spec\.models\.planner\.apiKey: .*without a key.*give"):
            check_keys(unkeyed.spec, {})


def test_redact_and_the_workers_environment() -> None:
    assert redact("bad key sk-abc given", "sk-abc") == "bad key *** given"
    env = scrubbed_environment({"CUDANALYST_API_KEY": "k", "OPENAI_API_KEY": "k", "GATEWAY_APIKEY": "k",
                                "PATH": "/bin"})
    assert env == {"PATH": "/bin"}


def test_the_spec_takes_keys_for_endpoints_only_and_one_secret_per_variable() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="apiKey is for serve: endpoint"):
        ModelSpec(model="tiny", serve="local", api_key={})
    with pytest.raises(ValidationError, match="coder.apiKey.env CUDANALYST_API_KEY is also planner.apiKey.env"):
        run_with({"endpoint": "https://a.example", "apiKey": {"secretName": "a"}},
                 {"endpoint": "https://b.example", "apiKey": {"secretName": "b"}})
    dumped = run_with({"endpoint": "https://a.example", "apiKey": {"secretName": "a"}}).to_dict()
    assert dumped["spec"]["models"]["planner"]["apiKey"] == {"env": "CUDANALYST_API_KEY", "secretName": "a",
                                                             "secretKey": "api-key"}


def test_a_hosted_api_that_refuses_vllms_extra_argument_is_asked_again_without_it() -> None:
    with serving(HostedApi(key=KEY, strict=True)) as api:
        results = generate(hosted(api), requests(4), FAST)
    assert all(r.ok for r in results), [r.error for r in results]
    assert sorted(api.answered.values()) == [1, 1, 1, 1] and api.statuses[400] <= FAST.concurrency
    assert all(r.usage_completion == 2 * COMPLETION_TOKENS_PER_CHOICE for r in results)  # usage still counted
