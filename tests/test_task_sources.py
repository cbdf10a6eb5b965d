"""The kernels the GPU suite test runs besides the baselines (tests/faster_kernels.py) compile with nvcc
and follow their task's contract, so that on the GPU only their behaviour is in question."""

from __future__ import annotations

import pytest
from faster_kernels import FASTER, edits_an_input, first_input, writes_nothing
from nvcc_mark import needs_nvcc

from cudanalyst.tasks import all_tasks, get_task
from cudanalyst.tasks.conformance import contract_problems

NEW = [t.name for t in all_tasks() if t.family != "polybench"]


def test_each_new_family_has_a_faster_kernel() -> None:
    assert {get_task(name).family for name in FASTER} == {"dl", "xsbench", "npb"}


@pytest.mark.parametrize("name", sorted(FASTER))
def test_faster_kernels_follow_the_contract(name: str) -> None:
    assert contract_problems(get_task(name), FASTER[name]) == []


@pytest.mark.parametrize("name", NEW)
def test_adversaries_are_made_for_every_new_task(name: str) -> None:
    task = get_task(name)
    nothing, edits = writes_nothing(task), edits_an_input(task)
    assert nothing.count("return;") >= len(task.kernels) and contract_problems(task, nothing) == []
    assert f"((unsigned char*){first_input(task)})[0] ^= 1u;" in edits and contract_problems(task, edits) == []


@needs_nvcc
def test_faster_kernels_and_adversaries_compile() -> None:
    from cudanalyst.runner.kernels.compile.nvcc import CompilePool, task_translation_unit

    units, names = [], []
    for name in FASTER:
        units.append(task_translation_unit(get_task(name), FASTER[name]))
        names.append(f"{name}/faster")
    for name in NEW:
        task = get_task(name)
        units += [task_translation_unit(task, writes_nothing(task)), task_translation_unit(task, edits_an_input(task))]
        names += [f"{name}/writes-nothing", f"{name}/edits-an-input"]
    with CompilePool(workers=2) as pool:
        results = pool.map(units)
    for name, result in zip(names, results, strict=True):
        assert result.ok, (name, result.log)
        for k in result.kernels.values():
            assert k.spill_store_bytes == 0 and k.local_bytes == 0, name
