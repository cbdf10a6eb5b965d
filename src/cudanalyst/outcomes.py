"""Unit records: what the LLM stage writes (candidates) and what the kernel stage writes (outcomes).

Labels are ordered fail < compile < pass < fast. A label says what was *established*: on a machine with no
GPU the kernel stage can only establish `compile`, so `evaluatedUpTo` is `compile` and the pass and fast
metrics are reported as not evaluated, never guessed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class Label(StrEnum):
    FAIL = "fail"
    COMPILE = "compile"
    PASS = "pass"
    FAST = "fast"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def __lt__(self, other: object) -> bool:  # type: ignore[override]
        if not isinstance(other, Label):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:  # type: ignore[override]
        if not isinstance(other, Label):
            return NotImplemented
        return self.rank <= other.rank


_RANK = {label: rank for rank, label in enumerate(Label)}  # the enum's order is the order of labels
LABELS = tuple(label.value for label in Label)

# Cumulative metrics, one per label above fail: a metric is reached by its label and every better one.
# The metric is named as its label except `compiled` (spec.attribution.metrics, api.spec.METRICS).
_METRIC_NAME = {Label.COMPILE: "compiled"}
METRIC_THRESHOLD = {_METRIC_NAME.get(label, label.value): label for label in Label if label.rank > 0}


def reaches(label: Label, metric: str) -> bool:
    return label.rank >= METRIC_THRESHOLD[metric].rank


def evaluated(evaluated_up_to: Label, metric: str) -> bool:
    """Whether the evaluation could establish `metric` at all."""
    return evaluated_up_to.rank >= METRIC_THRESHOLD[metric].rank


# The arm of the game's units (every coalition of players); the control arms are spec.controls' names.
GAME_ARM = "coalition"


class _Record(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class UnitRef(_Record):
    """Identity of a unit: which frozen program, coalition, arm, rollout and sample."""

    key: str
    run: str
    task: str
    generation: int
    program_id: str
    coalition: list[str] = Field(description="Players whose feedback was given, in spec order.")
    arm: str = Field(GAME_ARM, description="coalition (the game) or a control arm.")
    rollout: int = 0
    sample: int = 0


def unit_identity(unit: Any, run: str) -> dict[str, Any]:
    """The one way to name a unit in a record: its plan entry (`cudanalyst.plan.Unit`) and the run's name."""
    return {"key": unit.key, "run": run, "task": unit.task, "generation": unit.generation,
            "program_id": unit.program_id, "coalition": list(unit.coalition), "arm": unit.arm,
            "rollout": unit.rollout, "sample": unit.sample}


class ExtractionNote(BaseModel):
    """How the kernel was taken out of the completion (cudanalyst.runner.llm.extract)."""

    model_config = ConfigDict(extra="forbid")

    method: str = ""
    blocks: int = 0
    kernels: int = 0
    notes: list[str] = Field(default_factory=list)


class UnitCandidate(UnitRef):
    """Written by the LLM stage: the prompts, the completion and the extracted kernel; every field declared
    (an error record, errors/<unitKey>.json, is one too: no code, with `error`, `errorKind` and `phase`)."""

    model_config = ConfigDict(extra="forbid")

    prompt_version: str = ""
    prompts: dict[str, str] = Field(default_factory=dict, description="planner / coder prompts as sent.")
    plan_text: str | None = Field(None, alias="plan", description="The planner model's text this kernel followed "
                                  "(explicit planning; stored once per rollout under plans/).")
    completion: str = ""
    code: str | None = Field(None, description="Extracted CUDA source; None when no usable code was found.")
    reason: str = Field("", description="Why there is no code, or what went wrong.")
    models: dict[str, str] = Field(default_factory=dict)
    seed: int | None = None
    tokens: dict[str, int] = Field(default_factory=dict, description="prompt / completion token counts.")
    error: str | None = Field(None, description="A runner error (server down, context too long, ...).")
    error_kind: str | None = Field(None, description="The error's kind, e.g. prompt-too-long, server-down.")
    phase: str | None = Field(None, description="Where the error happened: planner or coder.")
    api: dict[str, str] = Field(default_factory=dict, description="chat or completion, per role (planner, coder).")
    sample_index: int | None = Field(None, description="This sample's place among the completions of its request.")
    samples_in_request: int | None = Field(None, description="Completions asked for in one request (n).")
    finish_reason: str | None = Field(None, description="The server's finish reason: stop, length, ...")
    planner_seed: int | None = None
    extraction: ExtractionNote | None = None


class UnitOutcome(UnitRef):
    """Written by the kernel stage: the established label and its evidence."""

    label: Label
    evaluated_up_to: Label = Field(description="The highest label this evaluation could establish.")
    reason: str = ""
    speedup: float | None = Field(None, description="Frozen program's time / candidate's time.")
    speedup_vs_baseline: float | None = None
    reference: Literal["frozen", "baseline"] | None = Field(
        None, description="What `fast` was measured against: the frozen program, or the task's baseline kernel "
        "when the frozen program could not be timed (it is itself incorrect or fails). None: not timed.")
    unchanged: bool = Field(
        False, description="The candidate is the frozen program, unchanged up to whitespace and comments.")
    time_ms: float | None = None
    resources: dict[str, Any] = Field(default_factory=dict, description="registers, shared, spills, ...")
    gpu_seconds: float = 0.0
