"""Operator benchmark against kmock: reconcile throughput, status latency and the operator's memory.

The operator runs as its own process (`python -m cudanalyst.operator.main`, as in its image) against a
kmock Kubernetes emulator served by this process, so its RSS is its own. Measured side by side in one run:

- throughput: N AttributionRuns posted at once -> each has its Indexed Job (runs/s), then phase Running;
- status latency: every Job marked failed at once -> each run's status says Failed (p50/p95 seconds),
  followed on the Job events; also as a ratio of the safety-net timer's interval (--interval), which the
  latency no longer waits for;
- RSS of the operator process idle (no runs), then holding N runs, and per run.

    python bench/operator_kmock.py --runs 200

The scale test on a real control plane belongs to the control-plane issue; kmock has no resourceVersion,
so kopf may process some events twice here (creation stays idempotent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kmock

NS = "bench"
RUNS = "cudanalyst.dev/v1alpha1/attributionruns"


def free_port_pair() -> int:
    """A port p with p and p+1 free (metrics and health endpoints of the operator)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise SystemExit("no free port pair")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def write_trajectory(folder: Path) -> str:
    from cudanalyst.trajectory import FrozenProgram, dump_programs, manifest_for

    programs = [FrozenProgram(task="vector_add", generation=0, program_id=f"p{i}", source="// k\n",
                              feedback={"debugger": "ok", "profiler": "1 ms"}) for i in range(2)]
    folder.mkdir(parents=True)
    (folder / "programs.jsonl").write_text(dump_programs(programs))
    (folder / "trajectory.json").write_text(manifest_for(programs).model_dump_json(by_alias=True))
    return folder.as_uri() + "/"


def run_body(i: int, trajectory: str, output: str) -> dict[str, Any]:
    name = f"run-{i:04d}"
    return {
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{i}", "generation": 1, "resourceVersion": "1",
                     "labels": {"cudanalyst.dev/batch": "bench"}},
        "spec": {
            "trajectory": {"uri": trajectory, "generations": [0], "programsPerGeneration": 2},
            "players": ["debugger", "profiler"],
            "models": {"planner": {"model": "/models/p"}},
            "sampling": {"rollouts": 1, "samplesPerCoalition": 1},
            "resources": {"shards": 2},
            "output": {"uri": output},
        },
    }


def phase(emu: kmock.KubernetesEmulator, name: str) -> str | None:
    key = (kmock.resource(RUNS), NS, name)
    if key not in emu.objects or emu.objects[key].deleted:
        return None
    return (emu.objects[key].raw.get("status") or {}).get("phase")


async def _wait(names: list[str], reached: Callable[[str], bool], since: dict[str, float], timeout: float,
                what: str) -> dict[str, float]:
    """Seconds from since[name] until reached(name) holds for each run (polled every 50 ms)."""
    done: dict[str, float] = {}
    deadline = time.perf_counter() + timeout
    while len(done) < len(names):
        now = time.perf_counter()
        for name in names:
            if name not in done and reached(name):
                done[name] = now - since[name]
        if now > deadline:
            raise SystemExit(f"timeout: {len(done)}/{len(names)} {what}")
        await asyncio.sleep(0.05)  # kmock serves from this same loop: poll lightly
    return done


async def wait_all(emu: kmock.KubernetesEmulator, names: list[str], want: str, since: dict[str, float],
                   timeout: float) -> dict[str, float]:
    """Seconds from since[name] until each run's phase is `want`."""
    return await _wait(names, lambda name: phase(emu, name) == want, since, timeout, f"runs reached {want}")


async def wait_jobs(emu: kmock.KubernetesEmulator, names: list[str], since: dict[str, float],
                    timeout: float) -> dict[str, float]:
    """Seconds from since[name] until each run's Indexed Job exists."""
    def exists(name: str) -> bool:
        key = (kmock.resource("batch/v1/jobs"), NS, f"{name}-runner")
        return key in emu.objects and not emu.objects[key].deleted

    return await _wait(names, exists, since, timeout, "Jobs created")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="cudanalyst-bench-"))
    trajectory = write_trajectory(tmp / "trajectory")
    (tmp / "out").mkdir()
    output = (tmp / "out").as_uri() + "/"
    async with kmock.KubernetesEmulator() as emu, kmock.Server(emu):
        emu.resources.load_bundled()
        emu.resources[RUNS] = kmock.ResourceInfo(
            kind="AttributionRun", singular="attributionrun", namespaced=True,
            verbs={"list", "watch", "get", "patch", "create", "delete"}, subresources={"status"})
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "k",
            "clusters": [{"name": "k", "cluster": {"server": str(emu.url)}}],
            "users": [{"name": "k", "user": {"token": "t"}}],
            "contexts": [{"name": "k", "context": {"cluster": "k", "user": "k"}}]}))
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "CUDANALYST_NAMESPACES": NS,
               "CUDANALYST_STATUS_INTERVAL": str(args.interval), "CUDANALYST_METRICS_PORT": str(args.metrics_port),
               "CUDANALYST_HEALTH_PORT": str(args.metrics_port + 1)}
        log = (tmp / "operator.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cudanalyst.operator.main", env=env, cwd=tmp,
            stdout=asyncio.subprocess.DEVNULL, stderr=log)
        try:
            # Started when it has listed the runs (its watch is up).
            start = time.perf_counter()
            while not [r for r in emu[kmock.resource(RUNS)] if r.method == "GET"]:
                if proc.returncode is not None or time.perf_counter() - start > 60:
                    raise SystemExit(f"operator did not start; see {tmp / 'operator.log'}")
                await asyncio.sleep(0.05)
            # One run first, so that lazily imported modules (numpy, boto3, ...) count as the base.
            async with emu.post(f"/apis/cudanalyst.dev/v1alpha1/namespaces/{NS}/attributionruns",
                                json=run_body(9999, trajectory, output)) as resp:
                assert resp.status == 200
            await wait_all(emu, ["run-9999"], "Running", {"run-9999": time.perf_counter()}, args.timeout)
            await asyncio.sleep(1.0)
            idle_rss = rss_kib(proc.pid)

            names = [f"run-{i:04d}" for i in range(args.runs)]
            posted: dict[str, float] = {}
            t0 = time.perf_counter()
            for i, name in enumerate(names):
                posted[name] = time.perf_counter()
                async with emu.post(f"/apis/cudanalyst.dev/v1alpha1/namespaces/{NS}/attributionruns",
                                    json=run_body(i, trajectory, output)) as resp:
                    assert resp.status == 200, await resp.text()
            jobs = await wait_jobs(emu, names, posted, args.timeout)
            elapsed = time.perf_counter() - t0
            started = await wait_all(emu, names, "Running", posted, args.timeout)
            await asyncio.sleep(1.0)
            loaded_rss = rss_kib(proc.pid)

            failed_at: dict[str, float] = {}
            for name in names:
                failed_at[name] = time.perf_counter()
                async with emu.patch(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}-runner/status", json={"status": {
                        "failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                                     "message": "bench"}]}}) as resp:
                    assert resp.status == 200
            latency = await wait_all(emu, names, "Failed", failed_at, args.timeout)
        finally:
            if proc.returncode is None:
                proc.terminate()
            await proc.wait()
            log.close()
    lat = sorted(latency.values())
    create = sorted(started.values())
    job_latency = sorted(jobs.values())
    return {
        "runs": args.runs,
        "statusIntervalSeconds": args.interval,
        "throughputRunsPerSecond": round(args.runs / elapsed, 1),
        "createToJobP50Seconds": round(statistics.median(job_latency), 3),
        "createToRunningP50Seconds": round(statistics.median(create), 3),
        "statusLatencyP50Seconds": round(statistics.median(lat), 3),
        "statusLatencyP95Seconds": round(lat[int(0.95 * (len(lat) - 1))], 3),
        "statusLatencyP95OverInterval": round(lat[int(0.95 * (len(lat) - 1))] / args.interval, 2),
        "operatorRssIdleMiB": round(idle_rss / 1024, 1),
        "operatorRssLoadedMiB": round(loaded_rss / 1024, 1),
        "rssPerRunKiB": round((loaded_rss - idle_rss) / args.runs, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--interval", type=float, default=60.0,
                        help="the operator's safety-net refresh interval (CUDANALYST_STATUS_INTERVAL)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--metrics-port", type=int, default=0, help="0: a free loopback port")
    args = parser.parse_args()
    if args.runs < 1 or args.interval <= 0:
        parser.error("--runs must be at least 1 and --interval positive")
    if not args.metrics_port:
        args.metrics_port = free_port_pair()
    result = asyncio.run(main_async(args))
    print(json.dumps(result, indent=2))
    print(f"throughput {result['throughputRunsPerSecond']} runs/s; status latency p95 "
          f"{result['statusLatencyP95Seconds']} s = {result['statusLatencyP95OverInterval']} x the "
          f"{args.interval} s interval; RSS {result['operatorRssLoadedMiB']} MiB with {args.runs} runs "
          f"({result['rssPerRunKiB']} KiB/run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
