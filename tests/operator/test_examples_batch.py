"""The GitOps batch in examples/batch: every run valid (models and CRD schema), listed, labelled, pinned."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from harness import _strict

from cudanalyst.api import load_run
from cudanalyst.crd import build_crd

BATCH = Path(__file__).resolve().parents[2] / "examples" / "batch"


def test_kustomization_lists_every_run_and_labels_the_batch() -> None:
    kustomization = yaml.safe_load((BATCH / "kustomization.yaml").read_text())
    files = sorted(p.name for p in BATCH.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files and len(files) >= 3
    assert kustomization["labels"][0]["pairs"] == {"cudanalyst.dev/batch": "gemm-feedback-2026"}
    # Only metadata labels: a selector label would make later edits of the batch label impossible.
    assert kustomization["labels"][0]["includeSelectors"] is False


def test_every_run_is_valid_distinct_and_pinned_by_digest() -> None:
    import jsonschema

    spec_schema = _strict(build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])
    names, variants = set(), set()
    for path in sorted(BATCH.glob("gemm-*.yaml")):
        run = load_run(path)
        jsonschema.validate(yaml.safe_load(path.read_text())["spec"], spec_schema)
        names.add(run.metadata.name)
        variants.add(run.metadata.labels["cudanalyst.dev/variant"])
        assert re.search(r"@sha256:[0-9a-f]{64}$", run.spec.resources.image), path.name
        assert run.spec.s3.credentials_secret and "secret" not in path.read_text().lower().replace(
            "credentialssecret", "")
    assert len(names) == len(variants) == len(list(BATCH.glob("gemm-*.yaml")))


def test_every_run_names_a_kueue_queue_and_priority_class() -> None:
    # The chart's kueue.enabled and docs/operator.md ("Kueue") describe these; tests/cluster/test_e2e_kueue.py
    # applies the batch against a real Kueue.
    for path in sorted(BATCH.glob("gemm-*.yaml")):
        run = load_run(path)
        assert run.spec.resources.queue_name == "gpu-research", path.name
        assert run.metadata.labels["kueue.x-k8s.io/priority-class"] in ("research", "research-high"), path.name
