"""Seeded, deterministic choice of the frozen programs a run replays."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cudanalyst.tasks.source_text import code_text
from cudanalyst.trajectory.format import FrozenProgram, TrajectoryError
from cudanalyst.trajectory.states import STATES, program_state


def _rng(seed: int, task: str, generation: int | str) -> np.random.Generator:
    # A stable per-(task, generation) stream: adding a task never changes another task's choice.
    digest = hashlib.sha256(f"{seed}/{task}/{generation}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def freeze(
    programs: Sequence[FrozenProgram],
    generations: Sequence[int],
    per_generation: int,
    seed: int,
    tasks: Sequence[str] = (),
) -> list[FrozenProgram]:
    """Pick up to `per_generation` programs per task and generation, in a stable order.

    A requested generation with no program of any selected task, or a requested task that the
    trajectory does not have, is an error that names it.
    """
    by_task_gen: dict[tuple[str, int], list[FrozenProgram]] = defaultdict(list)
    for p in programs:
        by_task_gen[(p.task, p.generation)].append(p)
    known_tasks = sorted({p.task for p in programs})
    selected_tasks = list(tasks) or known_tasks
    missing = [t for t in selected_tasks if t not in known_tasks]
    if missing:
        raise TrajectoryError(
            f"spec.trajectory.tasks: not in the trajectory: {', '.join(missing)} (it has: {', '.join(known_tasks)})"
        )
    frozen: list[FrozenProgram] = []
    for generation in generations:
        found = False
        for task in selected_tasks:
            pool = sorted(by_task_gen.get((task, generation), []), key=lambda p: p.program_id)
            if not pool:
                continue
            found = True
            k = min(per_generation, len(pool))
            picks = sorted(_rng(seed, task, generation).choice(len(pool), size=k, replace=False))
            frozen += [pool[i] for i in picks]
        if not found:
            have = sorted({g for (t, g) in by_task_gen if t in selected_tasks})
            raise TrajectoryError(
                f"spec.trajectory.generations: generation {generation} has no program "
                f"(the trajectory has generations {', '.join(map(str, have))})"
            )
    return frozen


@dataclass(frozen=True)
class StratumDraw:
    """One stratum of one task (and generation, when drawn per generation): asked, there, drawn."""

    task: str
    generation: int | None  # None: drawn over all the listed generations
    state: str
    asked: int
    available: int  # distinct sources in the stratum
    drawn: int
    repeats: int = 0  # programs left out as repeats of a source the stratum has already

    @property
    def short(self) -> bool:
        return self.drawn < self.asked

    def to_dict(self) -> dict[str, object]:
        return {"task": self.task, "generation": self.generation, "state": self.state, "asked": self.asked,
                "available": self.available, "drawn": self.drawn, "repeats": self.repeats}


def freeze_strata(
    programs: Sequence[FrozenProgram],
    generations: Sequence[int],
    counts: Mapping[str, int],
    seed: int,
    tasks: Sequence[str] = (),
    per: str = "task",
    fast_tolerance: float = 0.12,
) -> tuple[list[FrozenProgram], list[StratumDraw]]:
    """Draw `counts[state]` programs of each recorded state per task (per task and generation with per =
    "generation") from the listed generations, seeded by (seed, task, generation or all, state), so that
    adding a task or changing one stratum's count never changes another's draw. A stratum holds distinct sources:
    programs that repeat one (up to whitespace and comments) are left out, the first found kept (`_distinct`).

    Returns the programs (ordered by generation, task, programId) and what each stratum gave. A stratum with
    fewer programs than asked gives them all (the caller warns); a draw with no program at all, a listed
    generation no selected task has, or a task the trajectory lacks is an error that names the field."""
    pools: dict[tuple[str, int | None, str], list[FrozenProgram]] = defaultdict(list)
    selected = _selected_tasks(programs, tasks)
    wanted = set(generations)
    have_gens = {p.generation for p in programs if p.task in selected}
    for generation in generations:
        if generation not in have_gens:
            raise TrajectoryError(
                f"spec.trajectory.generations: generation {generation} has no program "
                f"(the trajectory has generations {', '.join(map(str, sorted(have_gens)))})"
            )
    for p in programs:
        if p.task not in selected or p.generation not in wanted:
            continue
        state = program_state(p, fast_tolerance)
        if state is not None:
            pools[(p.task, p.generation if per == "generation" else None, state)].append(p)
    scopes: list[int | None] = list(generations) if per == "generation" else [None]
    frozen: list[FrozenProgram] = []
    draws: list[StratumDraw] = []
    for task in selected:
        for scope in scopes:
            for state in STATES:
                asked = int(counts.get(state, 0))
                if asked <= 0:
                    continue
                every = pools.get((task, scope, state), [])
                pool = _distinct(every)
                k = min(asked, len(pool))
                where = f"strata/{state}/{'all' if scope is None else scope}"
                picks = sorted(_rng(seed, task, where).choice(len(pool), size=k, replace=False)) if k else []
                frozen += [pool[i] for i in picks]
                draws.append(StratumDraw(task, scope, state, asked, len(pool), k, len(every) - len(pool)))
    if not frozen:
        raise TrajectoryError("spec.trajectory.strata: no program of the listed generations is in an asked "
                              "stratum (a program's state comes from its recorded metrics: compiled, contract, "
                              "correct, speedup; docs/trajectory-format.md)")
    frozen.sort(key=lambda p: (p.generation, p.task, p.program_id))
    return frozen, draws


def _distinct(pool: Sequence[FrozenProgram]) -> list[FrozenProgram]:
    """One program per source, up to whitespace and comments: the first found (generation, then programId), ordered
    by programId. An agent resubmits its baseline unchanged again and again (38 times in the 1.5B's 480 iterations
    of 2026-12-02): drawn twice, one program would count as two replications."""
    first: dict[str, FrozenProgram] = {}
    for p in sorted(pool, key=lambda p: (p.generation, p.program_id)):
        first.setdefault(code_text(p.source), p)
    return sorted(first.values(), key=lambda p: p.program_id)


def _selected_tasks(programs: Sequence[FrozenProgram], tasks: Sequence[str]) -> list[str]:
    known_tasks = sorted({p.task for p in programs})
    missing = [t for t in tasks if t not in known_tasks]
    if missing:
        raise TrajectoryError(
            f"spec.trajectory.tasks: not in the trajectory: {', '.join(missing)} (it has: {', '.join(known_tasks)})"
        )
    return list(tasks) or known_tasks
