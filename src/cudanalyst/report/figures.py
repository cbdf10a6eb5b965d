"""The report's figures as PNG bytes (matplotlib, no pyplot: the Agg canvas, no display, no global state).

Each function takes the JSON-ready report sections and returns one PNG. A metric that was not
evaluated gets a panel saying so, never bars or lines at zero.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cudanalyst.report.compute import coalition_order

POOLED_LABEL = "pooled"
# Beyond this many coalitions a bar per coalition is unreadable; the structured ones are kept.
MAX_COALITION_BARS = 48
DPI = 110


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _not_evaluated(ax: Axes, metric: str, why: str = "not evaluated") -> None:
    ax.set_title(metric)
    ax.text(0.5, 0.5, why, ha="center", va="center", fontsize=13, color="#777777",
            transform=ax.transAxes, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_linestyle(":")
        spine.set_color("#bbbbbb")


def _games(attribution: dict[str, Any], metric: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """This metric's per-generation games (by generation) and its pooled game."""
    games = [g for g in attribution["games"] if g["metric"] == metric]
    per_gen = sorted((g for g in games if not g["pooled"]), key=lambda g: g["generation"])
    pooled = next((g for g in games if g["pooled"]), None)
    return per_gen, pooled


def _estimate(game: dict[str, Any] | None, section: str, key: str) -> tuple[float, float, float]:
    """(value, low, high) or NaNs when absent or not evaluated."""
    est = (game or {}).get(section, {}).get(key) if game and game.get("evaluated") else None
    if not est or est.get("value") is None:
        return (np.nan, np.nan, np.nan)
    low = est["low"] if est.get("low") is not None else est["value"]
    high = est["high"] if est.get("high") is not None else est["value"]
    return (est["value"], low, high)


def attribution_figure(attribution: dict[str, Any]) -> bytes:
    """Banzhaf value of each player per generation, one panel per metric, interval bands, pooled at the right."""
    players: list[str] = attribution["players"]
    metrics: list[str] = attribution["metrics"]
    fig = Figure(figsize=(5.2 * len(metrics), 4.2), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    colors = [f"C{i % 10}" for i in range(len(players))]
    for ax, metric in zip(axes, metrics, strict=True):
        per_gen, pooled = _games(attribution, metric)
        if pooled is None or not pooled["evaluated"]:
            _not_evaluated(ax, metric)
            continue
        gens = [g["generation"] for g in per_gen]
        x = np.arange(len(gens), dtype=float)
        x_pooled = len(gens) + 0.4
        # A small horizontal offset per player keeps overlapping intervals apart.
        offsets = (np.arange(len(players)) - (len(players) - 1) / 2) * 0.06
        for i, player in enumerate(players):
            vals = np.array([_estimate(g, "banzhaf", player) for g in per_gen]).reshape(-1, 3)
            if len(gens):
                ax.plot(x + offsets[i], vals[:, 0], "o-", color=colors[i], label=player, lw=1.8, ms=4)
                ax.fill_between(x + offsets[i], vals[:, 1], vals[:, 2], color=colors[i], alpha=0.15, lw=0)
            v, lo, hi = _estimate(pooled, "banzhaf", player)
            ax.errorbar([x_pooled + offsets[i]], [v], yerr=[[v - lo], [hi - v]], fmt="D", color=colors[i],
                        capsize=3, ms=5, label=None if len(gens) else player)
        ax.axhline(0, color="#444444", lw=0.8)
        ax.axvline(len(gens) - 0.3, color="#cccccc", lw=0.8, ls="--")
        ax.set_xticks([*x, x_pooled], [*map(str, gens), POOLED_LABEL])
        ax.set_xlabel("generation")
        ax.set_ylabel("Banzhaf value")
        ax.set_title(metric)
        ax.grid(alpha=0.3)
    handles, labels = next(((a.get_legend_handles_labels()) for a in axes if a.get_legend_handles_labels()[0]),
                           ([], []))
    if handles:
        fig.legend(handles, labels, loc="outside upper center", ncols=min(len(players), 8), frameon=False)
    return _png(fig)


def _ink(value: float, bound: float) -> str:
    """White text on the dark ends of the diverging colormap, black elsewhere."""
    return "white" if np.isfinite(value) and abs(value) > 0.6 * bound else "black"


def interaction_matrix(game: dict[str, Any], players: Sequence[str]) -> np.ndarray:
    """Symmetric n x n matrix of pairwise interactions (NaN on the diagonal and where unknown)."""
    n = len(players)
    mat = np.full((n, n), np.nan)
    for key, est in game.get("interactions", {}).items():
        pair = key.split(",")
        if len(pair) != 2 or est.get("value") is None:
            continue
        i, j = players.index(pair[0]), players.index(pair[1])
        mat[i, j] = mat[j, i] = est["value"]
    return mat


def interactions_figure(attribution: dict[str, Any]) -> bytes:
    """Heatmap of the pooled pairwise Banzhaf interactions, one panel per metric."""
    players: list[str] = attribution["players"]
    metrics: list[str] = attribution["metrics"]
    n = len(players)
    side = max(3.2, 0.55 * n + 2.2)
    fig = Figure(figsize=(side * len(metrics) + 0.8, side), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        _, pooled = _games(attribution, metric)
        if pooled is None or not pooled["evaluated"]:
            _not_evaluated(ax, metric)
            continue
        if n < 2:
            _not_evaluated(ax, metric, "one player: no pairs")
            continue
        mat = interaction_matrix(pooled, players)
        bound = float(np.nanmax(np.abs(mat))) if np.isfinite(mat).any() else 0.0
        bound = bound or 1e-3
        image = ax.imshow(mat, cmap="RdBu_r", vmin=-bound, vmax=bound)
        ax.set_xticks(range(n), players, rotation=45, ha="right")
        ax.set_yticks(range(n), players)
        if n <= 10:
            for i in range(n):
                for j in range(n):
                    if i != j and np.isfinite(mat[i, j]):
                        ax.text(j, i, f"{mat[i, j]:+.2f}", ha="center", va="center", fontsize=8,
                                color=_ink(mat[i, j], bound))
        ax.set_title(f"{metric} (pooled)")
        fig.colorbar(image, ax=ax, shrink=0.8, label="interaction")
    return _png(fig)


def shown_coalitions(keys: Sequence[str], n: int) -> list[str]:
    """All coalitions when few; else the empty, singletons, leave-one-outs and the grand coalition."""
    if len(keys) <= MAX_COALITION_BARS:
        return list(keys)

    def size(key: str) -> int:
        return len(key.split(",")) if key else 0

    return [k for k in keys if size(k) <= 1 or size(k) >= n - 1]


def coalitions_figure(attribution: dict[str, Any]) -> bytes:
    """Pooled outcome rate of every coalition (and control arm) per metric, with intervals."""
    players: list[str] = attribution["players"]
    metrics: list[str] = attribution["metrics"]
    pooled_controls = [c for c in attribution.get("controls", []) if c["pooled"]]
    first = next((g for m in metrics for g in [_games(attribution, m)[1]] if g), None)
    keys = shown_coalitions(sorted((first or {}).get("values", {}), key=lambda k: coalition_order(k, players)),
                            len(players))
    arms = list(dict.fromkeys(c["arm"] for c in pooled_controls))
    labels = [k or "(none)" for k in keys] + [f"[{a}]" for a in arms]
    fig = Figure(figsize=(4.2 * len(metrics) + 1.5, max(3.0, 0.28 * len(labels) + 1.4)), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False, sharey=True)[0]
    y = np.arange(len(labels))
    for ax, metric in zip(axes, metrics, strict=True):
        _, pooled = _games(attribution, metric)
        if pooled is None or not pooled["evaluated"]:
            _not_evaluated(ax, metric)
            ax.set_yticks(y, labels)
            continue
        rows = [_estimate(pooled, "values", k) for k in keys]
        for arm in arms:
            ctrl = next((c for c in pooled_controls if c["arm"] == arm and c["metric"] == metric), None)
            ests = [e for e in (ctrl or {}).get("rates", {}).values() if e.get("value") is not None]
            rows.append((ests[0]["value"], ests[0]["low"], ests[0]["high"]) if ests else (np.nan,) * 3)
        # Rates live in [0, 1]; the analytic interval can overshoot near the ends.
        arr = np.clip(np.array(rows, dtype=float).reshape(-1, 3), 0.0, 1.0)
        colors = ["C0"] * len(keys) + ["C7"] * len(arms)
        ax.barh(y, np.nan_to_num(arr[:, 0]), color=colors, alpha=0.85)
        ax.errorbar(arr[:, 0], y, xerr=[arr[:, 0] - arr[:, 1], arr[:, 2] - arr[:, 0]], fmt="none",
                    ecolor="#333333", capsize=2, lw=1)
        ax.set_yticks(y, labels)
        ax.set_xlim(0, 1.05)
        ax.set_xlabel("rate")
        ax.set_title(f"{metric} (pooled)")
        ax.grid(axis="x", alpha=0.3)
    axes[0].invert_yaxis()
    total = len((first or {}).get("values", {}))
    if len(keys) < total:
        fig.suptitle(f"{len(keys)} of {total} coalitions: none, singletons, leave-one-outs, all "
                     "(every coalition is in report.json)", fontsize=10)
    return _png(fig)


def tasks_figure(tasks: list[dict[str, Any]], players: Sequence[str], metrics: Sequence[str]) -> bytes:
    """Pooled Banzhaf value per task and player, one heatmap per metric."""
    names = [t["task"] for t in tasks]
    fig = Figure(figsize=(max(3.5, 0.7 * len(players) + 2.5) * len(metrics), max(2.6, 0.38 * len(names) + 1.6)),
                 layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        games = [next((g for g in t["games"] if g["metric"] == metric), None) for t in tasks]
        if not any(g and g["evaluated"] for g in games):
            _not_evaluated(ax, metric)
            continue
        mat = np.array([[_estimate(g, "banzhaf", p)[0] for p in players] for g in games], dtype=float)
        bound = float(np.nanmax(np.abs(mat))) if np.isfinite(mat).any() else 0.0
        bound = bound or 1e-3
        image = ax.imshow(mat, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
        ax.set_xticks(range(len(players)), players, rotation=45, ha="right")
        ax.set_yticks(range(len(names)), names)
        if mat.size <= 200:
            for i in range(mat.shape[0]):
                for j in range(mat.shape[1]):
                    text = f"{mat[i, j]:+.2f}" if np.isfinite(mat[i, j]) else "n/a"
                    ax.text(j, i, text, ha="center", va="center", fontsize=8, color=_ink(mat[i, j], bound))
        ax.set_title(f"{metric}: Banzhaf per task")
        fig.colorbar(image, ax=ax, shrink=0.8)
    return _png(fig)
