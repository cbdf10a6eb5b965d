"""The gate rules of a FeedbackPolicy (pure): a program's state from its own evaluation, and per feedback
component whether the next prompt shows it, in which form, and why.

Used by the recorder (runner.record.gate), which renders what is shown into the child's prompt, and by
`cudanalyst policy` to place the attribution's frozen programs in the same states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from cudanalyst.api.policy import PolicySpec


def _flag(value: Any) -> bool | None:
    """A recorded yes/no metric (True, 1.0, 0, ...); None when absent or not a number."""
    if value is None or isinstance(value, str):
        return None
    try:
        return bool(float(value))
    except (TypeError, ValueError):
        return None


def program_state(metrics: Mapping[str, Any]) -> tuple[str, str]:
    """(state, why) from a program's own metrics, as the recorder's evaluator and the importers write them:
    compiled, contract, gpu_evaluated, correct, speedup (over the task's baseline)."""
    if not _flag(metrics.get("compiled")):
        return "broken", "it did not compile"
    if _flag(metrics.get("contract")) is False:
        return "broken", "it breaks the task's contract"
    correct = _flag(metrics.get("correct"))
    if correct is None or _flag(metrics.get("gpu_evaluated")) is False:
        return "unverified", "it compiles; nothing could check it (no GPU)"
    if not correct:
        return "wrong", "it compiles and its output is wrong"
    speedup = metrics.get("speedup")
    if isinstance(speedup, (int, float)) and not isinstance(speedup, bool) and speedup > 1.0:
        return "fast", f"it is correct and {float(speedup):.2f}x the baseline's speed"
    return "correct", "it is correct, not faster than the baseline"


@dataclass(frozen=True)
class Decision:
    """What the gate did with one artifact of the parent program."""

    artifact: str
    component: str | None  # None: not one of the policy's players, shown as is
    shown: bool
    form: str  # raw or summary
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gate(policy: PolicySpec | None, state: str, artifacts: Mapping[str, Any]) -> list[Decision]:
    """One decision per artifact, in the artifacts' order. No policy: every artifact shown raw (the default)."""
    out = []
    for name in artifacts:
        if policy is None:
            out.append(Decision(name, name, True, "raw", "ungated: no policy"))
            continue
        if name not in policy.players:
            out.append(Decision(name, None, True, "raw", "not a component the policy speaks of"))
            continue
        rule = policy.rule(state, name)
        why = rule.reason or ("shown" if rule.show else "withheld")
        out.append(Decision(name, name, rule.show, rule.form if rule.show else "raw", f"{state}: {why}"))
    return out


def withheld_count(policy: PolicySpec, state: str) -> int:
    """How many of the policy's components a program in this state does not show (the random control's size)."""
    return sum(1 for p in policy.players if not policy.rule(state, p).show)
