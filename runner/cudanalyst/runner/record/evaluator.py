"""OpenEvolve's evaluation file for a recording: one CUDA program in, metrics and the three reports out.

OpenEvolve loads this file by path and calls `evaluate(program_path, **evaluator_args)` in its worker
processes (`evaluator.evaluator_args` in the config written by `cudanalyst.runner.record.evolve` carries
the task, the evaluation settings and whether a GPU is there). The facts and reports come from the same
functions the replay uses (`cudanalyst.runner.kernels.feedback.reports`); the reports are returned as artifacts named
after their tool, which OpenEvolve renders into the prompt of every child of this program.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from openevolve.evaluation_result import EvaluationResult

from cudanalyst import players
from cudanalyst.runner.kernels.feedback.reports import all_reports, program_facts
from cudanalyst.runner.kernels.timing.trials import speedup
from cudanalyst.runner.kernels.workers.requests import EvalSettings
from cudanalyst.runner.record import gate
from cudanalyst.tasks import get_task
from cudanalyst.tasks.conformance import contract_problems
from cudanalyst.trajectory.toolruns import HOST_PLAYER, TOOL_NAMES, ToolRun

# combined_score, the fitness OpenEvolve selects by (docs/decisions.md): a program that does not build or
# breaks the task's contract scores 0; one that builds but is not shown correct (wrong, or no GPU to tell)
# BUILT; a correct one CORRECT plus up to (1 - CORRECT) by its speedup over the task baseline, s / (1 + s).
BUILT = 0.1
CORRECT = 0.5

# Every registered tool's report (artifact) name: what an evaluation makes unless a policy leaves some unrun.
REPORTS = frozenset(players.tool_names())

# OpenEvolve's workers load this file before they build a prompt: a recording with a policy gates the reports there.
gate.install_from_env()

# The evaluations' log (evolve.py names the file): a JSON line per evaluation, with its wall time and each GPU
# tool's seconds running and waiting for the GPU-tools queue. For people, never shown to the agent: OpenEvolve
# renders metrics and artifacts into prompts, so these numbers may not go there.
EVALUATIONS_ENV = "CUDANALYST_RECORD_EVALUATIONS"
# A folder of finished evaluations by source (evolve.py names one per task and pass, filled first with the earlier
# passes' from the store): OpenEvolve evaluates a child that is its parent unchanged again, tools and all (9 of the
# 40 compiled programs of the 2026-12-01 recording were such repeats), and a resumed pass evaluates its task's
# baseline again. The same source with the same settings gets the metrics and reports its first evaluation got.
EVALUATED_ENV = "CUDANALYST_RECORD_EVALUATED"

# A folder of finished evaluations shared by every recording on this machine (optional): the same source with the same
# settings is the same evaluation in any recording, so two recordings of the same tasks (the study's two agents, the
# policy comparison's arms and seeds) evaluate each baseline once. A lock per source makes a second evaluator of the
# same source wait for the first one's result instead of running the tools beside it.
SHARED_ENV = "CUDANALYST_RECORD_SHARED_EVALUATIONS"

_pool: tuple[int, Any] | None = None  # (pid, WorkerPool): OpenEvolve forks its workers, each needs its own


def _gpu_pool() -> Any:
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        from cudanalyst.runner.kernels.workers.pool import WorkerPool

        _pool = (os.getpid(), WorkerPool(1))
        atexit.register(_pool[1].close)
    return _pool[1]


def combined_score(built: bool, correct: bool | None, ratio: float | None) -> float:
    """The fitness (pure): see BUILT and CORRECT."""
    if not built:
        return 0.0
    if not correct:
        return BUILT
    return CORRECT + (1 - CORRECT) * ((ratio / (1 + ratio)) if ratio else 0.0)


def evaluate_source(source: str, task: str, evaluation: dict[str, Any] | None = None,
                    gpu: bool = False) -> EvaluationResult:
    """Metrics (numbers only, as OpenEvolve wants) and the reports of one program: all three, or under a policy's
    `runTools: shown` those its state shows (gate.not_run). A stored evaluation of the same source answers when it
    holds every report wanted; one that lacks some gets them made now and kept beside the rest."""
    started = time.monotonic()
    settings = gate.current()
    stored = evaluated_path(source, task, evaluation, gpu)
    shared_folder = os.environ.get(SHARED_ENV)
    shared = evaluated_path(source, task, evaluation, gpu, shared_folder) if shared_folder else None
    with _claimed(shared):
        done = next((json.loads(p.read_text()) for p in (stored, shared) if p is not None and p.exists()), None)
        missing: set[str] | None = None
        if done is not None:
            wanted = REPORTS - gate.not_run(settings, done["metrics"], source)
            missing = wanted - set(done.get("reports", REPORTS))
            if not missing:
                if stored is not None and not stored.exists():
                    _write_whole(stored, done)  # into this recording's store too, with the rest of its evaluations
                log_evaluation(task, source, time.monotonic() - started, done["compiled"], tools_of(done, wanted),
                               repeat=True, reports=wanted)
                return answer(done, wanted)
        fresh = _evaluate(source, task, evaluation, gpu, settings, only=missing)
        if done is not None:  # the stored metrics stay (the state they gave chose `missing`); the new reports join
            fresh = {**done, "artifacts": {**done["artifacts"], **fresh["artifacts"]},
                     "tools": {**done["tools"], **{t: r for t, r in fresh["tools"].items()
                                                   if HOST_PLAYER[t] in fresh["reports"]}},
                     "reports": sorted(set(done.get("reports", REPORTS)) | set(fresh["reports"]))}
        wanted = REPORTS - gate.not_run(settings, fresh["metrics"], source)
        log_evaluation(task, source, time.monotonic() - started, fresh["compiled"], tools_of(fresh, wanted),
                       reports=wanted)
        for path in (stored, shared):
            if path is not None:
                _write_whole(path, fresh)
    return answer(fresh, wanted)


def answer(done: dict[str, Any], wanted: set[str] | frozenset[str]) -> EvaluationResult:
    """OpenEvolve's result: the metrics and the wanted reports (a report left unrun is absent, never a stand-in)."""
    return EvaluationResult(metrics=done["metrics"],
                            artifacts={k: v for k, v in done["artifacts"].items() if k in wanted or k not in REPORTS})


def tools_of(done: dict[str, Any], wanted: set[str] | frozenset[str]) -> dict[str, Any]:
    """How each GPU tool ran for the wanted reports: a tool whose report is not wanted did not run for them."""
    return {t: run if HOST_PLAYER[t] in wanted else {"status": "not-run", "cause": None, "timings": False}
            for t, run in done["tools"].items()}


def _evaluate(source: str, task: str, evaluation: dict[str, Any] | None, gpu: bool, settings: gate.GateSettings | None,
              only: set[str] | None = None) -> dict[str, Any]:
    """One evaluation, as stored: metrics, the reports made (`only` these, else the ones the program's state wants),
    whether it compiled and how each GPU tool ran."""
    cfg = EvalSettings.of(evaluation)
    spec = get_task(task)
    facts = program_facts(spec, source, cfg, gpu=gpu, pool=_gpu_pool() if gpu else None)
    contract_ok = not contract_problems(spec, source)
    built = facts.compiled.ok and contract_ok
    metrics: dict[str, float] = {
        "compiled": float(facts.compiled.ok),
        "contract": float(contract_ok),
        # 0: compiled only (no GPU here); correct and speedup were not evaluated, and are absent.
        "gpu_evaluated": float(gpu),
    }
    correct: bool | None = None
    ratio: float | None = None
    if gpu:
        correct = facts.compiled.ok and facts.correct
        metrics["correct"] = float(correct)
        p, b = facts.program_stats, facts.baseline_stats
        ratio = speedup(b["median_ms"], p["median_ms"]) if p and b else None
        if ratio is not None:
            metrics["speedup"] = round(ratio, 4)
    metrics["combined_score"] = round(combined_score(built, correct, ratio), 6)
    # The state comes from these metrics, so the reports it wants are known only now.
    wanted = only if only is not None else REPORTS - gate.not_run(settings, metrics, source)
    reports = all_reports(facts, only=wanted)
    tools = {name: facts.tools.get(name, ToolRun(status="not-run")).model_dump(by_alias=True, mode="json",
                                                                                exclude={"detail"})
             for name in TOOL_NAMES}
    return {"metrics": metrics, "artifacts": reports, "compiled": bool(facts.compiled.ok), "tools": tools,
            "reports": sorted(wanted)}


def _write_whole(path: Path, done: dict[str, Any]) -> None:
    """Whole or not at all: another worker, or the store's copier, may read it at any moment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(f".{os.getpid()}.part")
    part.write_text(json.dumps(done))
    part.replace(path)


@contextlib.contextmanager
def _claimed(shared: Path | None) -> Any:
    """Hold the shared folder's lock for this source (none without a shared folder); the kernel drops it when the
    process dies, so a killed evaluator never holds it."""
    if shared is None:
        yield
        return
    shared.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(shared.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def evaluated_path(source: str, task: str, evaluation: dict[str, Any] | None, gpu: bool,
                   folder: str | None = None) -> Path | None:
    """Where this evaluation's result is kept: in `folder`, by default the one the recorder named for this pass."""
    folder = folder if folder is not None else os.environ.get(EVALUATED_ENV)
    if not folder:
        return None
    key = json.dumps({"task": task, "source": source, "evaluation": evaluation or {}, "gpu": gpu}, sort_keys=True)
    return Path(folder) / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def log_evaluation(task: str, source: str, seconds: float, compiled: bool, tools: dict[str, Any],
                   repeat: bool = False, reports: set[str] | frozenset[str] = REPORTS) -> None:
    """One line in the evaluations' log, when the recorder named one. A repeat took its result from the first
    evaluation of the same source; its tools' seconds are that one's. `reports`: the ones this evaluation answered
    with (fewer than all under `runTools: shown`)."""
    path = os.environ.get(EVALUATIONS_ENV)
    if not path:
        return
    line = {"task": task, "sha256": hashlib.sha256(source.encode()).hexdigest()[:16], "seconds": round(seconds, 3),
            "compiled": compiled, "repeat": repeat, "pid": os.getpid(), "tools": tools, "reports": sorted(reports)}
    with open(path, "a") as f:  # one write per line, appended: OpenEvolve's workers share the file
        f.write(json.dumps(line) + "\n")


def evaluate(program_path: str, task: str, evaluation: dict[str, Any] | None = None,
             gpu: bool = False) -> EvaluationResult:
    return evaluate_source(Path(program_path).read_text(), task, evaluation, gpu)
