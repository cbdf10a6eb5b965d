"""The generated CRD on a real kube-apiserver (with etcd): accepted, CEL rules enforced, nothing pruned.

Needs the binaries from scripts/build-control-plane.sh; skipped with that reason otherwise.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from apiserver_crd import apiserver_with_crd

from cudanalyst.api import API_GROUP, API_VERSION, PLURAL, AttributionRunStatus
from cudanalyst.api.status import Condition, MetricCount, PlayerValue, Results, RunProgress
from cudanalyst.crd import CHART_PATH, build_crd

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[1]
NS = "default"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with apiserver_with_crd(tmp_path_factory.mktemp("crd-apiserver"), NS) as kubeconfig:
        from kubernetes import client, config

        with config.new_client_from_config(config_file=str(kubeconfig)) as c:
            yield client.CustomObjectsApi(c), client


def quickstart(name: str) -> dict[str, Any]:
    body = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    body["metadata"]["name"] = name
    return body


def create(co: Any, body: dict[str, Any]) -> dict[str, Any]:
    return co.create_namespaced_custom_object(API_GROUP, API_VERSION, NS, PLURAL, body)


def test_chart_crd_is_the_same_schema():
    text = (ROOT / CHART_PATH).read_text()
    body = yaml.safe_load("\n".join(line for line in text.splitlines() if not line.startswith("{{")))
    assert body["spec"] == build_crd()["spec"]


def test_defaults_filled_and_status_round_trips(api):
    co, _ = api
    obj = create(co, quickstart("roundtrip"))
    assert obj["spec"]["evaluation"]["fastTolerance"] == pytest.approx(0.12)
    status = AttributionRunStatus(
        phase="Running", observed_generation=1, start_time="2026-11-29T00:00:00Z",
        conditions=[Condition(type="Ready", status="False", reason="Running", message="3/72 units",
                              last_transition_time="2026-11-29T00:00:00Z", observed_generation=1)],
        progress=RunProgress(done=3, total=72, percent=4.2, text="3/72", eta_seconds=60),
        results=Results(top_player="analyzer", metric="compiled",
                        banzhaf=[PlayerValue(player="analyzer", metric="compiled", generation="pooled",
                                             value=0.25, low=0.1, high=0.4),
                                 PlayerValue(player="analyzer", metric="fastVsBaseline", generation="pooled",
                                             value=0.05)],
                        reached=[MetricCount(metric=m, reached=r, known=70, units=72)
                                 for m, r in (("fastVsBaseline", 9), ("fastVsFrozen", 4))]),
        report_uri="runs/roundtrip/report/report.json",
    ).model_dump(by_alias=True, exclude_none=True, mode="json")
    co.patch_namespaced_custom_object_status(API_GROUP, API_VERSION, NS, PLURAL, "roundtrip", {"status": status})
    got = co.get_namespaced_custom_object(API_GROUP, API_VERSION, NS, PLURAL, "roundtrip")["status"]
    for key, value in status.items():  # every field the models declare survives (nothing pruned)
        assert got[key] == value, key


def test_spec_frozen_once_started_except_suspend(api):
    co, client = api
    create(co, quickstart("frozen"))
    co.patch_namespaced_custom_object(API_GROUP, API_VERSION, NS, PLURAL, "frozen",
                                      {"spec": {"sampling": {"rollouts": 2}}})  # not started: allowed
    co.patch_namespaced_custom_object_status(API_GROUP, API_VERSION, NS, PLURAL, "frozen",
                                             {"status": {"startTime": "2026-11-29T00:00:00Z"}})
    with pytest.raises(client.ApiException) as info:
        co.patch_namespaced_custom_object(API_GROUP, API_VERSION, NS, PLURAL, "frozen",
                                          {"spec": {"sampling": {"rollouts": 3}}})
    assert info.value.status == 422 and "only spec.suspend may change" in info.value.body
    co.patch_namespaced_custom_object(API_GROUP, API_VERSION, NS, PLURAL, "frozen", {"spec": {"suspend": True}})
    got = co.get_namespaced_custom_object(API_GROUP, API_VERSION, NS, PLURAL, "frozen")
    assert got["spec"]["suspend"] is True and got["spec"]["sampling"]["rollouts"] == 2


@pytest.mark.parametrize(
    ("name", "edit", "words"),
    [
        ("dup-players", lambda s: s.update(players=["a", "a"]), "spec.players must be unique"),
        ("no-players", lambda s: s.update(players=[]), "spec.players"),
        ("many-players", lambda s: s.update(players=[f"p{i}" for i in range(17)]), "spec.players"),
        ("zero-shards", lambda s: s["resources"].update(shards=0), "spec.resources.shards"),
        ("bad-mode", lambda s: s["feedback"].update(modes={"linter": "raw"}), "spec.feedback.modes"),
        ("dup-gens", lambda s: s["trajectory"].update(generations=[0, 0]), "generations must be unique"),
        ("bad-planning", lambda s: s.update(planning="sometimes"), "spec.planning"),
        ("zero-samples", lambda s: s["sampling"].update(samplesPerCoalition=0), "samplesPerCoalition"),
        ("fast-twice", lambda s: s["attribution"].update(metrics=["pass", "fast", "fastVsFrozen"]),
         "spec.attribution.metrics must name each metric once"),
        ("dup-metrics", lambda s: s["attribution"].update(metrics=["pass", "pass"]),
         "spec.attribution.metrics must name each metric once"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(api, name, edit, words):
    co, client = api
    body = copy.deepcopy(quickstart(name))
    edit(body["spec"])
    with pytest.raises(client.ApiException) as info:
        create(co, body)
    assert info.value.status == 422 and words in info.value.body, info.value.body


def test_unknown_fields_are_pruned_not_stored(api):
    co, _ = api
    body = quickstart("pruned")
    body["spec"]["colour"] = "blue"
    obj = create(co, body)
    time.sleep(0.1)
    assert "colour" not in obj["spec"]
