"""Where a vLLM server's start went, read from its log when it became healthy (issue 32: ready in 45 s).

`healthy after 66 s` alone does not say what to fix. vLLM's log says the rest: its API server's first line (the
time to it is that process's Python and imports), its engine process's first line (that process's start and
imports), the engine's own figures (weights, torch.compile and whether it came from the cache, CUDA graphs, the
whole engine init) and the API server's last steps to /health. The log's clock has whole seconds, so the phases
between its lines are whole seconds too; the engine's own figures keep vLLM's precision.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

# "(APIServer pid=10914) INFO 12-04 02:12:46 [utils.py:344] ..." ; vLLM's date format has no year.
_LINE = re.compile(r"\((?P<who>APIServer|EngineCore)[^)]*\) [A-Z]+ (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d) ")
# The GPU build says "Model loading took"; the CPU build only "Loading weights took".
_WEIGHTS = (re.compile(r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds"),  # V1; V2 without "memory"
            re.compile(r"Loading weights took ([\d.]+) seconds"))
_COMPILE = re.compile(r"torch\.compile took ([\d.]+) s in total")
_COMPILE_CACHED = re.compile(r"Directly load the compiled graph")
_GRAPHS = re.compile(r"Graph capturing finished in ([\d.]+) secs")
# Our GPU servers ask vLLM to fork its engine (serving.GPU_ENV: no second import of torch and vLLM); vLLM spawns it
# instead where forking is unsafe, and says why in this warning (vllm/utils/system_utils.py: _maybe_force_spawn).
_FORCED_SPAWN = re.compile(r"Overriding VLLM_WORKER_MULTIPROC_METHOD to 'spawn'.*?Reasons?: (?P<why>.+?)\s*$",
                           re.MULTILINE)
_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")


@dataclass(frozen=True)
class StartPhases:
    """Seconds of a server's start; None where its log did not say (another vLLM, a start that failed)."""

    api_server_s: float | None = None  # the launch to the API server's first log line
    engine_process_s: float | None = None  # the API server's first line to the engine process's first line
    engine_s: float | None = None  # the engine's first line to its "init engine ... took" line
    ready_s: float | None = None  # that line to /health answering
    weights_s: float | None = None
    compile_s: float | None = None
    compile_cached: bool = False
    graphs_s: float | None = None
    forced_spawn: str | None = None  # vLLM's reasons for spawning the engine where it was asked to fork it

    def describe(self) -> str:
        """One clause for the console's start note; empty when the log said nothing usable."""
        parts = []
        if self.api_server_s is not None:
            parts.append(f"{self.api_server_s:.0f} s to the API server's first log line")
        if self.engine_process_s is not None:
            parts.append(f"{self.engine_process_s:.0f} s more to the engine process's")
        engine = [f"weights {self.weights_s:.1f} s"] if self.weights_s is not None else []
        if self.compile_s is not None:
            engine.append(f"torch.compile {self.compile_s:.1f} s{' from its cache' if self.compile_cached else ''}")
        if self.graphs_s is not None:
            engine.append(f"CUDA graphs {self.graphs_s:.0f} s")
        if self.engine_s is not None:
            parts.append(f"{self.engine_s:.0f} s in the engine" + (f" ({', '.join(engine)})" if engine else ""))
        if self.ready_s is not None:
            parts.append(f"{self.ready_s:.0f} s to healthy")
        if self.forced_spawn is not None:
            parts.append(f"the engine spawned, not forked (vLLM: {self.forced_spawn})")
        return ", ".join(parts)


def _epoch(stamp: str, near: float) -> float:
    """A log stamp (MM-DD HH:MM:SS, the server's local time, as ours) as seconds since the epoch, in the year of
    `near` (the launch), or the next one for a start across New Year."""
    year = time.localtime(near).tm_year
    at = time.mktime(time.strptime(f"{year}-{stamp}", "%Y-%m-%d %H:%M:%S"))
    return at if at >= near - 86400 else time.mktime(time.strptime(f"{year + 1}-{stamp}", "%Y-%m-%d %H:%M:%S"))


def _figure(text: str, *patterns: re.Pattern[str]) -> float | None:
    """The first pattern's figure that the log has."""
    for pattern in patterns:
        if found := pattern.search(text):
            return float(found.group(1))
    return None


def start_phases(log: str, launched_at: float, healthy_after_s: float) -> StartPhases:
    """The phases of a start from its log, `launched_at` (time.time() at the launch) and the seconds to /health."""
    first: dict[str, float] = {}
    engine_done = None
    for text in log.splitlines():
        if not (line := _LINE.match(text)):
            continue  # progress bars, warnings, tracebacks
        first.setdefault(line["who"], _epoch(line["stamp"], launched_at))
        if engine_done is None and _ENGINE.search(text):
            engine_done = _epoch(line["stamp"], launched_at)
    healthy_at = launched_at + healthy_after_s
    api, engine = first.get("APIServer"), first.get("EngineCore")
    # Clamped at 0: the log's clock has whole seconds and the launch has not.
    return StartPhases(
        api_server_s=max(0.0, api - launched_at) if api is not None else None,
        engine_process_s=max(0.0, engine - api) if api is not None and engine is not None else None,
        engine_s=engine_done - engine if engine is not None and engine_done is not None else None,
        ready_s=max(0.0, healthy_at - engine_done) if engine_done is not None else None,
        weights_s=_figure(log, *_WEIGHTS),
        compile_s=_figure(log, _COMPILE),
        compile_cached=bool(_COMPILE_CACHED.search(log)),
        graphs_s=_figure(log, _GRAPHS),
        forced_spawn=found["why"] if (found := _FORCED_SPAWN.search(log)) else None,
    )
