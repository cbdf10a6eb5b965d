"""The recorder runs OpenEvolve in generations of `parallel` iterations, so that later iterations can evolve the
children of earlier ones (issue 30: the policy comparison's recordings of 8 iterations at parallel 4 drew all 8
parents before any child existed, because OpenEvolve submits 2 x parallel iterations at once).

OpenEvolve itself (its process-parallel controller and database) against a loopback stand-in model that answers
each request with a new program, and a two-line evaluator: no GPU, no vLLM."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from hosted_api import HostedApi, serving

pytestmark = pytest.mark.skipif(importlib.util.find_spec("openevolve") is None,
                                reason="OpenEvolve is not installed (the `record` extra)")

EVALUATOR = '''
import re

def evaluate(program_path):
    # A later program scores higher: the database keeps every child, and any can be drawn as a parent.
    n = int(re.search(r"VALUE = (\\d+)", open(program_path).read()).group(1))
    return {"combined_score": n / 1000.0}
'''


class NewProgramEachTime(HostedApi):
    """Every answer a new whole program (VALUE = 1, 2, ...), as OpenEvolve's rewrite mode asks."""

    counter: Any = None

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super().reply(body)
        with self.lock:
            n = next(self.counter)
        for choice in answer["choices"]:
            choice["message"]["content"] = f"```python\nVALUE = {n}\n```"
        return answer


def evolve(tmp_path: Path, caplog: pytest.LogCaptureFixture, generations: bool, iterations: int = 8,
           parallel: int = 2) -> dict[int, tuple[str, str]]:
    """{iteration: (child id, parent id)}, from OpenEvolve's own log of each iteration (its database keeps one
    program per MAP-Elites cell, so it does not hold every child to the end)."""
    from openevolve import OpenEvolve
    from openevolve.config import Config

    from cudanalyst.runner.record.evolve import in_generations

    (tmp_path / "initial.py").write_text("VALUE = 0\n")
    (tmp_path / "evaluator.py").write_text(EVALUATOR)
    api = NewProgramEachTime(answer_delay_s=0.2)
    api.counter = itertools.count(1)
    with serving(api):
        config = Config.from_dict({
            "max_iterations": iterations, "checkpoint_interval": 100, "random_seed": 7, "diff_based_evolution": False,
            "llm": {"api_base": api.base_url, "api_key": "none", "models": [{"name": api.model, "weight": 1.0}],
                    "timeout": 30, "retries": 0},
            "database": {"num_islands": 1, "population_size": 20, "archive_size": 20},
            "evaluator": {"parallel_evaluations": parallel, "cascade_evaluation": False, "timeout": 60},
        })
        controller = OpenEvolve(str(tmp_path / "initial.py"), str(tmp_path / "evaluator.py"), config,
                                output_dir=str(tmp_path / "out"))
        if generations:
            in_generations(controller, parallel)
        with caplog.at_level(logging.INFO, logger="openevolve.process_parallel"):
            asyncio.run(controller.run(iterations=iterations))
    found = (LINE.search(r.getMessage()) for r in caplog.records if r.name == "openevolve.process_parallel")
    return {int(m[1]): (m[2], m[3]) for m in found if m}


LINE = re.compile(r"Iteration (\d+): Program (\S+) \(parent: (\S+)\)")


def parents_by_iteration(children: dict[int, tuple[str, str]]) -> dict[int, bool]:
    """{iteration: whether its child's parent is the initial program (a parent that is no iteration's child)}."""
    ids = {child for child, _ in children.values()}
    return {i: parent not in ids for i, (_, parent) in children.items()}


def test_openevolve_alone_draws_the_first_two_times_parallel_parents_from_the_baseline(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    got = parents_by_iteration(evolve(tmp_path, caplog, generations=False, iterations=4))
    assert sorted(got) == [1, 2, 3, 4] and all(got.values())  # what the comparison's recordings showed


def test_in_generations_later_iterations_evolve_earlier_children(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    children = evolve(tmp_path, caplog, generations=True)
    got = parents_by_iteration(children)
    assert sorted(got) == list(range(1, 9))  # every iteration gave a child; none was lost between generations
    assert got[1] and got[2]  # the first generation has nothing but the baseline to draw from
    # From the second generation on, children are drawn as parents: in OpenEvolve alone iterations 3 and 4 (within
    # its first 2 x parallel) could only evolve the baseline. The draw is seeded (random_seed), so this is no chance.
    assert not (got[3] and got[4]), got
    assert not all(got[i] for i in range(3, 9)), got
    # A child's parent was found in an earlier generation (of 2 iterations) than the child, never in its own.
    found_in = {child: i for i, (child, _) in children.items()}
    for i, (_, parent) in children.items():
        if parent in found_in:
            assert (found_in[parent] - 1) // 2 < (i - 1) // 2, (i, found_in[parent])
