"""Where a `cudanalyst run`'s wall time went, on the user's clock (issue 32).

The clock starts when the command's process started (not when its code began: imports and the plan count), and
ends when the last line is printed. Marks are epoch seconds (time.time()), since the shards' LLM timelines
(llm/timeline.py) are read from other processes:

  start   process start -> every model server healthy and warmed up (the LLM stage begins)
  plans   LLM stage begins -> the last plan back (explicit planning; kernels already flow beside them)
  kernels the last plan back -> the LLM stage over (every shard exited)
  tail    the LLM stage over -> the kernel stage over
  kernelStage  process start -> the kernel stage over, in a pass without an LLM stage
  report  building and printing the report
  wall    process start -> the end

Units per hour are given from the command (the whole wall) and after the start (wall less the start), over the
units the pass ran (a resumed pass's, not the plan's).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudanalyst.runner.llm.server_metrics import BUSY_CPUS


def process_started() -> float:
    """When this process started (epoch seconds). On Linux from /proc/self/stat (its start in clock ticks since boot)
    against the boot-time clock now: psutil's create_time adds those ticks to the boot time in whole seconds, so it
    put the start up to a second early, and the command's wall came out longer than the bench's clock around it
    (0.33 s and 0.44 s on 2026-12-02). Elsewhere psutil's, or the earliest moment we know of."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no psutil, or no /proc: the earliest moment we know of
        return _IMPORTED


_IMPORTED = time.time()


@dataclass
class WallClock:
    """Marks of one pass of `cudanalyst run` (epoch seconds), and what the LLM stage measured."""

    started: float = field(default_factory=process_started)
    marks: dict[str, float] = field(default_factory=dict)
    units: int = 0
    llm: dict[str, Any] = field(default_factory=dict)  # timeline.merge(): lastPlan, tokens, in-flight figures
    server: dict[str, Any] = field(default_factory=dict)  # server_metrics.ServerMeter.summary()
    notes: list[str] = field(default_factory=list)  # e.g. where the model server's compiled artefacts came from
    _epoch: float = field(default_factory=time.time, repr=False)
    _monotonic: float = field(default_factory=time.monotonic, repr=False)

    def mark(self, name: str, at: float | None = None) -> None:
        self.marks[name] = self.now() if at is None else at

    def now(self) -> float:
        """Epoch seconds that never go back: the monotonic clock, anchored to the epoch when this clock was made.
        A step of the system clock between two marks would make one span overlap the next. The other processes'
        marks (the LLM timelines) stay epoch seconds."""
        return self._epoch + (time.monotonic() - self._monotonic)

    def spans(self) -> list[tuple[str, str, float]]:
        """(key, label, seconds) of each phase the marks cover, in order."""
        m, out = self.marks, []
        llm, over = m.get("llm"), m.get("llmOver")
        if llm is not None:
            out.append(("start", "start (to the model server ready)", llm - self.started))
        last_plan = self.llm.get("lastPlan")
        if llm is not None and over is not None:
            if last_plan is not None and llm <= last_plan <= over:
                out.append(("plans", "LLM stage: plans (to the last one)", last_plan - llm))
                out.append(("kernels", "LLM stage: kernels after the last plan", over - last_plan))
            else:
                out.append(("kernels", "LLM stage: kernels", over - llm))
        if over is not None and "kernelsOver" in m:
            out.append(("tail", "kernel stage's tail after it", m["kernelsOver"] - over))
        elif llm is None and "kernelsOver" in m:  # a pass without an LLM stage (--stage kernels, or none left)
            out.append(("kernelStage", "kernel stage (no LLM stage in this pass)", m["kernelsOver"] - self.started))
        if "report" in m and "reportOver" in m:
            out.append(("report", "report", m["reportOver"] - m["report"]))
        return out

    def wall(self) -> float:
        return max(self.marks.values(), default=self.started) - self.started

    def to_json(self) -> dict[str, Any]:
        wall = self.wall()
        spans = {key: seconds for key, _, seconds in self.spans()}
        after = wall - spans.get("start", 0.0)
        return {"clock": "the user's: from the command's process start to its last line", "wall": wall,
                "spans": spans, "units": self.units,
                "unitsPerHour": self.units * 3600 / wall if wall > 0 else None,
                "unitsPerHourAfterStart": self.units * 3600 / after if after > 0 else None,
                "llm": self.llm, "server": self.server, "notes": self.notes}

    def lines(self) -> list[str]:
        """The table, then the rates and what the LLM stage measured."""
        wall = self.wall()
        rows = [(label, seconds) for _, label, seconds in self.spans()] + [("wall", wall)]
        width = max(len(label) for label, _ in rows)
        out = ["where the wall time went (the user's clock, from the command's start):"]
        for label, seconds in rows:
            share = f"{seconds / wall * 100:5.1f} %" if wall > 0 and label != "wall" else ""
            out.append(f"  {label.ljust(width)}  {seconds:8.1f} s  {share}".rstrip())
        figures = self.to_json()
        if self.units and figures["unitsPerHour"]:
            rate = f"  {self.units} units: {figures['unitsPerHour']:,.0f} units/h from the command"
            if figures["unitsPerHourAfterStart"] and "start" in figures["spans"]:
                rate += f", {figures['unitsPerHourAfterStart']:,.0f} after the start"
            out.append(rate)
        out += [f"  {line}" for line in llm_lines(self.llm, self.server)]
        out += [f"  {note}" for note in self.notes]
        return out


def llm_lines(llm: dict[str, Any], server: dict[str, Any]) -> list[str]:
    """What the LLM stage measured: tokens per second, where requests waited, the prefix cache."""
    out = []
    seconds = llm.get("seconds") or 0.0
    tokens = int(llm.get("tokens") or 0)
    if tokens and seconds:
        out.append(f"LLM stage: {tokens:,} tokens generated in {seconds:.1f} s: {tokens / seconds:,.0f} tokens/s "
                   f"(plans {int(llm.get('planTokens') or 0):,}, kernels {int(llm.get('codeTokens') or 0):,})")
    if llm.get("inFlight"):
        f = llm["inFlight"]
        out.append(f"requests sent by the shards: mean {f['mean']:.0f} in flight, max {f['max']}; "
                   f"{f['queuedShare'] * 100:.0f} % of the stage with requests held back by the client's bound")
    if server.get("samples"):
        s = server
        hits = f", prefix cache hits {s['prefixHitRate'] * 100:.0f} %" if s.get("prefixHitRate") is not None else ""
        out.append(f"model server: mean {s['runningMean']:.0f} requests running (max {s['runningMax']:.0f}), "
                   f"requests waiting in its queue {s['waitingShare'] * 100:.0f} % of the time, "
                   f"{s['generationTokensPerS']:,.0f} tokens/s{hits}, {s['preemptions']:.0f} preemptions")
        if len(by := s.get("generatedByServer") or {}) > 1 and (total := sum(by.values())) > 0:
            out.append(f"model servers: {len(by)}, their shares of the tokens generated "
                       + ", ".join(f"{100 * n / total:.0f} %" for n in by.values()))
        if s.get("stepSeconds") and s.get("tokensPerStep"):
            gap = f", a request's tokens {s['tokenGapSeconds'] * 1000:.0f} ms apart" if s.get("tokenGapSeconds") else ""
            out.append(f"model server's engine: a step every {s['stepSeconds'] * 1000:.1f} ms, "
                       f"{s['tokensPerStep']:.0f} tokens a step (prompt and generated){gap}")
        if s.get("cpuBusy") is not None:
            out.append(f"machine's CPUs {s['cpuBusy'] * 100:.0f} % busy over the stage{cpu_split(s.get('byCpu'))}")
    return out


def cpu_split(by: dict[str, Any] | None) -> str:
    """The engine's step apart in the intervals with the CPUs busy and in the others, where both stepped."""
    if not by or any(by[k]["stepSeconds"] is None for k in ("busy", "idle")):
        return ""
    limit = f"{BUSY_CPUS * 100:.0f} %"
    return (f"; the engine's step {by['idle']['stepSeconds'] * 1000:.1f} ms in the {by['idle']['intervals']} "
            f"intervals under {limit} busy, {by['busy']['stepSeconds'] * 1000:.1f} ms in the "
            f"{by['busy']['intervals']} at {limit} or more")
