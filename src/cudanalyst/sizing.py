"""How many frozen programs and tasks the smallest effect a study wants to see needs (`cudanalyst plan --effect`).

Two levels, as a study reports them (issue 29): over programs (this trajectory's programs: the unit is a frozen
program) and over tasks (kernels like these: the unit is a task, each the mean of its m programs). A player's
Banzhaf value of one program is b = mu + tau_task + e_program + noise, where the noise is the Bernoulli noise of
the program's own rates, rate (1 - rate) / (R 2^(n-2)) for R rollouts and n players (`attribution/design.py`). So

- one program's value has SD sd_p = sqrt(sigma_p^2 + noise), sigma_p^2 = sigma_tau^2 + sigma_w^2;
- one task's mean of m programs has SD sd_t = sqrt(sigma_tau^2 + (sigma_w^2 + noise) / m): more programs a task
  shrink the second part only, so sigma_tau alone sets how many tasks any m needs.

To see an effect delta two-sided at level alpha (Holm over M comparisons: its strictest step, alpha / M) with power
1 - beta, the fewest units n with (t(1 - alpha / 2M; n - 1 + prior) + t(1 - beta; n - 1)) sd / sqrt(n) <= delta
(power 0.5 drops the second term: the expected half-width is then delta). The spreads come from a pilot run's
outcomes (the pooled game: per program its Banzhaf values, grouped by task, the pilot's own noise removed) or, with
no pilot, the documented default spread for sigma_p and sigma_tau = sigma_p (every program's own effect taken as its
task's: the most tasks it could need).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import special

from cudanalyst.attribution import transforms as tf
from cudanalyst.attribution.design import DEFAULT_RATE, DEFAULT_SPREAD, MAX_UNITS, complete_rates
from cudanalyst.attribution.intervals import PRIOR_UNITS
from cudanalyst.attribution.values import GAME_ARM, OutcomeTables


@dataclass(frozen=True)
class Levels:
    """One metric's spreads at both levels, from a pilot (or assumed), with what they rest on."""

    metric: str
    player: str  # the player with the largest spread between programs and tasks (the hardest to size)
    sigma_program: float  # between programs, all tasks together, noise removed
    sigma_task: float  # between task means, within-task spread and noise removed
    sigma_within: float  # between programs of one task, noise removed
    rate: float  # mean rate of the pilot's game (its Bernoulli noise)
    rollouts: int  # the pilot's rollouts behind each rate
    programs: int
    tasks: int
    source: str  # "pilot", or "default" with the assumption named in `note`
    note: str = ""


def _noise(rate: float, rollouts: int, players: int) -> float:
    return rate * (1 - rate) / max(1, rollouts) / 2 ** (players - 2)


def pilot_levels(tables: OutcomeTables) -> list[Levels]:
    """Per metric, from the pilot's pooled game of coalitions: per program its Banzhaf values, split into the
    spread between tasks and within them (one-way random effects, method of moments), the pilot's noise removed."""
    out = []
    n = len(tables.players)
    for metric in tables.metrics:
        po = tables.games.get((GAME_ARM, metric, None))
        if po is None or po.masks.size != 1 << n:
            continue
        ok, rate = complete_rates(po)
        if ok.sum() < 2:
            continue
        values = tf.banzhaf_values(rate)  # (programs, players)
        unit = po.unit[ok]
        mean_rate = float(rate.mean())
        rollouts = max(1, po.rollouts.size)
        noise = _noise(mean_rate, rollouts, n)
        best: Levels | None = None
        best_key = (-1.0, -1.0)
        for i, player in enumerate(tables.players):
            b = values[:, i]
            sigma_p2 = max(float(b.var(ddof=1)) - noise, 0.0)
            groups = [b[unit == u] for u in np.unique(unit)]
            tasks = len(groups)
            within_df = sum(len(g) - 1 for g in groups)
            if tasks >= 2 and within_df > 0:
                s_w2 = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / within_df
                means = np.array([g.mean() for g in groups])
                m_h = tasks / sum(1 / len(g) for g in groups)  # harmonic mean of programs per task
                sigma_t2 = max(float(means.var(ddof=1)) - s_w2 / m_h, 0.0)
                sigma_w2 = max(s_w2 - noise, 0.0)
                note = ""
            else:
                sigma_t2, sigma_w2 = sigma_p2, 0.0
                note = ("one task, or one program a task: the spread between tasks is taken as the spread between "
                        "programs (the most tasks it could need)")
            level = Levels(metric, player, math.sqrt(sigma_p2), math.sqrt(sigma_t2), math.sqrt(sigma_w2),
                           mean_rate, rollouts, int(ok.sum()), tasks, "pilot", note)
            # The hardest player to size at either level; where the noise hides every player's spread (sigmas 0),
            # the one whose values spread most as observed, not simply the first.
            key = (level.sigma_program**2 + level.sigma_task**2, float(b.var(ddof=1)))
            if key > best_key:
                best, best_key = level, key
        if best is not None:
            out.append(best)
    return out


def default_levels(metrics: Sequence[str]) -> list[Levels]:
    note = (f"no pilot: the documented default spread {DEFAULT_SPREAD} between programs at rate {DEFAULT_RATE}, "
            "and the same between tasks (the most tasks it could need)")
    return [Levels(m, "any", DEFAULT_SPREAD, DEFAULT_SPREAD, 0.0, DEFAULT_RATE, 1, 0, 0, "default", note)
            for m in metrics]


def _t(p: float, df: float) -> float:
    return float(special.stdtrit(df, p))


def detectable(units: int, sd: float, alpha: float, power: float) -> float | None:
    """The smallest effect `units` units see at this alpha and power (None below two units)."""
    if units < 2:
        return None
    return (_t(1 - alpha / 2, units - 1 + PRIOR_UNITS) + _t(power, units - 1)) * sd / math.sqrt(units)


def units_for(effect: float, sd: float, alpha: float, power: float) -> int | None:
    """The fewest units that see `effect` (None beyond MAX_UNITS): detectable() falls with units, so bisect."""
    if sd == 0:
        return 2
    if (detectable(MAX_UNITS, sd, alpha, power) or math.inf) > effect:
        return None
    lo, hi = 2, MAX_UNITS
    while lo < hi:
        mid = (lo + hi) // 2
        if (detectable(mid, sd, alpha, power) or math.inf) <= effect:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class Design:
    """What the plan would run: its players, rollouts, programs and tasks, and programs per task."""

    players: int
    rollouts: int
    programs: int
    tasks: int

    @property
    def programs_per_task(self) -> int:
        return max(1, round(self.programs / max(1, self.tasks)))


def input_problem(effect: float, power: float, comparisons: int = 1) -> str | None:
    """What is wrong with a sizing's inputs, named by option (`cudanalyst plan`, `cudanalyst study`), or None."""
    if not 0 < effect <= 1:
        return f"--effect {effect}: the smallest Banzhaf value to see, between 0 (excluded) and 1"
    if not 0.5 <= power < 1:
        return f"--power {power}: between 0.5 and 1 (excluded)"
    if comparisons < 1:
        return f"--comparisons {comparisons}: at least 1"
    return None


def sizing(levels: Sequence[Levels], design: Design, effect: float, confidence: float, power: float,
           comparisons: int) -> dict[str, object]:
    """Per metric: the units each level needs to see `effect`, and what this plan's own units see."""
    alpha = (1 - confidence) / comparisons
    m = design.programs_per_task
    rows = []
    for lv in levels:
        noise = _noise(lv.rate, design.rollouts, design.players)
        sd_p = math.sqrt(lv.sigma_program**2 + noise)
        sd_t = math.sqrt(lv.sigma_task**2 + (lv.sigma_within**2 + noise) / m)
        seen_p = detectable(design.programs, sd_p, alpha, power)
        seen_t = detectable(design.tasks, sd_t, alpha, power)
        # The pilot's own counts are named apart from the two levels' answers ("programs", "tasks") below.
        pilot = {("pilotPrograms" if k == "programs" else "pilotTasks" if k == "tasks" else _camel(k)):
                 (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(lv).items()}
        rows.append({
            **pilot,
            "noisePerProgram": round(math.sqrt(noise), 4),
            "programs": {"unit": "program", "sd": round(sd_p, 4), "needed": units_for(effect, sd_p, alpha, power),
                         "planned": design.programs, "detectable": None if seen_p is None else round(seen_p, 3)},
            "tasks": {"unit": "task", "programsPerTask": m, "sd": round(sd_t, 4),
                      "needed": units_for(effect, sd_t, alpha, power),
                      "neededAnyProgramsPerTask": units_for(effect, lv.sigma_task, alpha, power),
                      "planned": design.tasks, "detectable": None if seen_t is None else round(seen_t, 3)},
        })
    return {"effect": effect, "confidence": confidence, "power": power, "comparisons": comparisons,
            "alpha": round(alpha, 6), "players": design.players, "rollouts": design.rollouts, "metrics": rows}


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(w.title() for w in rest)


def _n(value: object) -> str:
    return f"> {MAX_UNITS:,}" if value is None else str(value)


def sizing_markdown(result: dict[str, object], pilot: str | None) -> str:
    """The calculation as a study page's section: the inputs, the formulas with their numbers, the answer."""
    effect, power, comparisons, alpha = result["effect"], result["power"], result["comparisons"], result["alpha"]
    confidence = result["confidence"]
    assert isinstance(confidence, float) and isinstance(result["metrics"], list)
    rows = result["metrics"]
    source = f"the pilot run `{pilot}`" if pilot else "no pilot (the documented default spread)"
    lines = [
        "### Sizing: the smallest effect to see",
        "",
        f"Smallest effect: a Banzhaf value of {effect}, two-sided at {confidence * 100:g} % "
        + (f"with Holm over {comparisons} comparisons (its strictest step: alpha = {1 - confidence:g} / "
           f"{comparisons} = {alpha:.4g})" if comparisons > 1 else f"(alpha = {alpha:.4g})")
        + f", power {power}. Spreads from {source}; this plan: {result['players']} players, "
        f"{result['rollouts']} rollout(s).",
        "",
        "| metric | player | sigma programs | sigma tasks | sigma within | rate | pilot programs / tasks | "
        "programs needed | planned, sees | tasks needed (m a task) | tasks needed, any m | planned, sees |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p, t = r["programs"], r["tasks"]
        pilot_units = f"{r['pilotPrograms']} / {r['pilotTasks']}" if r["source"] == "pilot" else "assumed"
        lines.append(
            f"| {r['metric']} | {r['player']} | {r['sigmaProgram']} | {r['sigmaTask']} | {r['sigmaWithin']} | "
            f"{r['rate']} | {pilot_units} | {_n(p['needed'])} | {p['planned']}, {_n(p['detectable'])} | "
            f"{_n(t['needed'])} (m = {t['programsPerTask']}) | {_n(t['neededAnyProgramsPerTask'])} | "
            f"{t['planned']}, {_n(t['detectable'])} |")
    lines += [
        "",
        "A program's Banzhaf value is b = mu + tau (its task) + e (the program) + noise, noise = rate (1 - rate) / "
        "(R 2^(n-2)). Over programs the unit's SD is sd_p = sqrt(sigma_programs^2 + noise); over tasks, a task is the "
        "mean of its m programs: sd_t = sqrt(sigma_tasks^2 + (sigma_within^2 + noise) / m). The units needed are "
        f"the fewest n with (t(1 - alpha/2; n - 1 + {PRIOR_UNITS:g}) + t({power}; n - 1)) sd / sqrt(n) <= {effect}; "
        "\"sees\" is the smallest effect this plan's own units reach at the same alpha and power.",
    ]
    for r in rows:
        p, t = r["programs"], r["tasks"]
        lines.append(f"- {r['metric']}: sd_p = sqrt({r['sigmaProgram']}^2 + {r['noisePerProgram']}^2) = {p['sd']} "
                     f"-> {_n(p['needed'])} programs; sd_t = sqrt({r['sigmaTask']}^2 + ({r['sigmaWithin']}^2 + "
                     f"{r['noisePerProgram']}^2) / {t['programsPerTask']}) = {t['sd']} -> {_n(t['needed'])} tasks"
                     + (f" ({r['note']})" if r["note"] else ""))
    return "\n".join(lines) + "\n"
