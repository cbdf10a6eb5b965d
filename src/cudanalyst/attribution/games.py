"""Coalition encoding and games given as tables of values.

A coalition of players is a bitmask: bit i stands for ``players[i]`` (spec order), so a game over n
players is a float array of length 2^n indexed by mask. On the wire a coalition is its players joined by
commas ("" is the empty coalition); any order is accepted on input, spec order is written on output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# 2^24 coalitions is 128 MiB of float64 per table; beyond that exact enumeration is not the right tool.
MAX_EXACT_PLAYERS = 24


class GameError(ValueError):
    """A game (file or mapping) that is malformed; the message names the file and the key."""


@dataclass(frozen=True)
class Game:
    """v(S) for every coalition S, as a table indexed by bitmask."""

    players: tuple[str, ...]
    values: FloatArray  # shape (2^n,)

    @property
    def n(self) -> int:
        return len(self.players)


def check_players(players: Any, where: str = "players") -> tuple[str, ...]:
    """Players must be a non-empty list of unique, non-empty names without commas."""
    if not isinstance(players, list | tuple) or not players:
        raise GameError(f"{where}: expected a non-empty list of player names")
    for i, p in enumerate(players):
        if not isinstance(p, str) or not p.strip():
            raise GameError(f"{where}[{i}]: a player name must be a non-empty string, got {p!r}")
        if "," in p or p != p.strip():
            raise GameError(f"{where}[{i}]: player name {p!r} may not contain commas or surrounding spaces")
    dupes = sorted({p for p in players if list(players).count(p) > 1})
    if dupes:
        raise GameError(f"{where}: players must be unique; repeated: {', '.join(dupes)}")
    return tuple(players)


def coalition_key(mask: int, players: Sequence[str]) -> str:
    """The wire name of a coalition: its players in spec order, joined by commas."""
    return ",".join(p for i, p in enumerate(players) if mask >> i & 1)


def coalition_mask(members: Sequence[str], players: Sequence[str], where: str = "coalition") -> int:
    """Bitmask of a coalition given as a list of player names (any order)."""
    index = {p: i for i, p in enumerate(players)}
    mask = 0
    for name in members:
        if name not in index:
            raise GameError(f"{where}: unknown player {name!r} (players: {', '.join(players)})")
        bit = 1 << index[name]
        if mask & bit:
            raise GameError(f"{where}: player {name!r} appears twice")
        mask |= bit
    return mask


def parse_coalition(key: str, players: Sequence[str], where: str = "coalition") -> int:
    """Bitmask of a coalition written as "a,b" (any order; "" is the empty coalition)."""
    members = [part.strip() for part in key.split(",")] if key.strip() else []
    if any(not m for m in members):
        raise GameError(f"{where}: empty player name in coalition {key!r}")
    return coalition_mask(members, players, where)


@lru_cache(maxsize=32)
def popcounts(n: int) -> npt.NDArray[np.int64]:
    """|S| for every mask S of n players (read-only, cached)."""
    counts = np.zeros(1, dtype=np.int64)
    for _ in range(n):
        counts = np.concatenate([counts, counts + 1])
    counts.setflags(write=False)
    return counts


def masks_of_order(n: int, order: int) -> npt.NDArray[np.int64]:
    """Masks with exactly `order` members, in lexicographic order of their member indices (none if order > n)."""
    if order < 0:
        raise ValueError(f"order must be 0 or more, got {order}")
    # Lexicographic by members (0,1), (0,2), ..., (1,2), ...: the order pair keys are printed in.
    masks = [sum(1 << i for i in combo) for combo in combinations(range(n), order)]
    return np.asarray(masks, dtype=np.int64)


def game_from_mapping(players: Any, values: Any, source: str = "game") -> Game:
    """Build a game from {"a,b": v, ...}; every coalition must be present exactly once."""
    names = check_players(players, f"{source}: players")
    n = len(names)
    if n > MAX_EXACT_PLAYERS:
        raise GameError(f"{source}: players: {n} players is too many for an exact game (at most {MAX_EXACT_PLAYERS})")
    if not isinstance(values, Mapping):
        raise GameError(f"{source}: values: expected an object mapping coalitions to numbers")
    table = np.full(1 << n, np.nan)
    seen: dict[int, str] = {}
    for key, value in values.items():
        where = f"{source}: values[{key!r}]"
        if not isinstance(key, str):
            raise GameError(f"{where}: a coalition key must be a string")
        mask = parse_coalition(key, names, where)
        if mask in seen:
            raise GameError(f"{where}: the same coalition as values[{seen[mask]!r}]")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise GameError(f"{where}: expected a finite number, got {value!r}")
        seen[mask] = key
        table[mask] = float(value)
    missing = np.flatnonzero(np.isnan(table))
    if missing.size:
        shown = ", ".join(repr(coalition_key(int(m), names)) for m in missing[:5])
        more = f" and {missing.size - 5} more" if missing.size > 5 else ""
        raise GameError(
            f"{source}: values: missing coalition {shown}{more} "
            f"({missing.size} of {1 << n} missing; every coalition of {', '.join(names)} is needed)"
        )
    return Game(names, table)


def load_game_file(path: str | Path) -> Game:
    """Read a game file: {"players": [...], "values": {"": 0.1, "a": 0.3, "a,b": 0.5, ...}}."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise GameError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise GameError(f"{source}: not UTF-8 text: {exc}") from exc

    def reject_constant(name: str) -> float:
        raise GameError(f"{source}: {name} is not a number JSON allows")

    try:
        data = json.loads(text, parse_constant=reject_constant)
    except json.JSONDecodeError as exc:
        raise GameError(f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise GameError(f"{source}: expected a JSON object with keys players and values")
    for field in ("players", "values"):
        if field not in data:
            raise GameError(f"{source}: missing key {field!r}")
    unknown = sorted(set(data) - {"players", "values"})
    if unknown:
        raise GameError(f"{source}: unknown key(s) {', '.join(map(repr, unknown))} (expected players, values)")
    return game_from_mapping(data["players"], data["values"], source)
