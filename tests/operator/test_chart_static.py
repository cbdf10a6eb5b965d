"""Chart pieces testable without helm: the values schema, and the Argo CD Lua health check (run in Lua)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cudanalyst.operator.conditions import Observation, conditions_for, invalid, judge

CHART = Path(__file__).resolve().parents[2] / "charts" / "cudanalyst"


def schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def test_default_values_fit_the_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema())


@pytest.mark.parametrize("change,where", [
    ({"image": {"repository": "r", "digest": "latest"}}, "digest"),
    ({"containerSecurityContext": {"readOnlyRootFilesystem": False, "allowPrivilegeEscalation": False}},
     "readOnlyRootFilesystem"),
    ({"securityContext": {"runAsNonRoot": False}}, "runAsNonRoot"),
    ({"watchNamespaces": ["Not_A_Namespace"]}, "watchNamespaces"),
    ({"runner": {"serviceAccount": {"name": "x"}, "stage": "everything"}}, "stage"),
    ({"replicas": 2}, "replicas"),
])
def test_bad_values_are_refused_by_the_schema(change: dict[str, Any], where: str) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values.update(change)
    with pytest.raises(jsonschema.ValidationError) as info:
        jsonschema.validate(values, schema())
    assert where in str(info.value)


def lua_health(obj: dict[str, Any]) -> dict[str, str]:
    lupa = pytest.importorskip("lupa", reason="lupa (a Lua runtime for Python) runs Argo CD's Lua check")
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    script = (CHART / "files" / "argocd-health.lua").read_text()
    result = lua.execute(script)
    return {"status": result["status"], "message": result["message"]}


def run_with(verdict: Any, generation: int = 1, observed: int = 1) -> dict[str, Any]:
    return {"metadata": {"generation": generation},
            "status": {"observedGeneration": observed,
                       "conditions": conditions_for(verdict, [], observed, "2026-01-01T00:00:00Z")}}


def observation(job: dict[str, Any] | None, **kw: Any) -> Observation:
    values: dict[str, Any] = {"generation": 1, "spec_suspend": False, "queued": False, "job": job,
                              "done": 1, "total": 4}
    values.update(kw)
    return Observation(**values)


RUNNING = {"suspend": False, "active": 1, "conditions": []}
COMPLETE = {"suspend": False, "active": 0, "conditions": [{"type": "Complete", "status": "True"}]}
FAILED = {"suspend": False, "active": 0, "failedIndexes": "0",
          "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}


def test_argocd_health_follows_the_conditions_the_operator_writes() -> None:
    assert lua_health({"metadata": {}})["status"] == "Progressing"
    assert lua_health(run_with(judge(observation(RUNNING))))["status"] == "Progressing"
    assert lua_health(run_with(judge(observation(COMPLETE, aggregated=True))))["status"] == "Healthy"
    failed = lua_health(run_with(judge(observation(FAILED))))
    assert failed["status"] == "Degraded" and "failed shards: 0" in failed["message"]
    stalled = lua_health(run_with(invalid("InvalidSpec", "invalid spec: spec.players: must be unique")))
    assert stalled == {"status": "Degraded", "message": "invalid spec: spec.players: must be unique"}
    suspended = judge(observation({**RUNNING, "suspend": True}, spec_suspend=True))
    assert lua_health(run_with(suspended))["status"] == "Suspended"
    # A status from an older generation says nothing about the current spec yet.
    assert lua_health(run_with(judge(observation(COMPLETE, aggregated=True)), generation=2))["status"] == "Progressing"
