"""bench/server_start.py (issue 32): its summary, and bad input refused before any server starts. The bench
itself runs vLLM (the H200 is where its ratio means something; vLLM's CPU build forces spawn)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_support import load_script

BENCH = Path(__file__).resolve().parents[1] / "bench" / "server_start.py"


def bench():  # type: ignore[no-untyped-def]
    return load_script(BENCH, "bench_server_start")


def test_the_ratio_is_fork_over_spawn_of_the_medians() -> None:
    starts = [{"method": "spawn", "healthyAfter": 50.0}, {"method": "fork", "healthyAfter": 30.0},
              {"method": "fork", "healthyAfter": 40.0}, {"method": "spawn", "healthyAfter": 54.0},
              {"method": "spawn", "healthyAfter": 90.0}]
    got = bench().summary(starts)
    assert got["medians"] == {"spawn": 54.0, "fork": 35.0}
    assert got["ratio"] == pytest.approx(35.0 / 54.0)
    assert bench().summary(starts[:1])["ratio"] is None  # one way only: no ratio


def test_bad_input_exits_2_naming_it_before_any_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench().main([str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "left.txt").write_text("an earlier run's")
    assert bench().main([str(tmp_path), "--cache", str(tmp_path / "cache")]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert bench().main([str(tmp_path), "--rounds", "0"]) == 2
