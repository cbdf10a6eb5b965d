#!/usr/bin/env python3
"""A Kubernetes cluster on this machine, to try the operator with the README's cluster commands.

It is the project's own test control plane (tests/cluster/cp_cluster.py: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok with fake GPU nodes; binaries from
scripts/build-control-plane.sh), kept running in the background:

  scripts/dev-cluster.sh up       start it (or find it running), install the chart, print the exports
  scripts/dev-cluster.sh status   is it running? prints the exports again
  scripts/dev-cluster.sh down     stop everything it started

kwok nodes run no containers, so a supervisor process plays the pods, as the end-to-end tests do: the
operator Deployment's pod by running `cudanalyst-operator` here, as the chart's ServiceAccount (a real
token: the chart's RBAC decides), and each runner pod of a run by running its `cudanalyst-runner` command
here, then ending the pod with the runner's exit status. A run's relative output folder (`./runs`)
lands under the state folder's work/; models are looked up in this machine's cache, as `cudanalyst run`
does. The operator refreshes status every 5 s here (the chart's default is 60 s), so `kubectl get ar -w`
shows progress move.

State: ${CUDANALYST_CACHE:-~/.cache/cudanalyst}/dev-cluster/ (cluster/: etcd data, certificates, logs;
work/: the runs' folders, kept by `down`). Exit status: 0 done, 1 a component failed (its log is named),
2 bad usage or the control plane is not built.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "cluster"))

from cp_cluster import (  # noqa: E402
    Cluster,
    bin_dir,
    missing_binaries,
    start_cluster,
    wait_for,
    write_kubeconfig,
)
from cp_harness import PodHarness  # noqa: E402
from cp_process import ComponentError, free_port  # noqa: E402

from cudanalyst.cache import cache_root  # noqa: E402
from cudanalyst.runner import lifeline  # noqa: E402

RELEASE, NAMESPACE = "cudanalyst", "cudanalyst"
OPERATOR_SA = "cudanalyst-operator"  # the chart's <release>-operator
RUNNER_SA = "cudanalyst-runner"  # the chart's runner.serviceAccount.name
RUN_LABEL = "cudanalyst.dev/run"
COMPONENT_LABEL = "app.kubernetes.io/component"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
SPEC_MOUNT = "/etc/cudanalyst/spec.json"
GPU_NODES, GPUS_PER_NODE = 2, 8
STATUS_INTERVAL_S = "5"
TOKEN_SECONDS = 7 * 24 * 3600
POLL_S = 1.0


def state_root() -> Path:
    return cache_root() / "dev-cluster"


def say(message: str) -> None:
    print(f"dev-cluster: {message}", flush=True)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def read_state(root: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((root / "state.json").read_text()))
    except (OSError, json.JSONDecodeError):
        return None


def running(state: dict[str, Any] | None) -> bool:
    return bool(state) and all(alive(p["pid"]) for p in state["processes"])  # type: ignore[index]


def exports(root: Path, bins: Path) -> str:
    return f"export KUBECONFIG={root / 'kubeconfig'} PATH={bins}:$PATH"


# --- up ------------------------------------------------------------------------------------------


def install_chart(cluster: Cluster) -> None:
    """The chart, as the README installs it (upgrade --install: running it again is harmless)."""
    cluster.helm("upgrade", "--install", RELEASE, str(REPO / "charts" / "cudanalyst"), "--namespace", NAMESPACE,
                 "--create-namespace", "--wait=false", timeout_s=300)
    crd = "attributionruns.cudanalyst.dev"
    wait_for(lambda: cluster.kubectl("get", "crd", crd, "-o", "jsonpath={.status.conditions[?(@.type=='Established')]"
                                     ".status}", check=False).stdout.strip() == "True", 120, f"CRD {crd}")
    wait_for(lambda: cluster.kubectl("get", "serviceaccount", OPERATOR_SA, "-n", NAMESPACE, check=False).returncode == 0,
             60, f"the chart's ServiceAccount {OPERATOR_SA}")


def operator_kubeconfig(cluster: Cluster, root: Path) -> Path:
    """A kubeconfig with a token of the chart's operator ServiceAccount (a week long: a dev cluster lives on)."""
    token = cluster.service_account_token(NAMESPACE, OPERATOR_SA, expiration_s=TOKEN_SECONDS)
    return write_kubeconfig(root / "cluster" / "operator.kubeconfig", cluster.server, cluster.api.pki.ca.cert,
                            user=f"system:serviceaccount:{NAMESPACE}:{OPERATOR_SA}", token=token)


def up(root: Path) -> int:
    bins = bin_dir()
    missing = missing_binaries(bins)
    if missing:
        print(f"dev-cluster: error: the control plane is not built ({', '.join(missing)} missing in {bins}); "
              "run scripts/build-control-plane.sh first (about 20 minutes, once)", file=sys.stderr)
        return 2
    state = read_state(root)
    if running(state):
        say(f"already running (API server {state['server']})")  # type: ignore[index]
        print(exports(root, bins))
        return 0
    if state is not None:
        say("a previous cluster is partly gone: stopping what is left")
        down(root, keep_work=True)
    work = root / "cluster"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (root / "work").mkdir(exist_ok=True)
    started = time.monotonic()
    components = []
    try:
        say("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
        cluster = start_cluster(bins, work, components)
        wait_for(lambda: cluster.kubectl("get", "serviceaccount", "default", check=False).returncode == 0, 120,
                 "the controller-manager to make the default ServiceAccount")
        nodes = cluster.add_gpu_nodes(GPU_NODES, GPUS_PER_NODE)
        say(f"nodes Ready: {', '.join(nodes)} ({GPUS_PER_NODE} fake H200 each, run by kwok)")
        say("installing the operator from charts/cudanalyst (helm upgrade --install)")
        install_chart(cluster)
        # Runs go to namespace default here; its runner pods need the runner ServiceAccount there (the chart
        # makes it only in its own namespace or its watchNamespaces), as every namespace of runs does.
        cluster.kubectl("create", "serviceaccount", RUNNER_SA, "--namespace", "default", check=False)
        shutil.copy(cluster.kubeconfig, root / "kubeconfig")
        operator_config = operator_kubeconfig(cluster, root)
        supervisor = start_supervisor(root, bins, operator_config)
        processes = [{"name": c.name, "pid": c.process.pid, "log": str(c.log)} for c in components]  # type: ignore[union-attr]
        processes.append({"name": "supervisor", "pid": supervisor.pid, "log": str(work / "logs" / "supervisor.log")})
        (root / "state.json").write_text(json.dumps({"server": cluster.server, "bins": str(bins), "processes": processes},
                                                    indent=1))
        wait_for(lambda: supervisor.poll() is None and (work / "operator-ready").exists(), 180,
                 f"the operator to be healthy (log {work / 'logs'})")
    except (ComponentError, TimeoutError, subprocess.CalledProcessError, OSError) as exc:
        print(f"dev-cluster: error: {exc}", file=sys.stderr)
        for c in reversed(components):
            c.stop(grace_s=5)
        stop_recorded(root)
        return 1
    say(f"ready in {time.monotonic() - started:.0f} s; runner pods are played on this machine by the supervisor "
        f"(log {work / 'logs' / 'supervisor.log'}). Stop it all with: scripts/dev-cluster.sh down")
    print(exports(root, bins))
    return 0


def start_supervisor(root: Path, bins: Path, operator_config: Path) -> subprocess.Popen[bytes]:
    logs = root / "cluster" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "supervisor.log").open("ab") as out:
        # Its own session: it outlives this command (the control plane does too), and `down` ends its group.
        return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "supervise", "--state", str(root),
                                 "--operator-kubeconfig", str(operator_config)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=root / "work")


# --- down / status -------------------------------------------------------------------------------


def stop_group(pid: int, grace_s: float = 10) -> None:
    if not alive(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    end = time.monotonic() + grace_s
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def stop_recorded(root: Path) -> None:
    state = read_state(root)
    for proc in reversed((state or {}).get("processes", [])):  # the supervisor first, etcd last
        stop_group(int(proc["pid"]))
    (root / "state.json").unlink(missing_ok=True)


def down(root: Path, keep_work: bool = True) -> int:
    state = read_state(root)
    if state is None:
        say("not running")
        return 0
    stop_recorded(root)
    shutil.rmtree(root / "cluster", ignore_errors=True)
    say(f"stopped; the runs' folders stay in {root / 'work'}")
    return 0


def status(root: Path) -> int:
    state = read_state(root)
    if not running(state):
        dead = [p["name"] for p in (state or {}).get("processes", []) if not alive(p["pid"])]
        say("not running" + (f" (exited: {', '.join(dead)}; scripts/dev-cluster.sh down, then up)" if dead else ""))
        return 1
    say(f"running: API server {state['server']}")  # type: ignore[index]
    print(exports(root, Path(state["bins"])))  # type: ignore[index]
    return 0


# --- the supervisor: plays the operator's pod and the runner pods --------------------------------


def operator_env(core: Any) -> dict[str, str]:
    """The plain environment values of the chart's operator Deployment (secrets and field refs left out)."""
    from kubernetes import client

    with contextlib.suppress(Exception):
        apps = client.AppsV1Api(core.api_client)
        for dep in apps.list_namespaced_deployment(NAMESPACE, label_selector=f"{COMPONENT_LABEL}=operator").items:
            return {e.name: e.value for e in dep.spec.template.spec.containers[0].env or [] if e.value is not None}
    return {}


def start_operator(core: Any, kubeconfig: Path, root: Path) -> subprocess.Popen[bytes]:
    health = free_port()
    env = {**os.environ, **operator_env(core), "KUBECONFIG": str(kubeconfig),
           "CUDANALYST_STATUS_INTERVAL": STATUS_INTERVAL_S, "CUDANALYST_HEALTH_PORT": str(health),
           "CUDANALYST_METRICS_PORT": str(free_port())}
    log = root / "cluster" / "logs" / "operator.log"
    with log.open("ab") as out:
        proc = lifeline.popen([sys.executable, "-m", "cudanalyst.operator.main"], env=env, stdout=out,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, death_signal=signal.SIGTERM)

    def healthy() -> bool:
        import urllib.request

        if proc.poll() is not None:
            raise RuntimeError(f"the operator exited with status {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    wait_for(healthy, 120, f"the operator's /healthz (log {log})", interval_s=0.5)
    return proc


def runner_argv(pod: Any, spec_file: Path) -> list[str]:
    """The pod's own command line, with the mounted spec replaced by a local copy and the index filled in."""
    container = pod.spec.containers[0]
    index = pod.metadata.annotations[INDEX_ANNOTATION]
    argv = [*(container.command or ["cudanalyst-runner"]), *(container.args or [])]
    return [str(spec_file) if a == SPEC_MOUNT else a.replace("$(JOB_COMPLETION_INDEX)", index) for a in argv]


def play(core: Any, harness: PodHarness, pod: Any, root: Path) -> int:
    """Run one runner pod's command here; end the pod with its exit status (or stop it if the pod goes)."""
    ns, name = pod.metadata.namespace, pod.metadata.name
    run = pod.metadata.labels[RUN_LABEL]
    volume = next(v for v in pod.spec.volumes or [] if v.config_map is not None)
    spec = core.read_namespaced_config_map(volume.config_map.name, ns).data["spec.json"]
    folder = root / "work" / "pods" / ns
    folder.mkdir(parents=True, exist_ok=True)
    spec_file = folder / f"{name}-spec.json"
    spec_file.write_text(spec)
    argv = runner_argv(pod, spec_file)
    env = {**os.environ, **{e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}}
    print(f"{time.strftime('%H:%M:%S')} playing pod {ns}/{name} (run {run}): {' '.join(argv)}", flush=True)
    with (folder / f"{name}.log").open("ab") as out:
        proc = lifeline.popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              cwd=root / "work", start_new_session=True, death_signal=signal.SIGTERM)
    while proc.poll() is None:
        time.sleep(2)
        try:
            gone = core.read_namespaced_pod(name, ns).metadata.deletion_timestamp is not None
        except Exception as exc:  # noqa: BLE001 - a 404 means the Job deleted it (suspend, delete)
            gone = getattr(exc, "status", None) == 404
        if gone:
            print(f"{time.strftime('%H:%M:%S')} pod {ns}/{name} went away: stopping its runner", flush=True)
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
            return proc.returncode
    code = proc.returncode
    with contextlib.suppress(Exception):
        harness.finish(ns, name, succeeded=code == 0, exit_code=code if code > 0 else 1)
    print(f"{time.strftime('%H:%M:%S')} pod {ns}/{name} ended with exit status {code}", flush=True)
    return code


def supervise(root: Path, operator_config: Path) -> int:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(root / "kubeconfig"))
    core = client.CoreV1Api(api)
    harness = PodHarness(core)
    operator = start_operator(core, operator_config, root)
    (root / "cluster" / "operator-ready").touch()
    print(f"{time.strftime('%H:%M:%S')} operator running (pid {operator.pid}), playing runner pods", flush=True)
    played: set[str] = set()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while not stop:
        if operator.poll() is not None:
            print(f"operator exited with status {operator.returncode}; restarting it", flush=True)
            operator = start_operator(core, operator_config, root)
        try:
            pods = core.list_pod_for_all_namespaces(label_selector=f"{RUN_LABEL},{COMPONENT_LABEL}=runner").items
        except Exception as exc:  # noqa: BLE001 - the API server restarting; try again
            print(f"listing pods: {exc}", flush=True)
            pods = []
        for pod in sorted(pods, key=lambda p: p.metadata.creation_timestamp):
            if (pod.metadata.uid in played or pod.status.phase != "Running" or not pod.spec.node_name
                    or pod.metadata.deletion_timestamp is not None):
                continue
            played.add(pod.metadata.uid)
            play(core, harness, pod, root)
            if stop:
                break
        time.sleep(POLL_S)
    operator.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        operator.wait(20)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dev-cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "status", "supervise"])
    parser.add_argument("--state", type=Path, default=None, help="state folder (default: %(prog)s's cache folder)")
    parser.add_argument("--operator-kubeconfig", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = (args.state or state_root()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if args.command == "up":
        return up(root)
    if args.command == "down":
        return down(root)
    if args.command == "status":
        return status(root)
    return supervise(root, args.operator_kubeconfig)


if __name__ == "__main__":
    sys.exit(main())
