"""Each iteration's outcome as OpenEvolve's controller saw it: a child, or why there was none; and a recording that
stops when its model does not answer, instead of counting iterations the model never took.

OpenEvolve ends an iteration without a child for the agent's own reasons (no code in the answer, a rewrite identical
to its parent, diffs that match nothing) and for one that is not the agent's: the model server did not answer
("LLM generation failed", after OpenEvolve's own retries). It counts both as iterations and checkpoints past them.
On the H200 (2026-12-04) a shared model server went down mid-recording and four recordings went on for minutes,
"finishing" tasks with no child at all. The controller hands each outcome to its evolution tracer (`log_trace` for a
child, `log_failure` for none); `IterationLog` stands in that place: it appends one JSON line per iteration to
`iterations.jsonl` (copied beside the task's checkpoints), and on a model failure raises `ModelUnavailable`, which
OpenEvolve lets through (`_openevolve_strategy_error`): the run stops before that iteration reaches a checkpoint,
and the next pass resumes from the last one. A prompt longer than the model's context window stops the task the
same way, said apart (`PromptTooLong`): another pass with the same settings would stop there again.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

ITERATIONS_LOG = "iterations.jsonl"
# OpenEvolve's words (process_parallel._run_iteration) when the model gave nothing: its call failed after the
# retries, or it answered None.
MODEL_FAILURES = ("LLM generation failed", "LLM returned None response")
# The server's words (vLLM's and OpenAI's 400 answer) for a prompt longer than the model's context window. Not a
# server that is away: the same prompt fails the same way on every pass, so "run again" alone never gets past it.
CONTEXT_WORDS = "maximum context length"


class ModelUnavailable(RuntimeError):
    """The model did not answer an iteration: the recording stops at its last checkpoint."""

    _openevolve_strategy_error = True  # OpenEvolve re-raises these out of its evolution loop


class PromptTooLong(ModelUnavailable):
    """The model refused an iteration's prompt as longer than its context window: the recording stops at its last
    checkpoint too (an iteration lost to it would be one the agent never took), and says which settings to change."""


def cause(error: str) -> str:
    """Why an iteration has no child (pure): `context` (the model refused the prompt as longer than its context
    window), `model` (the server did not answer), `timeout` (the iteration ran past OpenEvolve's limit), else `agent`
    (the answer held no usable program: OpenEvolve's error says which)."""
    if error.startswith(MODEL_FAILURES):
        return "context" if CONTEXT_WORDS in error else "model"
    if "timed out" in error.lower():
        return "timeout"
    return "agent"


class IterationLog:
    """OpenEvolve's evolution tracer, as far as the recorder needs one (see the module's text). `inner`: a tracer
    OpenEvolve configured itself, still called."""

    def __init__(self, path: Path, inner: Any = None) -> None:
        self.path, self.inner = path, inner
        self._lock = threading.Lock()

    def _write(self, entry: dict[str, Any]) -> None:
        with self._lock, self.path.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def log_trace(self, iteration: int, child_program: Any = None, **kw: Any) -> None:
        self._write({"iteration": iteration, "child": getattr(child_program, "id", None)})
        if self.inner is not None:
            self.inner.log_trace(iteration=iteration, child_program=child_program, **kw)

    def log_failure(self, iteration: int, error: str = "", **kw: Any) -> None:
        why = cause(error)
        self._write({"iteration": iteration, "child": None, "cause": why, "error": error[:500]})
        if self.inner is not None:
            self.inner.log_failure(iteration=iteration, error=error, **kw)
        if why == "context":
            raise PromptTooLong(f"iteration {iteration}: the prompt did not fit the model's context window "
                                f"({error[:300]})")
        if why == "model":
            raise ModelUnavailable(f"iteration {iteration}: the model did not answer ({error[:300]})")

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def restore(text: str, done: int) -> str:
    """The stored log's lines up to the resumed checkpoint (pure): lines past it were cut short and run again."""
    return "".join(f"{ln}\n" for ln in text.splitlines() if ln.strip() and int(json.loads(ln)["iteration"]) <= done)


def taken(text: str, after: int) -> int:
    """How many iterations past `after` a log holds an outcome of (pure)."""
    return len({e["iteration"] for e in map(json.loads, filter(str.strip, text.splitlines()))
                if int(e["iteration"]) > after})


def summary(text: str) -> dict[str, int]:
    """{"children": n, "agent": n, "timeout": n, "model": n, "context": n} over a log's lines (pure)."""
    out = {"children": 0, "agent": 0, "timeout": 0, "model": 0, "context": 0}
    for ln in text.splitlines():
        if ln.strip():
            e = json.loads(ln)
            out["children" if e.get("child") else e.get("cause", "agent")] += 1
    return out
