"""Chaos bench (issue 33, part 1): a batch of AttributionRuns and one TrajectoryRecording on the test control plane,
through faults, must end as a run without faults would: every run Ready with the same outcomes and attribution, no
unit lost or written twice, nothing left behind.

The set-up is the end-to-end tests' (docs/testing-cluster.md): etcd, kube-apiserver, controller-manager, scheduler
and kwok (4 nodes of 8 fake GPUs), the chart installed, the operator as a local process with a token of the chart's
ServiceAccount, every runner pod played here (its shard of `cudanalyst-runner`, the planner a vLLM CPU server with
the tiny model; no GPU, so kernels stop at `compile`). The store is S3: moto's server behind a fault proxy
(tests/cluster/s3_faults.py), which also counts each key's successful PUTs.

First the reference: each run's shards run here, without the cluster or faults, into `reference/`. Then the same
runs go through the cluster while a seeded schedule of faults plays:

- the operator killed --kills times at random moments, SIGKILL and SIGTERM in turn, some right after a run is
  created (its Job is being made), some right after a pod ends (status patches under way); restarted after 0-5 s;
- the kube-apiserver restarted once and etcd once;
- runner pods deleted, evicted, and ended with a non-zero exit (before their shard ran);
- the store unreachable for --outage seconds, and answering 500 InternalError and 503 SlowDown for --errors seconds
  each, each fault starting as a run of its own has its pods Running (held until then), so shards meet it at work;
- while the operator is down: a run created, a run's labels edited, and a run that deletes its results deleted.

At the end it prints what it did and what it found, and writes it as JSON (--json).

    python bench/chaos.py --json docs/results/chaos-<date>/chaos.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "cluster"), str(ROOT / "tests"), str(ROOT / "scripts")]

from cp_cluster import (  # noqa: E402
    Cluster,
    bin_dir,
    missing_binaries,
    start_cluster,
    tear_down,
    wait_for,
)
from cp_harness import PodHarness  # noqa: E402
from e2e_support import (  # noqa: E402
    CHART_NAMESPACE,
    INDEX_ANNOTATION,
    OPERATOR_SA,
    RUN_LABEL,
    RUNNER_SA,
    OperatorProcess,
    Runs,
    install_chart,
    is_true,
    run_body,
    run_shard,
)
from s3_faults import FaultProxy  # noqa: E402

from cudanalyst.api import API_GROUP, API_VERSION, parse_run  # noqa: E402
from cudanalyst.api.recording import RECORDING_PLURAL  # noqa: E402
from cudanalyst.store import MAX_ATTEMPTS_ENV  # noqa: E402

NS = "chaos"
BUCKET = "chaos"
RECORDING_LABEL = f"{API_GROUP}/recording"
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
PLAYERS = (["debugger", "analyzer"], ["debugger", "profiler"], ["analyzer", "profiler"])
# What a played pod takes from its container's environment, as the operator set it on the Job: the store patience
# (CUDANALYST_S3_MAX_ATTEMPTS) that lets a shard wait out the store's outage. The rest of the Job's environment
# (the mounted credentials' folder, the namespace from the downward API) has no meaning outside a pod.
POD_ENV = ("CUDANALYST_RUN", MAX_ATTEMPTS_ENV, "PYTHONUNBUFFERED")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def pod_env(pod: Any) -> dict[str, str]:
    """The POD_ENV values of the pod's runner container (plain values only)."""
    return {e.name: e.value for e in (pod.spec.containers[0].env or [])
            if e.name in POD_ENV and e.value is not None}


def run_spec(name: str, i: int, planner: dict[str, Any], endpoint: str, prefix: str) -> dict[str, Any]:
    body = run_body(name, f"s3://{BUCKET}/{prefix}/", planner, shards=2)
    body["spec"]["players"] = PLAYERS[i % len(PLAYERS)]
    body["spec"]["sampling"]["seed"] = i
    # The program that did not compile, whatever the seed: the bundled example's correct program carries a 6.6 KB
    # Nsight Compute report, and with it the planner's prompt is longer than the tiny model's 4,096 tokens (its
    # units fail as prompt-too-long, so no fault-free reference could match).
    body["spec"]["trajectory"]["strata"] = {"broken": 1}
    body["spec"]["s3"] = {"endpoint": endpoint, "region": "us-east-1", "addressingStyle": "path"}
    return body


def start_planner(work: Path) -> tuple[dict[str, Any], Any]:
    import build_tiny_model
    from tiny_vllm import CONTEXT, SERVER_ARGS, VLLM_ENV

    from cudanalyst.api import ModelSpec
    from cudanalyst.cache import models_cache
    from cudanalyst.runner.llm.serving import start_local_server

    model = str(build_tiny_model.build(models_cache())["tiny-llama"])
    (work / "vllm").mkdir(exist_ok=True)
    spec = ModelSpec(model=model, serve="local", max_model_len=CONTEXT, dtype="float32", extra_args=SERVER_ARGS)
    server = start_local_server(model, spec, served_name="tiny", env=VLLM_ENV, health_timeout_s=900,
                                log_dir=str(work / "vllm"))
    live = server.__enter__()
    return {"endpoint": live.endpoint.base_url, "model": "tiny", "api": "chat"}, server


class Player(threading.Thread):
    """Plays every Running runner and recorder pod, one at a time: its shard (or `cudanalyst record`) here, then
    the pod's end with that exit status. `ended` is set after each pod end (a fault may wait for it)."""

    def __init__(self, runs: Runs, harness: PodHarness, work: Path) -> None:
        super().__init__(daemon=True, name="player")
        self.runs, self.harness, self.work = runs, harness, work
        self.done: set[str] = set()
        self.skip: set[str] = set()  # pods a fault has taken
        self.held: set[str] = set()  # runs whose pods wait for a fault
        self.ended = threading.Event()
        self.stop = threading.Event()
        self.played: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.t0 = time.monotonic()  # the faults' clock too

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.step()
            except Exception as exc:  # the API server may be restarting: try again
                log(f"player: {type(exc).__name__}: {str(exc)[:200]}")
                time.sleep(2)

    def step(self) -> None:
        pods = self.runs.core.list_namespaced_pod(NS).items
        todo = [p for p in pods if p.status.phase == "Running" and p.spec.node_name
                and p.metadata.uid not in self.done and p.metadata.deletion_timestamp is None]
        with self.lock:
            todo = [p for p in todo if p.metadata.uid not in self.skip
                    and (p.metadata.labels or {}).get(RUN_LABEL) not in self.held]
        if not todo:
            time.sleep(1)
            return
        pod = sorted(todo, key=lambda p: p.metadata.creation_timestamp)[0]
        labels = pod.metadata.labels or {}
        self.done.add(pod.metadata.uid)
        out = self.work / "pods"
        out.mkdir(exist_ok=True)
        env = {**S3_ENV, **pod_env(pod)}
        if RUN_LABEL in labels:
            run = labels[RUN_LABEL]
            cm = self.runs.core.read_namespaced_config_map(f"{run}-spec", NS)
            spec = out / f"{run}-spec.json"
            spec.write_text(cm.data["spec.json"])
            shard = int(pod.metadata.annotations[INDEX_ANNOTATION])
            of = json.loads(cm.data["spec.json"])["spec"]["resources"]["shards"]
            code = run_shard(spec, shard, of, out / f"{pod.metadata.name}.log", env=env, timeout_s=900)
            what = f"{run} shard {shard}"
        else:
            import subprocess

            rec = labels[RECORDING_LABEL]
            spec = out / f"{rec}-recording.json"
            spec.write_text(self.runs.core.read_namespaced_config_map(f"{rec}-recording", NS).data["spec.json"])
            with (out / f"{pod.metadata.name}.log").open("ab") as logf:
                code = subprocess.run([sys.executable, "-m", "cudanalyst", "record", str(spec)], stdout=logf,
                                      stderr=subprocess.STDOUT, env={**os.environ, **env}, timeout=1800,
                                      check=False).returncode
            what = f"recording {rec}"
        ended = self.end(pod.metadata.name, code)
        entry = {"t_s": round(time.monotonic() - self.t0, 1), "pod": pod.metadata.name, "what": what, "exit": code,
                 "pod end": ended}
        if code:
            lines = (out / f"{pod.metadata.name}.log").read_text(errors="replace").strip().splitlines()
            entry["why"] = lines[-1][-300:] if lines else ""
        self.played.append(entry)
        log(f"played {pod.metadata.name} ({what}): exit {code}, {ended}")
        self.ended.set()


    def end(self, pod: str, code: int) -> str:
        """Ends the pod with the shard's exit status; tries again while the API server is away (a restart), gives
        up only when the pod is gone (deleted by a fault: its replacement plays the shard again)."""
        from kubernetes.client.exceptions import ApiException

        for _ in range(60):
            try:
                self.harness.finish(NS, pod, succeeded=code == 0, exit_code=code or 1)
                return "ended"
            except ApiException as exc:
                if exc.status == 404:
                    return "not ended (gone)"
            except Exception:
                pass
            time.sleep(2)
        return "not ended (API server away for 2 min)"


class Chaos:
    def __init__(self, args: argparse.Namespace, cluster: Cluster, runs: Runs, op: OperatorProcess, proxy: FaultProxy,
                 player: Player, planner: dict[str, Any], bodies: dict[str, dict[str, Any]]) -> None:
        self.args, self.cluster, self.runs, self.op, self.proxy = args, cluster, runs, op, proxy
        self.player, self.planner, self.bodies = player, planner, bodies
        self.pod_runs = 0
        self.rng = random.Random(args.seed)
        self.t0 = player.t0
        self.faults: list[dict[str, Any]] = []
        self.kills = 0

    def note(self, kind: str, **detail: Any) -> None:
        entry = {"t_s": round(time.monotonic() - self.t0, 1), "fault": kind, **detail}
        self.faults.append(entry)
        log(f"fault: {entry}")

    def kill_operator(self, why: str) -> None:
        sig = "SIGKILL" if self.kills % 2 == 0 else "SIGTERM"
        if sig == "SIGKILL":
            self.op.kill()
        else:
            self.op.stop()
        self.kills += 1
        pause = self.rng.uniform(0, 5)
        self.note("operator killed", signal=sig, when=why, restartAfter_s=round(pause, 1))
        time.sleep(pause)
        self.op.start(deadline_s=120)

    def pod_fault(self, kind: str) -> None:
        """A run of its own for each pod fault, held from the player until the fault is done (the batch's pods are
        played within seconds of starting, too soon for a fault to find them)."""
        with self._held_run("pod-fault") as (_, pods):
            pod = self.rng.choice(pods)
            with self.player.lock:
                self.player.skip.add(pod.metadata.uid)
            self._pod_fault(kind, pod)

    @contextlib.contextmanager
    def _held_run(self, prefix: str) -> Iterator[tuple[str, list[Any]]]:
        """A run of its own, created while the player holds it back, with its 2 pods Running; released after."""
        run = f"{prefix}-{self.pod_runs}"
        self.pod_runs += 1
        self.bodies[run] = run_spec(run, 10 + self.pod_runs, self.planner, self.proxy.url, "runs")
        with self.player.lock:
            self.player.held.add(run)
        try:
            self.runs.create(self.bodies[run])
            yield run, self.player.harness.running_pods(NS, f"{RUN_LABEL}={run}", 2, deadline_s=180)
        finally:
            with self.player.lock:
                self.player.held.discard(run)

    def _pod_fault(self, kind: str, pod: Any) -> None:
        name = pod.metadata.name
        if kind == "pod deleted":
            self.runs.core.delete_namespaced_pod(name, NS)
        elif kind == "pod evicted":
            self.runs.core.create_namespaced_pod_eviction(name, NS, {
                "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}})
        else:
            self.player.harness.finish(NS, name, succeeded=False, exit_code=1, reason="Error")
        self.note(kind, pod=name)

    def store_fault(self, kind: str) -> None:
        """A run of its own whose pods are held until they are Running, then played while the store fails: the
        fault lands on shards at work (the batch's shards may all have run before it)."""
        with self._held_run("store-fault") as (run, _):
            if kind != "store unreachable":  # the errors start before the shards are released to the player
                seconds = self.args.errors
                self.proxy.errors(seconds, 500 if "500" in kind else 503)
        if kind == "store unreachable":
            seconds = self.args.outage
            self.note(kind, seconds=seconds, run=run)
            self.proxy.down(seconds)  # blocks that long; the player plays the run's shards meanwhile
        else:
            self.note(kind, seconds=seconds, run=run)

    def restart(self, which: str) -> None:
        comp = next(c for c in self.cluster.components if c.name == which)
        comp.stop()
        time.sleep(self.rng.uniform(1, 4))
        comp.start()
        wait_for(lambda: self.cluster.kubectl("get", "--raw", "/readyz", check=False).returncode == 0, 180,
                 f"the API server after restarting {which}")
        self.note(f"{which} restarted")

    def while_down(self, victim: str, late: str, edited: str) -> None:
        self.op.kill()
        self.kills += 1
        self.runs.create(run_spec(late, 3, self.planner, self.proxy.url, "runs"))
        self.runs.patch(edited, {"metadata": {"labels": {"chaos.cudanalyst.dev/edited": "yes"}}})
        self.runs.delete(victim)
        self.note("edits while the operator was down", signal="SIGKILL", created=late, edited=edited, deleted=victim)
        time.sleep(self.rng.uniform(1, 5))
        self.op.start(deadline_s=120)

    def kill_on_creation(self, name: str) -> None:
        self.runs.create(run_spec(name, 4, self.planner, self.proxy.url, "runs"))
        time.sleep(self.rng.uniform(0, 0.3))
        self.kill_operator(f"just after {name} was created (its ConfigMap and Job being made)")

    def kill_on_pod_end(self) -> None:
        # A run of its own, so that a pod ends soon (the batch's may all have ended already).
        run = f"pod-end-{self.pod_runs}"
        self.pod_runs += 1
        self.bodies[run] = run_spec(run, 10 + self.pod_runs, self.planner, self.proxy.url, "runs")
        self.player.ended.clear()
        self.runs.create(self.bodies[run])
        self.player.ended.wait(300)
        time.sleep(self.rng.uniform(0, 0.3))
        self.kill_operator("just after a pod ended (status patches under way)")

    def plan(self, victim: str, late: str, edited: str, created: str) -> list[tuple[str, Any]]:
        a = self.args
        steps: list[tuple[str, Any]] = [("kill on creation", lambda: self.kill_on_creation(created)),
                                        ("edits while down", lambda: self.while_down(victim, late, edited))]
        steps += [("kill on pod end", self.kill_on_pod_end)] * max(0, a.kills // 3)
        steps += [("kill", lambda: self.kill_operator("at a random moment"))] * max(0, a.kills - 2 - a.kills // 3)
        steps += [("apiserver", lambda: self.restart("kube-apiserver")), ("etcd", lambda: self.restart("etcd"))]
        steps += [(k, lambda k=k: self.pod_fault(k)) for k in ("pod deleted", "pod evicted", "pod exit 1")] * 2
        steps += [("store down", lambda: self.store_fault("store unreachable")),
                  ("store 500", lambda: self.store_fault("store answers 500")),
                  ("store 503", lambda: self.store_fault("store answers 503 SlowDown"))]
        first, rest = steps[:2], steps[2:]
        self.rng.shuffle(rest)
        return first[:1] + rest[: len(rest) // 2] + first[1:] + rest[len(rest) // 2:]

    def play(self, steps: list[tuple[str, Any]]) -> None:
        for label, step in steps:
            time.sleep(self.rng.uniform(2, 10))
            try:
                step()
            except Exception as exc:
                self.note("fault could not be applied", step=label, error=f"{type(exc).__name__}: {str(exc)[:200]}")
                traceback.print_exc()
                if not self.op.alive():
                    self.op.start(deadline_s=120)


def outcomes(client: Any, prefix: str) -> dict[str, str]:
    """{unit key: label} of every outcome record under prefix (the run's folder)."""
    found: dict[str, str] = {}
    token: dict[str, Any] = {}
    while True:
        page = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}outcomes/", **token)
        for item in page.get("Contents", []):
            body = json.loads(client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read())
            found[item["Key"].rsplit("/", 1)[-1].removesuffix(".json")] = body["label"]
        if not page.get("IsTruncated"):
            return found
        token = {"ContinuationToken": page["NextContinuationToken"]}


def error_kinds(text: str) -> dict[str, int]:
    """The operator log's ERROR lines (all its lives), counted by message with names, numbers and addresses
    blanked: what the faults made it say."""
    import re
    from collections import Counter

    kinds: Counter[str] = Counter()
    for line in text.splitlines():
        if " ERROR " not in line:
            continue
        message = line.split(" ERROR ", 1)[1]
        message = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message)
        message = re.sub(r"\b[0-9a-f]{5,}\b|\d+(\.\d+)?", "N", message)
        kinds[message[:200]] += 1
    return dict(kinds.most_common())


def attribution(name: str, body: dict[str, Any], prefix: str, endpoint: str) -> dict[str, Any]:
    from cudanalyst.operator.completion import aggregate
    from cudanalyst.runfolder import run_store

    doc = json.loads(json.dumps(body))
    doc["metadata"]["namespace"] = NS
    doc["spec"]["output"]["uri"] = f"s3://{BUCKET}/{prefix}/"
    doc["spec"]["s3"]["endpoint"] = endpoint
    run = parse_run(doc)
    results, _ = aggregate(run, run_store(run))
    return results.model_dump(by_alias=True, mode="json", exclude_none=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs in the batch at the start (2 more come during it)")
    p.add_argument("--kills", type=int, default=12)
    p.add_argument("--outage", type=float, default=60.0, help="seconds the store is unreachable")
    p.add_argument("--errors", type=float, default=20.0, help="seconds of 500s, and then of 503 SlowDowns")
    p.add_argument("--recording", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--seed", type=int, default=33)
    p.add_argument("--deadline", type=float, default=3600.0)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    # A SIGTERM (a timeout, a kill) ends it through `finally`, which stops the operator and the control plane it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.update(S3_ENV)  # this process reads the store too (the checks), as the runners and operator do

    bins = bin_dir()
    if missing_binaries(bins):
        print(f"missing binaries in {bins}: {missing_binaries(bins)}; run scripts/build-control-plane.sh",
              file=sys.stderr)
        return 2
    import boto3
    from s3_server import start_moto_server

    work = Path(tempfile.mkdtemp(prefix="chaos-"))
    components: list[Any] = []
    stoppers: list[Any] = []
    op: OperatorProcess | None = None
    t_start = time.monotonic()
    try:
        cluster = start_cluster(bins, work, components)
        wait_for(lambda: cluster.kubectl("get", "sa", "default", "-n", "default", check=False).returncode == 0, 60,
                 "the default service account")
        cluster.add_gpu_nodes(4, 8)
        install_chart(cluster)
        cluster.kubectl("create", "namespace", NS)
        wait_for(lambda: cluster.kubectl("get", "sa", "default", "-n", NS, check=False).returncode == 0, 60, "sa")
        cluster.kubectl("create", "serviceaccount", RUNNER_SA, "-n", NS)
        moto = start_moto_server()
        stoppers.append(moto.stop)
        proxy = FaultProxy(moto.url)
        stoppers.append(proxy.stop)
        direct = boto3.session.Session().client("s3", endpoint_url=moto.url, **{
            "region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"})
        direct.create_bucket(Bucket=BUCKET)
        planner, server = start_planner(work)
        stoppers.append(lambda: server.__exit__(None, None, None))
        log(f"cluster, chart, store and planner up in {time.monotonic() - t_start:.0f} s")

        names = [f"run-{i}" for i in range(args.runs)]
        victim, late, created = "victim", "late", "created"
        bodies = {n: run_spec(n, i, planner, proxy.url, "runs") for i, n in enumerate(names)}
        bodies[late] = run_spec(late, 3, planner, proxy.url, "runs")
        bodies[created] = run_spec(created, 4, planner, proxy.url, "runs")

        def reference(names: list[str]) -> None:
            """Each run's shards here, straight to the store, no cluster and no faults."""
            ref_dir = work / "reference"
            ref_dir.mkdir(exist_ok=True)
            for name in names:
                reference_one(name, bodies[name], ref_dir)

        def reference_one(name: str, body: dict[str, Any], ref_dir: Path) -> None:
            doc = json.loads(json.dumps(body))
            doc["metadata"]["namespace"] = NS
            doc["spec"]["output"]["uri"] = f"s3://{BUCKET}/reference/"
            doc["spec"]["s3"]["endpoint"] = moto.url
            spec = ref_dir / f"{name}.json"
            spec.write_text(json.dumps(doc))
            # spec.json and plan.json first, as the operator writes them at a run's start (the report reads them).
            from cudanalyst.planned_run import plan_run
            from cudanalyst.runfolder import run_store, write_start

            run = parse_run(doc)
            write_start(run_store(run), run, plan_run(run).overview())
            for shard in range(2):
                code = run_shard(spec, shard, 2, ref_dir / f"{name}-{shard}.log", env=S3_ENV, timeout_s=900)
                if code:
                    raise RuntimeError(f"reference shard {name}/{shard} exited {code}: see {ref_dir}")

        kubeconfig = cluster.impersonate(CHART_NAMESPACE, OPERATOR_SA)
        op = OperatorProcess(kubeconfig, work / "operator.log", status_interval=5.0, retry_interval=3.0,
                             extra_env={**S3_ENV, "AWS_ENDPOINT_URL_S3": proxy.url}).start()
        with cluster.api_client() as apic:
            runs = Runs(apic, NS)
            harness = PodHarness(runs.core)
            doomed = run_spec(victim, 5, planner, proxy.url, "runs")
            doomed["spec"]["output"]["deleteWithRun"] = True
            doomed["spec"]["models"]["planner"] = {"endpoint": "http://127.0.0.1:9/v1", "model": "tiny"}
            runs.create(doomed)
            for name in names:
                runs.create(bodies[name])
            if args.recording:
                runs.co.create_namespaced_custom_object(API_GROUP, API_VERSION, NS, RECORDING_PLURAL, {
                    "apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "TrajectoryRecording",
                    "metadata": {"name": "rec"},
                    "spec": {"tasks": ["conv2d"], "model": {**planner, "serve": "endpoint"}, "iterations": 1,
                             "population": 4, "seed": 1, "maxTokens": 32,
                             "output": {"uri": f"s3://{BUCKET}/recordings/"},
                             "s3": {"endpoint": proxy.url, "region": "us-east-1", "addressingStyle": "path"},
                             "resources": {"gpusPerShard": 1, "image": "registry.invalid/cudanalyst-runner:chaos",
                                           "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}}}})
            wait_for(lambda: (direct.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{victim}/").get("KeyCount", 0)
                              > 0), 120, "the victim's plan in the store")
            player = Player(runs, harness, work)
            # The victim's pod is never played: it is deleted with its run.
            player.skip.update(p.metadata.uid for p in harness.running_pods(NS, f"{RUN_LABEL}={victim}", 2, 120))
            player.start()
            chaos = Chaos(args, cluster, runs, op, proxy, player, planner, bodies)
            chaos.play(chaos.plan(victim, late, names[0], created))
            log("faults done; waiting for every run to be Ready")
            wanted = sorted(bodies)
            end = t_start + args.deadline
            ready: set[str] = set()
            while time.monotonic() < end and len(ready) < len(wanted):
                for name in wanted:
                    try:
                        if name not in ready and is_true(runs.get(name), "Ready"):
                            ready.add(name)
                    except Exception:
                        pass
                time.sleep(3)
            if args.recording:
                wait_for(lambda: is_true(dict(runs.co.get_namespaced_custom_object(
                    API_GROUP, API_VERSION, NS, RECORDING_PLURAL, "rec")), "Ready"), max(1.0, end - time.monotonic()),
                    "the recording Ready")
            player.stop.set()
            t_ref = time.monotonic()
            reference(wanted)
            log(f"reference (the same runs without the cluster or faults) of {len(wanted)} runs in "
                f"{time.monotonic() - t_ref:.0f} s")

            # What was found.
            found: dict[str, Any] = {"runs": {}}
            for name in wanted:
                mine, ref = outcomes(direct, f"runs/{name}/"), outcomes(direct, f"reference/{name}/")
                puts = {k: proxy.puts.get(f"/{BUCKET}/runs/{name}/outcomes/{k}.json", 0) for k in mine}
                entry = {"ready": name in ready, "units": len(mine), "referenceUnits": len(ref),
                         "lost": sorted(set(ref) - set(mine)), "extra": sorted(set(mine) - set(ref)),
                         "labelsDiffer": sorted(k for k in ref if k in mine and mine[k] != ref[k]),
                         "writtenMoreThanOnce": sorted(k for k, n in puts.items() if n > 1)}
                if name in ready:
                    entry["sameAttribution"] = (attribution(name, bodies[name], "runs", moto.url)
                                                == attribution(name, bodies[name], "reference", moto.url))
                found["runs"][name] = entry
            jobs = runs.batch.list_namespaced_job(NS).items
            live = {r["metadata"]["name"] for r in runs.co.list_namespaced_custom_object(
                API_GROUP, API_VERSION, NS, "attributionruns")["items"]}
            found["orphanJobs"] = [j.metadata.name for j in jobs
                                   if (j.metadata.labels or {}).get(RUN_LABEL) not in live | {None}]
            found["orphanPods"] = [p.metadata.name for p in runs.core.list_namespaced_pod(NS, label_selector=RUN_LABEL).items
                                   if p.metadata.labels[RUN_LABEL] not in live]
            found["orphanConfigMaps"] = [c.metadata.name for c in runs.core.list_namespaced_config_map(
                NS, label_selector=RUN_LABEL).items if c.metadata.labels[RUN_LABEL] not in live]
            found["victimStoreKeys"] = direct.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{victim}/").get("KeyCount", 0)
            found["jobsPerRun"] = {n: len(runs.jobs(n)) for n in wanted}
            metrics = op.metrics() if op.alive() else ""
            found["operatorAlive"] = op.alive()
            found["operatorErrorLines"] = sum(1 for line in op.text().splitlines() if " ERROR " in line)
            found["reconcileErrors"] = metrics.count("cudanalyst_reconcile_errors_total{")
            found["operatorErrors"] = error_kinds(op.text())
            found["recordingReady"] = bool(args.recording)  # waited for above: not Ready raised
        verdict = all(e["ready"] and not e["lost"] and not e["extra"] and not e["labelsDiffer"]
                      and not e["writtenMoreThanOnce"] and e.get("sameAttribution") for e in found["runs"].values()) and not (
            found["orphanJobs"] or found["orphanPods"] or found["orphanConfigMaps"] or found["victimStoreKeys"])
        result = {"args": vars(args) | {"json": str(args.json)}, "seconds": round(time.monotonic() - t_start),
                  "cores": os.cpu_count(), "faults": chaos.faults, "operatorKills": chaos.kills,
                  "podsPlayed": player.played, "storeRequests": proxy.requests, "storeFaulted": proxy.faulted,
                  "found": found, "nothingLost": verdict}
        print(json.dumps(result, indent=1))
        log(f"{'PASS' if verdict else 'FAIL'}: {len(found['runs'])} runs, {len(chaos.faults)} faults "
            f"({chaos.kills} operator kills), {result['seconds']} s")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1) + "\n")
        return 0 if verdict else 1
    finally:
        if op is not None:
            op.stop()
        for stop in reversed(stoppers):
            try:
                stop()
            except Exception:
                traceback.print_exc()
        tear_down(components, work, args.keep)


if __name__ == "__main__":
    raise SystemExit(main())
