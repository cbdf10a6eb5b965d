"""The run folder's contract: one progress model written by the runner and read back by everyone, with a
kernel-stage process's own object folded in, and the start objects written by one function."""

from __future__ import annotations

from cudanalyst.api import parse_run
from cudanalyst.report.demo import demo_spec
from cudanalyst.runfolder import PLAN, SPEC, read_shard_progress, write_start
from cudanalyst.runner.units import Failure, ProgressTracker, UnitStore
from cudanalyst.store import open_store


def test_an_llm_process_and_a_kernel_process_read_back_as_one_shard(tmp_path):
    units = UnitStore(open_store(str(tmp_path)))
    llm = ProgressTracker(shard=1, of=2, total=8, llm_done=8, kernels_done=0, gpu_seconds=1.0, stages=["llm"],
                          state="succeeded")
    llm.failures = [Failure("llm", "coder:length", "too long", ["a", "b"])]
    kernels = ProgressTracker(shard=1, of=2, total=8, kernels_done=5, gpu_seconds=2.5, stages=["kernels"])
    kernels.failures = [Failure("kernels", "worker", "crashed", ["c"])]
    units.write_progress(1, llm)
    units.write_progress(1, kernels)  # its own object: the two never overwrite each other's counts
    assert sorted(units.store.list("progress/")) == ["progress/shard-1.json", "progress/shard-1.kernels.json"]
    read = read_shard_progress(units.store, 1)
    assert read is not None
    assert (read.done, read.stage("llm").done, read.stage("kernels").done) == (5, 8, 5)
    assert read.gpu_seconds == 3.5 and read.failed_units == 3 and read.state == "running"
    assert read.stages == ["kernels", "llm"]
    assert read_shard_progress(units.store, 0) is None


def test_the_start_objects_are_the_run_without_status_and_the_plan_summary(tmp_path):
    store = open_store(str(tmp_path))
    run = parse_run(demo_spec(), "demo")
    write_start(store, run, {"units": 3})
    assert store.get_json(PLAN) == {"units": 3}
    spec = store.get_json(SPEC)
    assert spec["kind"] == "AttributionRun" and "status" not in spec and spec["spec"]["players"] == run.spec.players
