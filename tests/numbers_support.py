"""Comparing a rebuilt page's numbers with the shipped ones: equal up to floating-point noise.

A difference of equal rates comes out as +-1e-17 depending on the order numpy sums in (its version and SIMD path
change it: numpy 2.3.5 on a fresh machine gave the opposite signs of the shipped pages' zeros). A rebuilt page must
give the same numbers, not the same last bits."""

from __future__ import annotations

import math
from typing import Any

NOISE = 1e-9


def same_numbers(got: Any, want: Any, where: str = "$") -> None:
    """Assert `got` is `want` (parsed JSON or YAML) with every float equal within NOISE; names the first place that
    differs."""
    if isinstance(want, bool) or not isinstance(want, (int, float)) or not isinstance(got, (int, float)):
        if isinstance(want, dict) and isinstance(got, dict):
            assert got.keys() == want.keys(), f"{where}: keys {sorted(got)} != {sorted(want)}"
            for k in want:
                same_numbers(got[k], want[k], f"{where}.{k}")
        elif isinstance(want, list) and isinstance(got, list):
            assert len(got) == len(want), f"{where}: {len(got)} items != {len(want)}"
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                same_numbers(g, w, f"{where}[{i}]")
        else:
            assert got == want, f"{where}: {got!r} != {want!r}"
        return
    assert math.isclose(got, want, rel_tol=NOISE, abs_tol=NOISE), f"{where}: {got!r} != {want!r}"
