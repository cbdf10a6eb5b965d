"""A/A: the same code must time the same. An identical copy of every frozen program of the bundled example,
and of each of its tasks' baseline, is timed as a candidate against its original, in two rounds, through
the kernel stage's own interface. Each comes out at 1.00x within the timing noise and none is `fast`."""

from __future__ import annotations

import pytest
from gpu_support import gpu_only

from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates
from cudanalyst.runner.kernels.workers.pool import WorkerPool
from cudanalyst.tasks import get_task
from cudanalyst.trajectory import load_trajectory

pytestmark = gpu_only
NOISE = 0.05  # |speedup - 1| allowed for a copy; fast needs > 1.12


def _jobs(round_: int) -> list[KernelJob]:
    programs = load_trajectory("builtin://example").programs
    jobs = [KernelJob(f"{p.program_id}/{round_}", p.task, p.source + f"\n// copy {round_}\n", p.source)
            for p in programs]
    for task in sorted({p.task for p in programs}):
        base = get_task(task).baseline_source
        jobs.append(KernelJob(f"{task}-baseline/{round_}", task, base + f"\n// copy {round_}\n", base))
    return jobs


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
    assert all(r.unchanged for r in rows)  # each is its original, up to a comment
    for r in timed:
        assert r.label == "pass", (r.key, r.speedup, r.reason)
        assert r.speedup == pytest.approx(1.0, abs=NOISE), (r.key, r.speedup, r.reason)
    # A copy of a frozen program that verifies is timed against that program itself.
    assert all(r.reference == "frozen" for r in timed)
    # The planted problems of the example make some frozen programs wrong or broken: so are their copies.
    assert all(r.label in ("pass", "compile", "fail") for r in rows)
