"""A/A: the same code must time the same. A copy of every frozen program of the bundled example, and of each
of its tasks' baseline, is timed as a candidate against its original, in two rounds, through the kernel stage's
own interface. Each comes out at 1.00x within the timing noise and none is `fast`.

A copy that is the same code up to whitespace and comments is not timed at all (its speedup is 1 by definition,
runner/kernels/stage.py), so each copy here adds an unused static device function: other source text, so the
stage times it, but nvcc drops the function and the cubin is the original's byte for byte (checked below)."""

from __future__ import annotations

import pytest
from gpu_support import gpu_only

from cudanalyst.runner.kernels.pool import WorkerPool
from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates
from cudanalyst.tasks import get_task
from cudanalyst.trajectory import load_trajectory

pytestmark = gpu_only
NOISE = 0.05  # |speedup - 1| allowed for a copy; fast needs > 1.12


def _jobs(round_: int) -> list[KernelJob]:
    programs = load_trajectory("builtin://example").programs
    jobs = [KernelJob(f"{p.program_id}/{round_}", p.task, _copy(p.source, round_), p.source) for p in programs]
    for task in sorted({p.task for p in programs}):
        base = get_task(task).baseline_source
        jobs.append(KernelJob(f"{task}-baseline/{round_}", task, _copy(base, round_), base))
    return jobs


def _copy(source: str, round_: int) -> str:
    return source + f"\nstatic __device__ int cudanalyst_aa_copy_{round_}(int x) {{ return x + {round_}; }}\n"


def test_the_copies_compile_to_their_originals_cubin():
    from cudanalyst.runner.kernels.compile import compile_task_source

    for job in _jobs(1)[:6]:
        task = get_task(job.task)
        mine, theirs = compile_task_source(task, job.source), compile_task_source(task, job.frozen_source)
        assert mine.ok and theirs.ok and mine.cubin == theirs.cubin, job.key


def test_a_copy_of_every_frozen_program_and_baseline_times_as_its_original():
    settings = EvalSettings(gpu_workers=4)
    rows = []
    with WorkerPool(settings.gpu_workers) as pool:
        for round_ in (1, 2):
            rows += evaluate_candidates(_jobs(round_), settings, gpu=True, pool=pool)
    timed = [r for r in rows if r.label in ("pass", "fast")]
    for r in sorted(rows, key=lambda r: r.key):
        print(f"{r.key:28} {r.label:8} {r.reference or '-':9} "
              f"{'-' if r.speedup is None else f'{r.speedup:.3f}x'}  {r.reason[:90] if r.label == 'compile' else ''}")
    assert len(timed) >= 2 * 4  # at least every baseline copy in both rounds
    assert not any(r.unchanged for r in rows)  # other source text, so each is timed (the cubin is the same)
    for r in timed:
        assert r.label == "pass", (r.key, r.speedup, r.reason)
        assert r.speedup == pytest.approx(1.0, abs=NOISE), (r.key, r.speedup, r.reason)
    # A copy of a frozen program that verifies is timed against that program itself.
    assert all(r.reference == "frozen" for r in timed)
    # The planted problems of the example make some frozen programs wrong or broken: so are their copies.
    assert all(r.label in ("pass", "compile", "fail") for r in rows)
