"""The plan: units = frozen program x coalition (or control arm) x rollout x sample, and their shards.

A pure function of the spec and the trajectory: the operator, the local executor and every runner pod
compute the same plan, so only its summary is stored (plan.json) and shards need no coordination.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from cudanalyst.api import AttributionRun
from cudanalyst.outcomes import GAME_ARM
from cudanalyst.trajectory import FrozenProgram, StratumDraw

# Rough costs for `cudanalyst plan`'s estimate; measured on the H200 (see docs/performance.md).
TOKENS_PER_GPU_SECOND = 10_000
CANDIDATE_GPU_SECONDS = 0.6
CHARS_PER_TOKEN = 4
DEFAULT_MSR_COALITIONS = 256


@dataclass(frozen=True)
class Unit:
    key: str
    task: str
    generation: int
    program_id: str
    coalition: tuple[str, ...]
    arm: str
    rollout: int
    sample: int

    @property
    def coalition_key(self) -> str:
        return ",".join(self.coalition)


@dataclass
class Plan:
    run: str
    players: list[str]
    programs: list[FrozenProgram]
    units: list[Unit]
    shard_count: int
    shards: list[list[Unit]] = field(default_factory=list)
    # What each stratum of a stratified freeze gave (spec.trajectory.strata); empty for a draw by generation.
    draws: list[StratumDraw] = field(default_factory=list)

    def overview(self) -> dict[str, object]:
        """What plan.json holds: counts and the digest (the units are a pure function of spec + trajectory)."""
        arms: dict[str, int] = {}
        for u in self.units:
            arms[u.arm] = arms.get(u.arm, 0) + 1
        return {
            "run": self.run,
            "players": self.players,
            "programs": len(self.programs),
            "coalitions": len({u.coalition for u in self.units if u.arm == GAME_ARM}),
            "units": len(self.units),
            "unitsByArm": arms,
            "shards": [len(s) for s in self.shards],
            "digest": plan_digest(self),
        } | ({"strata": strata_summary(self.draws)} if self.draws else {})


def coalitions(players: list[str]) -> list[tuple[str, ...]]:
    """Every coalition, indexed by bitmask: bit i set means players[i] is in it (spec order kept)."""
    n = len(players)
    return [tuple(p for i, p in enumerate(players) if mask >> i & 1) for mask in range(2**n)]


def game_coalitions(run: AttributionRun) -> list[tuple[str, ...]]:
    """The coalitions the game is played on: all 2^n (exact), or a seeded sample of distinct ones (msr)."""
    players = list(run.spec.players)
    attribution = run.spec.attribution
    total = 2 ** len(players)
    if attribution.estimator in ("exact", "auto"):
        return coalitions(players)
    count = min(total, attribution.coalition_samples or min(total, DEFAULT_MSR_COALITIONS))
    digest = hashlib.sha256(f"msr/{run.spec.sampling.seed}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    masks = sorted(int(m) for m in rng.choice(total, size=count, replace=False))
    return [tuple(p for i, p in enumerate(players) if mask >> i & 1) for mask in masks]


def unit_key(run: str, program_id: str, coalition: tuple[str, ...], arm: str, rollout: int, sample: int) -> str:
    """Stable key of a unit: a retried pod finds its finished units by these keys."""
    ident = json.dumps([run, program_id, ",".join(coalition), arm, rollout, sample], separators=(",", ":"))
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


def control_coalition(arm: str, players: list[str]) -> tuple[str, ...]:
    """Which reports a control arm shows: randomized feedback shows all (from another program), others none."""
    return tuple(players) if arm == "randomizedFeedback" else ()


def make_units(run: AttributionRun, programs: list[FrozenProgram]) -> list[Unit]:
    spec = run.spec
    name = run.metadata.name
    arms = [(GAME_ARM, c) for c in game_coalitions(run)]
    arms += [(arm, control_coalition(arm, spec.players)) for arm in spec.controls]
    units = []
    for program in programs:
        for arm, coalition in arms:
            for rollout in range(spec.sampling.rollouts):
                for sample in range(spec.sampling.samples_per_coalition):
                    key = unit_key(name, program.program_id, coalition, arm, rollout, sample)
                    units.append(Unit(key, program.task, program.generation, program.program_id,
                                      coalition, arm, rollout, sample))
    return units


def split_shards(units: list[Unit], count: int) -> list[list[Unit]]:
    """Keep each frozen program's units together (shared prompt prefixes, one feedback computation).

    With fewer programs than shards, groups become (program, arm, coalition) so no shard idles.
    """
    programs = list(dict.fromkeys(u.program_id for u in units))
    if len(programs) >= count:
        group_of = {pid: i for i, pid in enumerate(programs)}
        index = [group_of[u.program_id] for u in units]
    else:
        groups = list(dict.fromkeys((u.program_id, u.arm, u.coalition) for u in units))
        group_of2 = {g: i for i, g in enumerate(groups)}
        index = [group_of2[(u.program_id, u.arm, u.coalition)] for u in units]
    shards: list[list[Unit]] = [[] for _ in range(count)]
    for unit, g in zip(units, index, strict=True):
        shards[g % count].append(unit)
    return shards


def strata_summary(draws: list[StratumDraw]) -> dict[str, object]:
    """Per task: programs drawn per state (summed over generations), and the strata that gave fewer than asked."""
    per_task: dict[str, dict[str, int]] = {}
    for d in draws:
        row = per_task.setdefault(d.task, {})
        row[d.state] = row.get(d.state, 0) + d.drawn
    return {"drawn": per_task, "short": [d.to_dict() for d in draws if d.short]}


def strata_line(draws: list[StratumDraw]) -> str:
    """One line for a run's start: what a stratified freeze drew, over all tasks, and how many strata fell short."""
    totals: dict[str, int] = {}
    for d in draws:
        totals[d.state] = totals.get(d.state, 0) + d.drawn
    short = sum(d.short for d in draws)
    tasks = len({d.task for d in draws})
    line = f"frozen by recorded state over {tasks} task(s): " + ", ".join(f"{k} {v}" for k, v in totals.items())
    if short:
        line += f"; {short} of {len(draws)} strata gave fewer than spec.trajectory.strata asks (`cudanalyst plan` names them)"
    return line


def make_plan(run: AttributionRun, programs: list[FrozenProgram], draws: list[StratumDraw] | None = None) -> Plan:
    """The whole plan for `run` over its already frozen programs (and what a stratified freeze drew)."""
    units = make_units(run, programs)
    count = run.spec.resources.shards
    plan = Plan(run.metadata.name, list(run.spec.players), list(programs), units, count, draws=list(draws or []))
    plan.shards = split_shards(units, count)
    return plan


def shard_units(plan: Plan, index: int, count: int) -> list[Unit]:
    if count != plan.shard_count:
        raise ValueError(f"--of {count} does not match spec.resources.shards = {plan.shard_count}")
    if not 0 <= index < count:
        raise ValueError(f"--shard {index} is out of range 0..{count - 1}")
    return plan.shards[index]


def plan_digest(plan: Plan) -> str:
    h = hashlib.sha256()
    for u in plan.units:
        h.update(u.key.encode())
    return h.hexdigest()[:16]


def estimate(run: AttributionRun, plan: Plan) -> dict[str, float]:
    """Tokens and GPU time, roughly: enough to tell a 5-minute run from a 5-day one."""
    spec = run.spec
    chars = {p.program_id: len(p.source) + sum(len(r) for r in p.feedback.values()) for p in plan.programs}
    calls = 2 if spec.planning == "explicit" else 1
    prompt_tokens = sum(chars[u.program_id] for u in plan.units) / CHARS_PER_TOKEN * calls
    completion_tokens = len(plan.units) * spec.sampling.max_tokens * calls
    llm_seconds = completion_tokens / TOKENS_PER_GPU_SECOND
    kernel_seconds = len(plan.units) * CANDIDATE_GPU_SECONDS
    return {
        "promptTokens": round(prompt_tokens),
        "maxCompletionTokens": completion_tokens,
        "llmGpuSeconds": round(llm_seconds, 1),
        "kernelGpuSeconds": round(kernel_seconds, 1),
        "gpuHours": round((llm_seconds + kernel_seconds) / 3600, 3),
    }
