"""A frozen program's recorded state (broken, wrong, correct, fast), read from the metrics its agent recorded.

The states are the strata of a stratified freeze (`spec.trajectory.strata`): feedback can only matter where the
frozen program leaves something to gain, and a draw by generation alone gave mostly programs that were already
correct (issue 29).
"""

from __future__ import annotations

from typing import Any, Literal

from cudanalyst.outcomes import beats
from cudanalyst.trajectory.format import FrozenProgram

State = Literal["broken", "wrong", "correct", "fast"]
STATES: tuple[State, ...] = ("broken", "wrong", "correct", "fast")


def _flag(metrics: dict[str, Any], name: str) -> bool | None:
    """A recorded yes/no: bools as they are, numbers (OpenEvolve's metrics are floats) as nonzero; else unknown."""
    value = metrics.get(name)
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return None


def program_state(program: FrozenProgram, fast_tolerance: float) -> State | None:
    """The program's state, or None when its metrics do not say (e.g. a recording without a GPU: compiled only).

    broken: did not compile, or broke the task's contract (`contract` 0: the kernel stage rejects it as well);
    wrong: compiled, not correct; correct: correct, not faster than the task's baseline by more than the
    tolerance (or not timed); fast: correct and `speedup` > 1 + fast_tolerance, the rule of `fastVsBaseline`.
    The recorder's `speedup` is over the task's baseline (runner/record/evaluator.py)."""
    m = program.metrics
    compiled = _flag(m, "compiled")
    if compiled is False or _flag(m, "contract") is False:
        return "broken"
    correct = _flag(m, "correct")
    if compiled is None or correct is None:
        return None
    if not correct:
        return "wrong"
    speedup = m.get("speedup")
    number = float(speedup) if isinstance(speedup, int | float) and not isinstance(speedup, bool) else None
    return "fast" if beats(number, fast_tolerance) else "correct"
