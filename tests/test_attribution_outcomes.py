"""Outcome records -> v(S) -> indices: best-of-k, cumulative metrics, rollouts, no-GPU nulls, controls,
and `cudanalyst attribute --outcomes` over a local folder and a real S3 endpoint (moto server)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cudanalyst.attribution.result import attribute_tables
from cudanalyst.attribution.values import parse_records, tabulate
from cudanalyst.cli.attribute import main
from cudanalyst.store import ObjectStore, open_store

PLAYERS = ["debugger", "analyzer", "profiler"]
LABELS = ["fail", "compile", "pass", "fast"]


def record(program: str, coalition: list[str], label: str, *, generation: int = 10, rollout: int = 0,
           sample: int = 0, arm: str = "coalition", up_to: str = "fast", task: str = "gemm",
           **extra: Any) -> dict[str, Any]:
    key = f"{program}-{'+'.join(coalition) or 'none'}-{arm}-r{rollout}-s{sample}"
    return {"key": key, "run": "t", "task": task, "generation": generation, "programId": program,
            "coalition": coalition, "arm": arm, "rollout": rollout, "sample": sample, "label": label,
            "evaluatedUpTo": up_to, **extra}


def report(raw: list[dict[str, Any]], players: list[str], metrics=("compiled", "pass", "fast"), **kw: Any):
    tables = tabulate(parse_records((r["key"], r) for r in raw), players, list(metrics))
    return attribute_tables(tables, replicates=kw.pop("replicates", 0), **kw)


def game(rep, metric: str, generation: int | None):
    (g,) = [g for g in rep.games if g.metric == metric and g.generation == generation]
    return g


def test_best_of_k_and_cumulative_metrics() -> None:
    raw = [
        record("p1", [], "fail", sample=0), record("p1", [], "compile", sample=1),
        record("p1", ["a"], "pass", sample=0), record("p1", ["a"], "fail", sample=1),
        record("p2", [], "fast", sample=0), record("p2", [], "fail", sample=1),
        record("p2", ["a"], "compile", sample=0), record("p2", ["a"], "compile", sample=1),
    ]
    rep = report(raw, ["a"])
    rates = {m: {k: e.value for k, e in game(rep, m, 10).values.items()} for m in ("compiled", "pass", "fast")}
    assert rates == {"compiled": {"": 1.0, "a": 1.0}, "pass": {"": 0.5, "a": 0.5}, "fast": {"": 0.5, "a": 0.0}}
    assert game(rep, "fast", 10).banzhaf["a"].value == pytest.approx(-0.5)
    assert game(rep, "fast", 10).shapley["a"].value == pytest.approx(-0.5)


def test_mean_over_rollouts_per_generation_and_pooled() -> None:
    raw = [
        # generation 10: rollout 0 -> 1 of 2 programs pass, rollout 1 -> 2 of 2.
        record("p1", [], "pass", rollout=0), record("p2", [], "fail", rollout=0),
        record("p1", [], "pass", rollout=1), record("p2", [], "pass", rollout=1),
        # generation 20: one program, fails in both rollouts.
        record("q1", [], "fail", generation=20, rollout=0), record("q1", [], "fail", generation=20, rollout=1),
    ]
    raw += [{**r, "coalition": ["a"], "key": r["key"] + "-a"} for r in raw]
    rep = report(raw, ["a"], metrics=["pass"])
    assert game(rep, "pass", 10).values[""].value == pytest.approx(0.75)
    assert game(rep, "pass", 20).values[""].value == 0.0
    # pooled: rollout 0 -> 1 of 3, rollout 1 -> 2 of 3.
    pooled = game(rep, "pass", None)
    assert pooled.pooled and pooled.values["a"].value == pytest.approx(0.5)
    assert pooled.programs == 3 and pooled.rollouts == 2


def test_no_gpu_reports_pass_and_fast_as_null_never_guessed() -> None:
    raw = [record(f"p{i}", list(c), LABELS[(i + len(c)) % 2], sample=s, up_to="compile")
           for i in range(3) for k in range(3) for c in itertools.combinations(PLAYERS[:2], k) for s in range(2)]
    rep = report(raw, PLAYERS[:2], replicates=50)
    assert game(rep, "compiled", 10).evaluated
    assert game(rep, "compiled", 10).banzhaf["debugger"].value is not None
    for metric in ("pass", "fast"):
        g = game(rep, metric, 10)
        assert not g.evaluated and "could not be established" in g.reason
        assert all(e.value is None for e in [*g.values.values(), *g.banzhaf.values(), *g.interactions.values()])


def test_a_failed_compile_is_known_to_fail_every_metric_without_a_gpu() -> None:
    raw = [record("p1", c, "fail", up_to="compile") for c in ([], ["a"])]
    g = game(report(raw, ["a"]), "pass", 10)
    assert g.evaluated and g.values["a"].value == 0.0


def test_controls_are_reported_apart_from_the_game() -> None:
    raw = [record("p1", list(c), "pass") for k in range(2) for c in itertools.combinations(["a"], k)]
    raw += [record("p1", [], "fail", arm="noFeedback"), record("p2", [], "pass", arm="noFeedback")]
    rep = report(raw, ["a"], metrics=["pass"])
    assert game(rep, "pass", 10).values[""].value == 1.0  # the control's failures do not leak in
    control = [c for c in rep.controls if c.generation == 10]
    assert control[0].arm == "noFeedback" and control[0].rates[""].value == 0.5


def simulated_run(store: ObjectStore, seed: int = 0) -> None:
    """Three players, 2 generations x 3 programs x 2 rollouts x 2 samples per coalition (small: the S3
    endpoint shares a loaded machine)."""
    rng = np.random.default_rng(seed)
    store.put_json("spec.json", {"players": PLAYERS, "attribution": {"metrics": ["compiled", "pass", "fast"]}})
    for generation, program, rollout in itertools.product((10, 20), range(3), range(2)):
        for k in range(4):
            for c in itertools.combinations(PLAYERS, k):
                p = 0.1 + 0.5 * ("debugger" in c) + 0.1 * ("profiler" in c)
                for s in range(2):
                    label = LABELS[int(rng.choice(4, p=[1 - p, p / 3, p / 3, p / 3]))]
                    r = record(f"g{generation}p{program}", list(c), label, generation=generation,
                               rollout=rollout, sample=s, task=f"task{program}")
                    store.put_json(f"outcomes/{r['key']}.json", r)


def test_cli_outcomes_same_from_a_folder_and_from_s3(
    tmp_path: Path, s3_store: ObjectStore, s3_endpoint: Any, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    simulated_run(open_store(tmp_path))
    simulated_run(s3_store)
    assert main(["--outcomes", str(tmp_path), "--bootstrap", "200"]) == 0
    local = json.loads(capsys.readouterr().out)

    # A user reaches S3 with the standard credential chain and an endpoint option.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_endpoint.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_endpoint.secret_access_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3_endpoint.region)
    assert main(["--outcomes", s3_store.uri, "--s3-endpoint", s3_endpoint.url, "--bootstrap", "200"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert local == remote

    assert local["players"] == PLAYERS and len(local["games"]) == 3 * 3
    pooled = [g for g in local["games"] if g["metric"] == "compiled" and g["pooled"]][0]
    assert pooled["estimator"] == "exact" and pooled["programs"] == 6 and pooled["rollouts"] == 2
    # Pooled, the unit of replication is the task (3 tasks of 2 generations each), not the program.
    assert pooled["unit"] == "task" and pooled["units"] == 3 and pooled["dof"] == 3
    debugger = pooled["banzhaf"]["debugger"]
    assert debugger["low"] < debugger["value"] < debugger["high"]
    # The bootstrap undercovers (docs/attribution.md), so it is asked for but not shown, and the game says so.
    assert debugger["bootstrapLow"] is None and "bootstrap interval not shown" in pooled["intervalNote"]
    # The debugger's effect is built in (+0.5 per sample); the analyzer has none.
    assert debugger["low"] > 0.1
    assert pooled["banzhaf"]["analyzer"]["low"] < 0 < pooled["banzhaf"]["analyzer"]["high"]
    assert list(pooled["interactions"]) == ["debugger,analyzer", "debugger,profiler", "analyzer,profiler"]


def test_cli_outcomes_bad_input_exits_2_naming_the_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(tmp_path)
    assert main(["--outcomes", str(tmp_path), "--players", "a"]) == 2
    assert "no outcome records" in capsys.readouterr().err

    store.put_json("outcomes/u1.json", {**record("p1", [], "pass"), "label": "great"})
    assert main(["--outcomes", str(tmp_path), "--players", "a"]) == 2
    err = capsys.readouterr().err
    assert "outcomes/u1.json" in err and "field label" in err

    store.put_json("outcomes/u1.json", record("p1", ["zed"], "pass"))
    assert main(["--outcomes", str(tmp_path), "--players", "a"]) == 2
    assert "unknown player 'zed'" in capsys.readouterr().err

    store.put_json("outcomes/u1.json", record("p1", [], "pass"))
    assert main(["--outcomes", str(tmp_path)]) == 2
    assert "--players" in capsys.readouterr().err  # no spec.json to take players from

    # exact never switches to MSR by itself: the game is not evaluated and names the missing coalition.
    assert main(["--outcomes", str(tmp_path), "--players", "a", "--estimator", "exact"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(not g["evaluated"] and g["estimator"] == "exact" for g in out["games"])
    assert "needs every coalition; no outcomes for 'a'" in out["games"][0]["reason"]
    assert out["games"][0]["banzhaf"]["a"]["value"] is None

    assert main(["--outcomes", str(tmp_path), "--players", "a", "--metrics", "speed"]) == 2
    assert "metric 'speed'" in capsys.readouterr().err


@pytest.mark.slow  # the store retries a refused connection with back-off (about 15 s) before giving up
def test_cli_outcomes_unreachable_endpoint_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from s3_server import free_port

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert main(["--outcomes", "s3://runs/gemm/", "--s3-endpoint", endpoint, "--players", "a"]) == 2
    captured = capsys.readouterr()
    assert endpoint in captured.err and captured.out == ""
