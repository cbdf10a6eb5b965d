"""Operator scale on the real control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok).

N AttributionRuns (one Indexed Job of one GPU pod each) across M fake GPU nodes that kwok simulates. The
operator runs as its own process (`python -m cudanalyst.operator.main`, as in its image), so its RSS is its
own. Measured in one run:

- start: all N runs posted at once -> each has startTime and a Running pod bound to a kwok node (runs/s);
- status latency: the pods are ended at a steady rate; for each run, from the moment this process sees its
  Job change (status.succeeded 0 -> 1, seen by a watch on Jobs) to the moment it sees the run's status
  change in answer (a watch on runs: status.shards.succeeded or the phase moved), p50/p99 seconds and as a
  ratio of the 2 s target;
- reconcile errors: the operator's cudanalyst_reconcile_errors_total and the ERROR lines of its log;
- peak RSS of the operator (VmHWM), against the 300 MB target;
- memory per run: the runs are posted in steps (--steps, default 100, N/4, N/2, N); after each step, once every
  run of it is Running and the operator is idle, its RSS (VmRSS) is read, and the growth per added run is printed
  between steps and from the first hundred to the end (issue 33: flat after the first hundred).

    python bench/operator_scale.py --runs 1000 --nodes 100

`--tracemalloc` runs the operator under tracemalloc and writes, at each step, the allocations still held grouped
by where they were made (`tracemalloc-<runs>-settled.txt` in the work folder, kept): what each run adds, by line;
and while runs start, each time the RSS has grown 15 MB (`tracemalloc-<runs>-starting-<n>.txt`): what a burst
holds. It slows the operator; its RSS figures are then not the ones to quote.

`--operator-source DIR` runs the operator from another copy of its package folder (e.g. an older commit's, from
`git archive <commit> operator/cudanalyst/operator | tar -x -C DIR`, then DIR/operator/cudanalyst/operator; commits before the
src layout kept it in a top-level `operator/`), so a before/after pair runs in the same conditions.

Needs the binaries of scripts/build-control-plane.sh. Prints what was run; a size that does not finish in
--deadline seconds is reported as such (use a smaller --runs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))

from cp_cluster import (  # noqa: E402
    Cluster,
    bin_dir,
    missing_binaries,
    start_cluster,
    tear_down,
    wait_for,
)
from cp_harness import PodHarness  # noqa: E402
from e2e_support import RUN_LABEL, RUNNER_SA, OperatorProcess, run_body  # noqa: E402

from cudanalyst.api import API_GROUP, API_VERSION, PLURAL  # noqa: E402

NS = "scale"
P99_TARGET_S = 2.0
RSS_TARGET_MB = 300.0
PLANNER = {"endpoint": "http://127.0.0.1:9/v1", "model": "tiny"}  # never reached: pods are played


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def peak_rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


def current_rss_mb(pid: int) -> float:
    match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


def reconcile_errors(metrics: str) -> int:
    return int(sum(float(v) for v in re.findall(r"^cudanalyst_reconcile_errors_total\{[^}]*\} ([0-9.e+]+)$",
                                                   metrics, re.M)))


def reconciles(metrics: str) -> dict[str, list[float]]:
    """{handler: [count, seconds]} from the operator's cudanalyst_reconcile_duration_seconds histogram."""
    out: dict[str, list[float]] = {}
    for part, index in (("count", 0), ("sum", 1)):
        for handler, value in re.findall(
                rf'^cudanalyst_reconcile_duration_seconds_{part}\{{handler="([^"]+)"\}} ([0-9.e+]+)$', metrics, re.M):
            out.setdefault(handler, [0, 0.0])[index] = round(float(value), 2)
    return out


class Watcher(threading.Thread):
    """Watches one kind in NS and records, per run, the first time `seen(obj)` holds."""

    def __init__(self, cluster: Cluster, kind: str, seen: Any) -> None:
        super().__init__(daemon=True)
        self.cluster, self.kind, self.seen = cluster, kind, seen
        self.times: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        from kubernetes import client, watch

        with self.cluster.api_client() as api:
            if self.kind == "jobs":
                lister: Any = client.BatchV1Api(api).list_namespaced_job
                args: tuple[Any, ...] = (NS,)
            else:
                lister = client.CustomObjectsApi(api).list_namespaced_custom_object
                args = (API_GROUP, API_VERSION, NS, PLURAL)
            version = ""
            while not self.stop.is_set():
                w = watch.Watch()
                try:
                    for event in w.stream(lister, *args, resource_version=version, timeout_seconds=30):
                        now = time.monotonic()
                        obj = event["object"]
                        obj = obj if isinstance(obj, dict) else api.sanitize_for_serialization(obj)
                        meta = obj["metadata"]
                        version = meta["resourceVersion"]
                        name = (meta.get("labels") or {}).get(RUN_LABEL, meta["name"])
                        if name not in self.times and self.seen(obj):
                            self.times[name] = now
                        if self.stop.is_set():
                            break
                except Exception as exc:  # an expired watch: start again from a fresh list
                    if "410" in str(exc) or "Expired" in str(exc):
                        version = ""
                    else:
                        time.sleep(0.5)
                finally:
                    w.stop()


def job_changed(job: dict[str, Any]) -> bool:
    return int((job.get("status") or {}).get("succeeded") or 0) >= 1


def run_answered(run: dict[str, Any]) -> bool:
    status = run.get("status") or {}
    return int((status.get("shards") or {}).get("succeeded") or 0) >= 1 or status.get("phase") in (
        "Aggregating", "Succeeded", "Failed")


# Imported first by the operator process (PYTHONPATH): `cudanalyst.operator` is taken from another folder.
SHIM = """import importlib.util, sys
_spec = importlib.util.spec_from_file_location("cudanalyst.operator", {init!r}, submodule_search_locations=[{src!r}])
_module = importlib.util.module_from_spec(_spec)
sys.modules["cudanalyst.operator"] = _module
_spec.loader.exec_module(_module)
"""


# Imported first by the operator process with --tracemalloc: SIGUSR1 writes what is held, by where it was made.
TRACEMALLOC_SHIM = """import os, signal, tracemalloc
tracemalloc.start(12)
def _dump(signum, frame):
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    stats = snapshot.statistics("traceback")
    total = sum(s.size for s in stats)
    with open(os.environ["CUDANALYST_BENCH_TRACEMALLOC"], "w") as out:
        current, peak = tracemalloc.get_traced_memory()
        out.write(f"traced {total / 2**20:.1f} MiB in {sum(s.count for s in stats)} blocks; Python heap now "
                  f"{current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB\\n")
        for stat in stats[:40]:
            out.write(f"\\n{stat.size / 2**20:.2f} MiB in {stat.count} blocks\\n")
            out.write("\\n".join("    " + line for line in stat.traceback.format(limit=12)) + "\\n")
        out.write("\\nby file:\\n")
        for stat in snapshot.statistics("filename")[:30]:
            out.write(f"{stat.size / 2**20:8.2f} MiB {stat.count:8d} blocks  {stat.traceback[0].filename}\\n")
signal.signal(signal.SIGUSR1, _dump)
"""


# Always imported first by the operator process: SIGUSR2 writes how many blocks Python's allocator holds and how many
# objects the collector tracks. Cheap, unlike tracemalloc: whether RSS that grows is objects kept (these grow with
# it) or a high-water mark of the allocator's arenas after a burst (these stay flat).
HEAP_SHIM = """import gc, json, os, signal, sys
def _heap(signum, frame):
    with open(os.environ["CUDANALYST_BENCH_HEAP"], "w") as out:
        json.dump({"blocks": sys.getallocatedblocks(), "objects": len(gc.get_objects())}, out)
signal.signal(signal.SIGUSR2, _heap)
"""


def shim_env(work: Path, env: dict[str, str], name: str, shim_text: str, extra: dict[str, str]) -> dict[str, str]:
    """A sitecustomize.py that runs `shim_text` in the operator process, after any shim already on its path."""
    shim = work / name
    shim.mkdir()
    text = shim_text
    old = Path(env.get("PYTHONPATH", "").split(os.pathsep)[0]) / "sitecustomize.py" if env.get("PYTHONPATH") else None
    if old is not None and old.is_file():
        text = old.read_text() + "\n" + text  # keep --operator-source's shim too
    (shim / "sitecustomize.py").write_text(text)
    path = os.pathsep.join(filter(None, [str(shim), env.get("PYTHONPATH") or os.environ.get("PYTHONPATH", "")]))
    return {**env, "PYTHONPATH": path, **extra}


def heap_of(pid: int, work: Path) -> dict[str, int]:
    """The operator's allocated blocks and tracked objects (HEAP_SHIM); {} when it does not answer."""
    target = work / "heap.json"
    target.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    try:
        wait_for(lambda: target.exists() and target.stat().st_size > 0, 60, "the operator's heap figures")
        time.sleep(0.2)
        return json.loads(target.read_text())
    except (TimeoutError, ValueError):
        return {}


def tracemalloc_env(work: Path, env: dict[str, str]) -> dict[str, str]:
    return shim_env(work, env, "tracemalloc-shim", TRACEMALLOC_SHIM,
                    {"CUDANALYST_BENCH_TRACEMALLOC": str(work / "tracemalloc.txt")})


def dump_tracemalloc(pid: int, work: Path, label: str) -> None:
    import signal as signals

    target = work / "tracemalloc.txt"
    target.unlink(missing_ok=True)
    os.kill(pid, signals.SIGUSR1)
    wait_for(lambda: target.exists() and target.stat().st_size > 0, 300, "the operator's tracemalloc dump")
    time.sleep(1)
    target.rename(work / f"tracemalloc-{label}.txt")
    print(f"  tracemalloc {label}: {work / f'tracemalloc-{label}.txt'} (RSS {current_rss_mb(pid):.1f} MB)",
          flush=True)


def operator_source_env(source: Path, work: Path) -> dict[str, str]:
    """The environment that makes `python -m cudanalyst.operator.main` run the operator in `source`."""
    if not (source / "main.py").is_file():
        raise SystemExit(f"--operator-source {source}: no main.py there "
                         "(expected a copy of operator/cudanalyst/operator)")
    shim = work / "operator-shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM.format(init=str(source / "__init__.py"), src=str(source)))
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH", "")]))}


def run_running(run: dict[str, Any]) -> bool:
    status = run.get("status") or {}
    return status.get("phase") == "Running" and int((status.get("shards") or {}).get("active") or 0) >= 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--gpus-per-node", type=int, default=16)
    p.add_argument("--interval", type=float, default=60.0,
                   help="the operator's CUDANALYST_STATUS_INTERVAL (its safety-net timer; 1.0 for the timer-only "
                        "operator before Job events were followed)")
    p.add_argument("--finish-rate", type=float, default=20.0, help="pods ended per second")
    p.add_argument("--deadline", type=float, default=900.0, help="seconds for the whole measurement")
    p.add_argument("--start-share", type=float, default=0.6,
                   help="share of --deadline for starting the runs; the runs started by then are measured")
    p.add_argument("--operator-source", type=Path, default=None,
                   help="a copy of operator/cudanalyst/operator to run instead of the installed one "
                        "(before/after comparisons)")
    p.add_argument("--steps", default="",
                   help="comma-separated run counts at which the operator's RSS is read (default 100,N/4,N/2,N)")
    p.add_argument("--tracemalloc", action="store_true",
                   help="run the operator under tracemalloc and dump what it holds at each step (keeps the folder)")
    p.add_argument("--operator-env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for the operator process (repeatable; e.g. MALLOC_ARENA_MAX=2 to "
                        "compare allocator settings)")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    args = p.parse_args(argv)
    operator_env: dict[str, str] = {}
    for pair in args.operator_env:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            p.error(f"--operator-env {pair!r}: expected NAME=VALUE")
        operator_env[name] = value
    # A SIGTERM (a timeout, a kill) ends it through `finally`, which stops the operator and the control plane it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    bins = bin_dir()
    missing = [b for b in missing_binaries(bins) if b not in ("helm", "kueue")]  # neither is used here
    if missing:
        print(f"missing binaries in {bins}: {missing}; run scripts/build-control-plane.sh",
              file=sys.stderr)
        return 2
    if args.runs > args.nodes * args.gpus_per_node:
        print(f"--runs {args.runs} needs {args.runs} GPUs; {args.nodes} nodes x {args.gpus_per_node} is fewer",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="operator-scale-"))
    components = []
    op: OperatorProcess | None = None
    end = time.monotonic() + args.deadline
    try:
        t0 = time.monotonic()
        cluster = start_cluster(bins, work, components)
        wait_for(lambda: cluster.kubectl("get", "sa", "default", "-n", "default", check=False).returncode == 0,
                 60, "the default service account")
        cluster.add_gpu_nodes(args.nodes, args.gpus_per_node, deadline_s=300)
        cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests" / "crd.yaml"))
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{API_GROUP}", "--timeout=60s")
        cluster.kubectl("create", "namespace", NS)
        wait_for(lambda: cluster.kubectl("get", "sa", "default", "-n", NS, check=False).returncode == 0, 60,
                 "the namespace's default service account")
        cluster.kubectl("create", "serviceaccount", RUNNER_SA, "-n", NS)
        print(f"control plane with {args.nodes} kwok GPU nodes ({args.gpus_per_node} GPUs each) up in "
              f"{time.monotonic() - t0:.0f} s", flush=True)

        extra_env = operator_source_env(args.operator_source.resolve(), work) if args.operator_source else {}
        extra_env.update(operator_env)
        if args.tracemalloc:
            extra_env = tracemalloc_env(work, extra_env)
            args.keep = True
        extra_env = shim_env(work, extra_env, "heap-shim", HEAP_SHIM, {"CUDANALYST_BENCH_HEAP": str(work / "heap.json")})
        op = OperatorProcess(cluster.kubeconfig, work / "operator.log", namespaces=NS,
                             status_interval=args.interval, extra_env=extra_env).start(deadline_s=300 if args.tracemalloc else 60)
        rss_idle = peak_rss_mb(op.proc.pid)  # type: ignore[union-attr]

        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        jobs_w = Watcher(cluster, "jobs", job_changed)
        runs_w = Watcher(cluster, "runs", run_answered)
        jobs_w.start()
        runs_w.start()
        names = [f"r{i:04d}" for i in range(args.runs)]
        with cluster.api_client() as apic:
            co = client.CustomObjectsApi(apic)
            core = client.CoreV1Api(apic)
            harness = PodHarness(core)
            def running_pods() -> list[Any]:
                pods = core.list_namespaced_pod(NS, label_selector=RUN_LABEL).items
                return [pod for pod in pods if pod.status.phase == "Running" and pod.spec.node_name]

            def running_runs() -> int:
                try:
                    items = co.list_namespaced_custom_object(API_GROUP, API_VERSION, NS, PLURAL)["items"]
                except ApiException:  # an overloaded API server times lists out (504): count again later
                    return -1
                return sum(1 for r in items if run_running(r))

            steps = sorted({int(x) for x in args.steps.split(",") if x.strip()} if args.steps else
                           {min(100, args.runs), args.runs // 4, args.runs // 2, args.runs})
            steps = [n for n in steps if 0 < n <= args.runs] + ([args.runs] if args.runs not in steps else [])
            rss_steps: list[dict[str, Any]] = []
            pid = op.proc.pid  # type: ignore[union-attr]
            t_post = time.monotonic()
            posted = 0
            dumped_rss, bursts = current_rss_mb(pid), 0
            for step in steps:
                for name in names[posted:step]:
                    co.create_namespaced_custom_object(API_GROUP, API_VERSION, NS, PLURAL,
                                                       run_body(name, work / "store", PLANNER, shards=1))
                posted = step
                # Settled: every run so far says Running (its pod bound), then the operator idle for a moment.
                settle_end = min(end, time.monotonic() + args.start_share * args.deadline)
                while time.monotonic() < settle_end and running_runs() < step:
                    # While runs start the operator holds more than once they are settled: with --tracemalloc,
                    # what it holds is dumped each time its RSS has grown 15 MB past the last dump's.
                    if args.tracemalloc and current_rss_mb(pid) > dumped_rss + 15 and bursts < 6:
                        dumped_rss, bursts = current_rss_mb(pid), bursts + 1
                        dump_tracemalloc(pid, work, f"{step}-starting-{bursts}")
                    time.sleep(2)
                time.sleep(5)
                point = {"runs": step, "rss_mb": round(current_rss_mb(pid), 1), "peak_mb": round(peak_rss_mb(pid), 1),
                         "running": running_runs(), "at_s": round(time.monotonic() - t_post, 1),
                         **heap_of(pid, work)}
                if rss_steps:
                    before = rss_steps[-1]
                    added = max(1, step - before["runs"])
                    point["kb_per_added_run"] = round((point["rss_mb"] - before["rss_mb"]) * 1024 / added, 1)
                    if "blocks" in point and "blocks" in before:
                        point["blocks_per_added_run"] = round((point["blocks"] - before["blocks"]) / added, 1)
                        point["objects_per_added_run"] = round((point["objects"] - before["objects"]) / added, 1)
                rss_steps.append(point)
                print(f"  step: {point}", flush=True)
                if args.tracemalloc:
                    dump_tracemalloc(pid, work, f"{step}-settled")
            t_posted = time.monotonic()

            # The start phase gets at most --start-share of the deadline; the rest measures the runs that started.
            start_end = t_post + args.start_share * args.deadline
            started: list[Any] = running_pods()  # at least once: the steps may have used the start's share
            while time.monotonic() < start_end and len(started) < args.runs:
                if int(time.monotonic() - t_post) % 60 < 2:
                    print(f"  {len(started)} pods Running after {time.monotonic() - t_post:.0f} s", flush=True)
                time.sleep(2)
                started = running_pods()
            t_started = time.monotonic()
            print(f"posted {args.runs} runs in {t_posted - t_post:.1f} s; {len(started)} pods Running on kwok "
                  f"nodes after {t_started - t_post:.1f} s ({len(started) / (t_started - t_post):.1f} runs/s started)",
                  flush=True)
            # A quiet moment: the operator has seen every started run Running before Jobs change (at most
            # 120 s, so that a slow operator is measured rather than waited for).
            t_quiet = time.monotonic()
            quiet_end = min(end, t_quiet + 120)
            started_names = {pod.metadata.labels[RUN_LABEL] for pod in started}
            while time.monotonic() < quiet_end:
                try:
                    items = co.list_namespaced_custom_object(API_GROUP, API_VERSION, NS, PLURAL)["items"]
                except ApiException as exc:  # an overloaded API server times lists out (504): ask again
                    print(f"  listing runs failed ({exc.status} {exc.reason}); trying again", flush=True)
                    time.sleep(2)
                    continue
                if len([r for r in items if r["metadata"]["name"] in started_names and run_running(r)]) \
                        >= len(started_names):
                    break
                time.sleep(2)
            print(f"{len(started_names)} started runs said Running {time.monotonic() - t_quiet:.1f} s later",
                  flush=True)
            time.sleep(2)
            gap = 1.0 / args.finish_rate
            for pod in started:
                if time.monotonic() >= end:
                    break
                harness.finish(NS, pod.metadata.name)
                time.sleep(gap)
            finished_at = time.monotonic()
            name_set = set(names)
            # A copy of the keys first: the watcher threads add to these dicts meanwhile.
            changed = lambda: [n for n in list(jobs_w.times) if n in name_set]  # noqa: E731
            while time.monotonic() < end and (len(changed()) < len(started)
                                               or any(n not in runs_w.times for n in changed())):
                time.sleep(1)
        jobs_w.stop.set()
        runs_w.stop.set()
        latencies = [runs_w.times[n] - jobs_w.times[n] for n in names if n in jobs_w.times and n in runs_w.times]
        unanswered = [n for n in names if n in jobs_w.times and n not in runs_w.times]
        metrics = op.metrics()
        errors = reconcile_errors(metrics)
        error_lines = sum(1 for line in op.text().splitlines() if " ERROR " in line)
        rss = peak_rss_mb(op.proc.pid)  # type: ignore[union-attr]
        rss_now = current_rss_mb(op.proc.pid)  # type: ignore[union-attr]
        first = next((p for p in rss_steps if p["runs"] >= 100), rss_steps[0] if rss_steps else None)
        last = rss_steps[-1] if rss_steps else None
        per_run_kb = (round((last["rss_mb"] - first["rss_mb"]) * 1024 / (last["runs"] - first["runs"]), 1)
                      if first and last and last["runs"] > first["runs"] else None)
        complete = len(started) == args.runs and len(latencies) == args.runs and not unanswered
        result = {
            "operatorSource": str(args.operator_source or "installed"), "operatorEnv": args.operator_env,
            "runs": args.runs, "nodes": args.nodes, "gpusPerNode": args.gpus_per_node, "interval_s": args.interval,
            "finishRate_per_s": args.finish_rate, "cores": os.cpu_count(), "complete": complete,
            "startedRuns": len(started), "measuredRuns": len(latencies), "startSeconds": round(t_started - t_post, 1),
            "jobChanges": len(jobs_w.times), "statusAnswers": len(latencies), "unanswered": len(unanswered),
            "latency_p50_s": round(percentile(latencies, 50), 3), "latency_p99_s": round(percentile(latencies, 99), 3),
            "latency_max_s": round(max(latencies), 3) if latencies else None,
            "p99_over_target": round(percentile(latencies, 99) / P99_TARGET_S, 2),
            "reconcileErrors": errors, "operatorErrorLines": error_lines, "reconciles": reconciles(metrics),
            "rssIdle_mb": round(rss_idle, 1), "rssPeak_mb": round(rss, 1), "rssEnd_mb": round(rss_now, 1),
            "rss_over_target": round(rss / RSS_TARGET_MB, 2), "rssSteps": rss_steps,
            "kbPerRunAfterFirstHundred": per_run_kb,
            "rssAtTenThousand_mb_extrapolated": (round(last["rss_mb"] + per_run_kb * (10000 - last["runs"]) / 1024, 0)
                                                 if per_run_kb is not None and last else None),
            "endPhaseSeconds": round(time.monotonic() - finished_at, 1),
        }
        print(json.dumps(result, indent=1))
        verdict = (f"{'complete' if complete else 'INCOMPLETE (ran out of --deadline)'}: {args.runs} runs posted, "
                   f"{len(started)} started, {len(latencies)} measured, on "
                   f"{args.nodes} nodes; p50 {result['latency_p50_s']} s, p99 {result['latency_p99_s']} s "
                   f"(target < {P99_TARGET_S} s: {'met' if result['latency_p99_s'] < P99_TARGET_S else 'MISSED'}); "
                   f"peak RSS {result['rssPeak_mb']} MB (target < {RSS_TARGET_MB:.0f} MB: "
                   f"{'met' if rss < RSS_TARGET_MB else 'MISSED'}); reconcile errors {errors}; growth per run after the "
                   f"first hundred {per_run_kb} KB, so about {result['rssAtTenThousand_mb_extrapolated']} MB at 10,000 "
                   f"runs (extrapolated)")
        print(verdict)
        return 0 if complete else 1
    finally:
        if op is not None:
            op.stop()
        tear_down(components, work, args.keep)


if __name__ == "__main__":
    raise SystemExit(main())
