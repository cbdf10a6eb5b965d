"""The FeedbackPolicy document: which feedback an agent is shown in each program state, and who plans.

The single source of the policy's schema. `cudanalyst policy RUN...` writes one from finished AttributionRuns
(cudanalyst.policy); a person may read and edit it; `cudanalyst record --policy FILE` (or a TrajectoryRecording's
`spec.policy`) makes the recorder follow it (cudanalyst.gating holds the rules). Every choice carries the evidence
it rests on; a choice without evidence that excludes 0 is the default: show the component, raw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from cudanalyst.api import KubeObject, parse_model, read_document
from cudanalyst.api.spec import Model

POLICY_KIND = "FeedbackPolicy"

# A program's state, from its own evaluation (cudanalyst.gating.program_state): it does not compile or breaks the
# task's contract; it compiles but nothing could check it (no GPU); it compiles and is wrong; it is correct; it is
# correct and faster than the task's baseline.
State = Literal["broken", "unverified", "wrong", "correct", "fast"]
STATES: tuple[str, ...] = ("broken", "unverified", "wrong", "correct", "fast")
Form = Literal["raw", "summary"]
Level = Literal["program", "task"]


class Evidence(Model):
    """One number a choice rests on: a Banzhaf value, or a difference between two runs, with its interval."""

    run: str = Field(description="The AttributionRun (or 'A - B' for a difference of two runs).")
    metric: str = Field(description="The outcome rate it is measured on: compiled, pass, fastVsFrozen, ...")
    index: str = Field(description="What is measured: a player's Banzhaf value, or the compared arms.")
    value: float | None
    low: float | None = None
    high: float | None = None
    confidence: float = Field(0.95, gt=0, lt=1)
    level: Level = Field(description="The unit of replication: frozen programs, or tasks.")
    units: int = Field(0, ge=0, description="Units behind the interval.")
    p_value: float | None = Field(None, description="Two-sided, for value = 0, before correction.")
    holm: bool | None = Field(None, description="Still excludes 0 after Holm's correction over its family (the "
                              "policy's Banzhaf values, or its run-to-run comparisons).")

    def sign(self, corrected: bool = True) -> int:
        """+1 or -1 when the interval excludes 0 on that side (and, `corrected`, survives Holm), else 0: noise,
        never a signal."""
        if self.low is None or self.high is None or (corrected and not self.holm):
            return 0
        return 1 if self.low > 0 else -1 if self.high < 0 else 0


class ComponentRule(Model):
    """One feedback component in one state: shown or withheld, in which form, and why."""

    component: str = Field(min_length=1, max_length=64)
    show: bool = True
    form: Form = "raw"
    reason: str = Field("", max_length=4096)
    evidence: list[Evidence] = Field(default_factory=list)


class StateRule(Model):
    metric: str = Field("", description="The outcome the state's choices were judged on (what such a program "
                        "needs next: broken -> compiled, wrong -> pass, correct -> fast).")
    components: list[ComponentRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> StateRule:
        names = [c.component for c in self.components]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"components named more than once: {', '.join(dupes)}")
        return self


class ModelChoice(Model):
    """Which model plans and which writes code. planner unset: the coder plans inside its own answer (the
    recorder's default, OpenEvolve's one call); set: the recording's `spec.planner` writes a plan first."""

    planner: str | None = Field(None, max_length=256, description="The model that writes the plan.")
    coder: str | None = Field(None, max_length=256, description="The model that writes code.")
    reason: str = Field("", max_length=4096)
    evidence: list[Evidence] = Field(default_factory=list)


class PolicySpec(Model):
    """Per program state, the components to show; which model plans; where it was learned."""

    players: list[str] = Field(default_factory=lambda: ["debugger", "analyzer", "profiler"], min_length=1,
                               description="The feedback components the policy speaks of; others are shown as is.")
    # Keys are checked below, not typed as State: a CRD's structural schema has no propertyNames.
    states: dict[str, StateRule] = Field(
        default_factory=dict, description="Per program state (broken, unverified, wrong, correct, fast); a state "
        "without a rule, or a component without an entry: shown, raw.")
    models: ModelChoice = Field(default_factory=ModelChoice)
    level: Level = Field("program", description="The level whose intervals decided (the evidence names its own).")
    correction: Literal["holm", "none"] = Field(
        "holm", description="holm: an interval counts only if it excludes 0 after Holm over its family.")
    sources: list[str] = Field(default_factory=list, description="The run folders it was learned from.")
    tasks: list[str] = Field(default_factory=list, description="The tasks of the programs it was learned from: a "
                             "comparison holds them out.")
    held_out: list[str] = Field(default_factory=list, description="Tasks of its runs left out of the learning "
                                "(`cudanalyst policy --hold-out`), so that a comparison can evaluate on them.")
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known_components(self) -> PolicySpec:
        unknown = sorted(set(self.states) - set(STATES))
        if unknown:
            raise ValueError(f"states: {', '.join(unknown)} not a program state (one of {', '.join(STATES)})")
        for state, rule in self.states.items():
            for c in rule.components:
                if c.component not in self.players:
                    raise ValueError(f"states.{state}: component {c.component!r} is not one of players "
                                     f"({', '.join(self.players)})")
        return self

    def rule(self, state: str, component: str) -> ComponentRule:
        """The rule for a component in a state; the default (shown, raw) where the policy has none."""
        for c in self.states[state].components if state in self.states else []:
            if c.component == component:
                return c
        return ComponentRule(component=component, reason="default: the policy has no rule for it here")


class FeedbackPolicy(KubeObject):
    kind: Literal["FeedbackPolicy"]
    spec: PolicySpec


def parse_policy(data: Any, source: str = "<input>") -> FeedbackPolicy:
    return parse_model(data, source, FeedbackPolicy, POLICY_KIND)


def load_policy(path: str | Path) -> FeedbackPolicy:
    """Read a FeedbackPolicy from YAML or JSON (SpecError names the file and field)."""
    return parse_policy(read_document(path), str(Path(path)))
