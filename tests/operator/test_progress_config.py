"""Progress from shard objects, and the operator's settings from its environment (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cudanalyst.operator.config import ConfigError, load_config
from cudanalyst.operator.progress import read_shards, run_progress
from cudanalyst.runfolder import ShardProgress
from cudanalyst.store import open_store


def test_summary_adds_shards_and_estimates_time_left() -> None:
    shards = [ShardProgress.model_validate(doc) if doc else None for doc in [
        {"done": 10, "total": 20, "byStage": {"llm": {"done": 20}, "kernels": {"done": 10}},
         "gpuSeconds": 30.5, "failedUnits": 1},
        None,  # shard 1 has not written anything yet
        {"done": 10, "total": 20, "byStage": {"llm": {"done": 12}, "kernels": {"done": 10}}, "gpuSeconds": 9.5,
         "failures": [{"units": 1, "unitKeys": ["a"]}]},  # an older writer: no failedUnits
    ]]
    now = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    progress, gpu = run_progress(shards, 60, "2026-01-01T00:00:00Z", now)
    doc = progress.model_dump(by_alias=True, mode="json")  # what the status patch carries
    assert doc["done"] == 20 and doc["total"] == 60 and doc["text"] == "20/60"
    assert doc["percent"] == 33.3
    assert doc["etaSeconds"] == 1200  # 600 s for 20 units, 40 to go
    assert doc["llm"] == {"done": 32, "total": 60} and doc["kernels"]["done"] == 20
    assert doc["failures"] == 2
    assert gpu == 40.0


def test_summary_never_exceeds_the_plan() -> None:
    progress, _ = run_progress([ShardProgress(done=99)], 10, "2026-01-01T00:00:00Z", datetime(2026, 1, 1, tzinfo=UTC))
    assert progress.done == 10 and progress.percent == 100.0 and progress.eta_seconds == 0


def test_read_shards_from_a_real_store(tmp_path) -> None:
    store = open_store(tmp_path.as_uri())
    store.put_json("progress/shard-1.json", {"done": 3})
    store.put_json("progress/shard-2.json", {"done": "many"})  # unreadable: counts as nothing done
    assert read_shards(store, 3) == [None, ShardProgress(done=3), None]


def test_config_from_environment() -> None:
    config = load_config({"CUDANALYST_NAMESPACES": "a, b", "CUDANALYST_STATUS_INTERVAL": "2.5",
                          "CUDANALYST_RUNNER_POD_LABELS": "x=1,y=2"})
    assert config.namespaces == ("a", "b") and config.status_interval == 2.5
    assert config.runner_pod_labels == {"x": "1", "y": "2"}
    assert load_config({}).namespaces == ()
    # Job and Pod changes are followed on their events; the timer is only a slow safety net.
    assert load_config({}).status_interval == 60.0


@pytest.mark.parametrize("env,needle", [
    ({"CUDANALYST_STATUS_INTERVAL": "soon"}, "CUDANALYST_STATUS_INTERVAL"),
    ({"CUDANALYST_BACKOFF_LIMIT_PER_INDEX": "-1"}, "CUDANALYST_BACKOFF_LIMIT_PER_INDEX"),
    ({"CUDANALYST_IMAGE_PULL_POLICY": "Sometimes"}, "CUDANALYST_IMAGE_PULL_POLICY"),
    ({"CUDANALYST_RUNNER_POD_LABELS": "novalue"}, "CUDANALYST_RUNNER_POD_LABELS"),
])
def test_bad_environment_names_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config(env)
