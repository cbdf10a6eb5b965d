"""Seeded, deterministic choice of the frozen programs a run replays."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from cudanalyst.trajectory.format import FrozenProgram, TrajectoryError


def _rng(seed: int, task: str, generation: int) -> np.random.Generator:
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
