"""Players as a registry: a fourth feedback tool is one entry in cudanalyst.players plus its function, and the
importer, the runner's reports, the feedback a prompt gets and the demo all pick it up. Labels and metrics
come from the Label enum."""

from __future__ import annotations

from typing import get_args

import pytest
from nvcc_mark import needs_nvcc

from cudanalyst import players
from cudanalyst.api import parse_run
from cudanalyst.api.spec import METRICS, Metric
from cudanalyst.outcomes import LABELS, METRIC_THRESHOLD, Label, reaches
from cudanalyst.players import FeedbackTool
from cudanalyst.report import compute
from cudanalyst.report.demo import demo_spec
from cudanalyst.store import open_store
from cudanalyst.tasks import get_task
from cudanalyst.trajectory import FrozenProgram
from cudanalyst.trajectory.openevolve import player_for_artifact


def linter_report(facts) -> str:
    """The fourth tool's function: it reads the same facts as the built-in tools."""
    syncs = facts.source.count("__syncthreads")
    return f"Linter report: task {facts.task.name}, {syncs} barrier(s), build {'ok' if facts.compiled.ok else 'failed'}"


@pytest.fixture
def four_tools(monkeypatch):
    linter = FeedbackTool("linter", f"{__name__}:linter_report", r"lint|clang.?tidy")
    monkeypatch.setattr(players, "TOOLS", (*players.TOOLS, linter))
    return linter


def test_the_registry_lists_the_three_tools_in_player_order():
    assert players.tool_names() == ["debugger", "analyzer", "profiler"]
    # importers try the broad debugger words last
    assert [p for _, p in players.artifact_rules()] == ["analyzer", "profiler", "debugger"]


def test_a_fourth_tool_is_recognised_by_the_importer(four_tools):
    assert player_for_artifact("clang_tidy_log") == "linter"
    assert player_for_artifact("lint") == "linter"
    assert player_for_artifact("compile_log") == "debugger"  # the others keep their rules


def test_a_fourth_tool_is_a_default_player_of_the_demo(four_tools):
    run = parse_run(demo_spec(), "demo")
    assert run.spec.players == ["debugger", "analyzer", "profiler", "linter"]


@needs_nvcc
def test_a_fourth_tool_reports_on_a_frozen_program_and_reaches_the_prompt(four_tools, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_CACHE", str(tmp_path / "cache"))
    from cudanalyst.runner.shard import fill_feedback
    from cudanalyst.runner.units import UnitStore

    gemm = get_task("gemm")
    spec = demo_spec(output_uri=str(tmp_path))
    spec["spec"]["players"] = ["debugger", "linter"]
    run = parse_run(spec, "spec")
    program = FrozenProgram(program_id="gemm-g0-p0", task="gemm", generation=0, source=gemm.baseline_source,
                            feedback={"debugger": "recorded"})
    store = UnitStore(open_store(str(tmp_path / "run")))
    [filled] = fill_feedback(run, [program], {program.program_id}, store)
    assert filled.feedback["debugger"] == "recorded"  # recorded reports win
    assert filled.feedback["linter"] == linter_report_text(gemm)
    stored = store.store.get_json("feedback/gemm-g0-p0.json")["reports"]
    assert set(stored) == {"debugger", "analyzer", "profiler", "linter"}
    assert "Not run: no GPU" in stored["profiler"]


def linter_report_text(task) -> str:
    return f"Linter report: task gemm, {task.baseline_source.count('__syncthreads')} barrier(s), build ok"


def test_an_unknown_task_gets_a_no_report_line_from_every_tool(four_tools):
    from cudanalyst.runner.kernels.feedback.reports import frozen_program_reports

    out = frozen_program_reports("no-such-task", "", None, gpu=False)
    assert set(out) == {"debugger", "analyzer", "profiler", "linter"}
    assert all(text.startswith("No report: ") for text in out.values())


def test_labels_and_metrics_come_from_the_label_enum():
    assert LABELS == ("fail", "compile", "pass", "fast") == tuple(Label)
    assert compute.LABELS is LABELS
    assert tuple(METRIC_THRESHOLD) == get_args(Metric)  # every metric a spec may name, `fast` (older name) too
    assert METRICS == ("compiled", "pass", "fastVsBaseline", "fastVsFrozen")  # a new spec's default: both fast
    assert [METRIC_THRESHOLD[m] for m in METRICS] == [Label.COMPILE, Label.PASS, Label.FAST, Label.FAST]
    assert reaches(Label.FAST, "compiled") and reaches(Label.PASS, "pass") and not reaches(Label.PASS, "fast")
    assert sorted(Label, key=lambda x: x.rank) == list(Label) and Label.COMPILE < Label.PASS
