"""Local mode over several GPUs (issue 15): which GPUs, how the shards are spread, and the lanes' processes.

The pure functions are checked on their own; then `cudanalyst run --stage kernels` over two lanes runs real
runner processes here (CUDA_VISIBLE_DEVICES names two GPUs; this machine has none, so kernels are compiled
only): one kernel-stage process per lane, each with its own shards and its own GPU in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from lanes_support import kernel_summaries, kernels_only_spec, write_candidates

from cudanalyst.api import load_run
from cudanalyst.planned_run import plan_run
from cudanalyst.runner.local.executor import RunInputError, lanes_for, vllm_cache
from cudanalyst.runner.local.gpus import (
    GpuChoiceError,
    Lane,
    choose_gpus,
    count_from_smi,
    local_shard_count,
    make_lanes,
    memory_from_smi,
    parse_visible,
    requested_count,
    split_shards,
    visible_gpus,
)


@pytest.mark.parametrize(("value", "gpus"), [
    ("0,1", ["0", "1"]), (" 2 , 3", ["2", "3"]), ("", []), ("-1", []), ("1,-1,0", ["1"]),
    ("0,,1", ["0"]), ("GPU-8f3a,GPU-77c1", ["GPU-8f3a", "GPU-77c1"]), ("MIG-GPU-1/0/0", ["MIG-GPU-1/0/0"]),
    ("nvidia0", []),
])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(value, gpus):
    assert parse_visible(value) == gpus


def test_nvidia_smi_listing_counts_gpus_not_mig_instances():
    listing = ("GPU 0: NVIDIA H200 (UUID: GPU-1)\n  MIG 3g.71gb Device 0: (UUID: MIG-1)\n"
               "GPU 1: NVIDIA H200 (UUID: GPU-2)\n")
    assert count_from_smi(listing) == 2
    assert count_from_smi("") == 0


def test_the_environment_decides_before_nvidia_smi():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "4,6"}) == ["4", "6"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_the_flag_wins_over_the_environment_and_bad_values_are_named():
    assert requested_count(None, {}) is None
    assert requested_count(None, {"CUDANALYST_GPUS": "2"}) == 2
    assert requested_count(1, {"CUDANALYST_GPUS": "2"}) == 1
    with pytest.raises(GpuChoiceError, match="--gpus 0"):
        requested_count(0, {})
    with pytest.raises(GpuChoiceError, match=r"\$CUDANALYST_GPUS='two'"):
        requested_count(None, {"CUDANALYST_GPUS": "two"})


def test_choose_gpus_takes_the_first_ones_or_says_what_is_visible():
    assert choose_gpus(None, ["0", "1", "2"]) == ["0", "1", "2"]
    assert choose_gpus(2, ["5", "7", "9"]) == ["5", "7"]
    with pytest.raises(GpuChoiceError, match=r"3 GPU\(s\) asked for, 2 visible \(0, 1\)"):
        choose_gpus(3, ["0", "1"])
    with pytest.raises(GpuChoiceError, match="none visible"):
        choose_gpus(1, [])


@pytest.mark.parametrize(("shards", "gpus", "local"), [
    (4, 0, 4), (4, 1, 4), (4, 2, 8), (4, 3, 12), (1, 2, 2), (3, 2, 6), (1, 8, 8), (8, 8, 64),
])
def test_every_gpu_gets_the_spec_s_shard_count(shards, gpus, local):
    assert local_shard_count(shards, gpus) == local


@pytest.mark.parametrize("gpus", [[], ["0"], ["0", "1"], ["3", "1", "2"], [str(i) for i in range(8)]])
@pytest.mark.parametrize("asked", [1, 2, 3, 4, 7, 16])
def test_every_shard_goes_to_exactly_one_lane_and_the_lanes_are_even(gpus, asked):
    shards = local_shard_count(asked, len(gpus))
    lanes = make_lanes(shards, gpus)
    assert len(lanes) == max(1, len(gpus))
    dealt = sorted(s for lane in lanes for s in lane.shards)
    assert dealt == list(range(shards))
    assert len({len(lane.shards) for lane in lanes}) == 1
    assert [lane.gpu for lane in lanes] == (gpus or [None])
    for lane in lanes:  # a pinned lane's processes see its GPU alone; an unpinned one changes nothing
        assert lane.env() == ({"CUDA_VISIBLE_DEVICES": lane.gpu} if lane.gpu is not None else {})


def test_each_lane_s_servers_have_a_vllm_cache_of_their_own():
    lanes = make_lanes(2, ["0", "1"])
    caches = [vllm_cache(lane.name, {"VLLM_CACHE_ROOT": "/c"})["VLLM_CACHE_ROOT"] for lane in lanes]
    assert caches == ["/c/gpu0", "/c/gpu1"]
    assert vllm_cache(lanes[1].name, {"XDG_CACHE_HOME": "/x"}) == {"VLLM_CACHE_ROOT": "/x/vllm/gpu1"}


def test_a_lane_s_shards_are_dealt_over_its_servers_and_a_gpu_s_memory_is_read():
    assert split_shards((0, 2, 4, 6), 2) == [(0, 4), (2, 6)]
    assert split_shards((1, 3, 5), 2) == [(1, 5), (3,)]
    assert split_shards((0, 1), 1) == [(0, 1)]
    with pytest.raises(ValueError, match="2 model servers per GPU need at least as many shards per GPU, and a lane has 1"):
        split_shards((0,), 2)
    with pytest.raises(ValueError, match="at least 1"):
        split_shards((0,), 0)
    assert memory_from_smi("81559\n") == 81559 << 20 and memory_from_smi("[N/A]\n") is None
    assert memory_from_smi("") is None


def test_uneven_shards_are_refused_rather_than_one_gpu_getting_more():
    with pytest.raises(ValueError, match="do not spread evenly"):
        make_lanes(3, ["0", "1"])
    assert make_lanes(2, ["0", "1"]) == [Lane(0, "0", (0,)), Lane(1, "1", (1,))]


def test_a_run_spread_over_two_gpus_keeps_every_unit_once(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.delenv("CUDANALYST_GPUS", raising=False)
    run = load_run(kernels_only_spec(tmp_path, programs=4, shards=3))
    local, lanes = lanes_for(run)
    assert [lane.gpu for lane in lanes] == ["3", "5"]
    assert local.spec.resources.shards == 6 and run.spec.resources.shards == 3  # the user's spec is not changed
    assert [lane.shards for lane in lanes] == [(0, 2, 4), (1, 3, 5)]
    plan, theirs = plan_run(local), plan_run(run)
    assert sorted(u.key for s in plan.shards for u in s) == sorted(u.key for u in theirs.units)
    per_lane = [sum(len(plan.shards[s]) for s in lane.shards) for lane in lanes]
    assert per_lane == [len(theirs.units) // 2] * 2  # the programs split evenly: same work per GPU
    with pytest.raises(RunInputError, match="3 GPU"):
        lanes_for(run, 3)


def cudanalyst_run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudanalyst", "run", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "COLUMNS": "2000", **env})  # one summary a line


def test_more_gpus_than_visible_is_invalid_input_and_nothing_is_written(tmp_path):
    spec = kernels_only_spec(tmp_path)
    res = cudanalyst_run(str(spec), "--stage", "kernels", "--gpus", "3", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert res.returncode == 2 and "3 GPU(s) asked for, 2 visible (0, 1)" in res.stderr, res.stderr
    assert not (tmp_path / "runs" / "quickstart" / "outcomes").exists()


def test_kernel_stage_runs_one_process_per_gpu_each_on_its_own_gpu(tmp_path):
    spec = kernels_only_spec(tmp_path, programs=2, shards=1)
    units = write_candidates(spec)
    cache = tmp_path / "compile-cache"  # its own nvcc cache: both lanes compile here, at once
    res = cudanalyst_run(str(spec), "--stage", "kernels", env={"CUDA_VISIBLE_DEVICES": "0,1",
                                                                "CUDANALYST_COMPILE_CACHE": str(cache),
                                                                "TMPDIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "2 shard(s) on 2 GPUs (0, 1)" in res.stderr
    summaries = kernel_summaries(res.stderr)
    # One kernel-stage process per lane: shard 0 on GPU 0, shard 1 on GPU 1, each with its own half.
    assert {s: gpu for s, (_, _, gpu) in summaries.items()} == {"0": "0", "1": "1"}, res.stderr[-3000:]
    assert [summaries[s][:2] for s in ("0", "1")] == [(units // 2, units // 2)] * 2
    outcomes = list((tmp_path / "runs" / "quickstart" / "outcomes").glob("*.json"))
    assert len(outcomes) == units
    assert {json.loads(p.read_text())["label"] for p in outcomes} == {"compile"}  # compiled; no GPU to run it
    progress = sorted(p.name for p in (tmp_path / "runs" / "quickstart" / "progress").glob("*.json"))
    assert progress == ["shard-0.kernels.json", "shard-1.kernels.json"]


def test_one_gpu_asked_for_keeps_one_lane(tmp_path):
    spec = kernels_only_spec(tmp_path, programs=2, shards=2)
    write_candidates(spec)
    res = cudanalyst_run(str(spec), "--stage", "kernels", "--gpus", "1",
                         env={"CUDA_VISIBLE_DEVICES": "0,1", "CUDANALYST_COMPILE_CACHE": str(tmp_path / "cache"),
                              "TMPDIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert {s: gpu for s, (_, _, gpu) in kernel_summaries(res.stderr).items()} == {"0-1": "0"}
    assert "2 shard(s) ->" in res.stderr  # the spec's own count, on one GPU

