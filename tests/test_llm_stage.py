"""Pure parts of the LLM stage: seeds, groups of samples, donors of randomized feedback."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "vllm"))
from llm_support import program  # noqa: E402

from cudanalyst.plan import Unit, unit_key  # noqa: E402
from cudanalyst.runner.llm.stage import derive_seed, donor_program, make_groups  # noqa: E402


def test_seeds_are_stable_and_differ_by_role_and_request() -> None:
    assert derive_seed(0, "coder", "g1") == derive_seed(0, "coder", "g1")
    assert len({derive_seed(0, "coder", "g1"), derive_seed(0, "planner", "g1"), derive_seed(1, "coder", "g1"),
                derive_seed(0, "coder", "g2")}) == 4
    assert 0 <= derive_seed("x") < 2**31


def test_samples_of_one_rollout_form_one_group() -> None:
    programs = {"p1": program("p1"), "p2": program("p2")}
    units = [Unit(unit_key("r", pid, c, "coalition", r, s), "gemm", 1, pid, c, "coalition", r, s)
             for pid in programs for c in [(), ("debugger",)] for r in range(2) for s in range(3)]
    groups = make_groups("r", units, programs)
    assert len(groups) == 2 * 2 * 2
    for g in groups:
        assert [u.sample for u in g.units] == [0, 1, 2]
        assert {(u.program_id, u.coalition, u.rollout) for u in g.units} == {(g.program.program_id, g.coalition,
                                                                              g.rollout)}
    assert len({g.key for g in groups}) == len(groups)


def test_randomized_feedback_takes_another_program_of_the_same_task_with_that_report() -> None:
    me = program("a")
    others = [program("b"), program("c", feedback={"analyzer": "x"}),
              program("d").model_copy(update={"task": "atax"})]
    pool = [me, *others]
    donors = {donor_program(me, "debugger", pool, seed) .program_id for seed in range(40)}
    assert donors == {"b"}  # c lacks a debugger report, d is another task
    picks = {donor_program(me, "analyzer", pool, seed).program_id for seed in range(40)}
    assert picks <= {"b", "c"} and len(picks) == 2  # seeded, both eligible ones drawn over seeds
    assert donor_program(me, "analyzer", pool, 7) == donor_program(me, "analyzer", list(reversed(pool)), 7)
    # Nothing of the same task: any other program with the report; no other program at all: itself.
    lone = program("z").model_copy(update={"task": "mvt"})
    assert donor_program(lone, "debugger", [lone, *others], 0).program_id in {"b", "d"}
    assert donor_program(me, "debugger", [me], 0) is me
