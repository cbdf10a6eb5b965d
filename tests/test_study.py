"""`cudanalyst study`: the paper's findings across run folders (src/cudanalyst/analysis/study.py).

The main run is real data: the 2,640 outcomes of examples/h200-outcomes.yaml on the H200
(docs/results/h200-outcomes-2026-11-30/), whose spec then was examples/study/main.yaml under another name. The other
runs of the study have not run yet: where a test needs them it builds SYNTHETIC run folders (a test double,
labelled so in each test) from the main run's records with labels rewritten.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from cudanalyst.analysis.study import (
    MARGIN,
    StudyError,
    _programs_md,
    finding_verdicts,
    load_specs,
    mark_holm,
    readme,
    standing,
    study,
    verdict,
)
from cudanalyst.api import load_run
from cudanalyst.cli import main as cli
from cudanalyst.report.compute import attribution
from cudanalyst.store import open_store

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "study"
PILOT = ROOT / "docs" / "results" / "h200-outcomes-2026-11-30"
PLAYERS = ["debugger", "analyzer", "profiler"]
RANK = {"fail": 0, "compile": 1, "pass": 2, "fast": 3}


def pilot_records() -> list[dict]:
    with gzip.open(PILOT / "outcomes.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def write_run(folder: Path, spec_file: Path, records: list[dict], name: str | None = None) -> Path:
    """A run folder as the runner leaves it: spec.json (the whole AttributionRun) and outcomes/<key>.json."""
    run = load_run(str(spec_file))
    data = run.to_dict()
    if name:
        data["metadata"]["name"] = name
    target = folder / data["metadata"]["name"]
    (target / "outcomes").mkdir(parents=True)
    (target / "spec.json").write_text(json.dumps(data))
    for r in records:
        (target / "outcomes" / f"{r['key']}.json").write_text(json.dumps(r))
    return target


@pytest.fixture(scope="module")
def pilot_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The H200 run's own spec (examples/h200-outcomes.yaml as it was on 2026-11-30: main.yaml named h200-outcomes;
    # that file now replays the real example) and records.
    return write_run(tmp_path_factory.mktemp("runs"), STUDY / "main.yaml", pilot_records(), name="h200-outcomes")


@pytest.fixture(scope="module")
def main_only(pilot_folder: Path) -> dict:
    specs = load_specs(STUDY)
    return study(specs, {"main": open_store(str(pilot_folder))}, attribution)


def best_of_k(records: list[dict], arm: str, coalition: list[str], metric: str) -> dict[str, int]:
    need = {"compiled": 1, "pass": 2, "fast": 3}[metric]
    out: dict[str, int] = {}
    for r in records:
        if r["arm"] == arm and r["coalition"] == coalition:
            out[r["programId"]] = max(out.get(r["programId"], 0), int(RANK[r["label"]] >= need))
    return out


def row(result: dict, claim: str, metric: str, copies: str = "count") -> dict:
    return next(r for r in result["rows"] if r.get("claim") == claim and r["metric"] == metric
                and r["copies"] == copies)


def test_a_comparison_is_the_mean_paired_difference_of_best_of_k_rates(main_only: dict) -> None:
    records = pilot_records()
    for metric in ("compiled", "pass", "fast"):
        full = best_of_k(records, "coalition", PLAYERS, metric)
        dummy = best_of_k(records, "dummyPlan", [], metric)
        expected = sum(full[p] - dummy[p] for p in full) / len(full)
        r = row(main_only, "real-feedback-vs-dummy-plan", metric)
        assert r["value"] == pytest.approx(expected)
        assert r["programs"] == len(full) == 48 and r["unpaired"] == 0
        assert r["low"] <= r["value"] <= r["high"]
        assert r["verdict"] == verdict(+1, r["low"], r["high"])


def test_finding_1_shows_every_arm_with_copies_counted_and_left_out(main_only: dict) -> None:
    report = json.loads((PILOT / "report.json").read_text())
    arms = {a["arm"]: a for a in main_only["arms"] if "arm" in a}
    for arm, counts in report["copies"]["byArm"].items():
        if arm == "coalition":
            continue
        a = arms[f"main: {arm}"]
        assert (a["copies"], a["units"]) == (counts["unchanged"], counts["units"])
        # Leaving copies out can only lower a rate whose copies pass (dummyPlan: 112 copies of 240 units).
        assert a["pass/exclude"]["programs"] <= a["pass/count"]["programs"]
    dummy = arms["main: dummyPlan"]
    assert dummy["pass/exclude"]["value"] < dummy["pass/count"]["value"]
    rows = [r for r in main_only["rows"] if r.get("claim") == "real-feedback-vs-dummy-plan"]
    assert {r["copies"] for r in rows} == {"count", "exclude"}


def test_claims_about_plan_content_are_read_with_copies_left_out_too(main_only: dict) -> None:
    # Findings 1 and 4 ask what a plan's content does; coders that copy their input at different rates (the 0.5B
    # about half the time, Gemma almost never) would otherwise compare copying. Finding 3 compares one coder.
    readings: dict[int, set[str]] = {}
    for r in main_only["rows"]:
        if r.get("claim"):
            readings.setdefault(r["finding"], set()).add(r["copies"])
    assert readings[1] == readings[4] == {"count", "exclude"}
    assert readings[3] == {"count"}


def test_a_copies_left_out_row_says_how_many_of_the_counted_programs_remain(main_only: dict) -> None:
    counted = row(main_only, "real-feedback-vs-dummy-plan", "pass")
    left = row(main_only, "real-feedback-vs-dummy-plan", "pass", "exclude")
    assert left["ofPrograms"] == counted["programs"] == 48
    # Programs whose dummy-plan cell held only copies drop out (47 % copies in that arm).
    assert 0 < left["programs"] < 48
    assert _programs_md(left) == f"{left['programs']} of 48 (in the others, some cell held only copies)"
    assert _programs_md(counted) == "48"


def test_finding_2_is_the_reports_own_attribution(main_only: dict) -> None:
    report = json.loads((PILOT / "report.json").read_text())
    table = main_only["finding2"]["table"]
    checked = 0
    for game in report["attribution"]["games"]:
        for kind, part in (("banzhaf", game["banzhaf"]), ("interaction", game["interactions"])):
            for index, est in part.items():
                mine = next(t for t in table if t["metric"] == game["metric"] and t["generation"] ==
                            game["generation"] and t["kind"] == kind and t["index"] == index
                            and t["unit"] == game["unit"])
                assert mine["value"] == pytest.approx(est["value"])
                assert mine["units"] == game["units"]
                checked += 1
    assert checked == 72  # 3 metrics x (3 generations + pooled) x (3 values + 3 interactions)
    # The other level of each game: per generation over tasks, pooled over programs; as many again.
    assert len(table) == 2 * checked
    assert {(t["generation"] is None, t["unit"]) for t in table} == {(False, "program"), (False, "task"),
                                                                     (True, "program"), (True, "task")}
    rows = main_only["finding2"]["rows"]
    assert {r["measured"] for r in rows} >= {"Banzhaf value of the analyzer", "Banzhaf value of the profiler"}


def test_runs_not_there_make_their_rows_not_run_and_the_name_is_noted(main_only: dict) -> None:
    r = row(main_only, "planning-without-feedback-vs-implicit", "pass")
    assert r["verdict"] == "not run" and "implicit-1.5b" in r["reason"] and "not there" in r["reason"]
    assert all(r["verdict"] == "not run" for r in main_only["rows"] if r["finding"] in (3, 4))
    notes = main_only["runs"]["main"]["notes"]
    assert notes and "h200-outcomes" in notes[0] and "another draw" in notes[0]


def synthetic_0_5b(runs: Path) -> None:
    """SYNTHETIC (test double): raw-0.5b and summary-0.5b built from the main run's game records, renamed; the
    summary run's candidates pass wherever some feedback was shown, so its effect is large and known."""
    records = [r for r in pilot_records() if r["arm"] == "coalition"]
    for role, boost in (("raw-0.5b", False), ("summary-0.5b", True)):
        name = load_run(str(STUDY / f"{role}.yaml")).metadata.name
        mine = []
        for r in records:
            r = dict(r, run=name)
            if boost and r["coalition"]:
                r.update(label="pass", reason="", unchanged=False)
            mine.append(r)
        write_run(runs, STUDY / f"{role}.yaml", mine)


def test_cli_writes_the_tables_with_synthetic_side_runs(tmp_path: Path, pilot_folder: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    synthetic_0_5b(runs)
    (runs / "study-raw-0-5b" / "report").mkdir()
    (runs / "study-raw-0-5b" / "report" / "report.html").write_text("<html></html>")
    out = tmp_path / "docs" / "study"
    code = cli(["study", str(STUDY), "--runs", str(runs), "--run", f"main={pilot_folder}", "--out", str(out),
                "--date", "2026-12-01"])
    assert code == 0, capsys.readouterr().err
    data = json.loads((out / "study.json").read_text())
    helps = row(data, "summary-helps-weak-model", "pass")
    assert helps["verdict"] == "agrees" and helps["low"] > 0 and helps["programs"] == 48
    assert row(data, "transfer-within-family", "pass")["verdict"] == "not run"
    # The diff-in-diff needs summary-1.5b, which is not there.
    assert "summary-1.5b" in row(data, "summary-helps-weak-more", "pass")["reason"]
    text = (out / "README.md").read_text()
    assert "## Finding 4: Cross-model plan transferability" in text
    assert "[report](../../runs/study-raw-0-5b/report/report.html)" in text
    assert (STUDY / "transfer-gemma.yaml").read_text().strip() in text  # the exact specs, copied
    # Holm over the page's family (findings 1, 3, 4 and finding 2's indices, both levels): a row marked yes is one
    # whose p-value passes the step-down.
    tested = [r for r in data["rows"] + data["finding2"]["table"] if r.get("pValue") is not None]
    assert data["holmFamily"] == len(tested) > 0 and all("holm" in r for r in tested)
    assert sum(data["holmParts"].values()) == len(tested)
    ps, passed = sorted(r["pValue"] for r in tested), 0
    while passed < len(ps) and ps[passed] <= 0.05 / (len(ps) - passed):
        passed += 1
    assert sum(r["holm"] for r in tested) == passed
    assert f"over the page's family, the {len(tested)} intervals of this page that test 0" in text


def test_bad_input_exits_2_naming_the_file_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert cli(["study", str(STUDY), "--runs", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "nowhere: no such folder" in capsys.readouterr().err

    specs = tmp_path / "specs"
    shutil.copytree(STUDY, specs)
    bad = specs / "raw-0.5b.yaml"
    bad.write_text(bad.read_text().replace("seed: 0", "seed: 1"))
    (tmp_path / "runs").mkdir()
    assert cli(["study", str(specs), "--runs", str(tmp_path / "runs"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "raw-0.5b.yaml: spec.sampling.seed differs from" in err and "main.yaml" in err

    assert cli(["study", str(STUDY), "--runs", str(tmp_path / "runs"), "--run", "nosuch=/tmp", "--out",
                str(out)]) == 2
    assert "no role 'nosuch'" in capsys.readouterr().err

    # A run folder made by another spec (SYNTHETIC: implicit planning in raw-0.5b's folder).
    implicit = tmp_path / "implicit.yaml"
    implicit.write_text((STUDY / "raw-0.5b.yaml").read_text().replace("planning: explicit", "planning: implicit"))
    write_run(tmp_path / "runs", implicit, pilot_records()[:10])
    assert cli(["study", str(STUDY), "--runs", str(tmp_path / "runs"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "study-raw-0-5b/spec.json: spec.planning differs from" in err and "raw-0.5b.yaml" in err
    assert not out.exists()  # nothing half-written


@pytest.mark.parametrize(("direction", "low", "high", "expected"), [
    (+1, 0.01, 0.2, "agrees"), (+1, -0.2, -0.01, "disagrees"), (+1, -0.1, 0.1, "inconclusive"),
    (-1, -0.2, -0.01, "agrees"), (-1, 0.01, 0.2, "disagrees"),
    (0, -MARGIN / 2, MARGIN / 2, "agrees"), (0, -0.2, 0.1, "inconclusive"), (0, 0.01, 0.04, "disagrees"),
    (+1, None, None, "inconclusive (no interval)"),
])
def test_verdict_rule(direction: int, low: float | None, high: float | None, expected: str) -> None:
    assert verdict(direction, low, high) == expected


def test_a_run_may_skip_generations_and_pairs_on_the_programs_it_shares(tmp_path: Path, pilot_folder: Path) -> None:
    """SYNTHETIC (test double): raw-0.5b and summary-0.5b at generations 10 and 20 only, from the main run's
    records of those generations; frozen programs are drawn per (seed, task, generation), so they pair."""
    specs = tmp_path / "specs"
    shutil.copytree(STUDY, specs)
    for role in ("raw-0.5b", "summary-0.5b"):
        f = specs / f"{role}.yaml"
        f.write_text(f.read_text().replace("generations: [0, 10, 20]", "generations: [10, 20]"))
    runs = tmp_path / "runs"
    records = [r for r in pilot_records() if r["arm"] == "coalition" and r["generation"] != 0]
    for role in ("raw-0.5b", "summary-0.5b"):
        write_run(runs, specs / f"{role}.yaml", records)
    result = study(load_specs(specs), {"main": open_store(str(pilot_folder)),
                                       **{r: open_store(str(runs / f"study-{r.replace('.', '-')}"))
                                          for r in ("raw-0.5b", "summary-0.5b")}}, attribution)
    same = row(result, "summary-helps-weak-model", "compiled")
    assert same["programs"] == 32 and same["value"] == pytest.approx(0.0, abs=1e-12)  # identical records
    assert same["verdict"] == "inconclusive"


def test_a_stopped_run_is_not_compared_until_it_is_finished(tmp_path: Path, pilot_folder: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """SYNTHETIC (test double): raw-0.5b and summary-0.5b from the main run's records, but summary-0.5b stopped
    half-way (plan.json says 1,920 units, 960 have an outcome). A stopped run's outcomes are the ones that came
    first (failures; correct candidates wait for timing), so its rows must wait for it, not use what is there."""
    runs = tmp_path / "runs"
    synthetic_0_5b(runs)
    stopped = runs / "study-summary-0-5b"
    (stopped / "plan.json").write_text(json.dumps({"units": 1920}))
    for f in sorted((stopped / "outcomes").iterdir())[960:]:
        f.unlink()
    out = tmp_path / "study"
    code = cli(["study", str(STUDY), "--runs", str(runs), "--run", f"main={pilot_folder}", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    data = json.loads((out / "study.json").read_text())
    helps = row(data, "summary-helps-weak-model", "pass")
    assert helps["verdict"] == "not run" and "incomplete: 960 of 1920" in helps["reason"]
    assert data["runs"]["summary-0.5b"]["missing"].startswith("incomplete")
    # A finished run with its plan.json is compared as before.
    (runs / "study-raw-0-5b" / "plan.json").write_text(json.dumps({"units": 1920}))
    assert cli(["study", str(STUDY), "--runs", str(runs), "--run", f"main={pilot_folder}", "--out", str(out)]) == 0
    assert json.loads((out / "study.json").read_text())["runs"]["raw-0.5b"]["missing"] in (None, "")


def test_a_preface_goes_under_the_title_verbatim(tmp_path: Path, pilot_folder: Path) -> None:
    preface = tmp_path / "preface.md"
    preface.write_text("Run on two H200s; **summary runs not yet run.**\n")
    out = tmp_path / "study"
    (tmp_path / "none").mkdir()
    assert cli(["study", str(STUDY), "--runs", str(tmp_path / "none"), "--run", f"main={pilot_folder}",
                "--out", str(out), "--preface", str(preface)]) == 0
    lines = (out / "README.md").read_text().splitlines()
    assert lines[0].startswith("# The paper's four findings") and lines[2] == preface.read_text().strip()
    assert cli(["study", str(STUDY), "--runs", str(tmp_path / "none"), "--run", f"main={pilot_folder}",
                "--out", str(out), "--preface", str(tmp_path / "absent.md")]) == 2


def test_holm_over_the_page_marks_only_what_survives_the_step_down() -> None:
    # 3 p-values: 0.001 <= 0.05/3 passes, 0.03 > 0.05/2 stops the step-down, so 0.04 fails too though < 0.05.
    rows = [{"pValue": 0.04}, {"pValue": 0.001}, {"verdict": "not run"}, {"pValue": 0.03}]
    assert mark_holm(rows, 0.05) == 3
    assert [r.get("holm") for r in rows] == [False, True, None, False]
    easier = [{"pValue": 0.001}, {"pValue": 0.02}, {"pValue": 0.04}]
    mark_holm(easier, 0.05)
    assert [r["holm"] for r in easier] == [True, True, True]


def test_a_folder_resumed_with_more_model_capacity_still_matches_its_role(tmp_path: Path, pilot_folder: Path) -> None:
    # The runner resumes a folder whose model was given a longer context (runs.outcome_spec); the study must read
    # that folder as its role's too. Another model is another spec.
    folder = tmp_path / "h200-outcomes"
    shutil.copytree(pilot_folder, folder)
    spec = json.loads((folder / "spec.json").read_text())
    spec["spec"]["models"]["planner"]["maxModelLen"] = 16384
    (folder / "spec.json").write_text(json.dumps(spec))
    result = study(load_specs(STUDY), {"main": open_store(str(folder))}, attribution)
    assert result["runs"]["main"]["outcomes"] == 2640 and not result["runs"]["main"]["missing"]
    spec["spec"]["models"]["planner"]["model"] = "qwen2.5-coder-0.5b-instruct"
    (folder / "spec.json").write_text(json.dumps(spec))
    with pytest.raises(StudyError, match=r"spec\.models\.planner\.model differs"):
        study(load_specs(STUDY), {"main": open_store(str(folder))}, attribution)


def test_every_comparison_is_reported_over_tasks_too(main_only: dict) -> None:
    records = pilot_records()
    full = best_of_k(records, "coalition", PLAYERS, "pass")
    dummy = best_of_k(records, "dummyPlan", [], "pass")
    task = {r["programId"]: r["task"] for r in records}
    per_task: dict[str, list[int]] = {}
    for p in full:
        per_task.setdefault(task[p], []).append(full[p] - dummy[p])
    expected = sum(sum(d) / len(d) for d in per_task.values()) / len(per_task)  # each task weighs the same
    r = next(r for r in main_only["rows"] if r.get("claim") == "real-feedback-vs-dummy-plan" and
             r["metric"] == "pass" and r["copies"] == "count" and r["unit"] == "task")
    assert r["value"] == pytest.approx(expected) and r["units"] == len(per_task) == 4 and r["programs"] == 48
    over_programs = row(main_only, "real-feedback-vs-dummy-plan", "pass")
    assert over_programs["unit"] == "program" and over_programs["units"] == 48
    # Four units of very different means: the interval over tasks is the wider one.
    assert r["high"] - r["low"] > over_programs["high"] - over_programs["low"]


def _r(finding: int, claim: str, verdict_: str, unit: str, holm: bool, direction: int = 1,
       copies: str = "count", metric: str = "pass") -> dict:
    return {"finding": finding, "claim": claim, "paper": claim, "measured": claim, "metric": metric,
            "copies": copies, "unit": unit, "direction": direction, "value": 0.1, "low": 0.0, "high": 0.2,
            "verdict": verdict_, "holm": holm}


def test_a_finding_agrees_only_where_every_claim_stands_and_is_general_only_over_tasks_too() -> None:
    rows = [
        # Finding 1: both claims stand over programs (one survives Holm, one is a small effect found small); over
        # tasks the first does not survive Holm.
        _r(1, "a", "agrees", "program", True), _r(1, "b", "agrees", "program", False, direction=0),
        _r(1, "a", "agrees", "task", False), _r(1, "b", "agrees", "task", False, direction=0),
        # Finding 3: one claim against (after Holm), the other inconclusive; the same over tasks.
        _r(3, "c", "disagrees", "program", True), _r(3, "d", "inconclusive", "program", False),
        _r(3, "c", "disagrees", "task", True), _r(3, "d", "inconclusive", "task", False),
        # Finding 4: copies counted agrees, copies left out does not: the reading does not stand.
        _r(4, "e", "agrees", "program", True), _r(4, "e", "inconclusive", "program", False, copies="exclude"),
    ]
    v = {x["finding"]: x for x in finding_verdicts(rows)}
    assert (v[1]["program"]["verdict"], v[1]["task"]["verdict"], v[1]["general"]) == ("agree", "inconclusive", False)
    assert (v[3]["program"]["verdict"], v[3]["task"]["verdict"], v[3]["general"]) == ("disagree", "disagree", True)
    assert v[4]["program"]["verdict"] == "inconclusive" and v[4]["task"]["verdict"] == "not run"
    assert v[2]["program"]["verdict"] == "not run"
    # Mixed claims: one for, one against -> inconclusive.
    mixed = finding_verdicts([_r(1, "a", "agrees", "program", True), _r(1, "b", "disagrees", "program", True)])
    assert mixed[0]["program"]["verdict"] == "inconclusive"
    assert standing([_r(1, "a", "disagrees", "program", False, direction=0)]) == "inconclusive"


def test_the_page_gives_each_findings_verdict_at_both_levels(main_only: dict, tmp_path: Path) -> None:
    assert [v["finding"] for v in main_only["verdicts"]] == [1, 2, 3, 4]
    text = readme(main_only, load_specs(STUDY), "2026-12-01")
    section = text.split("## Verdicts against the paper", 1)[1].split("## Finding 1", 1)[0]
    for v in main_only["verdicts"]:
        line = next(x for x in section.splitlines() if x.startswith(f"| {v['finding']}. "))
        assert f"| {v['program']['verdict']} (" in line and f"| {v['task']['verdict']} (" in line
    assert "over programs: value [interval]" in text and "(4 tasks, 48 programs)" in text


def test_the_page_shows_the_frozen_draw_as_the_runs_recorded_it(tmp_path: Path) -> None:
    # SYNTHETIC plan.json strata (the runner writes the plan's overview there at a run's start) beside real outcomes.
    records = pilot_records()
    main = write_run(tmp_path / "runs", STUDY / "main.yaml", records, name="h200-outcomes")
    drawn = {"gemm": {"broken": 2, "wrong": 0, "correct": 1, "fast": 0},
             "atax": {"broken": 2, "wrong": 1, "correct": 2, "fast": 1}}
    short = [{"task": "gemm", "state": "wrong"}, {"task": "gemm", "state": "correct"}, {"task": "gemm", "state": "fast"}]
    (main / "plan.json").write_text(json.dumps({"units": len(records), "strata": {"drawn": drawn, "short": short}}))
    other = write_run(tmp_path / "runs", STUDY / "implicit-1.5b.yaml", records)
    (other / "plan.json").write_text(json.dumps({"units": len(records), "strata": {"drawn": {**drawn, "atax": {}},
                                                                                  "short": short}}))
    specs = load_specs(STUDY)
    result = study(specs, {"main": open_store(str(main)), "implicit-1.5b": open_store(str(other))}, attribution)
    assert result["frozen"] == {"role": "main", "drawn": drawn, "short": 3, "differ": ["implicit-1.5b"]}
    text = readme(result, specs, "2026-12-02")
    section = text.split("## The frozen programs", 1)[1].split("## Finding 1", 1)[0]
    assert "9 programs on 2 tasks, 3 strata short" in section
    assert "| gemm | 2 | 0 | 1 | 0 | 3 |" in section and "| all | 4 | 1 | 3 | 1 | 9 |" in section
    assert "The runs of implicit-1.5b drew otherwise" in section
    # A draw by generation records no strata: no section (the first study's page is unchanged).
    assert "## The frozen programs" not in readme(study(specs, {"main": open_store(str(main.parent / "none"))},
                                                        attribution), specs, "2026-12-02")


def test_the_sizing_section_takes_the_main_run_as_pilot_and_the_pages_holm_family(pilot_folder: Path,
                                                                                  tmp_path: Path) -> None:
    import subprocess
    import sys

    specs = load_specs(STUDY)
    result = study(specs, {"main": open_store(str(pilot_folder))}, attribution, effect=0.1)
    sized = result["sizing"]
    assert sized["comparisons"] == result["holmFamily"] > 1 and sized["effect"] == 0.1
    text = readme(result, specs, "2026-12-02", link=lambda uri: f"<{uri.rsplit('/', 2)[-2]}>")
    assert "### Sizing: the smallest effect to see" in text and f"Holm over {result['holmFamily']} comparisons" in text
    # The pilot is named as the page links its runs (relative where the page travels with them), not as a URI.
    assert f"the pilot run `<{pilot_folder.name}>`" in text and "file://" not in text.split("### Sizing")[1][:400]
    # The same calculation as `cudanalyst plan --pilot` on that run with the same family.
    plan = subprocess.run([sys.executable, "-m", "cudanalyst", "plan", str(STUDY / "main.yaml"), "--json", "--pilot",
                           str(pilot_folder), "--effect", "0.1", "--comparisons", str(result["holmFamily"])],
                          capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["sizing"]["metrics"] == json.loads(json.dumps(sized["metrics"]))
    bad = cli(["study", str(STUDY), "--runs", str(pilot_folder.parent), "--out", str(tmp_path / "o"), "--effect", "0"])
    assert bad == 2 and not (tmp_path / "o").exists()


def test_the_page_says_what_the_runs_replay_in_the_trajectorys_own_words(tmp_path: Path) -> None:
    from cudanalyst.trajectory import load_trajectory

    records = pilot_records()
    main = write_run(tmp_path / "runs", STUDY / "main.yaml", records, name="h200-outcomes")
    (main / "report").mkdir()
    tools = {"nsight-compute": {"compiled": 30, "ok": 12, "failed": {"tool-error": 18}, "notRun": 0,
                                "mostlyFailed": True}}
    (main / "report" / "report.json").write_text(json.dumps({"toolReports": tools}))  # SYNTHETIC report
    specs = load_specs(STUDY)
    result = study(specs, {"main": open_store(str(main))}, attribution)
    uri = specs["main"][1].spec.trajectory.uri
    trajectory = load_trajectory(uri)
    assert result["replayed"]["description"] == trajectory.manifest.description != ""
    assert result["replayed"]["programs"] == len(trajectory.programs)
    section = readme(result, specs, "2026-12-02").split("## What the runs replay", 1)[1].split("\n## ", 1)[0]
    assert f"`{uri}`: {len(trajectory.programs)} programs" in section and trajectory.manifest.description in section
    assert "nsight-compute reports on 30 compiled frozen programs: ok 12, failed 18 (tool-error 18)" in section
    assert "mostly failed" in section
    # A trajectory that cannot be read from here is said, not guessed.
    folder = tmp_path / "specs"
    folder.mkdir()
    spec = (STUDY / "main.yaml").read_text().replace(f"uri: {uri}", "uri: ./no-such-recording/trajectory/")
    assert "no-such-recording" in spec
    (folder / "main.yaml").write_text(spec)
    gone = study(load_specs(folder), {}, attribution)
    assert "no-such-recording" in gone["replayed"]["unreadable"]
    assert "could not be read where this page was built" in readme(gone, load_specs(folder), "2026-12-02")
