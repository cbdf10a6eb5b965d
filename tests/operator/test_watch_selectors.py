"""The operator watches only its own Jobs and Pods (a server-side label selector), and every child it makes
carries that label, so the selector never hides one of them (issue 33: memory bounded in a shared cluster)."""

from __future__ import annotations

import kopf
from kopf._cogs.structs.references import Resource
from test_jobs import make_run

from cudanalyst.api.recording import parse_recording
from cudanalyst.operator import constants as c
from cudanalyst.operator.config import OperatorConfig
from cudanalyst.operator.handlers import configure
from cudanalyst.operator.jobs import runner_job
from cudanalyst.operator.recording import recorder_job

SELECTOR = f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY}"
# A pod label from the chart's runner.podLabels that tries to take the managed-by label over.
CONFIG = OperatorConfig(runner_pod_labels={c.MANAGED_BY_LABEL: "someone-else", "team": "a"})


def test_jobs_and_pods_are_watched_through_the_managed_by_selector_and_runs_are_not_filtered() -> None:
    settings = kopf.OperatorSettings()
    configure(settings)
    selectors = settings.watching.label_selectors
    assert selectors.collect(Resource("batch", "v1", "jobs", kind="Job", namespaced=True)) == [SELECTOR]
    assert selectors.collect(Resource("", "v1", "pods", kind="Pod", namespaced=True)) == [SELECTOR]
    run = Resource("cudanalyst.dev", "v1alpha1", "attributionruns", kind="AttributionRun", namespaced=True)
    assert selectors.collect(run) == []  # runs are made by users, with any labels


def test_every_child_job_and_its_pods_carry_the_selected_label() -> None:
    run = make_run(resources={"shards": 2})
    rec = parse_recording({
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "TrajectoryRecording",
        "metadata": {"name": "rec", "namespace": "lab", "labels": {c.MANAGED_BY_LABEL: "Helm"}},
        "spec": {"tasks": ["gemm"], "model": {"model": "/models/m"}, "output": {"uri": "s3://b/r/"}}})
    for job in (runner_job(run, CONFIG), recorder_job(rec, CONFIG)):
        assert job["metadata"]["labels"][c.MANAGED_BY_LABEL] == c.MANAGED_BY
        pod_labels = job["spec"]["template"]["metadata"]["labels"]
        assert pod_labels[c.MANAGED_BY_LABEL] == c.MANAGED_BY, pod_labels
        assert pod_labels["team"] == "a"  # the chart's other pod labels still reach the pod
