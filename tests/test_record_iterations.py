"""Each iteration's outcome in a recording (runner.record.iterations): why an iteration has no child, and a model
that does not answer stopping the task instead of being counted as the agent's iteration. The whole path, with
OpenEvolve against a model server that is not there, is tests/test_record_model_down.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from cudanalyst.runner.record.iterations import (
    IterationLog,
    ModelUnavailable,
    PromptTooLong,
    cause,
    restore,
    summary,
    taken,
)

# vLLM 0.32's 400 answer to a prompt longer than --max-model-len, as OpenEvolve's error carries it.
TOO_LONG = ("LLM generation failed: Error code: 400 - This model's maximum context length is 4096 tokens. However, "
            "your prompt contains at least 4097 input tokens, which exceeds this limit even without any output tokens.")


@pytest.mark.parametrize("error, why", [
    ("LLM generation failed: Connection error.", "model"),
    ("LLM returned None response", "model"),
    (TOO_LONG, "context"),
    # The planner's request (runner.record.gate.chat) carries the server's words after its own.
    ("LLM generation failed: planner at http://127.0.0.1:8101/v1: Error code: 400 - {'message': \"This model's "
     "maximum context length is 16384 tokens. However, you requested 17000 tokens\"}", "context"),
    ("Iteration timed out after 3630s", "timeout"),
    ("No valid code found in response", "agent"),
    ("Rewrite is identical to the parent program", "agent"),
    ("No valid diffs found in response", "agent"),
])
def test_an_iteration_without_a_child_is_the_models_fault_only_when_the_model_gave_nothing(error: str,
                                                                                           why: str) -> None:
    assert cause(error) == why


def test_the_log_keeps_every_outcome_and_a_model_failure_stops_the_run_as_openevolve_lets_it(tmp_path: Path) -> None:
    seen = []
    inner = SimpleNamespace(log_trace=lambda **kw: seen.append(("trace", kw["iteration"])),
                            log_failure=lambda **kw: seen.append(("failure", kw["iteration"])),
                            close=lambda: seen.append(("close", None)))
    log = IterationLog(tmp_path / "iterations.jsonl", inner)
    log.log_trace(iteration=1, child_program=SimpleNamespace(id="c1"), prompt="p")
    log.log_failure(iteration=2, error="No valid code found in response")
    with pytest.raises(ModelUnavailable) as stopped:
        log.log_failure(iteration=3, error="LLM generation failed: Connection refused")
    # OpenEvolve's evolution loop re-raises exceptions with this mark instead of logging them and going on.
    assert getattr(stopped.value, "_openevolve_strategy_error", False) is True
    assert "iteration 3" in str(stopped.value) and "Connection refused" in str(stopped.value)
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "iterations.jsonl").read_text().splitlines()]
    assert [(e["iteration"], e["child"], e.get("cause")) for e in lines] == [
        (1, "c1", None), (2, None, "agent"), (3, None, "model")]
    assert seen == [("trace", 1), ("failure", 2), ("failure", 3), ("close", None)]  # OpenEvolve's own still called
    text = (tmp_path / "iterations.jsonl").read_text()
    assert summary(text) == {"children": 1, "agent": 1, "timeout": 0, "model": 1, "context": 0}
    assert summary(restore(text, 2)) == {"children": 1, "agent": 1, "timeout": 0, "model": 0, "context": 0}


def test_a_prompt_longer_than_the_context_stops_the_run_said_apart_from_a_server_away(tmp_path: Path) -> None:
    # Stopped like a model failure (an iteration lost to it would be one the agent never took), but its own kind:
    # the same prompt fails again on the next pass, so the console asks for a longer context, not only a rerun.
    log = IterationLog(tmp_path / "iterations.jsonl")
    with pytest.raises(PromptTooLong) as stopped:
        log.log_failure(iteration=4, error=TOO_LONG)
    assert isinstance(stopped.value, ModelUnavailable) and stopped.value._openevolve_strategy_error
    assert "iteration 4: the prompt did not fit the model's context window" in str(stopped.value)
    assert "4097 input tokens" in str(stopped.value)
    text = (tmp_path / "iterations.jsonl").read_text()
    assert summary(text) == {"children": 0, "agent": 0, "timeout": 0, "model": 0, "context": 1}


def test_a_gate_request_the_server_does_not_answer_is_the_models_failure() -> None:
    # The planner's or summarizer's request, made while OpenEvolve builds the prompt: OpenEvolve reports the
    # exception's text as the iteration's error, so it must read as the model's failure.
    from cudanalyst.runner.record.gate import chat

    with pytest.raises(RuntimeError) as failed:
        chat("http://127.0.0.1:9/v1", "planner", "system", "user", 8, 0.8, 0)
    assert cause(str(failed.value)) == "model" and "planner at http://127.0.0.1:9/v1" in str(failed.value)


def test_the_iterations_a_pass_took_are_counted_past_its_checkpoint_once_each() -> None:
    lines = [{"iteration": i, "child": None, "cause": "agent"} for i in (1, 2, 3, 3, 4)]
    text = "".join(json.dumps(e) + "\n" for e in lines) + "\n"
    assert taken(text, 0) == 4 and taken(text, 2) == 2 and taken(text, 4) == 0
