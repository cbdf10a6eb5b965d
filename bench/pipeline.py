#!/usr/bin/env python
"""Programs per hour: the local pipeline on 1, 2, ... GPUs against a serial pipeline of the same steps, in one run.

  python bench/pipeline.py --spec SPEC [--gpus 1,2] [--serial-units K] [--units M] [--rollouts R]
                           [--model NAME] [--max-model-len N] [--max-tokens N] [--json FILE] [--against FILE]

One vLLM server per local model and GPU is started (and warmed up) once, every GPU's at the same time, and
shared by every side; its start-up time is printed apart and is not what is compared:
- pipeline on G GPUs (one side per entry of --gpus; default: every visible GPU, or one unpinned lane
  without a GPU): what `cudanalyst run SPEC --no-report --gpus G` does (runner.local.executor): one lane per
  GPU, each with its server, its share of the shards' LLM stage (subprocesses, all prompts in flight)
  and its own kernel-stage process (CPU compile pool, persistent GPU workers), which compiles and verifies
  candidates as they are stored and, once its lane's LLM stage is over, times the correct ones with its GPU
  alone (here the idle server keeps its memory but runs nothing; `cudanalyst run` stops it). M units: the
  whole spec, or --units M rounded up to whole frozen programs. Its time runs from the kernel stages' start
  to their end. The sides run one after the other, each from nothing (own folder and nvcc cache).
- serial: K units spread over the plan, one at a time, each through the same building blocks: its
  prompts (runner.llm.stage, .prompts), the plan of its group (one planner request, reused by
  the group's later samples as the pipeline does), one coder request with n = 1, extraction, then
  compile, verify and time it alone (runner.kernels.stage, one persistent GPU worker reused across units), on
  the first GPU. Its rate is measured on those K units (a sample: the serial pipeline's rate does not
  depend on how many units there are) and set beside every pipeline side's.
The serial side runs after the pipelines, on the same server, so any prefix-cache warmth favours the
serial side (the ratio is conservative). A "program" is a candidate kernel taken end to end to its outcome
record. Without a GPU kernels are compiled only, and the output says so. `--json FILE` is rewritten after
each side, so a run stopped by a time limit keeps the sides it finished; `--against FILE` also prints the
ratios against the sides of an earlier run's JSON of the same units (another call on the same machine).

  python bench/pipeline.py --spec SPEC --user-clock [cold,warm] [--vllm-cache DIR] [--gpus G] [--units M] ...

--user-clock measures what a user sees instead (issue 32): `cudanalyst run SPEC` as a user types it, a process of
its own, from its start to the printed report, the model server's start included. `cold` starts from a fresh
state (new run folder, empty nvcc cache, empty vLLM compile cache: a fresh machine); `warm` again from a new run
folder and an empty nvcc cache, but with the vLLM compile cache the cold run left (the next run on this machine,
or a pod that fetched the cache). `staged` is warm's run as two commands, `--stage llm` and then the plain command
again on the same folder (every unit has its candidate, so it runs the kernel stage alone and the report): the LLM stage with no verification on the GPU beside the model server, then the whole kernel
stage (issue 32's A/B: `--user-clock cold,warm,staged` sets both side by side, from the same cache). `unseeded` is
warm's command on the spec with `sampling.requestSeeds: false` (the A/B of the request seeds). `store` is a fresh
pod's start where the cache lives in a store: an empty local folder of its own, and the store that
`CUDANALYST_VLLM_CACHE_URI` names (scripts/device/models.sh seeds one from .device/vllm-cache.tgz), which the other
runs leave out; its server's line in the run's console says whether the store had this GPU kind's archive.
`runner-v1` and `runner-v2` are store's run with vLLM's model runner named (VLLM_USE_V2_MODEL_RUNNER 0 or 1: V2 draws
every seeded request's noise in one kernel; our servers' default for the coder since 2026-12-07). `api2` is store's
run on the spec with every local model's server fed by two API-server processes (`--api-server-count 2` in its
`extraArgs`: the outputs' host work split, bench/servers_per_gpu.py's `1x2` in a whole run). `first3` is store's run
with a brief first attempt of 3 s for the verifications that start while candidates still come in
(CUDANALYST_FIRST_ATTEMPT_SECONDS=3, runner/cudanalyst/runner/kernels/limits.py: a hung candidate spins beside the
model server for 3 s instead of its full limit, and is verified again after the LLM stage). `servers2` is store's run
with two model servers on each GPU (`--servers-per-gpu 2`: started together, each with half of the model's GPU
memory and of the running sequences, the GPU's shards dealt over them). Each run's
table is the command's own (its clock starts at its process start; a staged run's two tables are added); the
bench's clock (Popen to exit) is printed beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudanalyst.api import AttributionRun, load_run
from cudanalyst.outcomes import UnitCandidate, UnitOutcome, unit_identity
from cudanalyst.plan import Unit, plan_digest
from cudanalyst.planned_run import PlannedRun, plan_run
from cudanalyst.runfolder import (
    CANDIDATES,
    OUTCOMES,
    PLANNER_TEXTS,
    candidate_key,
    keys_under,
    outcome_key,
    planner_text_key,
    run_store,
)
from cudanalyst.runner.kernels.limits import FIRST_ATTEMPT_ENV
from cudanalyst.runner.llm.serving import API_SERVER_FLAGS
from cudanalyst.runner.local.display import shard_summaries
from cudanalyst.runner.local.executor import KernelStages, LaneServers, lanes_for, llm_stage_in_lanes, prepare
from cudanalyst.runner.local.gpus import Lane, visible_gpus
from cudanalyst.store import ObjectStore
from cudanalyst.trajectory import dump_programs

COMPILE_CACHE_ENV = "CUDANALYST_COMPILE_CACHE"


@dataclass
class Side:
    """What one side did: units taken end to end, wall seconds, and where the time and tokens went."""

    name: str
    units: int = 0
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    completion_tokens: int = 0
    labels: dict[str, int] = field(default_factory=dict)
    failures: int = 0
    notes: list[str] = field(default_factory=list)  # the runner's per-stage summaries
    gpus: int = 0  # GPUs the side used (0: no GPU, or the serial side)

    @property
    def per_hour(self) -> float:
        return self.units * 3600.0 / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        llm = self.stage_seconds.get("llm", 0.0)
        return self.completion_tokens / llm if llm > 0 else 0.0


# ---------------------------------------------------------------------------------------- the spec
def with_output(run: AttributionRun, uri: str) -> AttributionRun:
    spec = run.spec.model_copy(update={"output": run.spec.output.model_copy(update={"uri": uri})})
    return run.model_copy(update={"spec": spec})


def derive(run: AttributionRun, *, model: str | None, max_model_len: int | None,
           max_tokens: int | None, rollouts: int | None = None) -> AttributionRun:
    """The spec with the bench's overrides (a smaller model, context or completion length)."""
    data = run.model_dump(by_alias=True, mode="json", exclude_none=True)
    for role, spec in data["spec"]["models"].items():
        if spec and spec.get("serve") == "local":
            if model:
                spec["model"] = model
            if max_model_len:
                spec["maxModelLen"] = max_model_len
        data["spec"]["models"][role] = spec
    if max_tokens:
        data["spec"]["sampling"]["maxTokens"] = max_tokens
    if rollouts:
        data["spec"]["sampling"]["rollouts"] = rollouts
    return AttributionRun.model_validate(data)


def trimmed(run: AttributionRun, units: int, folder: Path) -> AttributionRun:
    """The spec over its first frozen programs, as many as `units` needs (whole programs: a program's
    units share prompts and plans, so cutting one apart would change the work per unit)."""
    plan = plan_run(run)
    per_program = max(1, len(plan.units) // max(1, len(plan.programs)))
    keep = plan.programs[: max(1, math.ceil(units / per_program))]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "programs.jsonl").write_text(dump_programs(keep))
    data = run.model_dump(by_alias=True, mode="json", exclude_none=True)
    data["spec"]["trajectory"] = {**data["spec"]["trajectory"], "uri": str(folder), "format": "cudanalyst",
                                  "generations": sorted({p.generation for p in keep}), "tasks": []}
    return AttributionRun.model_validate(data)


def spread(units: Sequence[Unit], k: int) -> list[Unit]:
    """About k units in whole prompt groups (the samples that share a prompt and a plan), the groups
    spread evenly over the plan, so the serial side plans as often per unit as the pipeline does."""
    groups: dict[tuple[object, ...], list[Unit]] = {}
    for u in units:
        groups.setdefault((u.program_id, u.coalition, u.arm, u.rollout), []).append(u)
    ordered = list(groups.values())
    size = max(1, len(ordered[0])) if ordered else 1
    want = min(len(ordered), max(1, math.ceil(k / size)))
    chosen = [ordered[i * len(ordered) // want] for i in range(want)]
    return [u for g in chosen for u in g][:k]


@contextlib.contextmanager
def compile_cache(folder: Path) -> Iterator[None]:
    """A fresh nvcc cache for one side (the shard subprocesses inherit it from the environment)."""
    old = os.environ.get(COMPILE_CACHE_ENV)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[COMPILE_CACHE_ENV] = str(folder)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(COMPILE_CACHE_ENV, None)
        else:
            os.environ[COMPILE_CACHE_ENV] = old


# ------------------------------------------------------------------------------------ the records
def label_counts(store: ObjectStore) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in keys_under(store, OUTCOMES):
        label = str(store.get_json(outcome_key(name)).get("label"))
        counts[label] = counts.get(label, 0) + 1
    return counts


def completion_tokens(store: ObjectStore) -> int:
    """Generated tokens of a run folder: every coder sample plus every stored (non-dummy) plan."""
    total = 0
    for name in keys_under(store, CANDIDATES):
        total += int(store.get_json(candidate_key(name)).get("tokens", {}).get("coderCompletion", 0) or 0)
    for name in keys_under(store, PLANNER_TEXTS):
        total += int((store.get_json(planner_text_key(name)).get("tokens") or {}).get("completion", 0) or 0)
    return total


# ------------------------------------------------------------------------------------- the sides
def runner_lines(folder: str, stage: str) -> list[str]:
    """The runner's one-line summaries of a stage (where its time went), from the shards' logs."""
    return [f"{name}: {text}" for name, text in shard_summaries(Path(folder), stage)]


def run_pipeline(run: AttributionRun, lanes: list[Lane], served: dict[int, list[AttributionRun]], folder: str,
                 side: Side) -> None:
    """What `cudanalyst run --gpus G` does: per lane (GPU), the kernel stage of its shards in one process,
    started beside the lane's shards' LLM stage, compiling and verifying as candidates come, timing once the
    lane's LLM stage is over. `llm` is the LLM stage's time (every lane); `kernels` what the kernel stages
    took after it (the tail)."""
    t0 = time.perf_counter()
    with KernelStages(run, lanes, folder, lambda: None) as kernels:
        # A lane's server is idle from its lane's end on (no requests), so its kernel stage times with the GPU alone.
        codes = llm_stage_in_lanes(lanes, served, folder, lambda: None, (), lambda lane: kernels.release(lane.index))
        t_llm = time.perf_counter()
        codes_k = kernels.finish()
    side.stage_seconds = {"llm": t_llm - t0, "kernels": time.perf_counter() - t_llm}
    side.failures += sum(1 for c in (*codes.values(), *codes_k.values()) if c != 0)


class SerialPipeline:
    """One unit at a time through plan, coder (n = 1), extraction, compile, verify and time."""

    def __init__(self, served: AttributionRun, units: Sequence[Unit], gpu: bool) -> None:
        from cudanalyst.runner.llm.client import ClientSettings
        from cudanalyst.runner.llm.model_servers import ModelServers, StageSettings
        from cudanalyst.runner.llm.stage import LlmStage
        from cudanalyst.runner.shard import fill_feedback
        from cudanalyst.runner.units import ProgressTracker, UnitStore

        self.run = served
        self.units = list(units)
        self.store = UnitStore(run_store(served))
        plan = plan_run(served)
        self.frozen = {p.program_id: p for p in plan.programs}
        # Feedback is per frozen program (computed once, cached), as in a shard; it counts as LLM-stage time.
        needed = {u.program_id for u in self.units}
        if "randomizedFeedback" in served.spec.controls:
            needed = set(self.frozen)
        self._fill = lambda: fill_feedback(served, plan.programs, needed, self.store)
        self.client = ClientSettings(concurrency=1)
        self.settings = StageSettings(client=self.client)
        self.servers = ModelServers(self.settings, served.spec.sampling.seed)
        self.progress = ProgressTracker(0, 1, len(self.units), stages=["llm", "kernels"])
        self._stage_cls = LlmStage
        self.gpu = gpu

    def run_all(self, side: Side) -> None:
        from cudanalyst.runner.kernels.workers.pool import WorkerPool

        side.stage_seconds = {"llm": 0.0, "kernels": 0.0}
        t_all = time.perf_counter()
        t0 = time.perf_counter()
        programs = self._fill()
        stage = self._stage_cls(self.run, programs, self.units, self.store, self.progress, 0, self.settings)
        side.stage_seconds["llm"] += time.perf_counter() - t0
        # One persistent GPU worker for the whole serial side: the serial baseline is not charged a
        # CUDA context per candidate, only the lack of overlap.
        pool = WorkerPool(1) if self.gpu else None
        try:
            for unit in self.units:
                self.one(stage, unit, side, pool)
        finally:
            if pool is not None:
                pool.close()
        side.seconds = time.perf_counter() - t_all
        side.units = len(self.store.finished_outcomes() & {u.key for u in self.units})

    def one(self, stage: Any, unit: Unit, side: Side, pool: Any) -> None:
        from cudanalyst.runner.llm.client import GenerationRequest, generate
        from cudanalyst.runner.llm.extract import extract_kernel
        from cudanalyst.runner.llm.prompts import TEMPLATE_VERSION
        from cudanalyst.runner.llm.stage import derive_seed, make_groups
        from cudanalyst.tasks import get_task

        t0 = time.perf_counter()
        group = make_groups(self.run.metadata.name, [unit], stage.programs)[0]
        summaries = stage._summaries([group], self.servers)
        if self.run.spec.planning == "explicit" and not group.failed:
            stage._plans([group], summaries, self.servers)  # the group's stored plan, or one request
        ref = unit_identity(unit, self.run.metadata.name)
        if group.failed:
            side.failures += 1
            side.stage_seconds["llm"] += time.perf_counter() - t0
            return
        sampling = self.run.spec.sampling
        endpoint = self.servers.endpoint(self.run.spec.models.resolved_coder)
        coder = stage._coder_prompt(group, summaries)
        prompt = coder.rendered(endpoint.api)
        # n = 1 per request, so each sample gets its own seed (the pipeline's n samples share one).
        request = GenerationRequest(unit.key, prompt, 1, derive_seed(sampling.seed, "coder", group.key, unit.sample),
                                    sampling.max_tokens, sampling.temperature, sampling.top_p)
        res = generate(endpoint, [request], self.client)[0]
        if not res.ok:
            side.failures += 1
            side.stage_seconds["llm"] += time.perf_counter() - t0
            return
        text = coder.answer_text(endpoint.api, res.texts[0] if res.texts else None)
        ex = extract_kernel(text, get_task(unit.task).kernel_names)
        tokens = res.completion_tokens[0] if res.completion_tokens else None
        plan_tokens = int((group.planner_meta.get("tokens") or {}).get("completion", 0) or 0)
        side.completion_tokens += (tokens or 0) + (plan_tokens if unit.sample == 0 else 0)
        record = UnitCandidate(
            **ref, prompt_version=TEMPLATE_VERSION, prompts={"coder": prompt if isinstance(prompt, str)
                                                             else json.dumps(prompt)},
            plan=group.plan, completion=text or "", code=ex.code, reason="" if ex.ok else (ex.reason or "no code"),
            seed=res.seed, tokens={"coderCompletion": tokens or 0, "coderPrompt": res.prompt_tokens or 0})
        self.store.write_candidate(record)
        side.stage_seconds["llm"] += time.perf_counter() - t0

        t1 = time.perf_counter()
        self.store.write_outcome(self.evaluate(unit, ex.code if ex.ok else None, ref, pool))
        side.stage_seconds["kernels"] += time.perf_counter() - t1

    def evaluate(self, unit: Unit, code: str | None, ref: dict[str, Any], pool: Any) -> UnitOutcome:
        from cudanalyst.runner.kernels.stage import KernelJob, evaluate_candidates

        job = KernelJob(key=unit.key, task=unit.task, source=code,
                        frozen_source=self.frozen[unit.program_id].source, unit=ref)
        return evaluate_candidates([job], self.run.spec.evaluation, gpu=self.gpu, pool=pool)[0]


# ----------------------------------------------------------------------------------------- output
def ratio(a: Side | dict[str, Any], b: Side | dict[str, Any]) -> float | None:
    """a's rate over b's (sides, or sides as the JSON holds them); None when b has no rate."""
    rate_a = a.per_hour if isinstance(a, Side) else float(a.get("perHour") or 0.0)
    rate_b = b.per_hour if isinstance(b, Side) else float(b.get("perHour") or 0.0)
    return rate_a / rate_b if rate_b > 0 else None


def table(pipelines: list[Side], serial: Side | None, server_start_s: float, gpu: bool) -> str:
    rows = [("side", "units", "seconds", "units/hour", "gen tok/s", "LLM share", "kernel share", "labels")]
    for s in ([serial] if serial else []) + pipelines:
        total = sum(s.stage_seconds.values()) or 1.0
        rows.append((s.name, str(s.units), f"{s.seconds:.1f}", f"{s.per_hour:,.0f}", f"{s.tokens_per_s:,.0f}",
                     f"{s.stage_seconds.get('llm', 0) / total:.0%}", f"{s.stage_seconds.get('kernels', 0) / total:.0%}",
                     " ".join(f"{k}={v}" for k, v in sorted(s.labels.items()))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    for p in pipelines:
        if serial is not None:
            r = ratio(p, serial)
            lines.append(f"ratio {p.name}/serial: {r:.1f}x" if r else f"ratio {p.name}/serial: n/a")
    for p in pipelines[1:]:
        r = ratio(p, pipelines[0])
        lines.append(f"ratio {p.name}/{pipelines[0].name}: {r:.2f}x" if r else f"ratio {p.name}/{pipelines[0].name}: n/a")
    lines.append(f"(model server start-up, every GPU's at once, not compared: {server_start_s:.1f} s)")
    if serial is not None:
        lines.append(f"serial: measured on {serial.units} units spread over the plan, one at a time; its rate "
                     "(units/hour) is set beside the pipelines' as measured, not run at their size")
    if not gpu:
        lines.append("no GPU here: kernels were compiled only (pass and fast not evaluated), on every side")
    return "\n".join(lines)


def side_json(s: Side) -> dict[str, Any]:
    return {"units": s.units, "seconds": s.seconds, "stageSeconds": s.stage_seconds, "perHour": s.per_hour,
            "completionTokens": s.completion_tokens, "tokensPerSecond": s.tokens_per_s, "labels": s.labels,
            "failures": s.failures, "notes": s.notes, "gpus": s.gpus}


def gpu_list(text: str) -> list[int]:
    """--gpus: GPU counts, one pipeline side each, in the order given ("1,2")."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or any(c < 1 for c in counts) or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected distinct GPU counts of at least 1, e.g. 1,2")
    return counts


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", required=True, help="AttributionRun YAML or JSON")
    p.add_argument("--gpus", type=gpu_list, default=None,
                   help="pipeline sides by GPU count, run one after the other, e.g. 1,2 (default: every visible GPU)")
    p.add_argument("--serial-units", type=int, default=8,
                   help="units the serial side runs (default %(default)s; 0: no serial side)")
    p.add_argument("--units", type=int, default=None,
                   help="pipeline units (rounded up to whole frozen programs; default: the whole spec)")
    p.add_argument("--rollouts", type=int, help="override sampling.rollouts (e.g. 2: the 2,640-unit example at 5,280)")
    p.add_argument("--model", help="serve this model instead: a name in the models cache (e.g. tiny-llama-base)")
    p.add_argument("--max-model-len", type=int, help="override models.*.maxModelLen")
    p.add_argument("--max-tokens", type=int, help="override sampling.maxTokens")
    p.add_argument("--health-timeout", type=float, default=900.0, help="seconds for the server to get healthy")
    p.add_argument("--workdir", help="folder for the run folders and logs (default: a new temp folder)")
    p.add_argument("--json", dest="json_out", help="also write the figures to this JSON file (after each side; with --user-clock, each "
                   "run's console and timings beside it as FILE.run-NAME.log and FILE.timings-NAME.json)")
    p.add_argument("--against", help="an earlier run's --json of the same units: print the ratios against its sides")
    p.add_argument("--vllm-cache", metavar="DIR",
                   help="with --user-clock: the vLLM compile cache folder (default: one in the work folder); give "
                        "the folder a cold run of an earlier call filled to run warm alone on the same machine")
    p.add_argument("--user-clock", type=user_runs, nargs="?", const=["cold", "warm"], default=None, metavar="RUNS",
                   help="measure `cudanalyst run` as a user sees it instead: cold (fresh state), warm (the vLLM "
                        "compile cache of the cold run), staged (as warm, but `--stage llm` first, then the rest: "
                        "no verification beside the model server), unseeded (as warm, with sampling.requestSeeds "
                        "false), store (a fresh folder and the store), runner-v1 and runner-v2 (as store, with "
                        "vLLM's model runner V1 or V2), api2 (as store, each local model's server fed by two "
                        "API-server processes), first3 (as store, with a first attempt of 3 s for verifications "
                        "beside the model server), servers2 (as store, two model servers on each GPU); default "
                        "cold,warm")
    args = p.parse_args(argv)
    if args.serial_units < 0 or (args.units is not None and args.units < 1) or (args.rollouts or 1) < 1:
        p.error("--serial-units must be at least 0, --units and --rollouts at least 1")
    return args


def against_lines(path: str, digest: str, pipelines: list[Side]) -> list[str]:
    """Ratios of this run's pipeline sides against an earlier run's (same units, by the plan's digest)."""
    try:
        earlier = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        return [f"--against {path}: not readable ({exc})"]
    if earlier.get("planDigest") != digest:
        return [f"--against {path}: another plan (digest {earlier.get('planDigest')} here {digest}): no ratio"]
    lines = []
    for name, side in (earlier.get("sides") or {}).items():
        if name == "serial":
            continue
        for p in pipelines:
            r = ratio(p, side)
            if r and p.name != name:
                lines.append(f"ratio {p.name} (this run) / {name} ({path}): {r:.2f}x")
    return lines


# ------------------------------------------------------------------------------------ the user's clock
USER_RUNS = ("cold", "warm", "staged", "unseeded", "store", "runner-v1", "runner-v2", "api2", "first3", "servers2")
# The `store` runs whose command's environment differs (issue 32): vLLM's model runner named (V1 is vLLM 0.22's
# default for the coder; ours is V2 since 2026-12-07, runner/cudanalyst/runner/llm/serving.py says why), ...
RUN_ENV = {"runner-v1": {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "runner-v2": {"VLLM_USE_V2_MODEL_RUNNER": "1"},
           # ... and a brief first attempt for verifications beside the model server (kernels/limits.py).
           "first3": {FIRST_ATTEMPT_ENV: "3"}}
# The A/B of two model servers sharing each GPU (`cudanalyst run --servers-per-gpu 2`): the arguments of its command.
RUN_ARGS = {"servers2": ["--servers-per-gpu", "2"]}
STORE_RUNS = ("store", *RUN_ENV, "api2", *RUN_ARGS)


def user_runs(text: str) -> list[str]:
    runs = [x.strip() for x in text.split(",") if x.strip()]
    if not runs or any(r not in USER_RUNS for r in runs) or len(set(runs)) < len(runs):
        raise argparse.ArgumentTypeError(f"{text!r}: expected some of {', '.join(USER_RUNS)}, each once")
    return runs


def unseeded(doc: dict[str, Any]) -> dict[str, Any]:
    """The run's document with `sampling.requestSeeds: false`: the `unseeded` run, warm's command on a spec whose
    requests carry no seed (issue 32: vLLM draws a seeded row's noise alone, one launch a row)."""
    spec = dict(doc["spec"])
    spec["sampling"] = {**(spec.get("sampling") or {}), "requestSeeds": False}
    return {**doc, "spec": spec}


def with_api_servers(doc: dict[str, Any], count: int) -> dict[str, Any]:
    """The run's document with every locally served model's server fed by `count` API-server processes (the `api2`
    run); a model whose extraArgs already name a count keeps it, and the document it came from is left as it was."""
    spec = AttributionRun.model_validate(doc).spec  # its ModelSpecs say which models are served locally
    models = {}
    for role in type(spec.models).model_fields:
        model = getattr(spec.models, role)
        if model is not None and model.serve == "local" and not any(
                a.split("=")[0] in API_SERVER_FLAGS for a in model.extra_args):
            models[role] = model.model_copy(update={"extra_args": [*model.extra_args, API_SERVER_FLAGS[0], str(count)]})
    changed = spec.model_copy(update={"models": spec.models.model_copy(update=models)})
    return {**doc, "spec": changed.model_dump(by_alias=True, exclude_none=True, mode="json")}


def run_as_user(spec_file: Path, work: Path, name: str, vllm_cache: Path, gpus: int | None) -> dict[str, Any]:
    """One `cudanalyst run` as a user runs it, or `staged`: the same spec as two commands, `--stage llm` and then
    the plain command on its folder, so that no verification shares the GPU with the model server (issue 32: do
    the kernel stage's GPU workers slow generation?). Each from a new run folder and nvcc cache, with the vLLM
    compile cache in `vllm_cache`."""
    if name in STORE_RUNS:  # a folder of its own, empty: what the run finds comes from the store
        return _user_command(spec_file, work, name, name, work / f"vllm-cache-{name}", gpus, RUN_ARGS.get(name, []),
                             keep_store=True, env=RUN_ENV.get(name))
    if name != "staged":
        return _user_command(spec_file, work, name, name, vllm_cache, gpus, [])
    llm = _user_command(spec_file, work, "staged", "staged-llm", vllm_cache, gpus, ["--stage", "llm", "--no-report"])
    if llm["exit"] != 0:
        return llm
    # The plain command again: every unit has its candidate, so it runs the kernel stage alone (no model server)
    # and builds the report, as a user's rerun does; `--stage kernels` would leave the report out.
    kernels = _user_command(spec_file, work, "staged", "staged-kernels", vllm_cache, gpus, [])
    return staged(llm, kernels)


def staged(llm: dict[str, Any], kernels: dict[str, Any]) -> dict[str, Any]:
    """The two commands of a staged run as one row: the first's spans, the second's whole kernel stage as the tail
    (it all comes after the LLM stage), walls and the bench's clocks added."""
    spans = dict(llm.get("spans") or {})
    later = kernels.get("spans") or {}
    if "kernelStage" in later:
        spans["tail"] = later["kernelStage"]
    if "report" in later:
        spans["report"] = later["report"]
    wall = (llm.get("wall") or 0.0) + (kernels.get("wall") or 0.0)
    units = max(int(llm.get("units") or 0), int(kernels.get("units") or 0))
    after = wall - spans.get("start", 0.0)
    return {"exit": kernels["exit"], "benchWall": llm["benchWall"] + kernels["benchWall"],
            "log": f"{llm['log']} and {kernels['log']}", "clock": llm.get("clock"), "wall": wall, "spans": spans,
            "units": units, "unitsPerHour": units * 3600 / wall if wall > 0 else None,
            "unitsPerHourAfterStart": units * 3600 / after if after > 0 else None, "llm": llm.get("llm") or {},
            "server": llm.get("server") or {}, "notes": [*(llm.get("notes") or []), *(kernels.get("notes") or [])],
            "commands": {"llm": llm, "kernels": kernels}}


def _user_command(spec_file: Path, work: Path, folder: str, name: str, vllm_cache: Path, gpus: int | None,
                  extra: list[str], keep_store: bool = False, env: dict[str, str] | None = None
                  ) -> dict[str, Any]:
    """One `cudanalyst run` in a process of its own: the command's own table (--timings) and the bench's clock. Its
    logs are kept (--keep-logs: the servers' and shards', which a run that went well removes), for the bench's
    caller to bring back."""
    from cudanalyst.runner.llm.compile_cache import CACHE_URI_ENV, DIR_ENV

    timings = work / f"timings-{name}.json"
    env = {**os.environ, COMPILE_CACHE_ENV: str(work / f"cache-{folder}"), DIR_ENV: str(vllm_cache), **(env or {})}
    # The local folder alone decides cold or warm: a cache store (scripts/device/models.sh sets one) would make a
    # cold run fetch what an earlier session kept. Only `store` measures the store.
    if not keep_store:
        env.pop(CACHE_URI_ENV, None)
    cmd = [sys.executable, "-m", "cudanalyst", "run", str(spec_file), "--output", str(work / f"runs-{folder}"),
           "--timings", str(timings), "--keep-logs", *extra] + (["--gpus", str(gpus)] if gpus else [])
    log = work / f"run-{name}.log"
    started = time.time()
    with log.open("wb") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env).returncode
    seconds = time.time() - started
    table = json.loads(timings.read_text()) if timings.is_file() else {}
    return {"exit": code, "benchWall": seconds, "log": str(log), **table}


def user_table(results: dict[str, dict[str, Any]]) -> str:
    """The runs side by side: each phase of the command's table, its wall, the bench's clock and the rates."""
    labels = {"start": "start, to the model server ready", "plans": "LLM stage: plans", "kernels":
              "LLM stage: kernels (after the last plan)", "tail": "kernel stage's tail after the LLM stage (staged: "
              "all of it, its own command)",
              "report": "report"}
    names = list(results)
    rows = [("", *names)]
    for key, label in labels.items():
        if any(key in (r.get("spans") or {}) for r in results.values()):
            rows.append((label, *(_cell(r, key) for r in results.values())))
    rows.append(("wall (the command's clock: its process start to its last line)",
                 *(f"{r.get('wall', 0):.1f} s" for r in results.values())))
    rows.append(("wall (the bench's clock: Popen to exit)", *(f"{r['benchWall']:.1f} s" for r in results.values())))
    rows.append(("units/h from the command", *(_rate(r.get("unitsPerHour")) for r in results.values())))
    rows.append(("units/h after the start", *(_rate(r.get("unitsPerHourAfterStart")) for r in results.values())))
    rows.append(("LLM stage tokens/s", *(_tokens(r) for r in results.values())))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for name, r in results.items():
        lines += [f"{name}: {note}" for note in r.get("notes") or []]
        if r["exit"] != 0:
            lines.append(f"{name}: cudanalyst run exited {r['exit']}: see {r['log']}")
    return "\n".join(lines)


def _cell(r: dict[str, Any], key: str) -> str:
    seconds = (r.get("spans") or {}).get(key)
    wall = r.get("wall") or 0
    return "" if seconds is None else f"{seconds:.1f} s ({seconds / wall * 100:.0f} %)" if wall else f"{seconds:.1f} s"


def _rate(value: float | None) -> str:
    return f"{value:,.0f}" if value else "n/a"


def _tokens(r: dict[str, Any]) -> str:
    llm = r.get("llm") or {}
    return f"{llm['tokens'] / llm['seconds']:,.0f}" if llm.get("tokens") and llm.get("seconds") else "n/a"


def keep_beside(json_out: Path, name: str, result: dict[str, Any]) -> None:
    """A finished run's console and timings beside the bench's JSON (FILE.run-NAME.log, FILE.timings-NAME.json),
    as soon as it ends: what a device call brings back while the bench still runs (keep_running.sh's
    job-progress.tgz), so a machine lost in a later run keeps this one's summary."""
    import shutil

    log = Path(result["log"])
    for source, target in ((log, f"{json_out.stem}.run-{name}.log"),
                           (log.with_name(f"timings-{name}.json"), f"{json_out.stem}.timings-{name}.json")):
        if source.is_file():
            shutil.copyfile(source, json_out.with_name(target))


def user_clock(args: argparse.Namespace, base: AttributionRun, work: Path) -> int:
    """--user-clock: the spec run as a user runs it, cold then warm (or as asked); prints the table."""
    spec_file = work / "spec.json"
    spec_file.write_text(json.dumps(base.to_dict()))
    # The runs on a spec of their own: the A/B of the request seeds, and of the API-server processes.
    derived = {"unseeded": unseeded, "api2": lambda doc: with_api_servers(doc, 2)}
    spec_files = {name: work / f"spec-{name}.json" for name in derived if name in args.user_clock}
    for name, path in spec_files.items():
        path.write_text(json.dumps(derived[name](base.to_dict())))
    # Empty for a cold run, which fills it; a warm run finds it (--vllm-cache: the folder of another call's cold run).
    vllm_cache = Path(args.vllm_cache).resolve() if args.vllm_cache else work / "vllm-cache"
    if args.user_clock[0] == "cold" and vllm_cache.is_dir() and any(vllm_cache.rglob("*")):
        print(f"bench/pipeline: --vllm-cache {vllm_cache} is not empty: a cold run starts from an empty one "
              "(run warm alone to use it)", file=sys.stderr)
        return 2
    from cudanalyst.runner.llm.compile_cache import CACHE_URI_ENV

    if set(STORE_RUNS) & set(args.user_clock) and not os.environ.get(CACHE_URI_ENV):
        print(f"bench/pipeline: --user-clock {', '.join(r for r in args.user_clock if r in STORE_RUNS)} needs "
              f"{CACHE_URI_ENV} (the store of vLLM's compiled artefacts: "
              "s3://bucket/prefix or a folder)", file=sys.stderr)
        return 2
    gpus = args.gpus[0] if args.gpus else None
    figures: dict[str, Any] = {"spec": base.metadata.name, "units": len(plan_run(base).units), "userClock": {},
                               "workdir": str(work)}
    print(f"{base.metadata.name}: {figures['units']} units, `cudanalyst run` as a user runs it: "
          f"{', '.join(args.user_clock)}; work folder {work}", flush=True)
    for name in args.user_clock:
        result = run_as_user(spec_files.get(name, spec_file), work, name, vllm_cache, gpus)
        figures["userClock"][name] = result
        print(f"{name}: exit {result['exit']}, {result['benchWall']:.1f} s on the bench's clock", flush=True)
        if result["exit"] != 0:  # the log stays on the machine: its end comes back with the bench's output
            print(*Path(result["log"]).read_text(errors="replace").splitlines()[-40:], sep="\n", flush=True)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(figures, indent=2))
            keep_beside(Path(args.json_out), name, result)
    print(user_table(figures["userClock"]))
    return 0 if all(r["exit"] == 0 for r in figures["userClock"].values()) else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from cudanalyst.runner.kernels.stage import gpu_available

    work = Path(args.workdir or tempfile.mkdtemp(prefix="cudanalyst-bench-pipeline-")).resolve()
    if work.is_dir() and any(work.iterdir()):
        # A bench starts from nothing: an earlier bench's compile cache, verdicts or run folders would be found.
        print(f"bench/pipeline: --workdir {work} is not empty; give an empty or new folder", file=sys.stderr)
        return 2
    visible = visible_gpus()
    counts: list[int | None] = list(args.gpus) if args.gpus else [len(visible) or None]
    if any(c is not None and c > len(visible) for c in counts):
        print(f"bench/pipeline: --gpus {args.gpus}: {len(visible)} GPU(s) visible here", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    base = derive(load_run(args.spec), model=args.model, max_model_len=args.max_model_len,
                  max_tokens=args.max_tokens, rollouts=args.rollouts)
    if args.units is not None:
        base = trimmed(base, args.units, work / "trajectory")
    if args.user_clock:
        return user_clock(args, base, work)
    gpu = gpu_available()
    widest, lanes_all = lanes_for(base, max((c or 0) for c in counts) or None)
    planned = PlannedRun.resolve(widest)  # the servers' models; its plan has the units of every side
    plan = planned.plan
    serial_units = spread(plan.units, args.serial_units) if args.serial_units else []
    print(f"{base.metadata.name}: pipeline {len(plan.units)} units over {len(plan.programs)} programs, "
          f"sides on {', '.join(f'{c} GPU(s)' if c else 'no GPU' for c in counts)}; serial {len(serial_units)} units; "
          f"{'GPU: kernels compiled, verified and timed' if gpu else 'no GPU: kernels compiled only'}; "
          f"work folder {work}", flush=True)

    figures: dict[str, Any] = {"spec": base.metadata.name, "gpu": gpu, "units": len(plan.units),
                               "planDigest": plan_digest(plan), "sides": {}, "workdir": str(work)}

    def save() -> None:
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(figures, indent=2))

    pipelines: list[Side] = []
    serial: Side | None = None
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    with LaneServers(planned, lanes_all, str(logs), args.health_timeout) as servers:
        server_start_s = time.perf_counter() - t0
        figures["serverStartSeconds"] = server_start_s
        print(f"model server(s) healthy after {server_start_s:.1f} s ({len(lanes_all)} GPU lane(s))", flush=True)
        for count in counts:
            name = f"pipeline {count} GPU" + ("s" if count and count > 1 else "") if count else "pipeline"
            side = Side(name, gpus=count or 0)
            local, lanes = lanes_for(base, count)
            side_run = with_output(local, str(work / f"pipeline-{count or 0}gpu"))
            store = prepare(with_output(base, side_run.spec.output.uri)).store
            folder = logs / f"pipeline-{count or 0}gpu"
            folder.mkdir()
            served = {lane.index: [with_output(r, side_run.spec.output.uri) for r in servers.served[lane.index]]
                      for lane in lanes}
            served = {i: [r.model_copy(update={"spec": r.spec.model_copy(update={"resources": local.spec.resources})})
                          for r in runs] for i, runs in served.items()}
            with compile_cache(work / f"cache-pipeline-{count or 0}gpu"):
                run_pipeline(side_run, lanes, served, str(folder), side)
            side.notes += runner_lines(str(folder), "llm") + runner_lines(str(folder), "kernels")
            side.seconds = sum(side.stage_seconds.values())
            side.units = len(keys_under(store, OUTCOMES))
            side.labels = label_counts(store)
            side.completion_tokens = completion_tokens(store)
            print(f"{name}: {side.units} units in {side.seconds:.1f} s ({side.per_hour:,.0f} units/h): LLM stage "
                  f"{side.stage_seconds['llm']:.1f} s, then the kernel stages' tail {side.stage_seconds['kernels']:.1f} s",
                  *side.notes, sep="\n  ", flush=True)
            pipelines.append(side)
            figures["sides"][name] = side_json(side)
            save()
        if serial_units:
            serial = Side("serial")
            serial_run = with_output(base, str(work / "serial"))
            with compile_cache(work / "cache-serial"):
                SerialPipeline(with_output(servers.served[lanes_all[0].index][0], serial_run.spec.output.uri),
                               serial_units, gpu).run_all(serial)
            serial.labels = label_counts(run_store(serial_run))
            print(f"serial: {serial.units} units in {serial.seconds:.1f} s", flush=True)
            figures["sides"]["serial"] = side_json(serial)
        # Saved before the servers stop: their shutdown may take 20 s a lane, and a call's time limit that
        # falls in it must not lose the serial side (on the H200, 5,280 units on one GPU ended just there).
        figures["ratio"] = ratio(pipelines[0], serial) if serial else None
        figures["ratios"] = {p.name: {"serial": ratio(p, serial) if serial else None,
                                      pipelines[0].name: ratio(p, pipelines[0])} for p in pipelines}
        save()

    print(table(pipelines, serial, server_start_s, gpu))
    if args.against:
        print(*against_lines(args.against, figures["planDigest"], pipelines), sep="\n")
    failures = sum(s.failures for s in pipelines) + (serial.failures if serial else 0)
    if failures:
        print(f"unfinished: {failures} failed shards or serial units (logs in {logs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
