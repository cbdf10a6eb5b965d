"""The AttributionRun models: defaults, and errors that name the bad field by its path."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cudanalyst.api import SpecError, load_run, parse_run

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def base() -> dict:
    return yaml.safe_load(QUICKSTART.read_text())


def problems_of(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        parse_run(data, "run.yaml")
    return info.value.problems


def test_quickstart_defaults_are_filled_in():
    run = load_run(QUICKSTART)
    spec = run.spec
    assert spec.evaluation.fast_tolerance == pytest.approx(0.12)
    assert spec.models.resolved_coder is spec.models.planner  # the coder defaults to the planner
    assert spec.mode_of("profiler") == "raw"
    dumped = run.to_dict()
    assert dumped["spec"]["sampling"]["samplesPerCoalition"] == spec.sampling.samples_per_coalition  # camelCase on the wire
    assert "samples_per_coalition" not in dumped["spec"]["sampling"]


@pytest.mark.parametrize(
    ("edit", "path", "words"),
    [
        (lambda d: d["spec"].update(players=["debugger", "debugger"]), "spec", "unique"),
        (lambda d: d["spec"].update(players=[]), "spec.players", "at least 1"),
        (lambda d: d["spec"].update(players=[f"p{i}" for i in range(17)]), "spec.players", "at most 16"),
        (lambda d: d["spec"]["sampling"].update(samplesPerCoalition=0), "spec.sampling.samplesPerCoalition",
         "greater than or equal to 1"),
        (lambda d: d["spec"].update(colour="blue"), "spec.colour", "Extra inputs"),
        (lambda d: d["spec"]["resources"].update(shards=0), "spec.resources.shards", "greater than or equal"),
        (lambda d: d["spec"]["trajectory"].update(generations=[]), "spec.trajectory.generations", "at least 1"),
        (lambda d: d["spec"]["feedback"].update(modes={"linter": "raw"}), "spec", "linter"),
        (lambda d: d["spec"]["models"].update(planner={"serve": "endpoint"}), "spec.models.planner",
         "endpoint is required"),
        (lambda d: d["spec"]["output"].update(uri="s3:// bad"), "spec.output.uri", "pattern"),
        (lambda d: d["metadata"].update(name="Not_A_DNS_Label"), "metadata.name", "pattern"),
        (lambda d: d["spec"].update(planning="sometimes"), "spec.planning", "explicit"),
    ],
)
def test_bad_specs_name_the_field(edit, path, words):
    data = copy.deepcopy(base())
    edit(data)
    problems = problems_of(data)
    assert any(p == path and words in m for p, m in problems), problems


def test_malformed_yaml_names_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: cudanalyst.dev/v1alpha1\nkind: AttributionRun\nspec: [unclosed\n")
    with pytest.raises(SpecError) as info:
        load_run(bad)
    assert "bad.yaml" in str(info.value) and "line" in str(info.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(SpecError, match="nope.yaml.*file not found"):
        load_run(tmp_path / "nope.yaml")


def test_cli_validate_exit_codes(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "cudanalyst", "validate", str(QUICKSTART)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    data = base()
    data["spec"]["sampling"]["rollouts"] = 0
    bad = tmp_path / "zero.yaml"
    bad.write_text(yaml.safe_dump(data))
    res = subprocess.run([sys.executable, "-m", "cudanalyst", "validate", str(bad)], capture_output=True, text=True)
    assert res.returncode == 2
    assert "spec.sampling.rollouts" in res.stderr


@pytest.mark.parametrize(("toleration", "problem"), [
    ({"key": "", "value": "x"}, "operator must be Exists when key is empty"),
    ({"operator": "Equal"}, "operator must be Exists when key is empty"),
    ({"key": "gpu", "operator": "Exists", "value": "x"}, "value must be empty when operator is Exists"),
    ({"key": "not a key"}, "is not a qualified name"),
    ({"key": "k", "value": "two words"}, "is not a valid label value"),
    ({"key": "k", "value": "v", "tolerationSeconds": 30}, "only valid with effect NoExecute"),
])
def test_a_toleration_the_api_server_would_refuse_in_the_job_is_refused_in_the_spec(toleration, problem) -> None:
    # The fuzzed specs found one (an empty key with operator ""): the API server took the run, then refused its
    # Job, and the operator retried the Job forever.
    from cudanalyst.api import SpecError, parse_run

    doc = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    doc["spec"]["resources"]["tolerations"] = [toleration]
    with pytest.raises(SpecError, match=problem) as err:
        parse_run(doc)
    assert "spec.resources.tolerations[0]" in str(err.value)
    doc["spec"]["resources"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                               {"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 5}]
    assert len(parse_run(doc).spec.resources.tolerations) == 2
