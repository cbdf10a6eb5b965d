"""The kernel stage's one interface: candidates in, labelled outcomes out; and the feedback reports.

`evaluate_candidates(jobs, settings, gpu=None, on_result=None)`:
1. checks each job (known task, some source, kernel signatures as the contract says);
2. compiles candidates, frozen programs and task baselines in the CPU compile pool (nvcc -> cubin);
3. without a GPU stops there: compiled sources are labelled `compile` with `evaluated_up_to`
   `compile` (pass and fast are not evaluated, never guessed);
4. with a GPU, verifies each candidate in persistent workers (in parallel) as soon as its compile is
   done, so nvcc and verification overlap (a verdict already stored, e.g. by the LLM stage's early
   verification, is read instead: verdicts.py); then, once every compile is over (so nvcc never competes
   with the timing loop for the CPU), times, holding the GPU alone, each correct candidate and (once
   per source) its frozen program and the task baseline.
`on_result` is called with each result as soon as it is final, in the caller's thread, so a caller can
store outcomes while the rest are still being evaluated (a killed shard keeps what it finished).

Label rule: fail (no code, contract broken, compile error) < compile (built, but failed to load, run or
verify) < pass (correct) < fast (correct and frozen time / candidate time > 1 + fastTolerance).
Bad input never raises: it becomes a `fail` with its reason.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
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


def correctness_seeds(cfg: EvalSettings) -> list[int]:
    return [SEED_BASE + i for i in range(cfg.correctness_trials)]


def verify_request(task: Task, cubin: bytes, cfg: EvalSettings) -> dict[str, Any]:
    """What a worker is asked to verify a candidate's cubin (also the verdict cache's key)."""
    return {"task": task.name, "sizes": dict(task.sizes), "cubin": cubin, "seeds": correctness_seeds(cfg),
            "rtol": cfg.rtol, "atol": cfg.atol}


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
                        pool: Any | None = None,
                        on_result: Callable[[KernelResult], None] | None = None,
                        phases: dict[str, float] | None = None) -> list[KernelResult]:
    """Outcomes for `jobs`, in the same order. `pool`: a WorkerPool to reuse (else one is made and closed);
    `on_result`: called with each result once it is final (see the module's docstring); `phases`: filled
    with the wall seconds of the two phases (`compileAndVerify`, `timing`), the count timed (`timed`) and
    the count whose verdict was already stored (`verifiedBefore`, see verdicts.py)."""
    with Evaluation(settings, gpu=gpu, pool=pool, on_result=on_result, phases=phases) as evaluation:
        evaluation.add(jobs)
        results = evaluation.finish()
    return [results[j.key] for j in jobs]


class Evaluation:
    """The stage as a stream: `add(jobs)` any number of times (each job is checked, compiled and, with a
    GPU, verified at once, while later jobs are still coming), `poll()` now and then to take in finished
    compiles and verifications, then `finish()`: the rest is waited for, and the correct candidates are
    timed with the GPU alone. Results go to `on_result` as they are final (in the caller's thread)."""

    def __init__(self, settings: Any, *, gpu: bool | None = None, pool: Any | None = None,
                 on_result: Callable[[KernelResult], None] | None = None,
                 phases: dict[str, float] | None = None, nice: int = 0) -> None:
        """`nice` > 0: nvcc and the GPU workers at a lower CPU priority (beside a model server)."""
        from cudanalyst.runner.kernels.compile import shared_cache
        from cudanalyst.runner.kernels.verdicts import VerdictCache

        self.phases: dict[str, float] = {} if phases is None else phases
        self.started = time.monotonic()
        self.cfg = EvalSettings.of(settings)
        self.on_result = on_result
        self.results: dict[str, KernelResult] = {}
        self.use_gpu = gpu_available() if gpu is None else gpu
        self.own_pool = self.use_gpu and pool is None
        if self.own_pool:
            from cudanalyst.runner.kernels.pool import WorkerPool

            pool = WorkerPool(self.cfg.gpu_workers, nice=nice)
        self.pool = pool
        self.nice = nice
        self.cache = shared_cache()
        self.stored = VerdictCache.beside(self.cache)  # the LLM stage may have verified some already
        self._compiler: Any = None  # a CompilePool, made at the first job that needs nvcc
        self.verifier = ThreadPoolExecutor(max(1, len(pool.workers)) if pool else 1, thread_name_prefix="verify")
        self.tasks: dict[str, Task] = {}
        self.order: dict[str, int] = {}  # arrival order of the jobs that go to nvcc
        self.compiled: dict[str, Any] = {}
        self.correct: list[KernelJob] = []
        self.verdicts: dict[str, dict[str, Any]] = {}
        self.refs: dict[tuple[str, str], Future[Any]] = {}
        # The compile pool hands identical sources the same future, so a future may stand for several jobs.
        self.by_future: dict[Future[Any], list[tuple[str, KernelJob]]] = {}

    def _emit(self, result: KernelResult) -> None:
        self.results[result.key] = result
        if self.on_result is not None:
            self.on_result(result)

    @property
    def compiler(self) -> Any:
        from cudanalyst.runner.kernels.compile import CompilePool

        if self._compiler is None:
            self._compiler = CompilePool(self.cfg.compile_workers, cache=self.cache, nice=self.nice)
        return self._compiler

    def add(self, jobs: Sequence[KernelJob]) -> None:
        from cudanalyst.runner.kernels.compile import task_translation_unit

        for job in jobs:
            try:
                task = self.tasks[job.key] = get_task(job.task)
            except UnknownTaskError as exc:
                self._emit(_fail(job, str(exc)))
                continue
            if job.source is None or not job.source.strip():
                self._emit(_fail(job, "no kernel source was extracted from the completion"))
                continue
            if problems := contract_problems(task, job.source):
                self._emit(_fail(job, "contract: " + "; ".join(problems)))
                continue
            self.order[job.key] = len(self.order)
            fut = self.compiler.submit(task_translation_unit(task, job.source))
            self.by_future.setdefault(fut, []).append(("compile", job))
            # Frozen programs and baselines compile in the same pool, once per source, for timing.
            for source in (task.baseline_source, job.frozen_source):
                if source and (task.name, source) not in self.refs:
                    self.refs[(task.name, source)] = self.compiler.submit(task_translation_unit(task, source))

    def poll(self, timeout: float | None = 0.0) -> int:
        """Take in the compiles and verifications finished within `timeout` seconds (None: all of them);
        returns how many are still pending."""
        pending = set(self.by_future)
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            finished, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            for fut in finished:
                for step, job in self.by_future.pop(fut):
                    if step == "compile":
                        if (verify := self._after_compile(job, fut.result())) is not None:
                            self.by_future[verify] = [("verify", job)]
                            pending.add(verify)
                    else:
                        self._after_verify(job, fut.result())
            if deadline is not None and time.monotonic() >= deadline:
                break
        return len(self.by_future)

    def _after_compile(self, job: KernelJob, c: Any) -> Future[Any] | None:
        """Record a compile; return the verification it starts, if any."""
        from cudanalyst.runner.kernels.verdicts import verify_once

        self.compiled[job.key] = c
        if not c.ok:
            self._emit(_fail(job, "compile error: " + _compile_errors(c)))
        elif not self.use_gpu:
            self._emit(KernelResult(
                key=job.key, label="compile", evaluated_up_to="compile", resources=_resources(c),
                reason="compiled; not run: no GPU on this machine, so pass and fast were not evaluated"))
        else:
            request = verify_request(self.tasks[job.key], c.cubin, self.cfg)
            return self.verifier.submit(verify_once, self.pool, self.stored, request, self.cfg.timeout_seconds)
        return None

    def _after_verify(self, job: KernelJob, verdict: dict[str, Any]) -> None:
        self.phases["verifiedBefore"] = self.phases.get("verifiedBefore", 0) + (1 if verdict.get("cached") else 0)
        if verdict.get("ok") and verdict.get("correct"):
            self.correct.append(job)
            self.verdicts[job.key] = verdict
            return
        why = str(verdict.get("reason")) if verdict.get("ok") else f"{verdict.get('kind')}: {verdict.get('error')}"
        self._emit(KernelResult(job.key, "compile", "fast", why, resources=_resources(self.compiled[job.key]),
                                gpu_seconds=float(verdict.get("seconds", 0.0))))

    def finish(self) -> dict[str, KernelResult]:
        """Wait for every compile and verification, then time the correct candidates; all results by key."""
        self.poll(timeout=None)
        ref_compiled = {k: f.result() for k, f in self.refs.items()}
        self.phases["compileAndVerify"] = time.monotonic() - self.started
        self.phases["timed"] = len(self.correct)
        if self.correct:
            # Timing in the order the jobs came in, so a run's outcomes do not depend on compile speed.
            _time_correct(sorted(self.correct, key=lambda j: self.order[j.key]), self.tasks, self.compiled,
                          self.verdicts, ref_compiled, self.cfg, self.pool, self._emit, self.phases)
        self.phases["timing"] = time.monotonic() - self.started - self.phases["compileAndVerify"]
        return self.results

    def close(self) -> None:
        if self._compiler is not None:
            self._compiler.close(drop_queued=True)
        self.verifier.shutdown(wait=True, cancel_futures=True)
        if self.own_pool and self.pool is not None:
            self.pool.close()

    def __enter__(self) -> Evaluation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _time_correct(correct: Sequence[KernelJob], tasks: dict[str, Task], compiled: dict[str, Any],
                  verdicts: dict[str, dict[str, Any]], ref_compiled: dict[tuple[str, str], Any], cfg: EvalSettings, pool: Any,
                  emit: Callable[[KernelResult], None], phases: dict[str, float]) -> None:
    """Time each verified candidate (and, once per source, its frozen program and the baseline)."""
    ref_times: dict[tuple[str, str], dict[str, Any] | None] = {}

    def time_source(t: Task, cubin: bytes, keep: bool) -> dict[str, Any]:
        request = {"task": t.name, "sizes": dict(t.sizes), "cubin": cubin, "warmup": cfg.warmup,
                   "trials": cfg.trials, "seed": SEED_BASE - 1, "keep": keep}
        reply = pool.time(request, max(cfg.timeout_seconds, 60.0))
        # The worker's own seconds against the phase's wall time: what the round trips cost.
        phases["timingWorker"] = phases.get("timingWorker", 0.0) + float(reply.get("seconds", 0.0))
        phases["timingRequests"] = phases.get("timingRequests", 0) + 1
        phases["timingPrep"] = phases.get("timingPrep", 0.0) + float(reply.get("prepSeconds", 0.0))
        return reply

    def reference_time(t: Task, source: str | None) -> dict[str, Any] | None:
        if source is None:
            return None
        key = (t.name, source)
        if key not in ref_times:
            c = ref_compiled.get(key)
            reply = time_source(t, c.cubin, keep=True) if c is not None and c.ok else None
            ref_times[key] = reply["stats"] if reply and reply.get("ok") else None
        return ref_times[key]

    for job in correct:
        t, c, verdict = tasks[job.key], compiled[job.key], verdicts[job.key]
        resources = _resources(c)
        gpu_s = float(verdict.get("seconds", 0.0))
        reply = time_source(t, c.cubin, keep=False)
        gpu_s += float(reply.get("seconds", 0.0))
        if not reply.get("ok"):
            emit(KernelResult(job.key, "pass", "pass", f"correct, but timing failed: {reply.get('error')}",
                              resources=resources, gpu_seconds=gpu_s))
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
        emit(KernelResult(
            job.key, label, up_to, why, speedup=s_frozen, speedup_vs_baseline=s_base, time_ms=mine["median_ms"],
            timings={"candidate": mine, "frozen": frozen, "baseline": base}, resources=resources, gpu_seconds=gpu_s))


def feedback_reports(task: str, source: str, settings: Any, *, gpu: bool | None = None) -> dict[str, str]:
    """The debugger, analyzer and profiler raw reports of one frozen program (compute once per program)."""
    from cudanalyst.runner.kernels.reports import frozen_program_reports

    use_gpu = gpu_available() if gpu is None else gpu
    return frozen_program_reports(task, source, EvalSettings.of(settings), gpu=use_gpu)
