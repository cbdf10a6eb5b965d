"""The CRD is generated from the models, checked in, and accepts what the code writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cudanalyst import crd
from cudanalyst.api import AttributionRunStatus, Condition, parse_run
from cudanalyst.api.status import PlayerValue, Results, RunProgress

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.yaml") if "kind: AttributionRun" in p.read_text())


def test_checked_in_crd_matches_models():
    res = subprocess.run([sys.executable, "-m", "cudanalyst", "crd", "--check", "--root", str(ROOT)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr + "\n(run `cudanalyst crd --write` after changing the models)"


def test_drift_is_detected(tmp_path):
    crd.write_files(tmp_path)
    path = tmp_path / crd.MANIFEST_PATH
    path.write_text(path.read_text().replace("maxItems: 16", "maxItems: 17"))
    res = subprocess.run([sys.executable, "-m", "cudanalyst", "crd", "--check", "--root", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "manifests/crd.yaml" in res.stderr


def test_schema_is_structural():
    """No construct the API server rejects in a structural schema survives generation."""
    text = crd.render_manifest()
    for banned in ("$ref", "anyOf", "$defs", "title:", "const:"):
        assert banned not in text
    doc = yaml.safe_load(text)
    version = doc["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names == ["Ready", "Phase", "Progress", "Top player", "Age", "Reason"]


def test_cel_rules_present():
    schema = crd.openapi_schema()
    rules = [r["rule"] for r in schema["properties"]["spec"]["x-kubernetes-validations"]]
    assert any("players" in r and "exists_one" in r for r in rules)
    root_rule = schema["x-kubernetes-validations"][0]["rule"]
    assert "oldSelf.status.startTime" in root_rule and "self.spec.suspend" not in root_rule
    assert "self.spec.players == oldSelf.spec.players" in root_rule


def test_chart_copy_is_kept_on_uninstall():
    text = (ROOT / crd.CHART_PATH).read_text()
    assert "helm.sh/resource-policy: keep" in text and text.strip().endswith("{{- end }}")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_validate_against_models_and_crd(path):
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc.get("kind") != "AttributionRun":
            continue
        parse_run(doc, str(path))
        errors = list(crd.validator().iter_errors(doc))
        assert not errors, [e.message for e in errors]


def full_status() -> dict:
    status = AttributionRunStatus(
        phase="Succeeded",
        conditions=[Condition(type="Ready", status="True", reason="Succeeded", message="done",
                              last_transition_time="2026-11-29T00:00:00Z", observed_generation=1)],
        observed_generation=1, start_time="2026-11-29T00:00:00Z", completion_time="2026-11-29T01:00:00Z",
        progress=RunProgress(done=10, total=10, percent=100.0, text="10/10", eta_seconds=0),
        gpu_seconds=12.5, job_name="run-abc",
        results=Results(top_player="profiler", metric="fast",
                        banzhaf=[PlayerValue(player="profiler", metric="fast", generation="pooled",
                                             value=0.2, low=0.1, high=0.3)]),
        report_uri="s3://bucket/runs/x/report/report.json",
    )
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


def test_status_validates_and_undeclared_fields_are_caught():
    v = crd.validator("status")
    assert not list(v.iter_errors(full_status()))
    bad = full_status()
    bad["progress"]["rate"] = 3  # would be pruned by the API server
    assert list(v.iter_errors(bad))
