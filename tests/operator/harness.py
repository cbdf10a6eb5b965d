"""Test harness for the operator's handlers against kmock (the kopf author's Kubernetes API emulator).

kmock stores objects and serves list/watch/create/patch/delete, but emulates no resourceVersion, label
selectors, pruning, garbage collection or controllers: the tests play the Job controller themselves by
writing Job and Pod status, and prove pruning safety by validating every status patch against the CRD.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import jsonschema
import kopf

from cudanalyst.crd import build_crd
from cudanalyst.operator.config import OperatorConfig
from cudanalyst.operator.handlers import build_registry
from cudanalyst.operator.lifecycle import Services
from cudanalyst.trajectory import FrozenProgram, dump_programs, manifest_for

NS = "ns1"
RUNS = "cudanalyst.dev/v1alpha1/attributionruns"
JOBS = "batch/v1/jobs"
PODS = "v1/pods"
CONFIGMAPS = "v1/configmaps"
EVENTS = "v1/events"


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "kmock", "user": {"token": "test"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock", "namespace": NS}}],
    }))
    return path


def declare_resources(kmock: Any) -> None:
    kmock.resources.load_bundled()
    kmock.resources[RUNS] = kmock.ResourceInfo(
        kind="AttributionRun", singular="attributionrun", namespaced=True, shortnames={"ar"},
        verbs={"list", "watch", "get", "patch", "create", "delete", "update"}, subresources={"status"},
    )


def write_trajectory(folder: Path, generations: tuple[int, ...] = (0, 1), per_generation: int = 2) -> str:
    """A small real trajectory folder in the project's format."""
    programs = [
        FrozenProgram(task="vector_add", generation=g, program_id=f"g{g}-p{i}", source=f"// kernel {g}.{i}\n",
                      feedback={"debugger": "ok", "analyzer": "regs=32", "profiler": "0.1 ms"})
        for g in generations for i in range(per_generation)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "programs.jsonl").write_text(dump_programs(programs))
    (folder / "trajectory.json").write_text(manifest_for(programs).model_dump_json(by_alias=True))
    return folder.as_uri() + "/"


def run_body(name: str, trajectory_uri: str, output_uri: str, **spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "trajectory": {"uri": trajectory_uri, "generations": [0, 1], "programsPerGeneration": 2},
        "players": ["debugger", "analyzer", "profiler"],
        "models": {"planner": {"model": "/models/planner"}},
        "sampling": {"rollouts": 1, "samplesPerCoalition": 2},
        "resources": {"shards": 2, "gpusPerShard": 1},
        "output": {"uri": output_uri},
    }
    for path, value in spec_overrides.items():
        node = spec
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return {
        "apiVersion": "cudanalyst.dev/v1alpha1",
        "kind": "AttributionRun",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1,
                     "resourceVersion": "1", "labels": {"cudanalyst.dev/batch": "b1"}},
        "spec": spec,
    }


# ---- the CRD's status schema, made strict: kopf patches of undeclared fields would be pruned silently.

def _strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if schema.get("nullable"):
        out.pop("nullable", None)
        kind = out.get("type")
        if kind:
            out["type"] = [kind, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    # OpenAPI v3.0's boolean exclusive bounds -> JSON Schema's numeric ones.
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(flag) is True:
            out[flag] = out.pop(bound)
        elif out.get(flag) is False:
            out.pop(flag)
    return out


def status_schema() -> dict[str, Any]:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return _strict(copy.deepcopy(schema))


_VALIDATOR: jsonschema.Draft202012Validator | None = None


def validate_status(status: dict[str, Any]) -> None:
    """Fail when a status (merged, or a patch with its deletions dropped) has a field the CRD lacks."""
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = jsonschema.Draft202012Validator(status_schema())
    errors = sorted(_VALIDATOR.iter_errors(status), key=lambda e: list(e.path))
    if errors:
        raise AssertionError("status does not fit the CRD: " + "; ".join(
            f"{'.'.join(map(str, e.path)) or '<status>'}: {e.message}" for e in errors))


def drop_nulls(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: drop_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [drop_nulls(v) for v in node]
    return node


def status_patches(kmock: Any) -> list[dict[str, Any]]:
    """Every status patch the operator sent to an AttributionRun."""
    return [r.data["status"] for r in kmock[kmock.resource(RUNS)]
            if r.method == "PATCH" and isinstance(r.data, dict) and "status" in r.data]


def check_all_status_patches(kmock: Any) -> int:
    patches = status_patches(kmock)
    for patch in patches:
        validate_status(drop_nulls(patch))
    for key in list(kmock.objects):
        if key[0] == kmock.resource(RUNS) and not kmock.objects[key].deleted:
            validate_status(drop_nulls(dict(kmock.objects[key].raw.get("status") or {})))
    return len(patches)


# ---- running the operator inside the test's event loop

def operator_config(**overrides: Any) -> OperatorConfig:
    values: dict[str, Any] = {"namespaces": (NS,), "status_interval": 0.3}
    values.update(overrides)
    return OperatorConfig(**values)


@contextlib.asynccontextmanager
async def operator_running(services: Services | None = None, posting: bool = False) -> AsyncIterator[None]:
    """kopf standalone in this loop, scanning off (kmock's cluster-wide namespace list fails); its services are
    built from operator_config()'s defaults unless a test passes its own (another config, or to read its metrics).

    kopf.operator() is kopf.spawn_tasks() then kopf.run_tasks(), and run_tasks gives the tasks it did not start
    (here the timers' runners, which its daemon killer leaves running when embedded, and kmock's keep-alive
    request handlers) 5 s to end before it cancels them: 5 s of every test. This is the same sequence with
    those tasks cancelled at once: the root tasks end on the stop flag as before, the rest is cancelled, and a
    task's error is raised as run_tasks raises it."""
    services = services if services is not None else Services(operator_config())
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = True
    settings.posting.enabled = posting
    settings.watching.reconnect_backoff = 0.1
    settings.queueing.idle_timeout = 0.5
    stop = asyncio.Event()
    existing = asyncio.all_tasks()
    roots = await kopf.spawn_tasks(registry=build_registry(services), settings=settings, standalone=True,
                                   namespaces=[NS], clusterwide=False, stop_flag=stop)
    try:
        yield
    finally:
        stop.set()
        # The stop-flag checker ends first; then the other roots are cancelled and awaited, as run_tasks does.
        done, pending = await asyncio.wait(roots, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=10)
        hung = asyncio.all_tasks() - existing - {asyncio.current_task()}
        for task in hung:
            task.cancel()
        if hung:
            await asyncio.wait(hung, timeout=10)
        for task in [*roots, *hung]:
            if task.done() and not task.cancelled() and task.exception():
                raise task.exception()  # type: ignore[misc]


async def eventually(check: Callable[[], Any], timeout: float = 10.0, step: float = 0.05) -> Any:
    """Poll until `check()` returns a truthy value without raising; re-raise its last error on timeout."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
            error: BaseException | None = AssertionError(f"still {value!r}")
        except (AssertionError, KeyError, IndexError, TypeError) as exc:
            error = exc
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout}s: {error}") from error
        await asyncio.sleep(step)


# ---- playing the Job controller and the runner (kmock has no controllers)

def job_url(name: str, status: bool = False) -> str:
    return f"/apis/batch/v1/namespaces/{NS}/jobs/{name}" + ("/status" if status else "")


def run_url(name: str) -> str:
    return f"/apis/cudanalyst.dev/v1alpha1/namespaces/{NS}/attributionruns/{name}"


async def set_job_status(kmock: Any, name: str, status: dict[str, Any]) -> None:
    async with kmock.patch(job_url(name, status=True), json={"status": status}) as resp:
        assert resp.status == 200, await resp.text()


async def add_pod(kmock: Any, run: str, shard: int, status: dict[str, Any]) -> None:
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{run}-runner-{shard}-x", "namespace": NS,
                     "labels": {"cudanalyst.dev/run": run, "batch.kubernetes.io/job-completion-index": str(shard)},
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(shard)}},
        "spec": {"containers": [{"name": "runner", "image": "reg/runner:1"}]},
        "status": status,
    }
    async with kmock.post(f"/api/v1/namespaces/{NS}/pods", json=pod) as resp:
        assert resp.status == 200, await resp.text()


def write_outcomes(run_body_: dict[str, Any], label_of: Callable[[tuple[str, ...]], str],
                   fields_of: Callable[[tuple[str, ...]], dict[str, Any]] | None = None) -> int:
    """What the runner pods would leave in the store: one outcome record per unit (with `fields_of`'s other
    fields, e.g. fastVsBaseline), and progress objects."""
    from cudanalyst.api import parse_run
    from cudanalyst.outcomes import UnitOutcome
    from cudanalyst.planned_run import plan_run
    from cudanalyst.runfolder import outcome_key, progress_key, run_store

    run = parse_run({k: run_body_[k] for k in ("apiVersion", "kind", "metadata", "spec")})
    plan = plan_run(run)
    store = run_store(run)
    for unit in plan.units:
        record = UnitOutcome(key=unit.key, run=run.metadata.name, task=unit.task, generation=unit.generation,
                               program_id=unit.program_id, coalition=list(unit.coalition), arm=unit.arm,
                               rollout=unit.rollout, sample=unit.sample, label=label_of(unit.coalition),
                               evaluated_up_to="fast", gpu_seconds=0.5,
                               **(fields_of(unit.coalition) if fields_of else {}))
        store.put_json(outcome_key(unit.key), record.model_dump(by_alias=True, mode="json"))
    for index, shard in enumerate(plan.shards):
        store.put_json(progress_key(index), {"done": len(shard), "total": len(shard), "gpuSeconds": 0.5 * len(shard),
                                             "byStage": {"llm": {"done": len(shard)}, "kernels": {"done": len(shard)}}})
    return len(plan.units)


def run_status(kmock: Any, name: str) -> dict[str, Any]:
    return dict(kmock.objects[RUNS, NS, name].raw.get("status") or {})


def condition(kmock: Any, name: str, kind: str) -> dict[str, Any]:
    for cond in run_status(kmock, name).get("conditions", []):
        if cond["type"] == kind:
            return cond
    raise KeyError(kind)
