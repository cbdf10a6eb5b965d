"""The kernel stage's one boundary: candidates in, outcome records out (`KernelStage`).

1. Each job is checked (known task, some source, kernel signatures as the contract says); a broken one
   is `fail` with its reason. Bad input never raises.
2. Candidates, frozen programs and task baselines compile in the CPU compile pool (nvcc -> cubin). A
   candidate whose cubin calls the device heap (malloc, free) is `compile` and never runs: heap memory
   outlives a launch and no reset reaches it (cubin_globals.py).
3. Without a GPU the stage stops there: compiled sources are `compile`, with `evaluatedUpTo` `compile`
   (pass and fast are not evaluated, never guessed).
4. With a GPU, each candidate is verified in persistent workers as soon as its compile is done (nvcc
   and verification overlap; a verdict already stored is read instead: verdicts.py). Each frozen
   program and each task baseline is verified the same way, once per source. A candidate's time limit
   is a multiple of its task baseline's verification time (the baseline's own runs, without the task's
   references its worker made first), with a floor, and the spec's `timeoutSeconds` as the cap; it counts
   from the candidate's own first step, once the references are ready, so a kernel that never terminates
   costs seconds, not a minute. With a first attempt (limits.py), a verification started while candidates
   still come in gets a briefer limit, and one that runs out of it is verified again with its full limit
   once every candidate is in.
5. Once every compile and verification is over, the correct candidates are timed with the GPU alone,
   in interleaved trials beside their reference (timing.py): the frozen program when it verified
   correct, else the task baseline (the record's `reference` says which). A candidate whose timed
   launches gave wrong outputs fails verification (`compile`), with the reason.

Labels: fail (no code, contract broken, compile error) < compile (built, but refused, or failed to load,
run or verify) < pass (correct) < fast (correct and reference time / candidate time > 1 + fastTolerance).
Records go to `on_outcome` as soon as they are final, in the caller's thread, so a killed shard keeps
what it finished.
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

from cudanalyst.outcomes import Label, UnitOutcome, beats
from cudanalyst.runner.kernels.compile.cubin_globals import CubinFormatError, heap_calls
from cudanalyst.runner.kernels.compile.nvcc import (
    CompilePool,
    CompileResult,
    shared_cache,
    task_translation_unit,
)
from cudanalyst.runner.kernels.feedback.reports import frozen_program_reports
from cudanalyst.runner.kernels.limits import attempt_limit, own_seconds, time_limit
from cudanalyst.runner.kernels.timing.trials import speedup
from cudanalyst.runner.kernels.verify.verdicts import VerdictCache, verify_once
from cudanalyst.runner.kernels.workers.pool import WorkerPool
from cudanalyst.runner.kernels.workers.requests import (
    EvalSettings,
    TimedProgram,
    compare_request,
    seeds_for,
    verify_request,
)
from cudanalyst.tasks import Task, UnknownTaskError, get_task
from cudanalyst.tasks.conformance import contract_problems
from cudanalyst.tasks.source_text import same_code

CANDIDATES_PER_COMPARISON = 8  # candidates timed in one request beside their reference
# A candidate whose fastest warm-up launch is this many times slower than its references' slowest is not timed
# further (timing/trials.py, too_slow): fast needs 1 + fastTolerance the other way, so its label cannot change.
SLOW_FACTOR = 10.0


@dataclass
class KernelJob:
    key: str
    task: str
    source: str | None  # None when the LLM stage extracted no code
    frozen_source: str | None = None
    unit: dict[str, Any] | None = None  # the unit's identity (outcomes.unit_identity); a bare key without


def same_binaries(jobs: Sequence[KernelJob], cubin: Callable[[KernelJob], bytes]) -> dict[str, list[KernelJob]]:
    """The jobs by distinct cubin, in order: the key of the first job with each cubin -> every job with that cubin,
    the first one first (pure)."""
    first: dict[bytes, str] = {}
    copies: dict[str, list[KernelJob]] = {}
    for job in jobs:
        copies.setdefault(first.setdefault(cubin(job), job.key), []).append(job)
    return copies


def label_for(correct: bool, speedup_vs_reference: float | None, fast_tolerance: float) -> Label:
    """pass or fast for a verified candidate; `compile` when it built but is not correct (pure)."""
    if not correct:
        return Label.COMPILE
    if beats(speedup_vs_reference, fast_tolerance):
        return Label.FAST
    return Label.PASS


def next_group(ready: Sequence[tuple[str, str | None]], last_task: str | None) -> tuple[str, str | None]:
    """The next group (task, frozen source) to time: a ready one of the task timed last, else the first ready
    (pure). The timing worker keeps only a few tasks' data on the GPU (trials.py, _task_data), and groups are
    ready in their arrival order, which goes round the tasks: taken as they came, a run of more tasks than it
    keeps could make each request load its task's data again."""
    return next((g for g in ready if g[0] == last_task), ready[0])


def spent_before(seconds: float, ended: float, mark: float | None) -> float:
    """How much of a span of `seconds` that ended at `ended` lay before `mark` (all of it without a mark) (pure)."""
    return seconds if mark is None else min(seconds, max(0.0, mark - (ended - seconds)))


def tail_summary(phases: dict[str, Any]) -> str:
    """The stage's own part of a run's tail, for its summary line: from the last candidate in to the end, split into
    timing and the compiles and verifications still running (timing waits for all of them), and the verifications
    that ran to their time limit, and the first attempts that ran out, when there were first attempts (issue 32:
    what a tail is made of, on every run's console) (pure)."""
    text = ""
    if "afterLastIn" in phases:
        after, timing = phases["afterLastIn"], phases.get("timing", 0.0)
        text = (f"after the last candidate came in {after:.1f} s (timing {timing:.1f} s, compiles and verifications "
                f"{max(0.0, after - timing):.1f} s, the longest verification then "
                f"{phases.get('afterLastInLongestVerify', 0.0):.1f} s), ")
    limits = phases.get("verifyLimits") or {}
    span = (f"; limits {min(limits.values()):.1f}-{max(limits.values()):.1f} s over {len(limits)} tasks"
            if limits else "")
    before = (f", {phases['verifyTimeoutSecondsBeforeLastIn']:.1f} s of it while candidates still came in"
              if phases.get("verifyTimeouts") and "verifyTimeoutSecondsBeforeLastIn" in phases else "")
    first = (f"{int(phases.get('verifyDeferred', 0))} first attempts of {phases['firstAttemptSeconds']:.1f} s ran "
             f"out while candidates still came in ({phases.get('verifyDeferredSeconds', 0.0):.1f} s) and were "
             "verified again with their full limit, " if "firstAttemptSeconds" in phases else "")
    return text + (f"{int(phases.get('verifyTimeouts', 0))} verifications ran to their time limit "
                   f"({phases.get('verifyTimeoutSeconds', 0.0):.1f} s{before}{span}), {first}")


@functools.cache
def gpu_status() -> tuple[bool, str]:
    """(whether pycuda sees a GPU, why not), asked in a child process so this one never creates a CUDA
    context. The reason names the real cause: pycuda missing is not the same as no GPU."""
    probe = "import pycuda.driver as d; d.init(); print(d.Device.count())"
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"the GPU probe did not answer ({exc})"
    if out.returncode == 0 and out.stdout.strip().isdigit():
        count = int(out.stdout.strip())
        return (True, "") if count > 0 else (False, "no GPU on this machine (the CUDA driver sees none)")
    if "No module named 'pycuda'" in out.stderr:
        return False, "pycuda is not installed here (the `gpu` extra), so no kernel could run"
    last = (out.stderr.strip().splitlines() or ["no output"])[-1]
    return False, f"the CUDA driver could not be used here ({last})"


def gpu_available() -> bool:
    return gpu_status()[0]


def _heap_calls(cubin: bytes) -> list[str]:
    try:
        return heap_calls(cubin)
    except CubinFormatError:
        return []  # not a cubin we can read: loading it fails, with the driver's reason


def _compile_errors(result: CompileResult, limit: int = 5) -> str:
    errors = [d.render() for d in result.errors][:limit]
    return "; ".join(errors) or (result.log.strip().splitlines() or ["nvcc failed"])[-1]


def _resources(result: CompileResult) -> dict[str, Any]:
    return {name: res.model_dump(by_alias=True) for name, res in result.kernels.items()}


@dataclass
class _Reference:
    """A frozen program or a task baseline: its compile and, with a GPU, its verdict."""

    source: str
    compiled: Future[CompileResult]
    verdict: Future[dict[str, Any]] | None = None
    waiting: list[Callable[[], None]] = field(default_factory=list)

    def correct(self) -> bool:
        v = self.verdict.result() if self.verdict is not None else None
        return bool(v and v.get("ok") and v.get("correct"))


def evaluate_candidates(jobs: list[KernelJob], settings: Any, *, gpu: bool | None = None,
                        pool: WorkerPool | None = None,
                        on_result: Callable[[UnitOutcome], None] | None = None,
                        phases: dict[str, float] | None = None, secret: int | None = None) -> list[UnitOutcome]:
    """Outcomes for `jobs`, in the same order (the stage over one batch; see KernelStage)."""
    with KernelStage(settings, gpu=gpu, pool=pool, on_outcome=on_result, phases=phases, secret=secret) as stage:
        stage.add(jobs)
        results = stage.finish()
    return [results[j.key] for j in jobs]


class KernelStage:
    """The stage as a stream: `add(jobs)` any number of times (each job is checked, compiled and, with a
    GPU, verified at once, while later jobs are still coming), `poll()` now and then to take in finished
    compiles and verifications, then `finish()`: the rest is waited for, and the correct candidates are
    timed with the GPU alone. Records go to `on_outcome` as they are final (in the caller's thread).

    `phases` is filled with where the time went: `compileAndVerify` and `timing` (wall seconds), `timed`,
    `verifiedBefore` (verdicts found stored), `timedCopies` (timed units that shared the measurement of the same
    cubin), `tooSlowToTime` (correct candidates left untimed after their warm-up: too slow to be fast),
    `timingRequests`, `timingWorker`, `workerRestarts` and
    `restartSeconds`, `references` (units timed against each reference), and what the candidates' compiles and
    verifications cost where they ran: `compiles` / `compileSeconds` (nvcc runs, their summed wall) and
    `verifications` / `verifySeconds` (in the GPU workers), with `gpuWorkers`: which of the two keeps a lane's
    kernel stage behind its LLM stage; `madeTaskData` (the task data the timing worker loaded onto the GPU, once per
    task when groups of a task are timed together); `fences` ("vmm" or "guards"), `fenceReruns` and `rebuiltTaskData`
    (fences.py), and what the fences' audits cost: `verifyAuditSeconds` (worker wall, within verifySeconds) and
    `timingAuditSeconds` (GPU time, one audit timed alone times the audits made, within timingWorker);
    `verifyTimeouts` / `verifyTimeoutSeconds` (verifications that ran to their time limit) with
    `verifyTimeoutSecondsBeforeLastIn` (the part of those seconds before the last job came in: in a whole run, a
    hung candidate's spin beside the model server), `verifyLimits` (each task's candidates' time limit),
    `firstAttemptSeconds` with `verifyDeferred` / `verifyDeferredSeconds` (first attempts that ran out, each verified
    again with its full limit: not verdicts, and not among the timeouts), and what `finish()` took after the last
    job came in (`afterLastIn`, timing included: the part of a run's tail the kernel stage owns)
    with the longest verification that ended then (`afterLastInLongestVerify`): timing waits for every
    verification, so one hung candidate among the last holds the whole timing back by its time limit."""

    def __init__(self, settings: Any, *, gpu: bool | None = None, pool: WorkerPool | None = None,
                 on_outcome: Callable[[UnitOutcome], None] | None = None,
                 phases: dict[str, float] | None = None, nice: int = 0, secret: int | None = None,
                 first_attempt_s: float | None = None) -> None:
        """`nice` > 0: nvcc and the GPU workers at a lower CPU priority (beside a model server). `secret`: the
        run's (runfolder.run_secret), which every input derives from; without one (and no fixed `seed` in the
        settings) a fresh secret is drawn, so nobody can know the inputs in advance either way.
        `first_attempt_s`: the limit of a candidate's verification started before finish() (beside a model
        server), where it is under the full limit; one that runs out of it is verified again with its full limit
        once finish() begins (limits.py). None: every verification gets its full limit at once."""
        self.phases: dict[str, Any] = {} if phases is None else phases
        self.started = time.monotonic()
        self._finishing: float | None = None  # when finish() began: every job is in
        self.first_attempt_s = first_attempt_s
        self._deferred: list[KernelJob] = []  # out of their first attempt, verified again once finish() begins
        if first_attempt_s is not None:
            self.phases["firstAttemptSeconds"] = first_attempt_s
        self.cfg = EvalSettings.of(settings)
        self.seeds = seeds_for(self.cfg, secret)
        self.on_outcome = on_outcome
        self.results: dict[str, UnitOutcome] = {}
        self.use_gpu, self.no_gpu_reason = gpu_status() if gpu is None else (gpu, "" if gpu else "no GPU was given")
        self.own_pool = self.use_gpu and pool is None
        if self.own_pool:
            pool = WorkerPool(self.cfg.gpu_workers, nice=nice)
        self.pool = pool
        self.nice = nice
        self.cache = shared_cache()
        self.stored = VerdictCache.beside(self.cache)  # the LLM stage may have verified some already
        self._compiler: CompilePool | None = None  # made at the first job that needs nvcc
        workers = max(1, len(pool.workers)) if pool else 1
        self.verifier = ThreadPoolExecutor(workers, thread_name_prefix="verify")
        # References are verified apart, so a candidate waiting for its time limit never blocks them.
        self.reference_verifier = ThreadPoolExecutor(2, thread_name_prefix="verify-reference")
        # Timing's references are made apart too, one task at a time, so they never delay a reference's verdict.
        self.warmer = ThreadPoolExecutor(1, thread_name_prefix="timing-references")
        self.jobs: dict[str, KernelJob] = {}
        self.tasks: dict[str, Task] = {}
        self.order: dict[str, int] = {}  # arrival order of the jobs that go to nvcc
        self.compiled: dict[str, CompileResult] = {}
        self.compile_keys: set[str] = set()
        self.correct: list[KernelJob] = []
        self.verdicts: dict[str, dict[str, Any]] = {}
        self.references: dict[tuple[str, str], _Reference] = {}
        self.warmed: set[str] = set()  # tasks whose timing references a worker was asked to make
        self.limits: dict[str, float] = {}  # each task's candidates' time limit, once its baseline's verdict is in
        # The compile pool hands identical sources the same future, so a future may stand for several jobs.
        self.by_future: dict[Future[Any], list[tuple[str, KernelJob]]] = {}

    # ---- records ------------------------------------------------------------------------------

    def _emit(self, job: KernelJob, label: Label, up_to: Label, reason: str, **evidence: Any) -> None:
        unit = job.unit or {"key": job.key, "run": "", "task": job.task, "generation": 0, "program_id": "",
                            "coalition": []}
        record = UnitOutcome(**unit, label=label, evaluated_up_to=up_to, reason=reason,
                               unchanged=same_code(job.source, job.frozen_source), **evidence)
        self.results[job.key] = record
        if self.on_outcome is not None:
            self.on_outcome(record)

    def _fail(self, job: KernelJob, reason: str) -> None:
        # Nothing the GPU could show changes a missing or broken source: every metric is established.
        self._emit(job, Label.FAIL, Label.FAST, reason)

    # ---- compile and verify ------------------------------------------------------------------------

    @property
    def compiler(self) -> CompilePool:
        if self._compiler is None:
            self._compiler = CompilePool(self.cfg.compile_workers, cache=self.cache, nice=self.nice)
        return self._compiler

    def _reference(self, task: Task, source: str) -> _Reference:
        """The frozen program or baseline `source` of `task`, compiled (and verified) once."""
        key = (task.name, source)
        if key not in self.references:
            ref = _Reference(source, self.compiler.submit(task_translation_unit(task, source)))
            if self.use_gpu:
                ref.verdict = self.reference_verifier.submit(self._verify_reference, task, ref)
            self.references[key] = ref
        return self.references[key]

    def _warm(self, task: Task) -> None:
        """Have a verification worker make the task's timing inputs and references (shared by the pool's
        workers, references.py) while nvcc and verification run, so the timing worker finds them made: timing
        runs on seeds of its own, which verification never needs."""
        if task.name in self.warmed or self.pool is None:
            return
        self.warmed.add(task.name)
        wire = {"op": "references", "task": task.name, "sizes": dict(task.sizes), "seeds": list(self.seeds.timing)}
        self.warmer.submit(self.pool.call, wire, self.cfg.timeout_seconds)

    def _verify_reference(self, task: Task, ref: _Reference) -> dict[str, Any]:
        c = ref.compiled.result()
        if not c.ok or c.cubin is None:
            return {"ok": True, "correct": False, "reason": "compile error: " + _compile_errors(c)}
        return verify_once(self.pool, self.stored, verify_request(task, c.cubin, self.cfg, self.seeds),
                           self.cfg.timeout_seconds)

    def _limit(self, task: Task) -> float:
        """The task baseline's verdict decides the candidates' time limit (waited for: it comes first)."""
        base = self.references[(task.name, task.baseline_source)]
        try:
            verdict = base.verdict.result(timeout=self.cfg.timeout_seconds) if base.verdict else None
        except TimeoutError:
            verdict = None
        limit = self.limits[task.name] = time_limit(own_seconds(verdict), self.cfg.timeout_seconds)
        return limit

    def add(self, jobs: Sequence[KernelJob]) -> None:
        for job in jobs:
            self.jobs[job.key] = job
            try:
                task = self.tasks[job.key] = get_task(job.task)
            except UnknownTaskError as exc:
                self._fail(job, str(exc))
                continue
            if job.source is None or not job.source.strip():
                self._fail(job, "no kernel source was extracted from the completion")
                continue
            if problems := contract_problems(task, job.source):
                self._fail(job, "contract: " + "; ".join(problems))
                continue
            self.order[job.key] = len(self.order)
            if self.use_gpu:  # the references are only timed against (and set the time limit)
                self._warm(task)
                self._reference(task, task.baseline_source)
                if job.frozen_source:
                    self._reference(task, job.frozen_source)
            fut = self.compiler.submit(task_translation_unit(task, job.source))
            self.by_future.setdefault(fut, []).append(("compile", job))

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
                    elif (again := self._after_verify(job, fut.result())) is not None:
                        self.by_future[again] = [("verify", job)]
                        pending.add(again)
            if deadline is not None and time.monotonic() >= deadline:
                break
        return len(self.by_future)

    def _after_compile(self, job: KernelJob, c: CompileResult) -> Future[Any] | None:
        """Record a compile; return the verification it starts, if any."""
        self.compiled[job.key] = c
        if not c.cached and c.key not in self.compile_keys:  # jobs of one source share one nvcc run
            self.compile_keys.add(c.key)
            self.phases["compiles"] = self.phases.get("compiles", 0) + 1
            self.phases["compileSeconds"] = self.phases.get("compileSeconds", 0.0) + c.seconds
        if not c.ok or c.cubin is None:
            self._fail(job, "compile error: " + _compile_errors(c))
        elif calls := _heap_calls(c.cubin):
            # Built, but never run: no reset reaches the device heap (cubin_globals.py), so a timed launch
            # could answer from what a verified launch stored there.
            self._emit(job, Label.COMPILE, Label.FAST, resources=_resources(c),
                       reason=f"refused before it ran: it calls the device heap ({', '.join(calls)}), whose "
                       "memory outlives a launch, so timed launches could reuse what verified ones computed")
        elif not self.use_gpu:
            self._emit(job, Label.COMPILE, Label.COMPILE, resources=_resources(c),
                       reason=f"compiled; not run: {self.no_gpu_reason}; pass and fast were not evaluated")
        else:
            return self.verifier.submit(self._verify, job)
        return None

    def _verify(self, job: KernelJob) -> dict[str, Any]:
        """A candidate's verification (in a verifier thread), with the limit of the moment it starts: a first
        attempt's while candidates still come in, else its full limit. A first attempt that ran out says so
        (`firstAttempt`), and its job is verified again (_after_verify)."""
        task = self.tasks[job.key]
        cubin = self.compiled[job.key].cubin
        assert cubin is not None  # only a job that compiled is verified
        limit, brief = attempt_limit(self._limit(task), self.first_attempt_s, self._finishing is not None)
        verdict = verify_once(self.pool, self.stored, verify_request(task, cubin, self.cfg, self.seeds), limit,
                              self.cfg.timeout_seconds)
        return {**verdict, "firstAttempt": True} if brief and verdict.get("kind") == "timeout" else verdict

    def _again(self, job: KernelJob) -> Future[Any] | None:
        """A job out of its first attempt: verified again with its full limit now if every job is in, else once
        finish() begins (the model server has stopped by then)."""
        if self._finishing is None:
            self._deferred.append(job)
            return None
        return self.verifier.submit(self._verify, job)

    def _after_verify(self, job: KernelJob, verdict: dict[str, Any]) -> Future[Any] | None:
        """Record a verification; return the verification it starts again, if any (a first attempt ran out)."""
        self.phases["verifiedBefore"] = self.phases.get("verifiedBefore", 0) + (1 if verdict.get("cached") else 0)
        if "fences" in verdict:
            self.phases["fences"] = verdict["fences"]
        spent = not verdict.get("cached") and "seconds" in verdict  # a worker's run, not a stored verdict
        if spent:
            self.phases["verifications"] = self.phases.get("verifications", 0) + 1
            self.phases["verifySeconds"] = self.phases.get("verifySeconds", 0.0) + float(verdict["seconds"])
            self.phases["verifyAuditSeconds"] = (self.phases.get("verifyAuditSeconds", 0.0)
                                                 + float(verdict.get("auditSeconds", 0.0)))
        if verdict.get("firstAttempt"):  # not a verdict: the job runs again with its full limit
            self.phases["verifyDeferred"] = self.phases.get("verifyDeferred", 0) + 1
            self.phases["verifyDeferredSeconds"] = (self.phases.get("verifyDeferredSeconds", 0.0)
                                                    + float(verdict.get("seconds", 0.0)))
            return self._again(job)
        if spent:
            if verdict.get("kind") == "timeout":
                self.phases["verifyTimeouts"] = self.phases.get("verifyTimeouts", 0) + 1
                self.phases["verifyTimeoutSeconds"] = (self.phases.get("verifyTimeoutSeconds", 0.0)
                                                       + float(verdict["seconds"]))
                # Its span ends about now (verdicts are taken as they come): the part of it before finish() began.
                before = spent_before(float(verdict["seconds"]), time.monotonic(), self._finishing)
                self.phases["verifyTimeoutSecondsBeforeLastIn"] = (
                    self.phases.get("verifyTimeoutSecondsBeforeLastIn", 0.0) + before)
            if self._finishing is not None:
                self.phases["afterLastInLongestVerify"] = max(self.phases.get("afterLastInLongestVerify", 0.0),
                                                              float(verdict["seconds"]))
        if verdict.get("ok") and verdict.get("correct"):
            self.correct.append(job)
            self.verdicts[job.key] = verdict
            return None
        why = str(verdict.get("reason")) if verdict.get("ok") else f"{verdict.get('kind')}: {verdict.get('error')}"
        self._emit(job, Label.COMPILE, Label.FAST, why, resources=_resources(self.compiled[job.key]),
                   gpu_seconds=float(verdict.get("seconds", 0.0)))
        return None

    # ---- timing ---------------------------------------------------------------------------------

    def finish(self) -> dict[str, UnitOutcome]:
        """Every job is in: take in the rest of the compiles and verifications and time the correct candidates;
        all records by key. A group of candidates (one task, one frozen program) is timed once each of its
        candidates is settled and no verification is running or waiting: verification goes first. Timing
        needs the GPU alone (pool.py), so a timing request made while verifications run waits for all of
        them and holds new ones back; on the H200 (2,640 units) timing each group as soon as it was settled
        made that convoy take 75 s of wall for 22 s of timing. Verification runs on several workers at once
        and decides which groups are complete; timing fills the gaps while nvcc works through its backlog."""
        self._finishing = time.monotonic()
        for job in self._deferred:  # out of their first attempt beside the server: their full limit now
            self.by_future[self.verifier.submit(self._verify, job)] = [("verify", job)]
        self._deferred = []
        groups: dict[tuple[str, str | None], list[KernelJob]] = {}
        for key in sorted(self.order, key=self.order.__getitem__):  # the jobs that went to nvcc, in arrival order
            job = self.jobs[key]
            groups.setdefault((job.task, job.frozen_source), []).append(job)
        timing = Timing(self)
        last_task: str | None = None
        while groups:
            pending = self.poll(timeout=0.0)
            ready = self._ready(groups)
            if ready and not self._verifying():
                group = next_group(ready, last_task)
                last_task = group[0]
                jobs = [j for j in groups.pop(group) if j.key in self.verdicts]  # the correct ones
                if jobs:
                    timing.run(jobs)
                continue
            if not pending and not ready and groups:
                raise RuntimeError(f"kernel stage: {len(groups)} group(s) never settled")  # a bug, never a state
            if pending:
                self.poll(timeout=0.05)
            else:  # only a reference is still being verified (not a future of ours to wait on)
                time.sleep(0.02)
        self.phases["compileAndVerify"] = time.monotonic() - self.started - timing.seconds
        self.phases["afterLastIn"] = time.monotonic() - self._finishing
        self.phases["timed"] = len(self.correct)
        if self.limits:
            self.phases["verifyLimits"] = dict(sorted(self.limits.items()))
        self.phases["timing"] = timing.seconds
        self.phases["references"] = dict(timing.count)
        if self.pool is not None:
            self.phases["gpuWorkers"] = len(self.pool.workers)
            self.phases["workerRestarts"] = self.pool.restarts
            self.phases["restartSeconds"] = round(self.pool.restart_seconds, 3)
        return self.results

    def _verifying(self) -> bool:
        """Whether a verification (of a candidate or a reference) is running or waiting for a worker; a compile
        still running is not: nvcc does not use the GPU."""
        return (any(step == "verify" for steps in self.by_future.values() for step, _ in steps)
                or any(ref.verdict is not None and not ref.verdict.done() for ref in self.references.values()))

    def _ready(self, groups: dict[tuple[str, str | None], list[KernelJob]]) -> list[tuple[str, str | None]]:
        """The groups whose every job has a record or a verdict of correct (waiting to be timed)."""
        return [g for g, jobs in groups.items()
                if all(j.key in self.results or j.key in self.verdicts for j in jobs)]

    def close(self) -> None:
        if self._compiler is not None:
            self._compiler.close(drop_queued=True)
        self.verifier.shutdown(wait=True, cancel_futures=True)
        self.reference_verifier.shutdown(wait=True, cancel_futures=True)
        self.warmer.shutdown(wait=True, cancel_futures=True)
        if self.own_pool and self.pool is not None:
            self.pool.close()

    def __enter__(self) -> KernelStage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Timing:
    """The correct candidates of one stage timed against their references (see the module's docstring)."""

    def __init__(self, stage: KernelStage) -> None:
        self.stage = stage
        self.cfg = stage.cfg
        self.count: dict[str, int] = {}  # units timed against each reference
        self.seconds = 0.0  # wall time spent timing

    def run(self, correct: Sequence[KernelJob]) -> None:
        """Time the correct candidates of one group (one task, one frozen program), a few per request. Candidates
        with the same cubin are the same GPU work: one of them is timed and the others share its measurement
        (on the H200, a third of the timed units of a 2,640-unit run returned their frozen program unchanged)."""
        started = time.monotonic()
        task = self.stage.tasks[correct[0].key]
        frozen = correct[0].frozen_source
        copies = same_binaries(correct, lambda j: self.stage.compiled[j.key].cubin or b"")
        distinct = [same[0] for same in copies.values()]
        for start in range(0, len(distinct), CANDIDATES_PER_COMPARISON):
            self._time_group(task, frozen, distinct[start:start + CANDIDATES_PER_COMPARISON], copies)
        self.stage.phases["timedCopies"] = self.stage.phases.get("timedCopies", 0) + len(correct) - len(distinct)
        self.seconds += time.monotonic() - started

    def _references(self, task: Task, frozen: str | None) -> list[tuple[str, bytes]]:
        """The references a group is timed beside: the frozen program and the task baseline, those of them
        that verified correct (the baseline once, when the frozen program is the baseline itself)."""
        out = []
        for name, source in (("frozen", frozen), ("baseline", task.baseline_source)):
            ref = self.stage.references.get((task.name, source)) if source else None
            if ref is None or not ref.correct() or (name == "baseline" and source == frozen):
                continue
            c = ref.compiled.result()
            if c.cubin is not None:
                out.append((name, c.cubin))
        return out

    def _compare(self, task: Task, programs: list[TimedProgram], references: Sequence[str] = ()) -> dict[str, Any]:
        assert self.stage.pool is not None
        request = compare_request(task, programs, self.cfg, self.stage.seeds, references=references,
                                  slow_factor=SLOW_FACTOR)
        reply = self.stage.pool.compare(request, max(self.cfg.timeout_seconds, 60.0))
        phases = self.stage.phases
        phases["timingWorker"] = phases.get("timingWorker", 0.0) + float(reply.get("seconds", 0.0))
        phases["timingRequests"] = phases.get("timingRequests", 0) + 1
        phases["timingPrep"] = phases.get("timingPrep", 0.0) + float(reply.get("prepSeconds", 0.0))
        # The fences' cost shows in timingWorker; what they did, here: the mode in force, the requests timed
        # again without a culprit, the kept task data found written and made again.
        if "fences" in reply:
            phases["fences"] = reply["fences"]
        phases["fenceReruns"] = phases.get("fenceReruns", 0) + int(reply.get("fenceReruns", 0))
        phases["rebuiltTaskData"] = phases.get("rebuiltTaskData", 0) + int(reply.get("rebuiltTaskData", 0))
        phases["madeTaskData"] = phases.get("madeTaskData", 0) + int(reply.get("madeTaskData", 0))
        phases["timingAuditSeconds"] = phases.get("timingAuditSeconds", 0.0) + float(reply.get("auditSeconds", 0.0))
        return reply

    def _time_group(self, task: Task, frozen: str | None, jobs: list[KernelJob],
                    copies: dict[str, list[KernelJob]]) -> None:
        """Time `jobs` (distinct cubins) beside the group's references; each job's copies get its measurement."""
        refs = self._references(task, frozen)
        if not refs:
            for job in (c for j in jobs for c in copies[j.key]):
                self._untimed(job, "neither the frozen program nor the task baseline verified correct, "
                                   "so there is nothing to time against")
            return
        programs = [TimedProgram(name, cubin) for name, cubin in refs]
        programs += [TimedProgram(j.key, self.stage.compiled[j.key].cubin or b"") for j in jobs]
        reply = self._compare(task, programs, [name for name, _ in refs])
        if not reply.get("ok"):
            if len(jobs) > 1:  # one candidate may have broken the request: each on its own
                for job in jobs:
                    self._time_group(task, frozen, [job], copies)
            else:
                for job in copies[jobs[0].key]:
                    self._untimed(job, f"correct, but timing failed: {reply.get('kind')}: {reply.get('error')}")
            return
        timed = reply["programs"]
        usable = {name: timed[name] for name, _ in refs if timed.get(name, {}).get("ok") and not timed[name].get("problem")}
        if frozen == task.baseline_source and "frozen" in usable:
            usable["baseline"] = usable["frozen"]
        reference = next((name for name in ("frozen", "baseline") if name in usable), None)
        if reference is None:
            why = "; ".join(f"{name}: {timed.get(name, {}).get('problem') or timed.get(name, {}).get('error')}"
                            for name, _ in refs)
            for job in jobs:
                self._untimed(job, f"correct, but no reference could be timed ({why})")
            return
        share = float(reply.get("seconds", 0.0)) / len(programs)
        for job in jobs:
            same = copies[job.key]
            for copy in same:  # the GPU time of one measurement, split among the units that share it
                self._label(copy, reference, usable, timed.get(job.key, {}), share / len(same),
                            timed_as=None if copy is job else job.key)

    def _label(self, job: KernelJob, ref_name: str, references: dict[str, dict[str, Any]], reply: dict[str, Any],
               gpu_s: float, timed_as: str | None = None) -> None:
        c = self.stage.compiled[job.key]
        verdict = self.stage.verdicts[job.key]
        gpu_s += float(verdict.get("seconds", 0.0))
        if not reply.get("ok"):
            self._untimed(job, f"correct, but timing failed: {reply.get('error')}")
            return
        if reply.get("problem"):  # wrong outputs in a timed launch: not the work that was verified
            shared = f" (the same cubin as unit {timed_as}, timed once for both)" if timed_as else ""
            self.stage._emit(job, Label.COMPILE, Label.FAST, f"fails verification: {reply['problem']}{shared}",
                             resources=_resources(c), gpu_seconds=gpu_s)
            return
        if slow := reply.get("slow"):  # so much slower than every reference that it cannot be fast
            self._too_slow(job, slow, ref_name, references, gpu_s, timed_as)
            return
        mine, theirs = reply["stats"], references[ref_name]["stats"]
        s = speedup(theirs["median_ms"], mine["median_ms"])
        base = references.get("baseline")
        label = label_for(True, s, self.cfg.fast_tolerance)
        vs_base = speedup(base["stats"]["median_ms"], mine["median_ms"]) if base else None
        what = ("the frozen program" if ref_name == "frozen"
                else "the task baseline (the frozen program could not be timed)")
        why = (f"{verdict.get('reason')}; {mine['median_ms']:.4g} ms median of {mine['trials']} trials "
               f"(IQR/median {mine['iqr_over_median']:.1%}), interleaved with {what} at {theirs['median_ms']:.4g} ms: "
               f"speedup {s:.3f}x (fast needs > {1 + self.cfg.fast_tolerance:.2f}x)")
        if ref_name == "frozen" and vs_base is not None:
            why += f"; {vs_base:.3f}x against the task baseline"
        if timed_as is not None:
            why += f"; the same cubin as unit {timed_as}, timed once for both"
        self.count[ref_name] = self.count.get(ref_name, 0) + 1
        self.stage._emit(job, label, Label.FAST if s is not None else Label.PASS, why, speedup=s,
                         speedup_vs_baseline=vs_base,
                         fast_vs_baseline=beats(vs_base, self.cfg.fast_tolerance) if vs_base is not None else None,
                         reference=ref_name, time_ms=mine["median_ms"], resources=_resources(c), gpu_seconds=gpu_s)

    def _too_slow(self, job: KernelJob, slow: dict[str, Any], ref_name: str, references: dict[str, dict[str, Any]],
                  gpu_s: float, timed_as: str | None) -> None:
        """A correct candidate left untimed after its warm-up: `pass`, with `fast` evaluated (and false) against
        every reference it was warmed up beside, and no speedup (a warm-up is no measurement)."""
        verdict = self.stage.verdicts[job.key]
        why = (f"{verdict.get('reason')}; not timed: the fastest of its {int(slow['launches'])} warm-up launches took "
               f"{slow['warmupMs']:.4g} ms, more than {slow['factor']:g} times its references' slowest "
               f"({slow['referenceMs']:.4g} ms), so it cannot be fast (fast needs > {1 + self.cfg.fast_tolerance:.2f}x)")
        if timed_as is not None:
            why += f"; the same cubin as unit {timed_as}, warmed up once for both"
        self.stage.phases["tooSlowToTime"] = self.stage.phases.get("tooSlowToTime", 0) + 1
        self.stage._emit(job, Label.PASS, Label.FAST, why, reference=ref_name,
                         fast_vs_baseline=False if "baseline" in references else None,
                         resources=_resources(self.stage.compiled[job.key]), gpu_seconds=gpu_s)

    def _untimed(self, job: KernelJob, reason: str) -> None:
        c = self.stage.compiled[job.key]
        gpu_s = float(self.stage.verdicts[job.key].get("seconds", 0.0))
        self.stage._emit(job, Label.PASS, Label.PASS, reason, resources=_resources(c), gpu_seconds=gpu_s)


def feedback_reports(task: str, source: str, settings: Any, *, gpu: bool | None = None) -> dict[str, str]:
    """The debugger, analyzer and profiler raw reports of one frozen program (compute once per program)."""
    use_gpu = gpu_available() if gpu is None else gpu
    return frozen_program_reports(task, source, EvalSettings.of(settings), gpu=use_gpu)


def feedback_with_tools(task: str, source: str, settings: Any, *,
                        gpu: bool | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """The reports and how each GPU tool ran on the program (`toolruns.ToolRun`, by tool name)."""
    from cudanalyst.runner.kernels.feedback.reports import frozen_program_feedback

    use_gpu = gpu_available() if gpu is None else gpu
    return frozen_program_feedback(task, source, EvalSettings.of(settings), gpu=use_gpu)
