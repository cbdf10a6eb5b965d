"""Program-level attribution: the unit of replication, exclusions with their real reasons, balance,
Holm marks, copies and references; and the plan's expected half-width (issues 12 and 13)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cudanalyst.attribution import design
from cudanalyst.attribution.result import attribute_tables
from cudanalyst.attribution.simulate import Design, simulate_columns
from cudanalyst.attribution.values import columns_of, parse_records, tabulate
from cudanalyst.cli import main as cli_main
from cudanalyst.outcomes import UnitOutcome
from cudanalyst.report.compute import copy_rates, references, summary_lines

PLAYERS = ["debugger", "analyzer", "profiler"]
COALITIONS = [list(c) for k in range(4) for c in itertools.combinations(PLAYERS, k)]


def rec(program: str, coalition: list[str], label: str, *, rollout: int = 0, sample: int = 0, task: str | None = None,
        up_to: str = "fast", arm: str = "coalition", **extra: Any) -> dict[str, Any]:
    key = f"{program}-{'+'.join(coalition)}-{arm}-{rollout}-{sample}"
    return {"key": key, "run": "t", "task": task or f"task-{program}", "generation": 0, "programId": program,
            "coalition": coalition, "arm": arm, "rollout": rollout, "sample": sample, "label": label,
            "evaluatedUpTo": up_to, **extra}


def run(raw: list[dict[str, Any]], metrics=("compiled", "pass", "fast"), **kw: Any):
    records = parse_records((r["key"], r) for r in raw)
    return attribute_tables(tabulate(records, PLAYERS, list(metrics), kw.pop("unchanged", "count")),
                            replicates=kw.pop("replicates", 0), **kw)


def game(rep, metric: str, pooled: bool = False):
    return next(g for g in rep.games if g.metric == metric and g.pooled == pooled)


def test_parsed_records_and_simulated_columns_give_the_same_report() -> None:
    cols = simulate_columns(Design(6, 2, 0.5, True), np.random.default_rng(1))
    records = [UnitOutcome(key=f"u{i}", run="t", task=cols.task[i], generation=int(cols.generation[i]),
                             program_id=cols.program[i], coalition=[p for b, p in enumerate(PLAYERS) if cols.mask[i] >> b & 1],
                             rollout=int(cols.rollout[i]), sample=int(cols.sample[i]),
                             label=["fail", "compile", "pass", "fast"][cols.label[i]], evaluated_up_to="fast")
               for i in range(len(cols))]
    via_records = attribute_tables(tabulate(columns_of(records, PLAYERS), PLAYERS, ["pass"]), replicates=50)
    via_columns = attribute_tables(tabulate(cols, PLAYERS, ["pass"]), replicates=50)
    assert via_records.model_dump() == via_columns.model_dump()


def test_rollouts_of_the_same_programs_are_not_new_programs() -> None:
    # One program of twelve drives the debugger's effect; the others show none. More rollouts of the same
    # programs must not shrink the interval towards zero width (the audit saw [0.21, 0.29] at R = 30).
    def raw(rollouts: int) -> list[dict[str, Any]]:
        out = []
        for p, c, r in itertools.product(range(12), COALITIONS, range(rollouts)):
            hit = p == 0 and "debugger" in c
            out.append(rec(f"p{p}", c, "pass" if hit else "fail", rollout=r))
        return out
    widths = [game(run(raw(r), ["pass"]), "pass").banzhaf["debugger"] for r in (1, 30)]
    assert widths[0].value == pytest.approx(1 / 12) and widths[1].value == pytest.approx(1 / 12)
    w1, w30 = (e.high - e.low for e in widths)
    # The width is the one program's variation between programs; rollouts only sharpen the within-program
    # noise of the other eleven (the asymmetric interval's lower end moves by a few points), never 1/sqrt(30).
    assert w30 == pytest.approx(w1, rel=0.1) and w30 > 0.3
    # Nor is one program of twelve made significant by replaying it (treated as 360 outcomes, p ~ 1e-10).
    assert all(e.p_value > 0.01 for e in widths)


def test_all_zero_rates_keep_a_width_and_one_program_gives_no_interval() -> None:
    zero = run([rec(f"p{p}", c, "fail") for p in range(4) for c in COALITIONS], ["pass"])
    b = game(zero, "pass").banzhaf["debugger"]
    assert b.value == 0 and b.low < 0 < b.high  # never [0, 0]
    one = game(run([rec("p0", c, "pass" if "debugger" in c else "fail") for c in COALITIONS], ["pass"]), "pass")
    b = one.banzhaf["debugger"]
    assert b.value == 1.0 and b.low is None and b.high is None
    assert one.units == 1 and "no interval: one program" in one.interval_note


def test_a_program_lacking_fast_leaves_only_the_fast_games_with_its_reason() -> None:
    why = "pass; the frozen program could not be timed, so fast was not evaluated"
    raw = [rec(f"p{p}", c, "pass" if (p + len(c)) % 2 else "compile") for p in range(1, 6) for c in COALITIONS]
    raw += [rec("p0", c, "pass", up_to="pass", reason=why) for c in COALITIONS]
    rep = run(raw)
    fast, passed = game(rep, "fast"), game(rep, "pass")
    assert passed.programs == 6 and passed.excluded_programs == 0
    assert fast.evaluated and fast.programs == 5 and fast.excluded_programs == 1
    assert fast.exclusions[0].programs == 1 and why in fast.exclusions[0].reason
    report = {"metrics": rep.metrics, "notEvaluated": [], "units": {},
              "exclusions": {"fast": {"excluded": 1, "of": 6, "reasons": [{"programs": 1, "reason": fast.exclusions[0].reason}]}}}
    lines = summary_lines(report)
    assert any("1 of 6 programs not evaluated" in line and why in line for line in lines)
    assert not any("GPU" in line for line in lines)


def test_no_gpu_names_the_records_reason_and_drops_known_failures_with_the_rest() -> None:
    why = "compiled; not run: no GPU on this machine, so pass and fast were not evaluated"
    raw = [rec(f"p{p}", c, "compile", up_to="compile", reason=why) for p in range(3) for c in COALITIONS]
    raw += [rec("p3", c, "fail", up_to="compile", reason="nvcc: error") for c in COALITIONS]
    rep = run(raw)
    g = game(rep, "pass")
    # p3 failed everywhere (known to miss pass), but keeping it alone would select the game by outcome.
    assert not g.evaluated and g.programs == 0 and g.excluded_programs == 4
    assert any(why in e.reason for e in g.exclusions)
    assert game(rep, "compiled").programs == 4


def test_unequal_sample_counts_use_the_common_k_and_say_so() -> None:
    raw = [rec(f"p{p}", c, "fail", sample=s) for p in range(4) for c in COALITIONS for s in range(3)]
    raw.append(rec("p0", [], "pass", sample=3))  # a fourth sample in one cell only: it must not count
    g = game(run(raw, ["pass"]), "pass")
    assert g.samples == 3 and "best-of-3 everywhere" in g.balance
    assert g.values[""].value == 0.0


def test_holm_marks_only_what_survives_the_family() -> None:
    rng = np.random.default_rng(0)
    raw = [rec(f"p{p}", c, "pass" if rng.random() < (0.9 if "debugger" in c else 0.1) else "fail")
           for p in range(24) for c in COALITIONS]
    rep = run(raw, ["pass"])
    g = game(rep, "pass")
    assert g.banzhaf["debugger"].holm is True and g.banzhaf["debugger"].p_value < 1e-6
    assert g.banzhaf["analyzer"].holm is False
    assert rep.holm_family == 2 * (3 + 3)  # generation 0 and pooled: 3 values + 3 pairs each


def test_copies_rates_and_exclude_policy() -> None:
    raw = [rec(f"p{p}", c, "pass", unchanged=(c == [] and p < 2), reference="frozen") for p in range(4) for c in COALITIONS]
    raw += [rec("p0", [], "fail", arm="dummyPlan", unchanged=True, reference="baseline")]
    records = parse_records((r["key"], r) for r in raw)
    copies = copy_rates(records, PLAYERS)
    assert copies["byArm"]["coalition"] == {"unchanged": 2, "units": 32, "rate": 2 / 32}
    assert copies["byCoalition"][""]["rate"] == 0.5 and copies["byCoalition"]["debugger"]["unchanged"] == 0
    assert copies["byArm"]["dummyPlan"]["rate"] == 1.0
    assert references(records) == {"frozen": 32, "baseline": 1, "notTimed": 0}
    counted = game(run(raw, ["pass"]), "pass")
    excluded = game(run(raw, ["pass"], unchanged="exclude"), "pass")
    assert counted.programs == 4 and excluded.programs == 2  # p0, p1 had only a copy under ()
    assert "no outcomes under coalition '(none)'" in excluded.exclusions[0].reason


def test_plan_half_width_matches_the_simulated_interval_and_inverts() -> None:
    sd = design.unit_sd(0.15, 0.5, 1, 3)
    hw = design.half_width(12, sd)
    assert hw == pytest.approx(2.179 * sd / np.sqrt(12), rel=0.01)  # t at 12 degrees of freedom
    need = design.units_needed(sd)
    assert design.half_width(need, sd) <= 0.05 < design.half_width(need - 1, sd)
    assert design.half_width(1, sd) is None


def test_cli_plan_prints_half_width_and_takes_a_pilot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).parents[1] / "examples" / "h200-pipeline.yaml"
    assert cli_main(["plan", str(example), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["design"]
    assert rows[0]["perGeneration"]["units"] == 4 and rows[0]["pooled"]["units"] == 4
    assert rows[0]["source"] == "default" and rows[0]["perGeneration"]["programsFor0.05"] > 4
    pilot = tmp_path / "pilot"
    (pilot / "outcomes").mkdir(parents=True)
    rng = np.random.default_rng(3)
    for p, c in itertools.product(range(8), COALITIONS):
        label = "pass" if rng.random() < 0.3 + 0.4 * ("debugger" in c) * (p % 2) else "fail"
        r = rec(f"p{p}", c, label)
        (pilot / "outcomes" / f"{r['key']}.json").write_text(json.dumps(r))
    assert cli_main(["plan", str(example), "--json", "--pilot", str(pilot)]) == 0
    rows = json.loads(capsys.readouterr().out)["design"]
    assert {r["source"] for r in rows} == {"pilot"} and rows[0]["spread"] > 0
    with pytest.raises(SystemExit) as exit_:
        cli_main(["plan", str(example), "--pilot", str(tmp_path / "nothing")])
    assert exit_.value.code == 2 and "no outcome records" in capsys.readouterr().err


def test_a_game_that_few_programs_move_is_flagged_and_its_differences_widened() -> None:
    from cudanalyst.attribution.contrast import FEW_CHANGING

    # 48 programs, about 10 % of them able to succeed at all: the rest have one rate (0) under every coalition.
    columns = simulate_columns(Design(48, 1, 0.5, False, active=0.1), np.random.default_rng(3))
    game = attribute_tables(tabulate(columns, PLAYERS, ["pass"])).games[0]
    assert game.units == 48 and "exploratory: only" in game.interval_note
    changing = int(game.interval_note.split("exploratory: only ")[1].split(" of ")[0])
    assert 0 < changing < FEW_CHANGING
    # The same outcomes with a seam that hides the few-changing rule: the widened intervals contain them.
    import cudanalyst.attribution.contrast as contrast

    original = contrast.few_changing
    contrast.few_changing = lambda changing, units: False
    try:
        plain = attribute_tables(tabulate(columns, PLAYERS, ["pass"])).games[0]
    finally:
        contrast.few_changing = original
    for player in PLAYERS:
        wide, narrow = game.banzhaf[player], plain.banzhaf[player]
        assert wide.low <= narrow.low and wide.high >= narrow.high
    assert any(game.banzhaf[p].high - game.banzhaf[p].low > plain.banzhaf[p].high - plain.banzhaf[p].low + 1e-9
               for p in PLAYERS)
    dense = attribute_tables(tabulate(simulate_columns(Design(48, 1, 0.5, False), np.random.default_rng(3)),
                                      PLAYERS, ["pass"]))
    assert "exploratory" not in dense.games[0].interval_note
