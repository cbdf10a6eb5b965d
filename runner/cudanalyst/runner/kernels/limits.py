"""How long a candidate's verification may run: its full limit, and the brief first attempt beside a model server.

The full limit is a multiple of the task baseline's own verification runs, with a floor, under the spec's
`timeoutSeconds`: a kernel that never terminates costs seconds, not a minute.

While candidates still come in (a whole run's LLM stage), a hung candidate spins on the GPU beside the model
server for all of that limit, and the GPU slices its time between the two processes' contexts. With a first
attempt (`CUDANALYST_FIRST_ATTEMPT_SECONDS`, off unless set) a verification started then gets at most that many
seconds; one that runs out is verified again with its full limit once every candidate is in, after the server
has stopped. No verdict changes: a run that finishes within the brief limit finishes within the full one, and
a timeout is never stored as a verdict (verify/verdicts.py). What it costs: the retries run in the tail.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

LIMIT_FLOOR_S = 10.0  # a candidate's verification time limit is never below this ...
LIMIT_MULTIPLE = 20.0  # ... and otherwise this many times the task baseline's own verification runs
FIRST_ATTEMPT_ENV = "CUDANALYST_FIRST_ATTEMPT_SECONDS"


def time_limit(reference_seconds: float | None, cap: float) -> float:
    """A candidate's verification time limit: a multiple of its reference's, with a floor, under the cap (pure)."""
    if reference_seconds is None or reference_seconds <= 0:
        return cap
    return min(cap, max(LIMIT_FLOOR_S, LIMIT_MULTIPLE * reference_seconds))


def own_seconds(verdict: dict[str, Any] | None) -> float | None:
    """A correct verdict's seconds without those its worker spent making the task's inputs and references
    (`referenceSeconds`: the harness's, once per task and seed): what a candidate's own runs are limited by
    (pure). None for no verdict, a wrong one, or one without seconds."""
    if not verdict or not verdict.get("correct") or "seconds" not in verdict:
        return None
    return max(0.0, float(verdict["seconds"]) - float(verdict.get("referenceSeconds", 0.0)))


def first_attempt_seconds(environ: Mapping[str, str]) -> float | None:
    """The first attempt's limit from the environment: None when it is off (unset, empty, `0` or `off`) (pure).
    ValueError, naming the variable and its value, for anything but a positive finite number of seconds."""
    text = environ.get(FIRST_ATTEMPT_ENV, "").strip()
    if text.lower() in ("", "0", "off"):
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{FIRST_ATTEMPT_ENV}={text!r}: expected a positive number of seconds (or 0 or off: no "
                         "first attempt)")
    return seconds


def attempt_limit(full: float, first_attempt_s: float | None, all_in: bool) -> tuple[float, bool]:
    """(the limit a verification starting now gets, whether it is a brief first attempt) (pure): the first
    attempt's seconds while candidates still come in (not `all_in`), when they are under the full limit; else the
    full limit."""
    if first_attempt_s is not None and not all_in and first_attempt_s < full:
        return first_attempt_s, True
    return full, False
