"""Unit records: what the LLM stage writes (candidates) and what the kernel stage writes (outcomes).

Labels are ordered fail < compile < pass < fast, `fast` against the frozen program (the metric fastVsFrozen);
the paper's fast, against the task's baseline, is the record's `fastVsBaseline` flag (the metric fastVsBaseline).
A label says what was *established*: on a machine with no GPU the kernel stage can only establish `compile`, so
`evaluatedUpTo` is `compile` and the pass and fast metrics are reported as not evaluated, never guessed.
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

# Cumulative metrics: a metric is reached by its label and every better one. Two metrics sit on `fast`, one per
# reference a speedup is taken against (docs/decisions.md, "Two fast metrics"):
# - fastVsFrozen: the record's `label` is fast: faster than the frozen program (against the task's baseline where
#   the frozen program cannot be timed, as `reference` says). Ours: did feedback improve on where the agent was?
# - fastVsBaseline: pass or better and `fastVsBaseline` (speedupVsBaseline > 1 + fastTolerance). The paper's:
#   "performance gain over baseline".
# - fast: the name of fastVsFrozen in specs and run folders written before there were two; it means what it meant.
# spec.attribution.metrics is api.spec.METRICS; a metric keeps the name the spec gives it in every table.
METRIC_THRESHOLD = {"compiled": Label.COMPILE, "pass": Label.PASS, "fastVsBaseline": Label.FAST,
                    "fastVsFrozen": Label.FAST, "fast": Label.FAST}
VS_BASELINE = frozenset({"fastVsBaseline"})  # metrics judged on the baseline label (`UnitOutcome.baseline_label`)
SAME_METRIC = {"fast": "fastVsFrozen"}  # older name -> the metric it names


def reaches(label: Label, metric: str) -> bool:
    return label.rank >= METRIC_THRESHOLD[metric].rank


def evaluated(evaluated_up_to: Label, metric: str) -> bool:
    """Whether the evaluation could establish `metric` at all."""
    return evaluated_up_to.rank >= METRIC_THRESHOLD[metric].rank


def beats(speedup: float | None, fast_tolerance: float) -> bool:
    """The one speedup rule of both fast metrics: faster by more than the tolerance (pure)."""
    return speedup is not None and speedup > 1.0 + fast_tolerance
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
    fast_vs_baseline: bool | None = Field(
        None, description="Correct and faster than the task's baseline by more than fastTolerance (the paper's "
        "fast; `label` compares with the frozen program). None: not established (not correct, not timed against "
        "the baseline, or a record written before this field: `with_fast_vs_baseline` derives it then).")
    unchanged: bool = Field(
        False, description="The candidate is the frozen program, unchanged up to whitespace and comments.")
    time_ms: float | None = None
    resources: dict[str, Any] = Field(default_factory=dict, description="registers, shared, spills, ...")
    gpu_seconds: float = 0.0

    def baseline_label(self) -> Label:
        """`label` with its top judged against the task's baseline: fast when `fastVsBaseline`, else pass."""
        if self.label.rank < Label.PASS.rank:
            return self.label
        return Label.FAST if self.fast_vs_baseline else Label.PASS

    def baseline_evaluated_up_to(self) -> Label:
        """How far the baseline comparison could see: a correct record without the flag stops at pass."""
        if self.label.rank >= Label.PASS.rank and self.fast_vs_baseline is None:
            return min(self.evaluated_up_to, Label.PASS, key=lambda lab: lab.rank)
        return self.evaluated_up_to

    def metric_label(self, metric: str) -> tuple[Label, Label]:
        """(label, evaluatedUpTo) as `metric` reads them."""
        if metric in VS_BASELINE:
            return self.baseline_label(), self.baseline_evaluated_up_to()
        return self.label, self.evaluated_up_to


def with_fast_vs_baseline(records: list[UnitOutcome], fast_tolerance: float) -> list[UnitOutcome]:
    """Records written before `fastVsBaseline` existed get it from their `speedupVsBaseline` and the run's
    tolerance, by the rule the kernel stage applies now (`beats`); a record that has it keeps it."""
    out = []
    for r in records:
        if r.fast_vs_baseline is None and r.label.rank >= Label.PASS.rank and r.speedup_vs_baseline is not None:
            r = r.model_copy(update={"fast_vs_baseline": beats(r.speedup_vs_baseline, fast_tolerance)})
        out.append(r)
    return out
