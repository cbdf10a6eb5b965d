"""The feedback policy (issue 30): its document, one test per gate rule, learning it from the shipped study's run
folders, the command's bad input, and the recorder's gate on OpenEvolve's own prompt builder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cudanalyst.api import SpecError
from cudanalyst.api.policy import ComponentRule, Evidence, PolicySpec, StateRule, load_policy, parse_policy
from cudanalyst.gating import gate, program_state, withheld_count

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "docs" / "results" / "study-2026-11-30" / "runs"
REPORTS = {"debugger": "Debugger report: it crashed at line 3", "analyzer": "Analyzer report: 40 registers",
           "profiler": "Profiler report: 12% of peak bandwidth"}


def policy(**states: dict[str, dict[str, Any]]) -> PolicySpec:
    """A policy with these rules: {state: {component: {show, form}}}."""
    return PolicySpec(states={s: StateRule(components=[ComponentRule(component=c, **r) for c, r in rules.items()])
                              for s, rules in states.items()})


def ev(low: float, high: float, holm: bool = True) -> Evidence:
    return Evidence(run="r", metric="pass", index="debugger", value=(low + high) / 2, low=low, high=high,
                    level="program", units=10, holm=holm)


# ---- a program's state, from its own evaluation --------------------------------------------------------------


@pytest.mark.parametrize("metrics, state", [
    ({"compiled": 0.0, "contract": 1.0, "gpu_evaluated": 1.0}, "broken"),
    ({"compiled": 1.0, "contract": 0.0, "gpu_evaluated": 1.0, "correct": 1.0}, "broken"),
    ({"compiled": 1.0, "contract": 1.0, "gpu_evaluated": 0.0}, "unverified"),
    ({"compiled": 1.0, "contract": 1.0, "gpu_evaluated": 1.0, "correct": 0.0}, "wrong"),
    ({"compiled": 1.0, "contract": 1.0, "gpu_evaluated": 1.0, "correct": 1.0, "speedup": 0.8}, "correct"),
    ({"compiled": 1.0, "contract": 1.0, "gpu_evaluated": 1.0, "correct": 1.0}, "correct"),
    ({"compiled": 1.0, "contract": 1.0, "gpu_evaluated": 1.0, "correct": 1.0, "speedup": 1.7}, "fast"),
    ({"compiled": True, "correct": True, "speedup": 2.0}, "fast"),  # an imported trajectory's booleans
    ({}, "broken"),
])
def test_the_state_comes_from_the_programs_own_metrics(metrics: dict[str, Any], state: str) -> None:
    assert program_state(metrics)[0] == state


# ---- the gate rules ----------------------------------------------------------------------------------------


def test_rule_no_policy_shows_every_report_raw() -> None:
    decisions = gate(None, "broken", REPORTS)
    assert [(d.artifact, d.shown, d.form) for d in decisions] == [(k, True, "raw") for k in REPORTS]


def test_rule_a_withheld_component_is_left_out_in_its_state_only() -> None:
    p = policy(broken={"profiler": {"show": False, "reason": "lowers compiled"}})
    broken = {d.artifact: d for d in gate(p, "broken", REPORTS)}
    assert not broken["profiler"].shown and "lowers compiled" in broken["profiler"].reason
    assert broken["debugger"].shown and broken["analyzer"].shown
    assert all(d.shown for d in gate(p, "correct", REPORTS))  # another state: its own (here none) rules


def test_rule_a_state_without_a_rule_and_a_component_without_an_entry_keep_the_default() -> None:
    p = policy(wrong={"debugger": {"show": False}})
    wrong = {d.artifact: d for d in gate(p, "wrong", REPORTS)}
    assert wrong["analyzer"].shown and wrong["analyzer"].form == "raw" and "default" in wrong["analyzer"].reason
    assert all(d.shown and d.form == "raw" for d in gate(p, "fast", REPORTS))


def test_rule_a_summary_form_is_asked_for_shown_components_only() -> None:
    p = policy(correct={"profiler": {"form": "summary"}, "debugger": {"show": False, "form": "summary"}})
    correct = {d.artifact: d for d in gate(p, "correct", REPORTS)}
    assert correct["profiler"].shown and correct["profiler"].form == "summary"
    assert not correct["debugger"].shown and correct["debugger"].form == "raw"


def test_rule_an_artifact_that_is_not_a_player_is_shown_as_is() -> None:
    p = policy(broken={c: {"show": False} for c in REPORTS})
    decisions = {d.artifact: d for d in gate(p, "broken", {**REPORTS, "stderr_tail": "x"})}
    assert decisions["stderr_tail"].shown and decisions["stderr_tail"].component is None
    assert not any(decisions[c].shown for c in REPORTS)


def test_rule_the_random_control_withholds_as_many_components_as_the_policy_drawn_per_program() -> None:
    from cudanalyst.gating import decisions, withheld_components

    p = policy(broken={"profiler": {"show": False}, "analyzer": {"show": False}})
    assert withheld_count(p, "broken") == 2 and withheld_count(p, "fast") == 0
    sources = [f"__global__ void k{i}() {{}}" for i in range(40)]
    draws = [decisions(p, "broken", REPORTS, "random", 3, s) for s in sources]
    assert all(sum(not d.shown for d in ds) == 2 for ds in draws)
    assert len({tuple(d.shown for d in ds) for ds in draws}) == 3  # every pair gets drawn, not the policy's one
    # One program, one draw: its evaluation (which leaves the drawn tools unrun) and each of its children's prompts
    # agree, whatever the line ends OpenEvolve's file round trip gives it.
    assert decisions(p, "broken", REPORTS, "random", 3, sources[7]) == draws[7]
    assert (withheld_components(p, "broken", "random", 3, "a\nb\n")
            == withheld_components(p, "broken", "random", 3, "a\r\nb\r\n"))
    assert {withheld_components(p, "broken", "random", seed, sources[0]) for seed in range(20)} != {
        withheld_components(p, "broken", "random", 0, sources[0])}  # the recording's seed draws too
    assert all(d.shown for d in decisions(p, "fast", REPORTS, "random", 3, sources[0]))
    # The policy's own rule does not draw.
    assert withheld_components(p, "broken") == {"profiler", "analyzer"} and not withheld_components(p, "fast")


def test_rule_a_component_whose_tool_was_not_run_is_withheld_and_says_why() -> None:
    from cudanalyst.gating import decisions

    p = policy(broken={"profiler": {"show": False}})
    made = decisions(p, "broken", {"debugger": "d", "analyzer": "a"}, not_run=["profiler"])
    assert [(d.artifact, d.shown) for d in made] == [("debugger", True), ("analyzer", True), ("profiler", False)]
    assert "not run" in made[-1].reason


def test_rule_noise_is_never_a_signal() -> None:
    from cudanalyst.policy import _component_rule

    assert ev(-0.2, 0.3).sign() == 0
    assert ev(-0.3, -0.1).sign() == -1 and ev(0.1, 0.3).sign() == 1
    assert ev(-0.3, -0.1, holm=False).sign() == 0 and ev(-0.3, -0.1, holm=False).sign(corrected=False) == -1
    assert not _component_rule("profiler", "pass", "wrong", [ev(-0.3, -0.1)], True).show
    assert _component_rule("profiler", "pass", "wrong", [ev(0.1, 0.3)], True).show
    kept = _component_rule("profiler", "pass", "wrong", [ev(-0.3, -0.1, holm=False)], True)
    assert kept.show and "not after Holm" in kept.reason
    conflict = _component_rule("profiler", "pass", "wrong", [ev(-0.3, -0.1), ev(0.1, 0.3)], True)
    assert conflict.show and "disagree" in conflict.reason
    nothing = _component_rule("profiler", "pass", "wrong", [], True)
    assert nothing.show and "nothing was measured" in nothing.reason


# ---- the document ------------------------------------------------------------------------------------------


def test_the_document_is_versioned_typed_and_names_a_bad_field(tmp_path: Path) -> None:
    doc = {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "FeedbackPolicy", "metadata": {"name": "p"},
           "spec": {"states": {"broken": {"components": [{"component": "profiler", "show": False}]}}}}
    assert not parse_policy(doc).spec.rule("broken", "profiler").show
    bad = json.loads(json.dumps(doc))
    bad["spec"]["states"]["broken"]["components"][0]["component"] = "linter"
    with pytest.raises(SpecError, match=r"spec: states.broken: component 'linter' is not one of players"):
        parse_policy(bad, "p.yaml")
    bad = json.loads(json.dumps(doc))
    bad["spec"]["states"]["hungry"] = {"components": []}
    with pytest.raises(SpecError, match="spec: states: hungry not a program state"):
        parse_policy(bad, "p.yaml")
    bad = json.loads(json.dumps(doc))
    bad["spec"]["states"]["broken"]["components"][0]["form"] = "haiku"
    with pytest.raises(SpecError, match=r"spec.states.broken.components\[0\].form"):
        parse_policy(bad, "p.yaml")


# ---- learning it from the shipped study --------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudanalyst", "policy", *args], capture_output=True, text=True,
                          timeout=600)


def test_the_policy_of_the_shipped_study_cites_its_evidence_and_keeps_the_default_on_noise(tmp_path: Path) -> None:
    out = tmp_path / "policy.yaml"
    proc = cli(*map(str, sorted(STUDY.iterdir())), "-o", str(out), "--name", "study")
    assert proc.returncode == 0, proc.stderr
    p = load_policy(out).spec
    assert set(p.states) == {"broken", "unverified", "wrong", "correct", "fast"}
    assert p.states["broken"].metric == "compiled" and p.states["wrong"].metric == "pass"
    assert p.states["correct"].metric == "fast"
    assert len(p.sources) == 8
    for state, rule in p.states.items():
        for c in rule.components:
            moved = [e for e in c.evidence if e.sign()]
            # A choice away from the default rests on an interval that excludes 0 after Holm, and only then.
            if not c.show or c.form != "raw":
                assert moved, (state, c)
            if state != "unverified":  # the study's programs were all evaluated on a GPU
                assert c.evidence and all(e.level == "program" for e in c.evidence)
                assert all(e.low is not None for e in c.evidence if e.units > 1)  # one program: no interval
            if not moved:
                assert c.show and c.form == "raw" and "default" in c.reason
    assert p.models.planner is None and "default" in p.models.reason
    assert {e.run for e in p.models.evidence} == {"study-transfer-0-5b - study-raw-0-5b",
                                                  "study-transfer-gemma - study-self-gemma"}
    # Uncorrected, the same numbers move something: the Holm step is what keeps those few out.
    loose = tmp_path / "loose.yaml"
    assert cli(*map(str, sorted(STUDY.iterdir())), "-o", str(loose), "--correction", "none").returncode == 0
    lp = load_policy(loose).spec
    moved = [(s, c.component) for s, r in lp.states.items() for c in r.components
             if any(e.sign(False) for e in c.evidence if " - " not in e.run)]
    assert moved and all(any(not e.holm for e in c.evidence) for s, r in lp.states.items() for c in r.components
                         if (s, c.component) in moved)


def test_a_report_json_names_its_run_folder(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    proc = cli(str(STUDY / "study-raw-0-5b" / "report" / "report.json"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert load_policy(out).spec.sources == [str(STUDY / "study-raw-0-5b")]


@pytest.mark.parametrize("case", ["missing", "unfinished", "wrong-file", "not-a-run", "twice"])
def test_bad_input_exits_2_naming_it_and_writes_nothing(tmp_path: Path, case: str) -> None:
    run = tmp_path / "study-raw-0-5b"
    shutil.copytree(STUDY / "study-raw-0-5b", run)
    if case == "missing":
        args, named = [str(tmp_path / "nope")], "nope: no such run folder"
    elif case == "unfinished":
        plan = json.loads((run / "plan.json").read_text())
        (run / "plan.json").write_text(json.dumps({**plan, "units": plan["units"] + 5}))
        args, named = [str(run)], f"plan.json: unfinished run: {plan['units']} of {plan['units'] + 5} units"
    elif case == "wrong-file":
        args, named = [str(run / "spec.json")], "spec.json: not a run folder or its report/report.json"
    elif case == "not-a-run":
        args, named = [str(tmp_path)], "is not a run folder: it has no spec.json"
    else:
        args, named = [str(run), str(run / "report" / "report.json")], "the same run given twice: study-raw-0-5b"
    out = tmp_path / "out.yaml"
    proc = cli(*args, "-o", str(out))
    assert proc.returncode == 2 and named in proc.stderr, proc.stderr
    assert not out.exists()


# ---- the recording's spec ----------------------------------------------------------------------------------


def rec_doc(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "TrajectoryRecording", "metadata": {"name": "r"},
            "spec": {"tasks": ["conv2d"], "model": {"model": "m"}, "output": {"uri": "/tmp/x"}, **spec}}


def test_a_policy_that_names_a_planner_needs_the_recordings_planner() -> None:
    from cudanalyst.api.recording import parse_recording

    pol = {"models": {"planner": "big", "coder": "small"}}
    with pytest.raises(SpecError, match="spec: planner: the policy names a planner"):
        parse_recording(rec_doc(policy=pol), "r.yaml")
    rec = parse_recording(rec_doc(policy=pol, planner={"model": "big"}))
    assert rec.spec.policy is not None and rec.spec.policy.models.planner == "big"


def test_an_ungated_recordings_spec_json_is_what_it_was_before_gating_existed() -> None:
    from cudanalyst.api.recording import parse_recording
    from cudanalyst.recording import recorded_spec

    assert not {"policy", "planner", "gating"} & set(recorded_spec(parse_recording(rec_doc())))
    gated = recorded_spec(parse_recording(rec_doc(policy={}, gating="random")))
    assert gated["gating"] == "random" and gated["policy"]["players"] == ["debugger", "analyzer", "profiler"]


# ---- the recorder's gate on OpenEvolve's prompt builder ----------------------------------------------------


def test_the_gate_leaves_withheld_reports_out_of_openevolves_prompt_and_logs_why(tmp_path: Path) -> None:
    pytest.importorskip("openevolve", reason="OpenEvolve is the `record` extra")
    from openevolve.config import PromptConfig
    from openevolve.prompt.sampler import PromptSampler

    from cudanalyst.runner.record.gate import GateSettings, gated_prompt

    p = policy(broken={"profiler": {"show": False}, "analyzer": {"show": False}})
    # No server at this port: the token counts fall back to the estimate, and say so.
    s = GateSettings(policy=p, gating="policy", seed=0, log_path=str(tmp_path / "gating.jsonl"),
                     coder_url="http://127.0.0.1:9/v1", coder_model="m")
    sampler = PromptSampler(PromptConfig(include_artifacts=True, max_artifact_bytes=65536,
                                         artifact_security_filter=False))
    kwargs = dict(current_program="__global__ void k() {}", parent_program="", program_metrics={"compiled": 0.0},
                  previous_programs=[], top_programs=[], inspirations=[], language="cuda", evolution_round=4,
                  diff_based_evolution=False, program_artifacts=dict(REPORTS))
    prompt = gated_prompt(s, lambda **kw: sampler.build_prompt(**kw), kwargs)
    assert "### debugger" in prompt["user"] and REPORTS["debugger"] in prompt["user"]
    for withheld in ("analyzer", "profiler"):
        assert f"### {withheld}" not in prompt["user"] and REPORTS[withheld] not in prompt["user"]
    log = [json.loads(line) for line in (tmp_path / "gating.jsonl").read_text().splitlines()]
    assert log == [prompt["gating"]]
    entry = log[0]
    assert entry["iteration"] == 4 and entry["state"] == "broken" and entry["withheld"] == ["analyzer", "profiler"]
    assert entry["savedTokens"] > 0 and entry["tokensExact"] is False
    assert entry["ungatedPromptTokens"] - entry["promptTokens"] == entry["savedTokens"]
    # A correct parent: no rule, so every report (the default).
    again = gated_prompt(s, lambda **kw: sampler.build_prompt(**kw),
                         {**kwargs, "program_metrics": {"compiled": 1.0, "gpu_evaluated": 1.0, "correct": 1.0}})
    assert all(f"### {c}" in again["user"] for c in REPORTS) and again["gating"]["savedTokens"] == 0
    assert entry["notRun"] == [] and again["gating"]["notRun"] == []


def test_under_run_tools_shown_a_report_never_made_is_logged_not_run_and_never_stands_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The evaluator left the profiler unrun for a broken parent (runTools: shown): the prompt has no profiler section,
    # no stand-in text, and the log says which report was never made (its tokens are not in savedTokens).
    pytest.importorskip("openevolve", reason="OpenEvolve is the `record` extra")
    from openevolve.config import PromptConfig
    from openevolve.prompt.sampler import PromptSampler

    from cudanalyst.runner.record.gate import GateSettings, gated_prompt, not_run

    p = policy(broken={"profiler": {"show": False}, "analyzer": {"show": False}})
    s = GateSettings(policy=p, gating="policy", seed=0, log_path=str(tmp_path / "gating.jsonl"),
                     coder_url="http://127.0.0.1:9/v1", coder_model="m", run_tools="shown")
    broken = {"compiled": 0.0}
    assert not_run(s, broken, "x") == {"profiler", "analyzer"}
    assert not_run(s, {"compiled": 1.0, "gpu_evaluated": 1.0, "correct": 1.0}, "x") == set()
    assert not_run(GateSettings(**{**s.__dict__, "run_tools": "all"}), broken, "x") == set()
    assert not_run(None, broken, "x") == set()
    sampler = PromptSampler(PromptConfig(include_artifacts=True, max_artifact_bytes=65536,
                                         artifact_security_filter=False))
    kwargs = dict(current_program="__global__ void k() {}", parent_program="", program_metrics=broken,
                  previous_programs=[], top_programs=[], inspirations=[], language="cuda", evolution_round=2,
                  diff_based_evolution=False, program_artifacts={"debugger": REPORTS["debugger"]})
    prompt = gated_prompt(s, lambda **kw: sampler.build_prompt(**kw), kwargs)
    assert REPORTS["debugger"] in prompt["user"] and "### profiler" not in prompt["user"]
    assert "### analyzer" not in prompt["user"]
    entry = prompt["gating"]
    assert entry["notRun"] == ["analyzer", "profiler"] and entry["withheld"] == ["analyzer", "profiler"]
    assert entry["shown"] == ["debugger"] and entry["savedTokens"] == 0
    # The settings reach the evaluator's process through the same file as the gate's.
    from cudanalyst.runner.record import gate as gate_module

    (tmp_path / "gating.json").write_text(s.to_json())
    monkeypatch.setenv(gate_module.ENV, str(tmp_path / "gating.json"))
    assert gate_module.current() == s


def test_gating_lines_sum_a_recordings_log(tmp_path: Path) -> None:
    from cudanalyst.gating import gating_lines
    from cudanalyst.store import open_store

    store = open_store(tmp_path)
    lines = [{"iteration": i, "state": "broken", "shown": ["debugger"], "withheld": ["analyzer", "profiler"],
              "savedTokens": 100, "tokensExact": True, **({"notRun": ["profiler"]} if i == 2 else {})} for i in (1, 2)]
    store.put_bytes("openevolve/conv2d/gating.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode())
    out = gating_lines(store, ["conv2d", "gemm"])
    assert "gating conv2d: 2 prompts (parents broken 2)" in out[0] and "200 prompt tokens saved" in out[0]
    assert "analyzer shown 0/withheld 2," in out[0] and "debugger shown 2/withheld 0," in out[0]
    assert "profiler shown 0/withheld 2 (not run 1);" in out[0]
    assert out[1] == "gating gemm: no log (no iteration built a prompt)"


def test_the_recorder_inlines_a_policy_file(tmp_path: Path) -> None:
    from cudanalyst.api.recording import parse_recording
    from cudanalyst.runner.local.commands import with_policy

    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "FeedbackPolicy",
                                 "metadata": {"name": "p"},
                                 "spec": {"states": {"wrong": {"components": [{"component": "analyzer",
                                                                                "show": False}]}}}}))
    rec = with_policy(parse_recording(rec_doc()), str(f))
    assert rec.spec.policy is not None and not rec.spec.policy.rule("wrong", "analyzer").show
    f.write_text(yaml.safe_dump({"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "FeedbackPolicy",
                                 "metadata": {"name": "p"}, "spec": {"models": {"planner": "big"}}}))
    with pytest.raises(SystemExit) as exc:
        with_policy(parse_recording(rec_doc()), str(f))
    assert exc.value.code == 2


def test_a_resumed_task_keeps_the_gating_log_up_to_its_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("openevolve", reason="OpenEvolve is the `record` extra")
    from cudanalyst.api.recording import parse_recording
    from cudanalyst.runner.record.evolve import GATING_LOG, gating_settings, restore_gating_log
    from cudanalyst.store import open_store

    store = open_store(tmp_path / "store")
    store.put_bytes(GATING_LOG, "".join(json.dumps({"iteration": i}) + "\n" for i in (1, 2, 3, 4)).encode())
    local = tmp_path / "gating.jsonl"
    restore_gating_log(store, local, 2)  # checkpoint 2: iterations 3 and 4 were cut short and run again
    assert [json.loads(x)["iteration"] for x in local.read_text().splitlines()] == [1, 2]
    restore_gating_log(open_store(tmp_path / "empty"), local, 0)
    assert local.read_text() == ""

    assert gating_settings(parse_recording(rec_doc()), tmp_path, "http://c/v1", "c", None) is None  # ungated
    planned = parse_recording(rec_doc(policy={"models": {"planner": "big"}}, planner={"model": "big"}))
    s = gating_settings(planned, tmp_path, "http://c/v1", "c", ("http://p/v1", "big"))
    assert (s.planner_url, s.planner_model, s.coder_url, s.log_path) == ("http://p/v1", "big", "http://c/v1",
                                                                         str(tmp_path / GATING_LOG))
    assert type(s).from_json(s.to_json()) == s  # what the workers read back


def test_at_the_task_level_the_units_are_the_tasks() -> None:
    from cudanalyst.policy import learn, load_finished

    p = learn([load_finished(str(STUDY / "study-raw-0-5b"))], level="task", correction="none").spec
    evidence = [e for r in p.states.values() for c in r.components for e in c.evidence if " - " not in e.run]
    assert evidence and all(e.level == "task" and e.units <= 4 for e in evidence)
    assert p.level == "task" and p.tasks == ["atax", "conv2d", "gemm", "jacobi-2d"]


def test_held_out_tasks_are_left_out_of_the_learning_and_named() -> None:
    from cudanalyst.policy import learn, load_finished

    run = load_finished(str(STUDY / "study-raw-0-5b"))
    whole = learn([run], correction="none").spec
    held = learn([run], correction="none", held_out=["gemm", "gemm"]).spec
    assert held.tasks == ["atax", "conv2d", "jacobi-2d"] and held.held_out == ["gemm"]
    units = {(s, c.component, e.run): e.units for s, r in whole.states.items() for c in r.components
             for e in c.evidence}
    fewer = [(e.units, units[(s, c.component, e.run)]) for s, r in held.states.items() for c in r.components
             for e in c.evidence if (s, c.component, e.run) in units]
    assert fewer and all(a <= b for a, b in fewer) and any(a < b for a, b in fewer)  # gemm's programs are gone
    assert len(run.records) > 0 and all(r.task for r in run.records)  # the run itself is left as it was


@pytest.mark.parametrize("hold, named", [
    ("gemm,bicgg", "--hold-out: bicgg: no outcome of the runs has this task"),
    ("atax,conv2d,gemm,jacobi-2d", "are all the runs' tasks: nothing left to learn from"),
])
def test_a_hold_out_that_names_no_task_of_the_runs_or_every_task_exits_2(tmp_path: Path, hold: str,
                                                                          named: str) -> None:
    out = tmp_path / "out.yaml"
    proc = cli(str(STUDY / "study-raw-0-5b"), "--hold-out", hold, "-o", str(out))
    assert proc.returncode == 2 and named in proc.stderr, proc.stderr
    assert not out.exists()


def test_the_shipped_policies_load_and_cite_evidence() -> None:
    # examples/policy/ is not applied to a cluster (a policy is a document the CLI and a recording's spec read).
    from cudanalyst.api.policy import load_policy

    files = sorted((Path(__file__).resolve().parents[1] / "examples" / "policy").glob("study-*.yaml"))
    assert len(files) >= 2, files
    for path in files:
        policy = load_policy(path)
        assert policy.kind == "FeedbackPolicy" and policy.spec.states, path
