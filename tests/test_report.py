"""`cudanalyst report`: from outcome records written with the real store to report.json, HTML and PNGs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cudanalyst.api.status import Results
from cudanalyst.attribution.result import BOOTSTRAP_MIN_UNITS
from cudanalyst.report import build_report
from cudanalyst.report.demo import PLAYERS, demo_spec, write_demo_run
from cudanalyst.report.table import NOT_EVALUATED, from_report, from_status, render
from cudanalyst.store import open_store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RANK = {"fail": 0, "compile": 1, "pass": 2, "fast": 3}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudanalyst", "report", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, check=False)


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A run evaluated up to fast, and its report built once for the module."""
    root = tmp_path_factory.mktemp("runs")
    store = open_store(str(root)).child("demo/")
    write_demo_run(store, demo_spec(output_uri=str(root)), gpu=True)
    return root / "demo", build_report(store)


def expected_rates(folder: Path, metric: str) -> dict[frozenset[str], float]:
    """v(S), pooled, computed here from the raw records: best of k per program, mean over rollouts."""
    best: dict[tuple[frozenset[str], int, str], int] = {}
    for path in (folder / "outcomes").glob("*.json"):
        rec = json.loads(path.read_text())
        if rec["arm"] != "coalition":
            continue
        key = (frozenset(rec["coalition"]), rec["rollout"], f"{rec['task']}/{rec['programId']}")
        best[key] = max(best.get(key, 0), RANK[rec["label"]])
    need = {"compiled": 1, "pass": 2, "fast": 3}[metric]
    per_rollout: dict[tuple[frozenset[str], int], list[bool]] = {}
    for (coalition, rollout, _), rank in best.items():
        per_rollout.setdefault((coalition, rollout), []).append(rank >= need)
    rates: dict[frozenset[str], list[float]] = {}
    for (coalition, _), hits in per_rollout.items():
        rates.setdefault(coalition, []).append(sum(hits) / len(hits))
    return {c: sum(r) / len(r) for c, r in rates.items()}


def banzhaf_by_definition(v: dict[frozenset[str], float], players: list[str], i: str) -> float:
    others = [p for p in players if p != i]
    subsets = [frozenset(c) for k in range(len(others) + 1) for c in combinations(others, k)]
    return sum(v[s | {i}] - v[s] for s in subsets) / 2 ** (len(players) - 1)


def pooled(report: dict[str, Any], metric: str) -> dict[str, Any]:
    return next(g for g in report["attribution"]["games"] if g["pooled"] and g["metric"] == metric)


@pytest.mark.parametrize("metric", ["compiled", "pass", "fast"])
def test_values_match_the_definition_over_the_records(gpu_run: tuple[Path, dict[str, Any]], metric: str) -> None:
    folder, report = gpu_run
    v = expected_rates(folder, metric)
    game = pooled(report, metric)
    assert game["evaluated"] is True
    for coalition, rate in v.items():
        key = ",".join(p for p in PLAYERS if p in coalition)
        assert game["values"][key]["value"] == pytest.approx(rate)
    for player in PLAYERS:
        est = game["banzhaf"][player]
        assert est["value"] == pytest.approx(banzhaf_by_definition(v, PLAYERS, player))
        assert est["low"] < est["value"] < est["high"]
        # The bootstrap undercovers at every size simulated, so it is not shown, and the game says why.
        assert game["units"] < BOOTSTRAP_MIN_UNITS and est["bootstrapLow"] is None and est["bootstrapHigh"] is None
    assert "bootstrap interval not shown" in game["intervalNote"]


def test_report_has_every_section(gpu_run: tuple[Path, dict[str, Any]]) -> None:
    folder, report = gpu_run
    assert report["notEvaluated"] == []
    assert report["generations"] == [10, 20]
    gens = {(g["metric"], g["generation"]) for g in report["attribution"]["games"]}
    assert {("pass", 10), ("pass", 20), ("pass", None)} <= gens
    assert {c["arm"] for c in report["attribution"]["controls"]} == {"noFeedback"}
    assert [t["task"] for t in report["tasks"]] == ["gemm", "jacobi-2d"]
    assert all(len(t["games"]) == 3 for t in report["tasks"])
    assert sum(report["units"]["labels"]["coalition"].values()) + sum(
        report["units"]["labels"]["noFeedback"].values()) == report["units"]["outcomes"] == 288
    prov = report["provenance"]
    assert prov["promptTemplateVersion"] == "v1"
    assert prov["codeVersion"]
    assert prov["spec"]["players"] == PLAYERS
    assert prov["models"]["planner"].startswith("gemma-3-270m")
    # Written beside each other in report/: JSON equal to what was returned, PNGs, and the HTML.
    stored = json.loads((folder / "report" / "report.json").read_text())
    assert stored == {k: v for k, v in report.items() if k != "htmlUri"}
    html = (folder / "report" / "report.html").read_text()
    for name in report["figures"]:
        png = (folder / "report" / name).read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 5000
        assert f'data-file="{name}"' in html
    assert html.count('src="data:image/png;base64,') == 4
    assert "<script" not in html and "http://" not in html and "https://" not in html  # self-contained
    assert report["htmlUri"] == (folder / "report" / "report.html").as_uri()


def test_no_gpu_run_shows_pass_and_fast_as_not_evaluated(tmp_path: Path) -> None:
    store = open_store(str(tmp_path)).child("demo/")
    write_demo_run(store, demo_spec(output_uri=str(tmp_path)), gpu=False)
    report = build_report(store)
    assert report["notEvaluated"] == ["pass", "fast"]
    assert report["units"]["evaluatedUpTo"] == {"compile": 288}
    for metric in ("pass", "fast"):
        game = pooled(report, metric)
        assert game["evaluated"] is False
        assert all(e["value"] is None for e in game["banzhaf"].values())
        assert all(e["value"] is None for e in game["values"].values())
    assert all(e["value"] is not None for e in pooled(report, "compiled")["banzhaf"].values())
    html = (tmp_path / "demo" / "report" / "report.html").read_text()
    assert "pass: not evaluated" in html and "fast: not evaluated" in html
    console = Console(record=True, width=200)
    console.print(render(from_report(report)))
    text = console.export_text()
    assert "pass (not evaluated)" in text and "fast (not evaluated)" in text
    for line in text.splitlines():
        if line.strip().startswith(("│ debugger", "│ analyzer", "│ profiler")):
            # compiled has a number; pass and fast never show a zero standing in for "unknown"
            assert line.count(NOT_EVALUATED) == 2 and "+0.000 [+0.000" not in line


def test_cli_reads_and_writes_an_s3_run_folder(s3_endpoint: Any, s3_bucket: str, s3_settings: Any) -> None:
    run_store = open_store(f"s3://{s3_bucket}/runs/", s3_settings).child("demo/")
    write_demo_run(run_store, demo_spec(output_uri=f"s3://{s3_bucket}/runs/"), gpu=True)
    env = {"AWS_ACCESS_KEY_ID": s3_endpoint.access_key_id, "AWS_SECRET_ACCESS_KEY": s3_endpoint.secret_access_key,
           "AWS_DEFAULT_REGION": s3_endpoint.region}
    proc = cli(f"s3://{s3_bucket}/runs/demo/", "--s3-endpoint", s3_endpoint.url, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"s3://{s3_bucket}/runs/demo/report/report.html"
    assert "debugger" in proc.stdout
    keys = set(run_store.list("report/"))
    assert keys == {f"report/{n}" for n in ("report.json", "report.html", "attribution.png", "interactions.png",
                                            "coalitions.png", "tasks.png")}
    assert run_store.get_json("report/report.json")["run"] == "demo"


def test_cli_out_writes_elsewhere_and_leaves_the_run_folder_alone(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "runs")).child("demo/")
    write_demo_run(store, demo_spec(output_uri=str(tmp_path / "runs")), gpu=False)
    out = tmp_path / "out"
    proc = cli(str(tmp_path / "runs" / "demo"), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (out / "report.html").as_uri()
    assert (out / "report.json").is_file() and (out / "tasks.png").is_file()
    assert not (tmp_path / "runs" / "demo" / "report").exists()


def test_cli_rejects_a_folder_that_is_not_a_run_folder(tmp_path: Path) -> None:
    (tmp_path / "outcomes").mkdir()
    proc = cli(str(tmp_path))
    assert proc.returncode == 2
    assert "not a run folder" in proc.stderr and str(tmp_path) in proc.stderr and "spec.json" in proc.stderr
    assert not (tmp_path / "report").exists()


def test_cli_names_a_bad_outcome_record_and_writes_nothing(tmp_path: Path) -> None:
    store = open_store(str(tmp_path)).child("demo/")
    write_demo_run(store, demo_spec(output_uri=str(tmp_path)), gpu=True)
    victim = sorted((tmp_path / "demo" / "outcomes").glob("*.json"))[5]
    rec = json.loads(victim.read_text())
    rec["label"] = "great"
    victim.write_text(json.dumps(rec))
    proc = cli(str(tmp_path / "demo"))
    assert proc.returncode == 2
    assert victim.name in proc.stderr and "label" in proc.stderr
    assert not (tmp_path / "demo" / "report").exists()


def test_cli_says_when_there_are_no_outcomes_yet(tmp_path: Path) -> None:
    store = open_store(str(tmp_path)).child("demo/")
    store.put_json("spec.json", demo_spec(output_uri=str(tmp_path)))
    proc = cli(str(tmp_path / "demo"))
    assert proc.returncode == 2
    assert "no outcome records yet" in proc.stderr and "outcomes/" in proc.stderr


def test_cli_rejects_a_spec_that_does_not_validate(tmp_path: Path) -> None:
    spec = demo_spec(output_uri=str(tmp_path))
    spec["spec"]["players"] = ["debugger", "debugger"]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = cli(str(tmp_path))
    assert proc.returncode == 2
    assert "spec.json" in proc.stderr and "players" in proc.stderr


def test_table_from_status_results() -> None:
    results = {
        "topPlayer": "debugger", "metric": "compiled", "confidence": 0.9, "notEvaluated": ["pass"],
        "banzhaf": [
            {"player": "debugger", "metric": "compiled", "generation": "pooled", "value": 0.25, "low": 0.1, "high": 0.4},
            {"player": "analyzer", "metric": "compiled", "generation": "pooled", "value": -0.05, "low": -0.2,
             "high": 0.1},
            {"player": "debugger", "metric": "compiled", "generation": "10", "value": 0.9, "low": 0.8, "high": 1.0},
        ],
    }
    console = Console(record=True, width=160)
    console.print(render(from_status(Results.model_validate(results), ["debugger", "analyzer"], ["compiled", "pass"])))
    text = console.export_text()
    assert "+0.250 [+0.100, +0.400]" in text and "-0.050 [-0.200, +0.100]" in text
    assert "+0.900" not in text  # a generation's value is not the pooled one
    assert "pass (not evaluated)" in text and "90% intervals" in text


def test_a_run_missing_a_coalition_exact_fails_by_name_auto_switches_and_says_so(tmp_path: Path) -> None:
    store = open_store(str(tmp_path)).child("inc/")
    write_demo_run(store, demo_spec(name="inc", output_uri=str(tmp_path)), skip_coalitions=("analyzer",))
    report = build_report(store)
    game = pooled(report, "compiled")
    # exact (the spec's) never becomes MSR by itself: the game fails and names the coalition.
    assert game["estimator"] == "exact" and not game["evaluated"] and "'analyzer'" in game["reason"]
    assert any("'analyzer'" in note for note in report["estimatorNotes"])

    spec = demo_spec(name="auto", output_uri=str(tmp_path))
    spec["spec"]["attribution"]["estimator"] = "auto"
    store = open_store(str(tmp_path)).child("auto/")
    write_demo_run(store, spec, skip_coalitions=("analyzer",))
    report = build_report(store)
    game = pooled(report, "compiled")
    assert game["estimator"] == "msr" and game["coalitions"] == 7 and "analyzer" not in game["values"]
    assert "auto: MSR" in game["estimatorNote"] and any("auto: MSR" in n for n in report["estimatorNotes"])
    assert all(e["value"] is not None for e in game["banzhaf"].values())
    html = (tmp_path / "auto" / "report" / "report.html").read_text()
    assert "auto: MSR" in html


def test_one_player_has_values_and_no_pairs(tmp_path: Path) -> None:
    store = open_store(str(tmp_path)).child("one/")
    write_demo_run(store, demo_spec(name="one", output_uri=str(tmp_path), players=["debugger"]), gpu=True)
    report = build_report(store)
    v = expected_rates(tmp_path / "one", "pass")
    game = pooled(report, "pass")
    assert game["banzhaf"]["debugger"]["value"] == pytest.approx(v[frozenset({"debugger"})] - v[frozenset()])
    assert game["interactions"] == {}
    assert all(t["games"][0]["interactions"] == {} for t in report["tasks"])
    assert "Pairwise interactions" not in (tmp_path / "one" / "report" / "report.html").read_text()


def test_status_results_a_version_cannot_read_are_named_not_guessed() -> None:
    from cudanalyst.report.status_view import print_status

    console = Console(record=True, width=160)
    obj = {"metadata": {"name": "r"}, "spec": {"players": ["debugger"]},
           "status": {"phase": "Succeeded", "results": {"banzhaf": [
               {"player": "debugger", "metric": "speed", "generation": "pooled", "value": 1, "low": 0, "high": 2}]}}}
    print_status(obj, console, with_report=False)
    text = console.export_text()
    assert "status.results not readable by this version" in text and "banzhaf.0.metric" in text
    assert "Banzhaf values from status" not in text and "no results yet" not in text


def test_a_value_without_an_interval_stays_without_one_in_the_status(tmp_path: Path) -> None:
    """A game that gives no interval (one task pooled, one program) must not reach the status as a zero-width
    interval [v, v]: that would claim a certainty the run does not have."""
    from cudanalyst.attribution.result import AttributionResult
    from cudanalyst.operator.completion import status_results

    store = open_store(str(tmp_path)).child("demo/")
    write_demo_run(store, demo_spec(name="demo", output_uri=str(tmp_path)))
    attribution = build_report(store)["attribution"]
    game = next(g for g in attribution["games"] if g["pooled"] and g["metric"] == "compiled")
    game["banzhaf"]["debugger"].update(low=None, high=None)  # as the maths leaves it with too few units
    for est in game["interactions"].values():
        est.update(low=None, high=None)
    results = status_results(AttributionResult.model_validate(attribution), ["compiled"])
    by = {v.player: v for v in results.banzhaf if v.generation == "pooled" and v.metric == "compiled"}
    assert (by["debugger"].low, by["debugger"].high) == (None, None)
    assert by["analyzer"].low is not None and by["analyzer"].low <= by["analyzer"].value <= by["analyzer"].high
    assert all((i.low, i.high) == (None, None) for i in results.top_interactions if i.metric == "compiled")
    console = Console(record=True, width=160)
    console.print(render(from_status(results, ["debugger", "analyzer"], ["compiled"])))
    text = console.export_text()
    value = f"{by['debugger'].value:+.3f}"
    assert f"{value} (no interval)" in text and f"[{value}, {value}]" not in text
