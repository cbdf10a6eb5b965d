"""The kernel stage's one interface: candidates in, labelled outcomes out; and the feedback reports.

`evaluate_candidates(jobs, settings, gpu=None)`:
1. checks each job (known task, some source, kernel signatures as the contract says);
2. compiles candidates, frozen programs and task baselines in the CPU compile pool (nvcc -> cubin);
3. without a GPU stops there: compiled sources are labelled `compile` with `evaluated_up_to`
   `compile` (pass and fast are not evaluated, never guessed);
4. with a GPU, verifies in persistent workers (in parallel), then times, holding the GPU alone, each
   correct candidate and (once per source) its frozen program and the task baseline.

Label rule: fail (no code, contract broken, compile error) < compile (built, but failed to load, run or
verify) < pass (correct) < fast (correct and frozen time / candidate time > 1 + fastTolerance).
Bad input never raises: it becomes a `fail` with its reason.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cudanalyst.runner.kernels.timing import speedup
from cudanalyst.tasks import Task, UnknownTaskError, get_task
from cudanalyst.tasks.conformance import contract_problems

SEED_BASE = 1000  # correctness seeds are SEED_BASE + 0..correctnessTrials-1; timing uses SEED_BASE - 1


@dataclass
class KernelJob:
    key: str
    task: str
    source: str | None  # None when the LLM stage extracted no code
    frozen_source: str | None = None


@dataclass
class KernelResult:
    key: str
    label: str  # fail | compile | pass | fast
    evaluated_up_to: str  # the highest label this evaluation could establish
    reason: str
    speedup: float | None = None  # frozen program's time / candidate's time
    speedup_vs_baseline: float | None = None
    time_ms: float | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    gpu_seconds: float = 0.0


@dataclass(frozen=True)
class EvalSettings:
    """The fields of the spec's `evaluation` the stage reads (any object with these attributes will do)."""

    correctness_trials: int = 5
    rtol: float = 1e-4
    atol: float = 1e-4
    warmup: int = 3
    trials: int = 30
    fast_tolerance: float = 0.12
    timeout_seconds: float = 60.0
    compile_workers: int = 4
    gpu_workers: int = 2

    @classmethod
    def of(cls, settings: Any) -> EvalSettings:
        if settings is None:
            return cls()
        if isinstance(settings, dict):
            return cls(**{k: v for k, v in settings.items() if k in cls.__dataclass_fields__})
        return cls(**{k: getattr(settings, k) for k in cls.__dataclass_fields__ if hasattr(settings, k)})


def label_for(correct: bool, speedup_vs_frozen: float | None, fast_tolerance: float) -> str:
    """pass or fast for a verified candidate; `compile` when it built but is not correct (pure)."""
    if not correct:
        return "compile"
    if speedup_vs_frozen is not None and speedup_vs_frozen > 1.0 + fast_tolerance:
        return "fast"
    return "pass"


@functools.cache
def gpu_available() -> bool:
    """Whether pycuda sees a GPU, asked in a child process so this one never creates a CUDA context."""
    probe = "import pycuda.driver as d; d.init(); print(d.Device.count())"
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip().isdigit() and int(out.stdout.strip()) > 0


def _fail(job: KernelJob, reason: str) -> KernelResult:
    return KernelResult(key=job.key, label="fail", evaluated_up_to="compile", reason=reason)


def _compile_errors(result: Any, limit: int = 5) -> str:
    errors = [d.render() for d in result.errors][:limit]
    return "; ".join(errors) or (result.log.strip().splitlines() or ["nvcc failed"])[-1]


def _resources(result: Any) -> dict[str, Any]:
    return {name: res.model_dump(by_alias=True) for name, res in result.kernels.items()}


def evaluate_candidates(jobs: list[KernelJob], settings: Any, *, gpu: bool | None = None,
                        pool: Any | None = None) -> list[KernelResult]:
    """Outcomes for `jobs`, in the same order. `pool`: a WorkerPool to reuse (else one is made and closed)."""
    cfg = EvalSettings.of(settings)
    from cudanalyst.runner.kernels.compile import (
        CompileCache,
        CompilePool,
        default_cache_dir,
        task_translation_unit,
    )

    results: dict[str, KernelResult] = {}
    tasks: dict[str, Task] = {}
    todo: list[KernelJob] = []
    for job in jobs:
        try:
            tasks[job.key] = get_task(job.task)
        except UnknownTaskError as exc:
            results[job.key] = _fail(job, str(exc))
            continue
        if job.source is None or not job.source.strip():
            results[job.key] = _fail(job, "no kernel source was extracted from the completion")
            continue
        if problems := contract_problems(tasks[job.key], job.source):
            results[job.key] = _fail(job, "contract: " + "; ".join(problems))
            continue
        todo.append(job)

    # Compile candidates, frozen programs and baselines in one pool; identical sources compile once.
    cache = CompileCache(os.environ.get("CUDANALYST_COMPILE_CACHE") or default_cache_dir())
    with CompilePool(cfg.compile_workers, cache=cache) as compiler:
        cand = {j.key: compiler.submit(task_translation_unit(tasks[j.key], j.source or "")) for j in todo}
        refs: dict[tuple[str, str], Any] = {}
        for j in todo:
            t = tasks[j.key]
            refs.setdefault((t.name, t.baseline_source), compiler.submit(task_translation_unit(t, t.baseline_source)))
            if j.frozen_source:
                refs.setdefault((t.name, j.frozen_source), compiler.submit(task_translation_unit(t, j.frozen_source)))
        compiled = {k: f.result() for k, f in cand.items()}
        ref_compiled = {k: f.result() for k, f in refs.items()}

    built: list[KernelJob] = []
    for job in todo:
        c = compiled[job.key]
        if not c.ok:
            results[job.key] = _fail(job, "compile error: " + _compile_errors(c))
        else:
            built.append(job)
    use_gpu = gpu_available() if gpu is None else gpu
    if not use_gpu:
        for job in built:
            results[job.key] = KernelResult(
                key=job.key, label="compile", evaluated_up_to="compile", resources=_resources(compiled[job.key]),
                reason="compiled; not run: no GPU on this machine, so pass and fast were not evaluated")
    elif built:
        from cudanalyst.runner.kernels.pool import WorkerPool

        own = pool is None
        pool = pool or WorkerPool(cfg.gpu_workers)
        try:
            _evaluate_on_gpu(built, tasks, compiled, ref_compiled, cfg, pool, results)
        finally:
            if own:
                pool.close()
    return [results[j.key] for j in jobs]


def _evaluate_on_gpu(built: Sequence[KernelJob], tasks: dict[str, Task], compiled: dict[str, Any],
                     ref_compiled: dict[tuple[str, str], Any], cfg: EvalSettings, pool: Any,
                     results: dict[str, KernelResult]) -> None:
    seeds = [SEED_BASE + i for i in range(cfg.correctness_trials)]

    def verify(job: KernelJob) -> dict[str, Any]:
        t = tasks[job.key]
        return pool.verify({"task": t.name, "sizes": dict(t.sizes), "cubin": compiled[job.key].cubin,
                            "seeds": seeds, "rtol": cfg.rtol, "atol": cfg.atol}, cfg.timeout_seconds)

    with ThreadPoolExecutor(max(1, len(pool.workers))) as ex:
        verdicts = dict(zip([j.key for j in built], ex.map(verify, built), strict=True))

    ref_times: dict[tuple[str, str], dict[str, Any] | None] = {}

    def time_source(t: Task, cubin: bytes, keep: bool) -> dict[str, Any]:
        request = {"task": t.name, "sizes": dict(t.sizes), "cubin": cubin, "warmup": cfg.warmup,
                   "trials": cfg.trials, "seed": SEED_BASE - 1, "keep": keep}
        return pool.time(request, max(cfg.timeout_seconds, 60.0))

    def reference_time(t: Task, source: str | None) -> dict[str, Any] | None:
        if source is None:
            return None
        key = (t.name, source)
        if key not in ref_times:
            c = ref_compiled.get(key)
            reply = time_source(t, c.cubin, keep=True) if c is not None and c.ok else None
            ref_times[key] = reply["stats"] if reply and reply.get("ok") else None
        return ref_times[key]

    for job in built:
        t, verdict = tasks[job.key], verdicts[job.key]
        resources = _resources(compiled[job.key])
        gpu_s = float(verdict.get("seconds", 0.0))
        if not verdict.get("ok"):
            results[job.key] = KernelResult(job.key, "compile", "fast", f"{verdict.get('kind')}: {verdict.get('error')}",
                                            resources=resources, gpu_seconds=gpu_s)
            continue
        if not verdict.get("correct"):
            results[job.key] = KernelResult(job.key, "compile", "fast", str(verdict.get("reason")),
                                            resources=resources, gpu_seconds=gpu_s)
            continue
        reply = time_source(t, compiled[job.key].cubin, keep=False)
        gpu_s += float(reply.get("seconds", 0.0))
        if not reply.get("ok"):
            results[job.key] = KernelResult(job.key, "pass", "pass", f"correct, but timing failed: {reply.get('error')}",
                                            resources=resources, gpu_seconds=gpu_s)
            continue
        mine = reply["stats"]
        frozen = reference_time(t, job.frozen_source)
        base = reference_time(t, t.baseline_source)
        s_frozen = speedup(frozen["median_ms"] if frozen else None, mine["median_ms"])
        s_base = speedup(base["median_ms"] if base else None, mine["median_ms"])
        label = label_for(True, s_frozen, cfg.fast_tolerance)
        up_to = "fast" if s_frozen is not None else "pass"
        why = (f"{verdict.get('reason')}; {mine['median_ms']:.4g} ms median of {mine['trials']} "
               f"(IQR/median {mine['iqr_over_median']:.1%})")
        why += (f"; speedup {s_frozen:.3f}x vs the frozen program (fast needs > {1 + cfg.fast_tolerance:.2f}x)"
                if s_frozen is not None else "; the frozen program could not be timed, so fast was not evaluated")
        results[job.key] = KernelResult(
            job.key, label, up_to, why, speedup=s_frozen, speedup_vs_baseline=s_base, time_ms=mine["median_ms"],
            timings={"candidate": mine, "frozen": frozen, "baseline": base}, resources=resources, gpu_seconds=gpu_s)


def feedback_reports(task: str, source: str, settings: Any, *, gpu: bool | None = None) -> dict[str, str]:
    """The debugger, analyzer and profiler raw reports of one frozen program (compute once per program)."""
    from cudanalyst.runner.kernels.reports import frozen_program_reports

    use_gpu = gpu_available() if gpu is None else gpu
    return frozen_program_reports(task, source, EvalSettings.of(settings), gpu=use_gpu)
