"""Two fast metrics (issue 28, part 2): fastVsBaseline, the paper's (faster than the task's baseline), and
fastVsFrozen, ours (faster than the frozen program; `fast` in older specs and run folders). Each is checked in the
outcome records, the attribution, the report, the status and the study; an archived run folder still reads."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from cudanalyst.analysis.study import load_specs, readme, study
from cudanalyst.api import load_run
from cudanalyst.api.spec import METRICS, AttributionSpec
from cudanalyst.api.status import Results
from cudanalyst.attribution.values import tabulate
from cudanalyst.cli import main as cli
from cudanalyst.operator.completion import status_results
from cudanalyst.operator.conditions import Observation, judge, reached_text
from cudanalyst.outcomes import UnitOutcome, with_fast_vs_baseline
from cudanalyst.report import compute
from cudanalyst.report.build import build, compute_report
from cudanalyst.report.demo import demo_spec, write_demo_run
from cudanalyst.report.load import load_run_folder
from cudanalyst.report.status_view import print_status
from cudanalyst.report.table import from_attribution, render
from cudanalyst.runfolder import outcome_spec
from cudanalyst.store import open_store

ROOT = Path(__file__).resolve().parents[1]
ARCHIVED = ROOT / "docs" / "results" / "study-2026-11-30" / "runs" / "h200-outcomes"  # spec.json + outcomes
PILOT = ROOT / "docs" / "results" / "h200-outcomes-2026-11-30"  # report.json as written on 2026-11-30
BOTH = ["fastVsBaseline", "fastVsFrozen"]


def record(program: str, label: str, *, vs_baseline: bool | None = None, speedup_vs_baseline: float | None = None,
           sample: int = 0, coalition: tuple[str, ...] = ("a",), up_to: str = "fast") -> UnitOutcome:
    return UnitOutcome.model_validate({
        "key": f"{program}-{'-'.join(coalition)}-{sample}", "run": "r", "task": "gemm", "generation": 10,
        "programId": program, "coalition": list(coalition), "sample": sample, "label": label,
        "evaluatedUpTo": up_to, "fastVsBaseline": vs_baseline, "speedupVsBaseline": speedup_vs_baseline})


def rates(records: list[UnitOutcome], metrics: list[str]) -> dict[str, dict[str, bool]]:
    """Per metric, per program: reached under coalition {a} (one rollout), from the tabulated games."""
    tables = tabulate(records, ["a"], metrics)
    out = {}
    for m in metrics:
        po = tables.games[("coalition", m, 10)]
        out[m] = {name.rsplit("/", 1)[-1]: bool(po.reached[i, 0, 0]) for i, name in enumerate(po.programs)}
    return out


# ---------------------------------------------------------------------------------------------- records


def test_faster_than_the_baseline_but_not_the_frozen_program_and_the_reverse() -> None:
    records = [
        # beats the baseline (the frozen program was already good), not the frozen program
        record("p1", "pass", vs_baseline=True),
        # beats the frozen program (a slow one), not the baseline
        record("p2", "fast", vs_baseline=False),
        record("p3", "fast", vs_baseline=True),  # both
        record("p4", "pass", vs_baseline=False),  # neither
        record("p5", "compile", up_to="fast"),  # not correct: neither, known
    ]
    got = rates(records, ["pass", *BOTH, "fast"])
    assert got["fastVsBaseline"] == {"p1": True, "p2": False, "p3": True, "p4": False, "p5": False}
    assert got["fastVsFrozen"] == {"p1": False, "p2": True, "p3": True, "p4": False, "p5": False}
    assert got["fast"] == got["fastVsFrozen"]  # the older name reads as it did
    assert got["pass"] == {"p1": True, "p2": True, "p3": True, "p4": True, "p5": False}


def test_best_of_k_is_taken_per_metric() -> None:
    # One cell, two samples: the first beats the frozen program only, the second the baseline only.
    records = [record("p1", "fast", vs_baseline=False, sample=0), record("p1", "pass", vs_baseline=True, sample=1),
               record("p2", "fast", vs_baseline=False, sample=0), record("p2", "fail", sample=1)]
    got = rates(records, BOTH)
    assert got == {"fastVsBaseline": {"p1": True, "p2": False}, "fastVsFrozen": {"p1": True, "p2": True}}


def test_a_correct_kernel_not_timed_against_the_baseline_leaves_only_that_metric() -> None:
    # p2 is fast against its frozen program, but the baseline could not be timed beside it: fastVsBaseline unknown.
    records = [record("p1", "pass", vs_baseline=True), record("p2", "fast", vs_baseline=None)]
    tables = tabulate(records, ["a"], BOTH)
    base, frozen = tables.games[("coalition", "fastVsBaseline", None)], tables.games[("coalition", "fastVsFrozen", None)]
    assert frozen.known.all()
    assert base.known[base.programs.index("gemm/g10/p1")].all()
    assert not base.known[base.programs.index("gemm/g10/p2")].all()
    assert "not timed against the task's baseline" in base.unknown[base.programs.index("gemm/g10/p2")]


def test_a_record_written_before_the_flag_gets_it_from_its_speedup_over_the_baseline() -> None:
    old = [record("p1", "pass", speedup_vs_baseline=1.2), record("p2", "fast", speedup_vs_baseline=1.05),
           record("p3", "pass"), record("p4", "pass", vs_baseline=False, speedup_vs_baseline=3.0)]
    assert [r.fast_vs_baseline for r in with_fast_vs_baseline(old, 0.12)] == [True, False, None, False]
    assert [r.fast_vs_baseline for r in with_fast_vs_baseline(old, 0.3)] == [False, False, None, False]
    assert old[0].fast_vs_baseline is None  # the caller's records are not changed


def test_the_record_carries_the_flag_on_the_wire() -> None:
    wire = record("p1", "pass", vs_baseline=True).model_dump(by_alias=True, mode="json")
    assert wire["fastVsBaseline"] is True and wire["label"] == "pass"
    assert UnitOutcome.model_validate(wire).baseline_label() == "fast"


# -------------------------------------------------------------------------------------------------- spec


def test_a_new_spec_attributes_both_and_an_old_one_reads_as_it_did(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert AttributionSpec().metrics == list(METRICS) == ["compiled", "pass", *BOTH]
    assert AttributionSpec(metrics=["compiled", "pass", "fast"]).metrics == ["compiled", "pass", "fast"]
    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    data["spec"]["attribution"]["metrics"] = ["pass", "fast", "fastVsFrozen"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit) as exc:
        cli(["validate", str(bad)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"{bad}: invalid AttributionRun" in err and "spec.attribution: metrics must name each metric once" in err


def test_a_folder_resumes_with_other_metrics_but_not_another_estimator() -> None:
    run = load_run(str(ROOT / "examples" / "quickstart.yaml"))
    other = run.spec.model_copy(update={"attribution": run.spec.attribution.model_copy(update={"metrics": list(METRICS)})})
    assert outcome_spec(other) == outcome_spec(run.spec)
    msr = run.spec.model_copy(update={"attribution": run.spec.attribution.model_copy(update={"estimator": "msr"})})
    assert outcome_spec(msr) != outcome_spec(run.spec)


# ------------------------------------------------------------------------------------ report and status


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """A synthetic run (report.demo) that asks for both fast metrics, its folder and report object."""
    root = tmp_path_factory.mktemp("runs")
    store = open_store(str(root)).child("demo/")
    write_demo_run(store, demo_spec(output_uri=str(root), metrics=tuple(METRICS)), gpu=True)
    folder = load_run_folder(store)
    return folder, compute_report(folder)


def test_the_report_attributes_and_counts_both(demo: tuple[Any, dict[str, Any]]) -> None:
    folder, report = demo
    assert report["metrics"] == list(METRICS)
    pooled = {g["metric"]: g for g in report["attribution"]["games"] if g["pooled"]}
    assert pooled["fastVsBaseline"]["evaluated"] and pooled["fastVsFrozen"]["evaluated"]
    assert pooled["fastVsBaseline"]["values"] != pooled["fastVsFrozen"]["values"]
    game = [r for r in folder.outcomes if r.arm == "coalition"]
    reached = report["units"]["reached"]["coalition"]
    assert reached["fastVsFrozen"]["reached"] == sum(r.label == "fast" for r in game)
    assert reached["fastVsBaseline"]["reached"] == sum(bool(r.fast_vs_baseline) for r in game)
    assert reached["fastVsBaseline"]["reached"] != reached["fastVsFrozen"]["reached"]
    assert any("Two fast metrics" in n for n in report["attribution"]["notes"])
    line = next(x for x in compute.summary_lines(report) if x.startswith("samples of the game reaching"))
    assert f"fastVsBaseline {reached['fastVsBaseline']['reached']}" in line
    assert f"fastVsFrozen {reached['fastVsFrozen']['reached']}" in line


def test_the_html_and_the_printed_table_show_both(demo: tuple[Any, dict[str, Any]]) -> None:
    folder, report = demo
    html = build(folder).html
    assert "Samples reaching each metric" in html and html.count("fastVsBaseline") >= 3
    console = Console(record=True, width=240)
    console.print(render(from_attribution(report["attribution"])))  # what `cudanalyst run` prints at the end
    text = console.export_text()
    assert "fastVsBaseline" in text and "fastVsFrozen" in text


def test_the_status_carries_both(demo: tuple[Any, dict[str, Any]]) -> None:
    folder, report = demo
    result = compute.attribution(folder.outcomes, folder.run)
    results = status_results(result, list(METRICS), report)
    results = Results.model_validate(results.model_dump(by_alias=True, mode="json"))  # as the API server returns it
    assert {v.metric for v in results.banzhaf if v.generation == "pooled"} == set(METRICS)
    counts = {c.metric: c.reached for c in results.reached}
    assert counts == {m: report["units"]["reached"]["coalition"][m]["reached"] for m in METRICS}
    # The Succeeded condition's message names both counts (what `kubectl get ar` and `cudanalyst status` show).
    obs = Observation(1, False, False, {"conditions": [{"type": "Complete", "status": "True"}]}, total=10,
                      aggregated=True, reached=reached_text(results))
    message = judge(obs).message
    assert f"fastVsBaseline {counts['fastVsBaseline']}" in message and f"fastVsFrozen {counts['fastVsFrozen']}" in message
    # `cudanalyst status`, from the object as the API server returns it (no metrics in the stored spec: the
    # CRD has no default for them, so the table takes the metrics its results hold).
    obj = {"metadata": {"name": "demo", "namespace": "ns"}, "spec": {"players": list(result.players)},
           "status": {"phase": "Succeeded", "results": results.model_dump(by_alias=True, mode="json")}}
    console = Console(record=True, width=300)
    print_status(obj, console, with_report=False)
    out = console.export_text()
    assert "fastVsBaseline" in out and "fastVsFrozen" in out
    assert f"fastVsBaseline {counts['fastVsBaseline']}" in out


# -------------------------------------------------------------------------------------- old run folders


def archived_records() -> list[dict[str, Any]]:
    with gzip.open(ARCHIVED / "outcomes.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def test_an_archived_run_folder_reads_fast_as_it_did() -> None:
    folder = load_run_folder(open_store(str(ARCHIVED)))
    assert folder.run.spec.attribution.metrics == ["compiled", "pass", "fast"]
    raw = archived_records()
    assert not any("fastVsBaseline" in r for r in raw)  # written before the flag existed
    report = compute_report(folder)
    assert report["metrics"] == ["compiled", "pass", "fast"]
    assert "fastVsBaseline" not in json.dumps(report["attribution"]["games"])
    # `fast` is fastVsFrozen: the same games, program by program.
    tables = tabulate(folder.outcomes, folder.run.spec.players, ["fast", "fastVsFrozen", "fastVsBaseline"])
    for (arm, metric, scope), po in tables.games.items():
        if metric == "fast":
            twin = tables.games[(arm, "fastVsFrozen", scope)]
            assert (po.reached == twin.reached).all() and (po.known == twin.known).all()
    # Asked for, the paper's fast comes from each record's speedupVsBaseline and the run's tolerance (0.12).
    tolerance = folder.run.spec.evaluation.fast_tolerance
    beat = sum(r["label"] in ("pass", "fast") and (r.get("speedupVsBaseline") or 0) > 1 + tolerance for r in raw)
    assert sum(bool(r.fast_vs_baseline) for r in folder.outcomes) == beat > 0
    frozen = sum(r["label"] == "fast" for r in raw)
    assert beat != frozen  # they differ on this run: 244 against 86
    base = tables.games[("coalition", "fastVsBaseline", None)]
    assert base.known.all()  # every correct record there was timed beside the baseline


def test_an_archived_report_and_status_still_read() -> None:
    report = json.loads((PILOT / "report.json").read_text())
    table = from_attribution(report["attribution"])
    assert table.metrics == ["compiled", "pass", "fast"]
    assert any(r.metric == "fast" and r.value is not None for r in table.rows)
    old_status = {"topPlayer": "debugger", "metric": "compiled", "banzhaf": [
        {"player": "debugger", "metric": "fast", "generation": "pooled", "value": 0.01}],
        "exclusions": [{"metric": "fast", "excluded": 1, "of": 48}]}
    results = Results.model_validate(old_status)
    assert results.reached == [] and results.banzhaf[0].metric == "fast"
    console = Console(record=True, width=200)
    print_status({"metadata": {"name": "old"}, "spec": {"players": ["debugger"]},
                  "status": {"results": old_status}}, console, with_report=False)
    assert "fast" in console.export_text() and "fastVsBaseline" not in console.export_text()


# ------------------------------------------------------------------------------------------------ study


def test_a_study_that_asks_for_the_papers_fast_compares_on_it(tmp_path: Path) -> None:
    # The study's specs with both fast metrics, and the archived main run under a spec that asks for them.
    specs_dir = tmp_path / "study"
    shutil.copytree(ROOT / "examples" / "study", specs_dir)
    for f in specs_dir.glob("*.yaml"):
        f.write_text(f.read_text().replace("metrics: [compiled, pass, fast]", f"metrics: [{', '.join(METRICS)}]"))
    main = tmp_path / "runs" / "main"
    shutil.copytree(ARCHIVED, main)
    spec = json.loads((main / "spec.json").read_text())
    spec["spec"]["attribution"]["metrics"] = list(METRICS)
    (main / "spec.json").write_text(json.dumps(spec))
    specs = load_specs(specs_dir)
    result = study(specs, {"main": open_store(str(main))}, compute.attribution)
    compared = {r["metric"] for r in result["rows"] if r.get("metric")}
    assert compared == {"compiled", "pass", "fastVsBaseline"}  # the paper's comparisons use the paper's metric
    arm = next(a for a in result["arms"] if a.get("arm") == "main: dummyPlan")
    assert {"fastVsBaseline/count", "fastVsFrozen/count", "fastVsFrozen/exclude"} <= set(arm)
    f2 = result["finding2"]
    assert {r["metric"] for r in f2["rows"]} == {"compiled", "pass", "fastVsBaseline"}
    assert {t["metric"] for t in f2["table"]} == set(METRICS)  # both shown
    # The value is the paired difference of best-of-k rates of the paper's fast, from the records by hand.
    raw = archived_records()

    def best(arm: str, coalition: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in raw:
            if r["arm"] == arm and r["coalition"] == coalition:
                hit = r["label"] in ("pass", "fast") and (r.get("speedupVsBaseline") or 0) > 1.12
                out[r["programId"]] = max(out.get(r["programId"], 0), int(hit))
        return out

    full, dummy = best("coalition", ["debugger", "analyzer", "profiler"]), best("dummyPlan", [])
    got = next(r for r in result["rows"] if r.get("claim") == "real-feedback-vs-dummy-plan"
               and r["metric"] == "fastVsBaseline" and r["copies"] == "count")
    assert got["value"] == pytest.approx(sum(full[p] - dummy[p] for p in full) / len(full))
    page = readme(result, specs, "2026-12-01")
    assert "| fastVsBaseline (count) | fastVsFrozen (count) |" in page and "the paper's fast, used by every" in page
    header = next(line for line in page.splitlines() if line.startswith("| arm | units | copies |"))
    rule = page.splitlines()[page.splitlines().index(header) + 1]
    assert header.count("|") == rule.count("|") == 12  # 3 + 2 x 4 columns
