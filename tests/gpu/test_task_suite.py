"""Every task of the suite on the GPU, through the kernel stage's own interface (parametrized over the suite,
so a new task is covered as soon as it is registered; ids are FAMILY-NAME, so `-k "dl or xsbench or npb"`
picks the new families):
- its baseline verifies correct, and a copy of it times as the baseline itself (A/A: 1.00x, `pass`);
- adversarial controls fail verification with the reason: the baseline returning at once (outputs never
  written), and the baseline editing a read-only input;
- a faster kernel of one task per new family (tests/faster_kernels.py) is `fast` against the naive
  baseline: in each family `fast` can happen."""

from __future__ import annotations

import pytest
from faster_kernels import FASTER, edits_an_input, first_input, writes_nothing
from gpu_support import gpu_only

from cudanalyst.runner.kernels.stage import EvalSettings, KernelJob, evaluate_candidates
from cudanalyst.runner.kernels.workers.pool import WorkerPool
from cudanalyst.tasks import all_tasks, get_task

pytestmark = gpu_only
NOISE = 0.05  # |speedup - 1| allowed for a copy (as tests/gpu/test_timing_aa.py); fast needs > 1.12
TASKS = all_tasks()


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(2) as p:
        yield p


def _show(rows) -> None:  # noqa: ANN001 - outcome records
    """The verdicts, speedups and candidate times (the suite's sizes aim at baselines of >= ~50 us: read, not
    asserted, since a test asserts no timing)."""
    for r in rows:
        speed = "-" if r.speedup is None else f"{r.speedup:.3f}x"
        took = "-" if r.time_ms is None else f"{r.time_ms * 1000:.1f} us"
        print(f"{r.key:40} {r.label:8} {r.reference or '-':9} {speed:>9} {took:>11}  {r.reason[:140]}")


@pytest.mark.parametrize("name", [t.name for t in TASKS], ids=[f"{t.family}-{t.name}" for t in TASKS])
def test_baseline_is_correct_times_as_itself_and_adversaries_fail(pool, name, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_COMPILE_CACHE", str(tmp_path))  # no verdict stored by an earlier run
    task = get_task(name)
    base = task.baseline_source
    jobs = [KernelJob(f"{name}/copy", name, base + "\n// copy\n", base),
            KernelJob(f"{name}/writes-nothing", name, writes_nothing(task), base)]
    # A time-stepped task would flip the bit back on every second step; its inputs are atax's case.
    edited = first_input(task) if task.repeat == 1 else None
    if edited:
        jobs.append(KernelJob(f"{name}/edits-an-input", name, edits_an_input(task), base))
    results = evaluate_candidates(jobs, EvalSettings(), gpu=True, pool=pool)
    _show(results)
    copy, nothing, *edits = results
    assert copy.unchanged and copy.label == "pass" and copy.reference == "frozen", (copy.label, copy.reason)
    assert copy.speedup == pytest.approx(1.0, abs=NOISE), (copy.speedup, copy.reason)
    assert nothing.label == "compile" and nothing.speedup is None, (nothing.label, nothing.reason)
    assert "never written" in nothing.reason or "differ from the reference" in nothing.reason, nothing.reason
    for r in edits:
        assert r.label == "compile" and f"input {edited} was modified" in r.reason, (r.label, r.reason)


@pytest.mark.parametrize("name", sorted(FASTER), ids=[f"{get_task(n).family}-{n}" for n in sorted(FASTER)])
def test_a_faster_kernel_of_each_new_family_is_fast(pool, name):
    base = get_task(name).baseline_source
    [r] = evaluate_candidates([KernelJob(f"{name}/faster", name, FASTER[name], base)], EvalSettings(), gpu=True,
                              pool=pool)
    _show([r])
    assert r.label == "fast" and r.reference == "frozen", (r.label, r.speedup, r.reason)
    assert r.speedup_vs_baseline is not None and r.speedup_vs_baseline > 1.12, r.speedup_vs_baseline
