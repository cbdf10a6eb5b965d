"""From outcome records to v(S): per metric, per generation and pooled, per arm.

A program's outcome under a coalition and rollout is its best over the k samples. v(S) for a metric is
the mean over rollouts of the fraction of frozen programs that reach the metric (cumulative: compiled =
compile or better, pass = pass or fast, fast = fast). Pooled = the same fraction over the programs of
every generation together.

Nothing is guessed: a sample whose label equals its `evaluatedUpTo` (below fast) may have been better
than the evaluation could see, so it says nothing about higher metrics. A program's outcome for a metric
is known when one sample reaches it, or when every sample is known to fall short of it (its label is
below the level the evaluation could establish). A rate is reported only when every program's outcome
is known; otherwise it is null (e.g. pass and fast on a machine with no GPU).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from cudanalyst.attribution.games import GameError, coalition_mask
from cudanalyst.outcomes import METRIC_THRESHOLD, OutcomeRecord

IntArray = npt.NDArray[np.int64]
GAME_ARM = "coalition"


class OutcomeError(ValueError):
    """Outcome records that cannot be tabulated; the message names the record."""


@dataclass(frozen=True)
class RateCounts:
    """Counts behind v(S) for the coalitions present, one column per rollout.

    successes[c, r] programs reached the metric under coalition masks[c] in rollout r, out of
    totals[c, r]; undetermined[c, r] of them could not be decided (their rate is then unknown).
    """

    masks: IntArray  # (C,), ascending
    rollouts: IntArray  # (R,)
    successes: IntArray  # (C, R)
    totals: IntArray  # (C, R)
    undetermined: IntArray  # (C, R)

    @property
    def evaluated(self) -> bool:
        return not self.undetermined.any()

    def rates(self) -> npt.NDArray[np.float64]:
        """v for each coalition: mean over the rollouts that have programs of the per-rollout fraction."""
        with np.errstate(invalid="ignore", divide="ignore"):
            per_rollout = self.successes / self.totals
        return np.nanmean(np.where(self.totals > 0, per_rollout, np.nan), axis=1)

    def variances(self) -> npt.NDArray[np.float64]:
        """Var of each rate: programs are Bernoulli draws within a rollout, rollouts independent.

        Var(mean_r p_r) = sum_r p_r (1 - p_r) / P_r / R^2, with the plug-in p_r; the bootstrap that
        resamples programs within each coalition and rollout has exactly this variance.
        """
        present = self.totals > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            p = self.successes / self.totals
            per_rollout = np.where(present, p * (1 - p) / self.totals, 0.0)
        count = present.sum(axis=1)
        return per_rollout.sum(axis=1) / np.maximum(count, 1) ** 2


@dataclass(frozen=True)
class OutcomeTables:
    """Counts per (arm, metric, scope); scope is a generation number or None for pooled."""

    players: tuple[str, ...]
    metrics: tuple[str, ...]
    generations: tuple[int, ...]
    arms: tuple[str, ...]
    counts: Mapping[tuple[str, str, int | None], RateCounts]


def parse_records(raw: Iterable[tuple[str, Any]]) -> list[OutcomeRecord]:
    """Validate raw JSON objects (named by where they came from) as outcome records."""
    records = []
    for where, obj in raw:
        try:
            records.append(OutcomeRecord.model_validate(obj))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "(record)"
            raise OutcomeError(f"{where}: field {field}: {first['msg']}") from exc
    return records


def _group(keys: Sequence[IntArray]) -> tuple[IntArray, IntArray]:
    """Row index of the unique key tuples, and those unique tuples (as a 2-D array)."""
    stacked = np.stack(keys, axis=1)
    unique, inverse = np.unique(stacked, axis=0, return_inverse=True)
    return inverse.reshape(-1), unique


def tabulate(records: Sequence[OutcomeRecord], players: Sequence[str], metrics: Sequence[str]) -> OutcomeTables:
    """Best-of-k per program, then counts per arm, metric, coalition, rollout, generation and pooled."""
    if not records:
        raise OutcomeError("no outcome records")
    for m in metrics:
        if m not in METRIC_THRESHOLD:
            raise OutcomeError(f"unknown metric {m!r} (expected one of {', '.join(METRIC_THRESHOLD)})")
    masks = []
    for rec in records:
        try:
            masks.append(coalition_mask(rec.coalition, players, f"outcome {rec.key or rec.program_id}: coalition"))
        except GameError as exc:
            raise OutcomeError(str(exc)) from exc
    arms = tuple(sorted({r.arm for r in records}, key=lambda a: (a != GAME_ARM, a)))
    programs = {key: i for i, key in enumerate(sorted({(r.task, r.generation, r.program_id) for r in records}))}
    arm_idx = np.array([arms.index(r.arm) for r in records])
    prog = np.array([programs[(r.task, r.generation, r.program_id)] for r in records])
    gen = np.array([r.generation for r in records])
    mask = np.array(masks, dtype=np.int64)
    rollout = np.array([r.rollout for r in records])
    label = np.array([r.label.rank for r in records])
    ceiling = np.array([r.evaluated_up_to.rank for r in records])

    # One row per program outcome: (arm, program, coalition, rollout), best over its samples.
    unit, unit_keys = _group([arm_idx, prog, mask, rollout, gen])
    samples = np.bincount(unit)
    u_arm, _, u_mask, u_rollout, u_gen = unit_keys.T

    counts: dict[tuple[str, str, int | None], RateCounts] = {}
    generations = tuple(int(g) for g in np.unique(gen))
    for metric in metrics:
        need = METRIC_THRESHOLD[metric].rank
        reached = np.bincount(unit, weights=label >= need, minlength=len(samples)) > 0
        short = np.bincount(unit, weights=(label < need) & (label < ceiling), minlength=len(samples))
        known = reached | (short == samples)
        for scope in (*generations, None):
            in_scope = np.ones(len(u_arm), bool) if scope is None else u_gen == scope
            for a, arm in enumerate(arms):
                rows = in_scope & (u_arm == a)
                if rows.any():
                    counts[(arm, metric, scope)] = _counts(u_mask[rows], u_rollout[rows], reached[rows], known[rows])
    return OutcomeTables(tuple(players), tuple(metrics), generations, arms, counts)


def _counts(mask: IntArray, rollout: IntArray, reached: npt.NDArray[np.bool_], known: npt.NDArray[np.bool_]) -> RateCounts:
    masks, c = np.unique(mask, return_inverse=True)
    rollouts, r = np.unique(rollout, return_inverse=True)
    cell = c.reshape(-1) * len(rollouts) + r.reshape(-1)
    size = len(masks) * len(rollouts)

    def tally(weights: npt.NDArray[Any]) -> IntArray:
        return np.bincount(cell, weights=weights, minlength=size).astype(np.int64).reshape(len(masks), -1)

    return RateCounts(
        masks=masks.astype(np.int64),
        rollouts=rollouts.astype(np.int64),
        successes=tally(reached & known),
        totals=tally(np.ones(len(cell))),
        undetermined=tally(~known),
    )
