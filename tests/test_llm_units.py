"""Unit records and weights in a real store: a folder and moto's S3 server, through the same interface."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudanalyst.outcomes import UnitCandidate
from cudanalyst.runfolder import read_shard_progress
from cudanalyst.runner.units import Failure, ProgressTracker, UnitStore, group_key
from cudanalyst.runner.weights import WeightsError, resolve_model_path, sync_prefix
from cudanalyst.store import ObjectStore, open_store


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path: Path) -> ObjectStore:
    if request.param == "file":
        return open_store(str(tmp_path / "store"))
    return request.getfixturevalue("s3_store")


def cand(key: str, **kw) -> UnitCandidate:
    return UnitCandidate(key=key, run="r", task="gemm", generation=1, program_id="p1", coalition=["debugger"],
                           **kw)


def test_a_finished_unit_is_written_once_and_its_error_cleared(store: ObjectStore) -> None:
    units = UnitStore(store.child("run/"))
    units.write_error(cand("u1", error="planner: endpoint unreachable"))
    assert units.error_keys() == {"u1"}
    assert units.write_candidate(cand("u1", completion="first", code=None, reason="empty completion"))
    assert not units.write_candidate(cand("u1", completion="second"))
    assert units.read_candidate("u1").completion == "first"
    assert units.error_keys() == set() and units.finished_candidates() == {"u1"}


def test_plans_and_summaries_keep_the_first_writer(store: ObjectStore) -> None:
    units = UnitStore(store)
    g = group_key("r", "p1", ("debugger",), "coalition", 0)
    assert units.read_planner_text(g) is None
    assert units.write_planner_text(g, {"plan": "A"})["plan"] == "A"
    assert units.write_planner_text(g, {"plan": "B"})["plan"] == "A"  # a racing shard gets the stored plan
    assert units.write_summary("p1", "profiler", {"summary": "s1"})["summary"] == "s1"
    assert units.read_summary("p1", "profiler") == {"summary": "s1"}
    assert group_key("r", "p1", ("debugger",), "coalition", 1) != g


def test_progress_is_one_small_object(store: ObjectStore) -> None:
    units = UnitStore(store)
    progress = ProgressTracker(shard=2, of=4, total=10, llm_done=7, kernels_done=3, stages=["llm"])
    progress.failures = [Failure("llm", "coder:prompt-too-long", "too long", [f"k{i}" for i in range(30)])]
    units.write_progress(2, progress)
    doc = store.get_json("progress/shard-2.json")  # the wire form: camelCase, readable without the model
    assert (doc["done"], doc["total"], doc["byStage"]["llm"]["done"], doc["failedUnits"]) == (3, 10, 7, 30)
    assert doc["failures"][0]["units"] == 30 and len(doc["failures"][0]["unitKeys"]) == 10
    read = read_shard_progress(units.store, 2)
    assert read is not None and (read.done, read.stage("llm").done, read.failed_units) == (3, 7, 30)
    assert read_shard_progress(units.store, 3) is None


def test_weights_from_an_s3_prefix_are_synced_once(s3_store: ObjectStore, tmp_path: Path) -> None:
    model = s3_store.child("models/m/")
    model.put_json("config.json", {"model_type": "llama"})
    model.put_bytes("sub/weights.bin", b"\x00" * 1000)
    target = sync_prefix(model, tmp_path / "w", "s3://b/models/m/")
    assert json.loads((target / "config.json").read_text()) == {"model_type": "llama"}
    assert (target / "sub" / "weights.bin").stat().st_size == 1000
    (target / "sub" / "weights.bin").write_bytes(b"local")  # unchanged listing: no copy again
    sync_prefix(model, tmp_path / "w", "s3://b/models/m/")
    assert (target / "sub" / "weights.bin").read_bytes() == b"local"
    with pytest.raises(WeightsError, match="no objects under"):
        sync_prefix(s3_store.child("models/none/"), tmp_path / "x", "s3://b/models/none/")
    s3_store.child("models/bad/").put_bytes("weights.bin", b"1")
    with pytest.raises(WeightsError, match="no config.json"):
        sync_prefix(s3_store.child("models/bad/"), tmp_path / "y", "s3://b/models/bad/")


def test_local_weights_must_be_a_model_folder(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match="does not exist"):
        resolve_model_path(str(tmp_path / "nope"))
    with pytest.raises(WeightsError, match="does not exist"):
        resolve_model_path("some-org/some-model")  # a hub name is never fetched
    (tmp_path / "m").mkdir()
    with pytest.raises(WeightsError, match="no config.json"):
        resolve_model_path(str(tmp_path / "m"))
    (tmp_path / "m" / "config.json").write_text("{}")
    assert resolve_model_path(f"file://{tmp_path / 'm'}") == str((tmp_path / "m").resolve())
    (tmp_path / "cache" / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "cache" / "models" / "tiny" / "config.json").write_text("{}")
    assert resolve_model_path("tiny", cache=tmp_path / "cache") == str((tmp_path / "cache" / "models" / "tiny").resolve())
    with pytest.raises(WeightsError, match="or the name of a folder in"):
        resolve_model_path("other", cache=tmp_path / "cache")
