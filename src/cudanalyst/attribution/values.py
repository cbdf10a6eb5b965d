"""From outcome records to each frozen program's outcomes: per metric, per generation and pooled, per arm.

A program's outcome under a coalition and rollout is its best over the k samples, per metric: the sample that
reaches fastVsBaseline need not be the one that reaches fastVsFrozen. Metrics are cumulative (compiled = compile
or better, pass = pass or fast, fastVsFrozen (fast) = fast against the frozen program, fastVsBaseline = pass or
better and faster than the task's baseline; `outcomes.METRIC_THRESHOLD`). v(S) is the mean over the game's
programs of each program's rate under S (its mean over rollouts); with every program in every rollout
that is the mean over rollouts of the fraction of programs reaching the metric. Pooled = the programs of
every generation together.

The unit of replication is the frozen program (the task, when generations are pooled: a task's
programs of different generations descend from each other). Tables keep every program's outcomes apart,
so intervals can come from the variation between programs (see `report.py`).

Nothing is guessed: a sample whose label equals its `evaluatedUpTo` (below fast) may have been better
than the evaluation could see, so it says nothing about higher metrics. A program's outcome in a cell
is known when one sample reaches the metric, or when every sample is known to fall short of it. A
program with an unknown outcome in any cell of a game leaves that whole game (the design stays paired),
and the records' own reasons say why. When some programs leave because their evaluation stopped below the
metric (no GPU, say), so do the others whose evaluation stopped there, even those known to miss it (every
sample failed earlier): keeping only those would select the game by its outcome.

Balance: best-of-k must be over the same k everywhere. Where cells hold different numbers of samples
(units lost, runs in progress), every cell of the arm keeps its first k_common samples (by sample index)
and the game says so; with `unchanged: exclude` the counts differ by design, so they are reported instead.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from cudanalyst.attribution.games import GameError, coalition_mask
from cudanalyst.outcomes import GAME_ARM, METRIC_THRESHOLD, VS_BASELINE, Label, UnitOutcome

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Unchanged = Literal["count", "exclude"]
_LABEL_NAMES = {lab.rank: lab.value for lab in Label}


class OutcomeError(ValueError):
    """Outcome records that cannot be tabulated; the message names the record."""


@dataclass(frozen=True)
class OutcomeColumns:
    """Outcome records as columns (one entry per record): what `tabulate` works on.

    `columns_of(records, players)` builds it from parsed records; simulations build it directly.
    """

    arm: tuple[str, ...]
    task: tuple[str, ...]
    generation: IntArray
    program: tuple[str, ...]
    mask: IntArray
    rollout: IntArray
    sample: IntArray
    label: IntArray  # Label.rank
    ceiling: IntArray  # evaluatedUpTo's rank
    unchanged: BoolArray
    reason: tuple[str, ...] = field(default=())  # empty: no reasons recorded
    # The same against the task's baseline (UnitOutcome.baseline_label, .baseline_evaluated_up_to), read by the
    # fastVsBaseline metric; None (simulations): the record's label and ceiling.
    baseline_label: IntArray | None = None
    baseline_ceiling: IntArray | None = None

    def __len__(self) -> int:
        return len(self.mask)


@dataclass(frozen=True)
class ProgramOutcomes:
    """One game (arm, metric, scope): best-of-k outcomes per (program, coalition, rollout).

    reached/known/present are (programs, coalitions, rollouts); `unit` maps each program to its unit of
    replication (itself, or its task when pooled). `unknown` gives, per program with an undetermined
    cell, why (the records' reasons).
    """

    masks: IntArray  # (C,), ascending
    rollouts: IntArray  # (R,)
    programs: tuple[str, ...]  # (G,)
    unit: IntArray  # (G,) index into unit_names
    unit_names: tuple[str, ...]
    reached: BoolArray
    known: BoolArray
    present: BoolArray
    unknown: Mapping[int, str]
    capped: BoolArray  # (G,) the program's evaluation stopped below the metric (its highest evaluatedUpTo)
    samples: int  # k: samples behind each best-of (the common k, or the most when unbalanced)
    balance: str = ""  # empty when every cell had k samples
    unit_kind: Literal["program", "task"] = "program"

    @property
    def evaluated(self) -> bool:
        return bool((self.known | ~self.present).all())


@dataclass(frozen=True)
class OutcomeTables:
    """Program outcomes per (arm, metric, scope); scope is a generation number or None for pooled."""

    players: tuple[str, ...]
    metrics: tuple[str, ...]
    generations: tuple[int, ...]
    arms: tuple[str, ...]
    games: Mapping[tuple[str, str, int | None], ProgramOutcomes]
    unchanged: Unchanged = "count"


def parse_records(raw: Iterable[tuple[str, Any]]) -> list[UnitOutcome]:
    """Validate raw JSON objects (named by where they came from) as outcome records."""
    records = []
    for where, obj in raw:
        try:
            records.append(UnitOutcome.model_validate(obj))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"]) or "(record)"
            raise OutcomeError(f"{where}: field {loc}: {first['msg']}") from exc
    return records


def columns_of(records: Sequence[UnitOutcome], players: Sequence[str]) -> OutcomeColumns:
    """Records -> columns; an unknown player in a record's coalition is an OutcomeError naming it."""
    if not records:
        raise OutcomeError("no outcome records")
    masks = []
    for rec in records:
        try:
            masks.append(coalition_mask(rec.coalition, players, f"outcome {rec.key or rec.program_id}: coalition"))
        except GameError as exc:
            raise OutcomeError(str(exc)) from exc
    return OutcomeColumns(
        arm=tuple(r.arm for r in records),
        task=tuple(r.task for r in records),
        generation=np.array([r.generation for r in records], dtype=np.int64),
        program=tuple(r.program_id for r in records),
        mask=np.array(masks, dtype=np.int64),
        rollout=np.array([r.rollout for r in records], dtype=np.int64),
        sample=np.array([r.sample for r in records], dtype=np.int64),
        label=np.array([r.label.rank for r in records], dtype=np.int64),
        ceiling=np.array([r.evaluated_up_to.rank for r in records], dtype=np.int64),
        unchanged=np.array([r.unchanged for r in records], dtype=bool),
        reason=tuple(r.reason for r in records),
        baseline_label=np.array([r.baseline_label().rank for r in records], dtype=np.int64),
        baseline_ceiling=np.array([r.baseline_evaluated_up_to().rank for r in records], dtype=np.int64),
    )


def _starts(values: Sequence[Any]) -> tuple[npt.NDArray[np.object_], BoolArray]:
    """The values as an object array, and whether each differs from the one before (True for the first). Records
    come grouped (a program's together), so only these run heads need a lookup each (most of `tabulate`'s time
    went to a lookup per record)."""
    obj = np.fromiter(values, dtype=object, count=len(values))
    new = np.ones(len(obj), bool)
    np.not_equal(obj[1:], obj[:-1], out=new[1:])
    return obj, new


def _head_codes(heads: list[Any], new: BoolArray, key: Callable[[Any], Any] | None = None) -> tuple[list[Any], IntArray]:
    """Sorted distinct values (by `key`) of the runs' heads and each entry's index among them (entry i is in run
    cumsum(new)[i] - 1); every distinct value heads some run."""
    distinct = sorted(set(heads), key=key)
    index = {v: i for i, v in enumerate(distinct)}
    return distinct, np.fromiter(map(index.__getitem__, heads), dtype=np.int64, count=len(heads))[np.cumsum(new) - 1]


def _codes(values: Sequence[Any]) -> tuple[list[Any], IntArray]:
    """Sorted distinct values and each entry's index among them."""
    obj, new = _starts(values)
    return _head_codes(obj[new].tolist(), new)


def _mixed_radix(keys: Sequence[IntArray]) -> IntArray | None:
    """One int64 per row that orders the rows as their keys do lexicographically (first key first); None when
    there are no rows or the keys' ranges together do not fit in an int64."""
    if not len(keys[0]):
        return None
    lows = [int(k.min()) for k in keys]
    spans = [int(k.max()) - lo + 1 for k, lo in zip(keys, lows, strict=True)]
    if math.prod(spans) >= 1 << 63:
        return None
    out = np.zeros(len(keys[0]), dtype=np.int64)
    for k, lo, span in zip(keys, lows, spans, strict=True):
        out = out * span + (k.astype(np.int64) - lo)
    return out


def _sorted_cells(keys: Sequence[IntArray]) -> tuple[IntArray, IntArray, IntArray]:
    """Rows sorted by their keys lexicographically (stable, as np.lexsort), grouped by all keys but the last:
    (order, first sorted row of each group, each sorted row's group). Sorting one mixed-radix int64 (stable) is
    a fraction of np.lexsort's and np.unique(axis=0)'s time; the result is the same."""
    lead = _mixed_radix(keys[:-1])
    full = _mixed_radix([lead, keys[-1]]) if lead is not None else None
    new = np.ones(len(keys[0]), bool)
    if lead is None or full is None:
        order = np.lexsort(list(keys)[::-1])
        sorted_lead = np.stack(keys[:-1], axis=1)[order]
        new[1:] = (sorted_lead[1:] != sorted_lead[:-1]).any(axis=1)
    else:
        order = np.argsort(full, kind="stable")
        sorted_key = lead[order]
        new[1:] = sorted_key[1:] != sorted_key[:-1]
    return order, np.flatnonzero(new), np.cumsum(new) - 1


def _program_codes(cols: OutcomeColumns) -> tuple[list[tuple[str, int, str]], IntArray]:
    """`_codes` of the records' (task, generation, program) keys, built for the run heads only."""
    task, new = _starts(cols.task)
    program, new_program = _starts(cols.program)
    new |= new_program
    new[1:] |= cols.generation[1:] != cols.generation[:-1]
    heads = list(zip(task[new].tolist(), cols.generation[new].tolist(), program[new].tolist(), strict=True))
    return _head_codes(heads, new)


def tabulate(
    records: Sequence[UnitOutcome] | OutcomeColumns,
    players: Sequence[str],
    metrics: Sequence[str],
    unchanged: Unchanged = "count",
    pooled_unit: Literal["task", "program"] = "task",
) -> OutcomeTables:
    """Best-of-k per program, cell by cell, for every arm, metric, generation and pooled.

    `unchanged="exclude"` leaves out the samples that are the frozen program unchanged (copies).
    `pooled_unit`: the unit of replication of the pooled games (task; program for one task's breakdown)."""
    for m in metrics:
        if m not in METRIC_THRESHOLD:
            raise OutcomeError(f"unknown metric {m!r} (expected one of {', '.join(METRIC_THRESHOLD)})")
    if unchanged not in ("count", "exclude"):
        raise OutcomeError(f"unchanged: expected count or exclude, got {unchanged!r}")
    cols = records if isinstance(records, OutcomeColumns) else columns_of(records, players)
    if not len(cols):
        raise OutcomeError("no outcome records")
    keep = ~cols.unchanged if unchanged == "exclude" else np.ones(len(cols), bool)

    arm_values, new_arm = _starts(cols.arm)
    arm_list, arm = _head_codes(arm_values[new_arm].tolist(), new_arm, key=lambda a: (a != GAME_ARM, a))
    arms = tuple(arm_list)
    prog_keys, prog = _program_codes(cols)
    tasks, task_of_prog = _codes([k[0] for k in prog_keys])
    generations = tuple(int(g) for g in np.unique(cols.generation))
    reasons = cols.reason or ("",) * len(cols)

    rows = np.flatnonzero(keep)
    # Cells: (arm, program, coalition, rollout); samples ranked by index within each cell.
    cell_keys = [arm[rows], prog[rows], cols.mask[rows], cols.rollout[rows], cols.sample[rows]]
    order, first, cell = _sorted_cells(cell_keys)
    rows = rows[order]
    cells = np.stack([k[order[first]] for k in cell_keys[:4]], axis=1)
    count = np.bincount(cell, minlength=len(cells))
    rank = np.arange(len(rows)) - first[cell]

    # Balance per arm: the common k, unless copies were left out on purpose.
    notes: dict[int, tuple[int, str]] = {}
    for a in range(len(arms)):
        in_arm = cells[:, 0] == a
        if not in_arm.any():
            continue
        lo, hi = int(count[in_arm].min()), int(count[in_arm].max())
        if lo == hi:
            notes[a] = (lo, "")
        elif unchanged == "exclude":
            notes[a] = (hi, f"best of 1 to {hi} samples per cell: unchanged copies are left out (unchanged: exclude)")
        else:
            short = int((count[in_arm] < hi).sum())
            notes[a] = (lo, f"cells hold {lo} to {hi} samples ({short} of {int(in_arm.sum())} cells short): "
                            f"best-of-{lo} everywhere (each cell's first {lo} samples by index)")
    k_of_arm = np.array([notes[a][0] if a in notes else 0 for a in range(len(arms))], dtype=np.int64)
    k_of_cell = k_of_arm[cells[:, 0]]
    use = rank < k_of_cell[cell] if unchanged == "count" else np.ones(len(rows), bool)
    rows, cell = rows[use], cell[use]
    n_used = np.bincount(cell, minlength=len(cells))

    c_arm, c_prog, c_mask, c_roll = (cells[:, i] for i in range(4))
    present_cell = n_used > 0
    c_gen = np.array([k[1] for k in prog_keys], dtype=np.int64)[c_prog]

    arm_prog = arm[rows] * len(prog_keys) + prog[rows]  # each row's (arm, program), flat
    games: dict[tuple[str, str, int | None], ProgramOutcomes] = {}
    for metric in metrics:
        need = METRIC_THRESHOLD[metric].rank
        vs_baseline = metric in VS_BASELINE and cols.baseline_label is not None and cols.baseline_ceiling is not None
        all_labels = cols.baseline_label if vs_baseline else cols.label
        all_ceilings = cols.baseline_ceiling if vs_baseline else cols.ceiling
        assert all_labels is not None and all_ceilings is not None
        label, ceiling = all_labels[rows], all_ceilings[rows]
        # How far each program's evaluation could see, per arm (the highest evaluatedUpTo of its records).
        top = np.zeros((len(arms), len(prog_keys)), dtype=np.int64)
        np.maximum.at(top.reshape(-1), arm_prog, ceiling)  # a flat index: ufunc.at's fast path
        reached = np.bincount(cell, weights=label >= need, minlength=len(cells)) > 0
        undetermined_row = (label < need) & (label >= ceiling)
        short = np.bincount(cell, weights=~undetermined_row & (label < need), minlength=len(cells))
        known = reached | (short == n_used)
        # Why a program's cell is undetermined: its records' reasons (or how far they were evaluated).
        why: dict[tuple[int, int], Counter[str]] = {}
        for r, c in zip(rows[undetermined_row], cell[undetermined_row], strict=True):
            if reached[c]:
                continue
            text = reasons[r] or f"evaluated only up to {_LABEL_NAMES[int(all_ceilings[r])]}"
            if vs_baseline and cols.ceiling[r] > all_ceilings[r]:
                text = f"{text}; not timed against the task's baseline"
            why.setdefault((int(c_arm[c]), int(c_prog[c])), Counter())[text] += 1
        for a, arm_name in enumerate(arms):
            for scope in (*generations, None):
                sel = present_cell & (c_arm == a)
                if scope is not None:
                    sel &= c_gen == scope
                if sel.any():
                    games[(arm_name, metric, scope)] = _dense(
                        sel, c_prog, c_mask, c_roll, reached, known, prog_keys, task_of_prog, tasks,
                        pooled=scope is None and pooled_unit == "task", why={p: t for (b, p), t in why.items() if b == a},
                        capped=top[a] < need,
                        k=notes[a][0], balance=notes[a][1],
                    )
    return OutcomeTables(tuple(players), tuple(metrics), generations, arms, games, unchanged)


def _dense(
    sel: BoolArray, c_prog: IntArray, c_mask: IntArray, c_roll: IntArray, reached: BoolArray, known: BoolArray,
    prog_keys: list[tuple[str, int, str]], task_of_prog: IntArray, tasks: list[str], *, pooled: bool,
    why: Mapping[int, Counter[str]], capped: BoolArray, k: int, balance: str,
) -> ProgramOutcomes:
    progs, g = np.unique(c_prog[sel], return_inverse=True)
    masks, c = np.unique(c_mask[sel], return_inverse=True)
    rollouts, r = np.unique(c_roll[sel], return_inverse=True)
    shape = (len(progs), len(masks), len(rollouts))
    present, reach, know = np.zeros(shape, bool), np.zeros(shape, bool), np.zeros(shape, bool)
    idx = (g.reshape(-1), c.reshape(-1), r.reshape(-1))
    present[idx], reach[idx], know[idx] = True, reached[sel], known[sel]
    names = tuple(f"{prog_keys[p][0]}/g{prog_keys[p][1]}/{prog_keys[p][2]}" for p in progs)
    if pooled:
        unit_ids, unit = np.unique(task_of_prog[progs], return_inverse=True)
        unit_names = tuple(tasks[u] for u in unit_ids)
    else:
        unit, unit_names = np.arange(len(progs)), names
    unknown: dict[int, str] = {}
    for i in np.flatnonzero((present & ~know).any(axis=(1, 2))).tolist():  # programs with an undetermined cell
        texts = why.get(int(progs[i]), Counter())
        unknown[i] = "; ".join(t for t, _ in texts.most_common(2)) or "not established"
    return ProgramOutcomes(
        masks=masks.astype(np.int64), rollouts=rollouts.astype(np.int64), programs=names,
        unit=np.asarray(unit, dtype=np.int64).reshape(-1), unit_names=unit_names,
        reached=reach, known=know, present=present, unknown=unknown, capped=capped[progs], samples=k, balance=balance,
        unit_kind="task" if pooled else "program",
    )
