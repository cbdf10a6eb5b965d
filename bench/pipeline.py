#!/usr/bin/env python
"""Programs per hour: the local pipeline against a serial pipeline of the same steps, in one run.

  python bench/pipeline.py --spec SPEC [--serial-units K] [--units M] [--model NAME]
                           [--max-model-len N] [--max-tokens N] [--json FILE]

One vLLM server per local model is started (and warmed up) once and shared by both sides; its
start-up time is printed apart and is not what is compared:
- pipeline: what `cudanalyst run SPEC --no-report` does (src/cudanalyst/local.py): the kernel stage of
  every shard in one process (CPU compile pool, persistent GPU workers), started beside every shard's
  LLM stage (subprocesses, all prompts in flight); it compiles and verifies candidates as they are
  stored and, once the LLM stage is over, times the correct ones with the GPU alone (here the idle
  server keeps its memory but runs nothing; `cudanalyst run` stops it). M units: the whole spec, or
  --units M rounded up to whole frozen programs. Its time runs from the kernel stage's start to its end.
- serial: K units spread over the plan, one at a time, each through the same building blocks: its
  prompts (runner/llm/stage.py, prompts.py), the plan of its group (one planner request, reused by
  the group's later samples as the pipeline does), one coder request with n = 1, extraction, then
  compile, verify and time it alone (kernels/stage.py, one persistent GPU worker reused across units).
The serial side runs after the pipeline, on the same server, so any prefix-cache warmth favours the
serial side (the ratio is conservative). Each side writes to its own fresh output folder and compile
cache, so nothing is skipped as already done. A "program" is a candidate kernel taken end to end to
its outcome record. Without a GPU kernels are compiled only, and the output says so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudanalyst.api import AttributionRun, load_run
from cudanalyst.local import kernel_stage_alongside, prepare, run_stage, shared_servers, write_spec_file
from cudanalyst.outcomes import CandidateRecord, OutcomeRecord, unit_identity
from cudanalyst.plan import Unit
from cudanalyst.runs import plan_run, run_store
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
           max_tokens: int | None) -> AttributionRun:
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
def keys_under(store: ObjectStore, prefix: str) -> list[str]:
    return [k for k in store.list(prefix) if k.endswith(".json") and "/" not in k[len(prefix):]]


def label_counts(store: ObjectStore) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in keys_under(store, "outcomes/"):
        label = str(store.get_json(key).get("label"))
        counts[label] = counts.get(label, 0) + 1
    return counts


def completion_tokens(store: ObjectStore) -> int:
    """Generated tokens of a run folder: every coder sample plus every stored (non-dummy) plan."""
    total = 0
    for key in keys_under(store, "candidates/"):
        total += int(store.get_json(key).get("tokens", {}).get("coderCompletion", 0) or 0)
    for key in keys_under(store, "plans/"):
        total += int((store.get_json(key).get("tokens") or {}).get("completion", 0) or 0)
    return total


# ------------------------------------------------------------------------------------- the sides
def runner_lines(folder: str, stage: str) -> list[str]:
    """The runner's one-line summaries of a stage (where its time went), from the shards' logs."""
    marker = {"llm": "LLM stage:", "kernels": "kernel stage:"}[stage]
    lines = []
    for log in sorted(Path(folder).glob(f"shard-*-{stage}.log")):
        lines += [f"{log.stem}: {x.split(marker, 1)[1].strip()}" for x in log.read_text(errors="replace").splitlines()
                  if marker in x]
    return lines


def run_pipeline(run: AttributionRun, served: AttributionRun, folder: str, side: Side) -> None:
    """What `cudanalyst run` does: the kernel stage (every shard in one process) started beside every
    shard's LLM stage, compiling and verifying as candidates come, timing once the LLM stage is over.
    `llm` is the LLM stage's time; `kernels` what the kernel stage took after it (its tail)."""
    shards = list(range(served.spec.resources.shards))
    t0 = time.perf_counter()
    with kernel_stage_alongside(run, shards, folder, lambda: None) as kernels_after_llm:
        spec_path = write_spec_file(served, folder)
        codes = run_stage(spec_path, shards, len(shards), "llm", folder, True, lambda: None)
        t_llm = time.perf_counter()
        # The server is idle from here on (no requests), so the kernel stage times with the GPU alone.
        codes_k = kernels_after_llm()
    side.stage_seconds = {"llm": t_llm - t0, "kernels": time.perf_counter() - t_llm}
    side.failures += sum(1 for c in (*codes.values(), *codes_k.values()) if c != 0)


class SerialPipeline:
    """One unit at a time through plan, coder (n = 1), extraction, compile, verify and time."""

    def __init__(self, served: AttributionRun, units: Sequence[Unit], gpu: bool) -> None:
        from cudanalyst.runner.llm.client import ClientSettings
        from cudanalyst.runner.llm.servers import ModelServers, StageSettings
        from cudanalyst.runner.llm.stage import LlmStage
        from cudanalyst.runner.shard import fill_feedback
        from cudanalyst.runner.units import Progress, UnitStore

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
        self.progress = Progress(0, 1, len(self.units), stages=["llm", "kernels"])
        self._stage_cls = LlmStage
        self.gpu = gpu

    def run_all(self, side: Side) -> None:
        from cudanalyst.runner.kernels.pool import WorkerPool

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
        endpoint = self.servers.endpoint(self.run.spec.coder)
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
        record = CandidateRecord(
            **ref, prompt_version=TEMPLATE_VERSION, prompts={"coder": prompt if isinstance(prompt, str)
                                                             else json.dumps(prompt)},
            plan=group.plan, completion=text or "", code=ex.code, reason="" if ex.ok else (ex.reason or "no code"),
            seed=res.seed, tokens={"coderCompletion": tokens or 0, "coderPrompt": res.prompt_tokens or 0})
        self.store.write_candidate(record)
        side.stage_seconds["llm"] += time.perf_counter() - t0

        t1 = time.perf_counter()
        self.store.write_outcome(self.evaluate(unit, ex.code if ex.ok else None, ref, pool))
        side.stage_seconds["kernels"] += time.perf_counter() - t1

    def evaluate(self, unit: Unit, code: str | None, ref: dict[str, Any], pool: Any) -> OutcomeRecord:
        from cudanalyst.runner.kernels.stage import KernelJob, evaluate_candidates

        job = KernelJob(key=unit.key, task=unit.task, source=code,
                        frozen_source=self.frozen[unit.program_id].source, unit=ref)
        return evaluate_candidates([job], self.run.spec.evaluation, gpu=self.gpu, pool=pool)[0]


# ----------------------------------------------------------------------------------------- output
def table(pipeline: Side, serial: Side, server_start_s: float, gpu: bool) -> str:
    rows = [("side", "units", "seconds", "units/hour", "gen tok/s", "LLM share", "kernel share", "labels")]
    for s in (serial, pipeline):
        total = sum(s.stage_seconds.values()) or 1.0
        rows.append((s.name, str(s.units), f"{s.seconds:.1f}", f"{s.per_hour:,.0f}", f"{s.tokens_per_s:,.0f}",
                     f"{s.stage_seconds.get('llm', 0) / total:.0%}", f"{s.stage_seconds.get('kernels', 0) / total:.0%}",
                     " ".join(f"{k}={v}" for k, v in sorted(s.labels.items()))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    ratio = pipeline.per_hour / serial.per_hour if serial.per_hour else float("nan")
    lines.append(f"ratio pipeline/serial: {ratio:.1f}x   (model server start-up, not compared: {server_start_s:.1f} s)")
    if not gpu:
        lines.append("no GPU here: kernels were compiled only (pass and fast not evaluated), on both sides")
    return "\n".join(lines)


def side_json(s: Side) -> dict[str, Any]:
    return {"units": s.units, "seconds": s.seconds, "stageSeconds": s.stage_seconds, "perHour": s.per_hour,
            "completionTokens": s.completion_tokens, "tokensPerSecond": s.tokens_per_s, "labels": s.labels,
            "failures": s.failures, "notes": s.notes}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", required=True, help="AttributionRun YAML or JSON")
    p.add_argument("--serial-units", type=int, default=8, help="units the serial side runs (default %(default)s)")
    p.add_argument("--units", type=int, default=None,
                   help="pipeline units (rounded up to whole frozen programs; default: the whole spec)")
    p.add_argument("--model", help="serve this model instead: a name in the models cache (e.g. tiny-llama-base)")
    p.add_argument("--max-model-len", type=int, help="override models.*.maxModelLen")
    p.add_argument("--max-tokens", type=int, help="override sampling.maxTokens")
    p.add_argument("--health-timeout", type=float, default=900.0, help="seconds for the server to get healthy")
    p.add_argument("--workdir", help="folder for the two run folders and logs (default: a new temp folder)")
    p.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    if args.serial_units < 1 or (args.units is not None and args.units < 1):
        p.error("--serial-units and --units must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from cudanalyst.runner.kernels.stage import gpu_available

    work = Path(args.workdir or tempfile.mkdtemp(prefix="cudanalyst-bench-pipeline-")).resolve()
    if work.is_dir() and any(work.iterdir()):
        # A bench starts from nothing: an earlier bench's compile cache, verdicts or run folders would be found.
        print(f"bench/pipeline: --workdir {work} is not empty; give an empty or new folder", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    base = derive(load_run(args.spec), model=args.model, max_model_len=args.max_model_len,
                  max_tokens=args.max_tokens)
    if args.units is not None:
        base = trimmed(base, args.units, work / "trajectory")
    pipe_run = with_output(base, str(work / "pipeline"))
    serial_run = with_output(base, str(work / "serial"))
    plan, pipe_store = prepare(pipe_run)
    serial_units = spread(plan.units, args.serial_units)
    gpu = gpu_available()
    print(f"{base.metadata.name}: pipeline {len(plan.units)} units over {len(plan.programs)} programs, "
          f"{base.spec.resources.shards} shard(s); serial {len(serial_units)} units; "
          f"{'GPU: kernels compiled, verified and timed' if gpu else 'no GPU: kernels compiled only'}; "
          f"work folder {work}", flush=True)

    pipeline, serial = Side("pipeline"), Side("serial")
    logs = str(work / "logs")
    Path(logs).mkdir(exist_ok=True)
    t0 = time.perf_counter()
    with shared_servers(pipe_run, logs, args.health_timeout) as served:
        server_start_s = time.perf_counter() - t0
        print(f"model server healthy after {server_start_s:.1f} s", flush=True)
        with compile_cache(work / "cache-pipeline"):
            run_pipeline(pipe_run, served, logs, pipeline)
        pipeline.notes += runner_lines(logs, "llm") + runner_lines(logs, "kernels")
        print(f"pipeline: LLM stage {pipeline.stage_seconds['llm']:.1f} s, then the kernel stage's tail "
              f"{pipeline.stage_seconds['kernels']:.1f} s", *pipeline.notes, sep="\n  ", flush=True)
        with compile_cache(work / "cache-serial"):
            SerialPipeline(with_output(served, serial_run.spec.output.uri), serial_units, gpu).run_all(serial)
        print(f"serial: {serial.units} units in {serial.seconds:.1f} s", flush=True)
    pipeline.seconds = sum(pipeline.stage_seconds.values())
    pipeline.units = len(keys_under(pipe_store, "outcomes/"))
    pipeline.labels = label_counts(pipe_store)
    pipeline.completion_tokens = completion_tokens(pipe_store)
    serial_store = run_store(serial_run)
    serial.labels = label_counts(serial_store)

    print(table(pipeline, serial, server_start_s, gpu))
    if pipeline.failures or serial.failures:
        print(f"unfinished: pipeline shards failed {pipeline.failures}, serial units failed {serial.failures} "
              f"(logs in {logs})")
    if args.json_out:
        figures = {"spec": base.metadata.name, "gpu": gpu, "serverStartSeconds": server_start_s,
                   "ratio": pipeline.per_hour / serial.per_hour if serial.per_hour else None,
                   "sides": {s.name: side_json(s) for s in (pipeline, serial)}, "workdir": str(work)}
        Path(args.json_out).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
