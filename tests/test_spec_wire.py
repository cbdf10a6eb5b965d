"""Local mode reads a spec as the API server does (cudanalyst.api.wire, strict types): the differences the fuzzed
specs of issue 33 found between `cudanalyst validate` and the real API server, each pinned here. The cluster side of
every case is tests/cluster/test_e2e_fuzz.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from cudanalyst.api import SpecError, parse_run

BASE: dict[str, Any] = {
    "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": "w"},
    "spec": {"trajectory": {"uri": "builtin://example", "generations": [0]}, "players": ["debugger"],
             "models": {"planner": {"endpoint": "http://127.0.0.1:9/v1", "model": "m"}}, "output": {"uri": "/tmp/o"},
             "sampling": {"rollouts": 1}, "resources": {"shards": 1}},
}


def spec_with(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    node = doc["spec"]
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return doc


@pytest.mark.parametrize(("path", "value", "words"), [
    ("resources.shards", "3", "spec.resources.shards"),  # a number as a string: the API server's "must be of type"
    ("resources.shards", True, "spec.resources.shards"),
    ("suspend", "true", "spec.suspend"),
    ("suspend", 1, "spec.suspend"),
    ("sampling.temperature", "0.5", "spec.sampling.temperature"),
    ("sampling.seed", 2**63, "spec.sampling.seed: 9223372036854775808 is outside the 64-bit integer range"),
    ("trajectory.generations", [0.0], "spec.trajectory.generations[0]: expected an integer"),
    ("models.planner.serve", None, "spec.models.planner.serve: null is not a supported value"),
])
def test_refused_here_as_the_api_server_refuses_it(path: str, value: Any, words: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_run(spec_with(path, value))
    assert words in str(info.value)


def test_read_as_the_api_server_stores_it() -> None:
    # A null where none is allowed is pruned (the default applies); an integral float is the integer.
    run = parse_run(spec_with("planning", None))
    assert run.spec.planning == "explicit"
    run = parse_run(spec_with("resources.shards", 3.0))
    assert run.spec.resources.shards == 3 and isinstance(run.spec.resources.shards, int)
    assert parse_run(spec_with("sampling.seed", 2**63 - 1)).spec.sampling.seed == 2**63 - 1
    assert parse_run(spec_with("sampling.temperature", 1)).spec.sampling.temperature == 1.0


def test_whitespace_is_ascii_whitespace_as_in_the_api_servers_regex() -> None:
    # Go's RE2 reads \s as ASCII whitespace: a no-break space is not one, a tab is.
    assert parse_run(spec_with("models.planner.endpoint", "http://h\u00a0x/v1")).spec.models.planner.endpoint
    with pytest.raises(SpecError, match="spec.models.planner.endpoint"):
        parse_run(spec_with("models.planner.endpoint", "http://h\tx/v1"))
    with pytest.raises(SpecError, match="spec.output.uri"):
        parse_run(spec_with("output.uri", "/tmp/a b"))


def test_files_are_read_as_kubectl_reads_them(tmp_path: Any) -> None:
    from cudanalyst.api import load_run

    # JSON as JSON: a character beyond U+FFFF (escaped as a surrogate pair) and 5e-324 survive.
    # (resources.image is free text; queueName must be a label value since the fuzz e2e found the API server's rule.)
    doc = spec_with("resources.image", "q\U000e02a7")
    doc["spec"]["sampling"]["temperature"] = 5e-324
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    run = load_run(path)
    assert run.spec.resources.image == "q\U000e02a7" and run.spec.sampling.temperature == 5e-324
    # YAML: 1e-5 is a number, as for kubectl, not the string PyYAML's YAML 1.1 makes of it.
    text = path.with_suffix(".yaml")
    text.write_text(yaml.safe_dump(BASE) + "  evaluation: {rtol: 1e-5, atol: 2E-6}\n")
    evaluation = load_run(text).spec.evaluation
    assert (evaluation.rtol, evaluation.atol) == (1e-5, 2e-6)


def test_a_trajectory_name_too_long_for_the_file_system_is_a_plan_error() -> None:
    # Valid for the schema (2,048 characters), too long for a file name: `cudanalyst plan` crashed with OSError and
    # the operator's start handler would have retried it forever; now it is the spec's fault, named.
    from cudanalyst.planned_run import PlanError, plan_run

    run = parse_run(spec_with("trajectory.uri", "builtin://example" + "a" * 2000))
    with pytest.raises(PlanError, match="spec.trajectory.uri: no builtin trajectory"):
        plan_run(run)


def test_the_schema_read_here_is_the_crds() -> None:
    # wire.py reads types, nullability and enums from the models itself (the core may not import cudanalyst.crd
    # from cudanalyst.api); they must be the CRD's, for both kinds.
    from cudanalyst.api import AttributionRun
    from cudanalyst.api.recording import TrajectoryRecording
    from cudanalyst.api.wire import structural_schema
    from cudanalyst.crd import openapi_schema, recording_schema

    def differences(ours: dict[str, Any], crd: dict[str, Any], path: str) -> list[str]:
        found = [f"{path}: {k}" for k in ("type", "nullable", "enum") if ours.get(k) != crd.get(k)]
        for name in set(ours.get("properties", {})) | set(crd.get("properties", {})):
            found += differences(ours.get("properties", {}).get(name, {}), crd.get("properties", {}).get(name, {}),
                                 f"{path}.{name}")
        if "items" in ours or "items" in crd:
            found += differences(ours.get("items", {}), crd.get("items", {}), f"{path}[]")
        return found

    for model, crd in ((AttributionRun, openapi_schema()), (TrajectoryRecording, recording_schema())):
        assert differences(structural_schema(model)["properties"]["spec"], crd["properties"]["spec"], "spec") == []
