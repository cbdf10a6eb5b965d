"""One task of a recording: OpenEvolve in this process, its checkpoints copied to the object store.

`python -m cudanalyst.runner.record.evolve --recording FILE --task NAME --endpoint URL --served-model NAME`
is started by `cudanalyst record` once per task. OpenEvolve starts from the task's baseline kernel and
writes a checkpoint after each iteration that gave a program; the first at least `checkpointInterval` iterations past
the last copied one (`checkpoint_due`) is copied to
`<output>/<name>/openevolve/<task>/checkpoints/checkpoint_N/` and then `progress/<task>.json` names it, so
the store's progress object always points at a complete checkpoint. A later start resumes from that one
(checkpoints past it, half-copied by a killed process, are removed first).

Each iteration's outcome (a child, or why none) goes to `iterations.jsonl` beside the checkpoints
(runner.record.iterations); an iteration the model did not answer stops the task before it is checkpointed. A pass
whose iterations all ended without a program, for the agent's reasons, has taken them: OpenEvolve calls that run
failed (EvolutionFailedError), the recorder counts them and goes on.

Exit status: 0 the task has all its iterations, 1 it failed, 3 it was stopped before the end, 4 the model did not
answer (the task stopped at its last checkpoint; a later pass resumes there), 5 the model refused a prompt as longer
than its context window (stopped the same way; a pass with the same settings stops there again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cudanalyst.api.recording import TrajectoryRecording
from cudanalyst.recording import progress_key, read_task_progress, recording_store, task_store
from cudanalyst.store import ObjectStore

EXIT_STOPPED = 3
EXIT_MODEL = 4
EXIT_CONTEXT = 5  # a prompt longer than the model's context window (iterations.PromptTooLong)
ARTIFACT_BYTES = 64 * 1024  # a report is a few KiB; Nsight Compute's sections stay well below this
log = logging.getLogger("cudanalyst.record")


# With diff-based evolution OpenEvolve's user message asks for SEARCH/REPLACE blocks (or, on a rewrite iteration,
# the whole program): the system text must not contradict it by always asking for the complete source.
WHOLE_SOURCE = "Answer with the complete new source in one ```cuda fenced block."
AS_ASKED = ("Answer in the form the request asks for: SEARCH/REPLACE blocks against the current program, or the "
            "complete new source in one ```cuda fenced block when it asks for a rewrite.")


def system_message(task: str, evolution: str = "rewrite") -> str:
    """The replay's coder system text and task section (its contract), so both agents are told the same."""
    from cudanalyst.runner.llm.prompts import render, template_text
    from cudanalyst.tasks import get_task

    contract = get_task(task).contract().strip()
    coder = template_text("coder_system.txt").strip()
    if evolution == "diff":
        coder = coder.replace(WHOLE_SOURCE, AS_ASKED)
    return coder + "\n\n" + render("task.tmpl", contract=contract).strip()


def openevolve_config(rec: TrajectoryRecording, task: str, endpoint: str, served: str, gpu: bool) -> dict[str, Any]:
    """OpenEvolve's configuration for one task (pure)."""
    spec = rec.spec
    search = spec.search
    return {
        "max_iterations": spec.iterations,
        # OpenEvolve checkpoints only at an iteration that gave a program, and only when its number is a multiple
        # of the interval: with diff-based search most iterations give none (a diff that does not apply), and on
        # the H200 (2026-12-02) 8 of 16 tasks had no checkpoint after three calls. So it checkpoints after every
        # such iteration, and the store takes one once spec.checkpointInterval iterations have passed
        # (checkpoint_due).
        "checkpoint_interval": 1,
        "random_seed": spec.seed,
        "language": "cuda",
        "file_suffix": ".cu",
        # By default whole programs, not SEARCH/REPLACE diffs: small models rarely write a diff that applies, and
        # a failed diff is no program at all, while a bad rewrite is still a program with its reports.
        "diff_based_evolution": search.evolution == "diff",
        "full_rewrite_probability": search.full_rewrite_probability,
        "max_code_length": 100_000,
        "log_level": "INFO",
        "llm": {
            "api_base": endpoint, "api_key": "none", "models": [{"name": served, "weight": 1.0}],
            "temperature": spec.temperature, "top_p": spec.top_p, "max_tokens": spec.max_tokens,
            # Our own server: a slow answer is slow, not lost (two loaded CPU cores need minutes). A call that still
            # fails after the retries stops the task (runner.record.iterations): a blip must not, a dead server must.
            "timeout": 3600, "retries": 3, "retry_delay": 5,
        },
        "prompt": {
            "system_message": system_message(task, search.evolution),
            "num_top_programs": search.top_programs, "num_diverse_programs": search.diverse_programs,
            # The reports reach the child's prompt unaltered, so the recorded feedback is what the agent saw:
            # no redaction of long tokens (hex addresses, ncu's IDs) and no truncation below a report's size.
            "include_artifacts": True, "max_artifact_bytes": ARTIFACT_BYTES, "artifact_security_filter": False,
        },
        "database": {
            "population_size": spec.population, "archive_size": min(spec.population, 100),
            "num_islands": spec.islands, "random_seed": spec.seed, "log_prompts": True,
            "exploration_ratio": search.exploration_ratio, "exploitation_ratio": search.exploitation_ratio,
            "elite_selection_ratio": search.elite_selection_ratio,
            "migration_interval": search.migration_interval, "migration_rate": search.migration_rate,
            "in_memory": True, "max_snapshot_artifacts": None,
            # Reports stay inside the program files (artifacts_json), hence inside the checkpoint copied to
            # the store, never in a folder on this machine.
            "artifact_size_threshold": 16 * ARTIFACT_BYTES,
        },
        "evaluator": {
            "cascade_evaluation": False, "parallel_evaluations": spec.parallel, "timeout": 3600,
            "max_retries": 0,
            "evaluator_args": {"task": task, "evaluation": spec.evaluation.model_dump(), "gpu": gpu},
        },
    }


def checkpoint_due(iteration: int, last: int, interval: int, total: int) -> bool:
    """Whether OpenEvolve's checkpoint at `iteration` goes to the store, the last one there being at `last`."""
    return iteration >= total or iteration - last >= interval


def upload_checkpoint(local: Path, store: ObjectStore, number: int) -> int:
    """Copy checkpoint_N's files to the store; returns how many programs it holds."""
    folder = local / f"checkpoint_{number}"
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        store.put_bytes(f"checkpoints/checkpoint_{number}/{path.relative_to(folder).as_posix()}", path.read_bytes())
    return sum(1 for p in files if p.parent.name == "programs" and p.suffix == ".json")


def download_checkpoint(store: ObjectStore, number: int, target: Path) -> Path:
    prefix = f"checkpoints/checkpoint_{number}/"
    folder = target / f"checkpoint_{number}"
    for key in store.list(prefix):
        path = folder / key[len(prefix):]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get_bytes(key))
    return folder


def drop_checkpoints_after(store: ObjectStore, number: int) -> None:
    """Checkpoints past the last complete one were cut short by a stop; the next pass writes them again."""
    for key in list(store.list("checkpoints/")):
        name = key.split("/")[1]
        if name.startswith("checkpoint_") and int(name.removeprefix("checkpoint_") or 0) > number:
            store.delete(key)


GATING_LOG = "gating.jsonl"  # per task, beside its checkpoints: one line per iteration (runner.record.gate)
# Per task and per pass (a resumed recording is another pass), beside its checkpoints: one line per evaluation,
# with the GPU tools' seconds (runner.record.evaluator.log_evaluation). A pass writes only its own file.
EVALUATIONS_PREFIX = "evaluations/"


# Per task, beside its checkpoints: each finished evaluation's result by source (runner.record.evaluator), kept in the
# store as it finishes, so a later pass answers the same source from it instead of running the tools again. A pass
# cut short before its first checkpoint starts the task from its baseline again; on the H200 (2026-12-02) the 16
# baselines' tools then queued anew at every start, and 8 of 16 tasks had no checkpoint after three calls.
EVALUATED_PREFIX = "evaluated/"
SYNC_S = 15.0


def restore_evaluated(store: ObjectStore, local: Path) -> int:
    """The store's finished evaluations into the pass's folder; returns how many."""
    local.mkdir(parents=True, exist_ok=True)
    count = 0
    for key in store.list(EVALUATED_PREFIX):
        name = key[len(EVALUATED_PREFIX):]
        if "/" not in name and name.endswith(".json"):
            (local / name).write_bytes(store.get_bytes(key))
            count += 1
    return count


class EvaluationSync:
    """Copies a pass's finished evaluations (whole files only: the evaluator renames each into place) and its
    evaluations' log to the store, every SYNC_S seconds in a thread and at each checkpoint, so a pass that is
    stopped or killed keeps what it evaluated. OpenEvolve forks its workers while the thread runs; they never use
    the store or this object, and the thread holds its lock only while it copies."""

    def __init__(self, store: ObjectStore, evaluated: Path, log: Path, log_key: str, every_s: float = SYNC_S):
        self.store, self.evaluated, self.log, self.log_key, self.every_s = store, evaluated, log, log_key, every_s
        self.sent: set[str] = {k[len(EVALUATED_PREFIX):] for k in store.list(EVALUATED_PREFIX)}
        self.log_size = -1
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="evaluation-sync", daemon=True)

    def sync(self) -> None:
        with self.lock:
            for path in sorted(self.evaluated.glob("*.json")):
                if path.name not in self.sent:
                    self.store.put_bytes(EVALUATED_PREFIX + path.name, path.read_bytes())
                    self.sent.add(path.name)
            if self.log.exists() and self.log.stat().st_size != self.log_size:
                data = self.log.read_bytes()
                self.store.put_bytes(self.log_key, data)
                self.log_size = len(data)

    def _loop(self) -> None:
        while not self.stop_event.wait(self.every_s):
            try:
                self.sync()
            except Exception:  # the store may be briefly unreachable; the next round or the checkpoint tries again
                log.warning("could not copy the evaluations to the store", exc_info=True)

    def __enter__(self) -> EvaluationSync:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join()
        self.sync()


def gating_settings(rec: TrajectoryRecording, workdir: Path, endpoint: str, served: str,
                    planner: tuple[str, str] | None) -> Any:
    """The gate's settings for this task's OpenEvolve processes, or None: no policy, every report shown raw."""
    from cudanalyst.runner.record.gate import GateSettings

    spec = rec.spec
    if spec.policy is None:
        return None
    url, name = planner if planner and spec.policy.models.planner else ("", "")
    return GateSettings(policy=spec.policy, gating=spec.gating, seed=spec.seed, log_path=str(workdir / GATING_LOG),
                        coder_url=endpoint, coder_model=served, planner_url=url, planner_model=name,
                        max_tokens=spec.max_tokens, temperature=spec.temperature, run_tools=spec.run_tools)


def restore_gating_log(store: ObjectStore, local: Path, done: int) -> None:
    """The store's log up to the resumed checkpoint (lines past it were cut short and are run again)."""
    lines = []
    if store.exists(GATING_LOG):
        lines = [ln for ln in store.get_text(GATING_LOG).splitlines()
                 if ln.strip() and int(json.loads(ln).get("iteration", 0)) <= done]
    local.write_text("".join(f"{ln}\n" for ln in lines))


def in_generations(controller: Any, width: int) -> None:
    """Make OpenEvolve run its iterations in generations of `width` (the spec's parallel, at least one per island).

    OpenEvolve's process-parallel controller submits min(2 x workers, iterations) iterations at once and draws each
    one's parent when it submits it: the first 2 x parallel iterations of a pass all evolve the baseline, and a
    recording of 8 iterations at parallel 4 had no generations at all (docs/results/policy-2026-12-04). Here each
    generation's iterations are submitted together, once the generation before has been added to the database, so
    from the second on a parent can be a child. The pool of workers stays up between generations."""
    async def run(start: int, count: int, target: float | None) -> None:
        # OpenEvolve's _run_evolution_with_checkpoints, with its one run_evolution call made once a generation.
        parallel = controller.parallel_controller
        completed = successful = 0
        first, end = start, start + count
        while start < end and not parallel.shutdown_event.is_set() and not getattr(
                parallel, "early_stopping_triggered", False):
            step = min(width, end - start)
            # The callback looked up each time: the recorder replaces it with its own (save and upload).
            await parallel.run_evolution(start, step, target, checkpoint_callback=controller._save_checkpoint)
            completed += parallel.completed_iterations
            successful += parallel.successful_iterations
            start += step
        # What OpenEvolve judges the whole run by (no iteration gave a program: it fails), over every generation.
        parallel.completed_iterations, parallel.successful_iterations = completed, successful
        parallel.produced_no_candidates = completed > 0 and successful == 0 and not parallel.shutdown_event.is_set()
        if parallel.shutdown_event.is_set():
            return
        # Its final checkpoint once, at the pass's end: one at each generation's end would add checkpoints at
        # iterations that gave no program (OpenEvolve checkpoints after those that did).
        last = first + count - 1
        if last > 0 and last % controller.config.checkpoint_interval == 0:
            controller._save_checkpoint(last)

    controller._run_evolution_with_checkpoints = run


def evolve_task(rec: TrajectoryRecording, task: str, endpoint: str, served: str, gpu: bool,
                workdir: Path, planner: tuple[str, str] | None = None) -> int:
    from openevolve import OpenEvolve
    from openevolve.config import Config
    from openevolve.controller import EvolutionFailedError

    from cudanalyst.runner.record import evaluator, iterations
    from cudanalyst.tasks import get_task

    top = recording_store(rec)
    store = task_store(rec, task)
    total = rec.spec.iterations
    done = int(read_task_progress(top, task).get("checkpoint", 0))
    if done >= total:
        return 0
    drop_checkpoints_after(store, done)
    workdir.mkdir(parents=True, exist_ok=True)
    initial = workdir / "initial.cu"
    initial.write_text(get_task(task).baseline_source)
    resume = str(download_checkpoint(store, done, workdir / "resume")) if done else None
    settings = gating_settings(rec, workdir, endpoint, served, planner)
    if settings is not None:
        from cudanalyst.runner.record.gate import ENV, install

        restore_gating_log(store, workdir / GATING_LOG, done)
        (workdir / "gating.json").write_text(settings.to_json())
        os.environ[ENV] = str(workdir / "gating.json")  # OpenEvolve's workers start with this process's environment
        install(settings)

    evaluations = f"{EVALUATIONS_PREFIX}pass-{time.strftime('%Y%m%dT%H%M%S')}-from-{done}.jsonl"
    (workdir / evaluations).parent.mkdir(parents=True, exist_ok=True)
    os.environ[evaluator.EVALUATIONS_ENV] = str(workdir / evaluations)  # inherited by OpenEvolve's workers
    restored = restore_evaluated(store, workdir / "evaluated")
    if restored:
        log.info("%s: %d evaluations of earlier passes restored; their sources are not evaluated again", task, restored)
    os.environ[evaluator.EVALUATED_ENV] = str(workdir / "evaluated")
    sync = EvaluationSync(store, workdir / "evaluated", workdir / evaluations, evaluations)

    config = Config.from_dict(openevolve_config(rec, task, endpoint, served, gpu))
    controller = OpenEvolve(str(initial), evaluator.__file__, config, output_dir=str(workdir / "out"))
    outcomes = workdir / iterations.ITERATIONS_LOG
    stored = store.get_text(iterations.ITERATIONS_LOG) if store.exists(iterations.ITERATIONS_LOG) else ""
    outcomes.write_text(iterations.restore(stored, done))
    # The controller hands each iteration's outcome to its tracer when the run starts (OpenEvolve.run).
    controller.evolution_tracer = iterations.IterationLog(outcomes, controller.evolution_tracer)
    save = controller._save_checkpoint  # OpenEvolve's checkpoint callback: copy each one as soon as it is written
    last = {"n": done}

    def save_and_upload(iteration: int) -> None:
        save(iteration)
        if not checkpoint_due(iteration, last["n"], rec.spec.checkpoint_interval, total):
            return
        programs = upload_checkpoint(workdir / "out" / "checkpoints", store, iteration)
        if settings is not None and (workdir / GATING_LOG).exists():
            store.put_bytes(GATING_LOG, (workdir / GATING_LOG).read_bytes())
        store.put_bytes(iterations.ITERATIONS_LOG, iterations.restore(outcomes.read_text(), iteration).encode())
        sync.sync()
        best = controller.database.get_best_program()
        top.put_json(progress_key(task), {
            "task": task, "checkpoint": iteration, "iterations": total, "programs": programs,
            "bestMetrics": best.metrics if best else {}, "gpu": gpu,
        })
        last["n"] = max(last["n"], iteration)

    controller._save_checkpoint = save_and_upload  # type: ignore[method-assign]
    in_generations(controller, max(rec.spec.parallel, rec.spec.islands))
    # Fresh: iterations 1..total. Resumed from N: OpenEvolve runs `remaining` more from N + 1.
    with sync:
        took_all = False  # every iteration of the pass ended, none with a program (EvolutionFailedError below)
        try:
            asyncio.run(controller.run(iterations=total - done, checkpoint_path=resume))
        except iterations.ModelUnavailable as exc:
            too_long = isinstance(exc, iterations.PromptTooLong)
            log.error("%s: %s; stopped at checkpoint %d (%srun again to resume there)", task, exc, last["n"],
                      "give the model a longer context, then " if too_long else "")
            return EXIT_CONTEXT if too_long else EXIT_MODEL
        except EvolutionFailedError as exc:
            # OpenEvolve fails a run none of whose iterations gave a program, so that a model that never answered
            # does not pass for one that found nothing better. Ours stops at such a model before (ModelUnavailable):
            # what is left are the agent's own answers (no code, a rewrite identical to its parent, no diff that
            # applies), each logged in iterations.jsonl, and iterations it took. A rerun would only take them again.
            ran = iterations.taken(outcomes.read_text(), done)
            if ran < total - done:
                raise
            log.warning("%s: none of this pass's %d iteration(s) gave a program (%s); the task has its iterations",
                        task, ran, exc)
            took_all = True
        if last["n"] < total and (took_all or controller.database.last_iteration >= total):
            save_and_upload(total)  # the last iterations fell between two checkpoint intervals, or gave no program
    return 0 if last["n"] >= total else EXIT_STOPPED


def main(argv: list[str] | None = None) -> int:
    from cudanalyst.api.recording import parse_recording

    parser = argparse.ArgumentParser(prog="cudanalyst.runner.record.evolve")
    parser.add_argument("--recording", required=True, help="the TrajectoryRecording, as JSON")
    parser.add_argument("--task", required=True)
    parser.add_argument("--endpoint", required=True, help="OpenAI-compatible base URL (…/v1)")
    parser.add_argument("--served-model", required=True)
    parser.add_argument("--gpu", type=int, choices=(0, 1), default=0)
    parser.add_argument("--planner-endpoint", default="", help="the planner's base URL, when the policy names one")
    parser.add_argument("--planner-model", default="")
    parser.add_argument("--workdir", default="")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    rec = parse_recording(json.loads(Path(args.recording).read_text()), args.recording)
    work = Path(args.workdir or tempfile.mkdtemp(prefix=f"cudanalyst-record-{args.task}-"))
    try:
        planner = (args.planner_endpoint, args.planner_model) if args.planner_endpoint else None
        return evolve_task(rec, args.task, args.endpoint, args.served_model, bool(args.gpu), work, planner)
    except Exception:
        log.exception("task %s failed", args.task)
        return 1


if __name__ == "__main__":
    sys.exit(main())
