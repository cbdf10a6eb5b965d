"""The gate rules of a FeedbackPolicy (pure): a program's state from its own evaluation, and per feedback
component whether the next prompt shows it, in which form, and why.

Used by the recorder (runner.record.gate), which renders what is shown into the child's prompt, and by
`cudanalyst policy` to place the attribution's frozen programs in the same states.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Collection, Mapping, Sequence
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


def program_key(source: str) -> str:
    """A program's identity for the random control's draw: its source's digest, line ends as OpenEvolve's evaluator
    reads them back from the file it writes (universal newlines), so the evaluation and the prompt agree."""
    return hashlib.sha256(re.sub(r"\r\n?", "\n", source).encode()).hexdigest()


def withheld_components(policy: PolicySpec, state: str, gating: str = "policy", seed: int = 0,
                        source: str = "") -> frozenset[str]:
    """The policy's components a program in this state does not show. `random` (the control): as many as the policy
    withholds in this state, drawn among its players, seeded by the recording's seed and the program itself: the
    evaluator (which leaves their tools unrun under `runTools: shown`) and the prompt of every child of the program
    draw the same."""
    if gating == "random":
        players = sorted(policy.players)
        k = min(withheld_count(policy, state), len(players))
        return frozenset(random.Random(f"{seed}:{program_key(source)}").sample(players, k))
    return frozenset(p for p in policy.players if not policy.rule(state, p).show)


def decisions(policy: PolicySpec, state: str, artifacts: Mapping[str, Any], gating: str = "policy", seed: int = 0,
              source: str = "", not_run: Collection[str] = ()) -> list[Decision]:
    """One decision per artifact (the policy's rule, or the random control's draw), then one per component whose
    tool was not run for this program (`not_run`: withheld, there is no report to show)."""
    if gating == "random":
        drop = withheld_components(policy, state, gating, seed, source)
        why = f"{state}: random control, {len(drop)} of {len(policy.players)} withheld"
        out = [Decision(a, a, a not in drop, "raw", why) if a in policy.players
               else Decision(a, None, True, "raw", "not a component the policy speaks of") for a in artifacts]
    else:
        out = gate(policy, state, artifacts)
    out += [Decision(c, c, False, "raw", f"{state}: withheld; its tool was not run for this program (runTools: shown)")
            for c in sorted(not_run) if c not in artifacts]
    return out


def read_gating_log(text: str) -> list[dict[str, Any]]:
    """The recorder's per-iteration gating log (runner.record.gate): one JSON object a line."""
    import json

    return [json.loads(line) for line in text.splitlines() if line.strip()]


def gating_lines(store: Any, tasks: Sequence[str]) -> list[str]:
    """Per task, what the gate did over the recording: iterations by parent state, each component's times shown
    and withheld (and of those, never made: `runTools: shown`), and the prompt tokens it saved (`store`: the
    recording's folder)."""
    from collections import Counter

    lines = []
    for task in tasks:
        key = f"openevolve/{task}/gating.jsonl"
        if not store.exists(key):
            lines.append(f"gating {task}: no log (no iteration built a prompt)")
            continue
        records = read_gating_log(store.get_text(key))
        states = Counter(r["state"] for r in records)
        shown = Counter(a for r in records for a in r["shown"])
        withheld = Counter(a for r in records for a in r["withheld"])
        unrun = Counter(a for r in records for a in r.get("notRun", []))  # runTools: shown
        saved = sum(int(r.get("savedTokens", 0)) for r in records)
        exact = all(r.get("tokensExact") for r in records)
        names = sorted(set(shown) | set(withheld))
        counts = [f"{a} shown {shown[a]}/withheld {withheld[a]}" + (f" (not run {unrun[a]})" if unrun[a] else "")
                  for a in names]
        lines.append(
            f"gating {task}: {len(records)} prompts (parents {', '.join(f'{s} {n}' for s, n in sorted(states.items()))}"
            f"); {', '.join(counts) or 'no reports'}; "
            f"{saved} prompt tokens saved{'' if exact else ' (estimated: the server has no /tokenize)'}"
            f" -> {store.uri_of(key)}")
    return lines
