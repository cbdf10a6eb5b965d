"""Build a run's report: read its folder, compute the attribution, draw, and write `report/` into the store.

report/report.json (full detail), report/report.html (self-contained) and report/*.png. Everything is
computed before the first write, so a failure leaves no half-written report behind; each object is
written atomically by the store.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cudanalyst
from cudanalyst import usage
from cudanalyst.attribution.result import AttributionResult
from cudanalyst.report import compute
from cudanalyst.report.load import RunFolder, load_run_folder
from cudanalyst.runfolder import REPORT
from cudanalyst.store import ObjectStore

REPORT_JSON = "report.json"  # in the report's own folder (runfolder.REPORT unless `--out` names another)
REPORT_HTML = "report.html"
SCHEMA_VERSION = 1


@dataclass
class BuiltReport:
    report: dict[str, Any]
    figures: dict[str, bytes]
    html: str


def git_commit() -> str | None:
    """The commit of the installed code when it runs from a git checkout (editable installs), else None."""
    here = Path(cudanalyst.__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) == 40 else None


def _models_of_spec(folder: RunFolder) -> dict[str, str]:
    spec = folder.run.spec
    out = {}
    for role, model in (("planner", spec.models.planner), ("coder", spec.models.resolved_coder), ("summarizer", spec.models.resolved_summarizer)):
        where = model.endpoint if model.serve == "endpoint" else "local vLLM"
        out[role] = f"{model.model or '(served default)'} ({model.api}, {where})"
    return out


def provenance(folder: RunFolder, created_at: str) -> dict[str, Any]:
    return {
        "run": folder.run.metadata.name,
        "runFolder": folder.uri,
        "createdAt": created_at,
        "codeVersion": cudanalyst.__version__,
        "gitCommit": git_commit(),
        "promptTemplateVersion": ", ".join(folder.prompt_versions) or None,
        "candidatesRead": folder.candidates_read,
        "planDigest": (folder.plan or {}).get("digest"),
        "models": _models_of_spec(folder),
        "modelsInCandidates": folder.candidate_models,
        "spec": folder.run.to_dict()["spec"],
    }


def compute_report(folder: RunFolder, created_at: str | None = None) -> dict[str, Any]:
    """The report.json object of a loaded run folder."""
    return report_object(folder, compute.attribution(folder.outcomes, folder.run), created_at)


def report_object(folder: RunFolder, result: AttributionResult, created_at: str | None = None) -> dict[str, Any]:
    """The report.json object of a run folder and its computed attribution (dumped here, at the boundary)."""
    created_at = created_at or datetime.now(UTC).isoformat(timespec="seconds")
    records = folder.outcomes
    return {
        "schemaVersion": SCHEMA_VERSION,
        "run": folder.run.metadata.name,
        "players": list(result.players),
        "metrics": list(result.metrics),
        "generations": sorted({r.generation for r in records}),
        "confidence": result.confidence,
        "notEvaluated": compute.not_evaluated_metrics(result),
        "exclusions": compute.exclusions(result),
        "estimatorNotes": compute.estimator_notes(result),
        "units": {
            "planned": (folder.plan or {}).get("units"),
            "outcomes": len(records),
            "labels": compute.label_counts(records),
            "reached": compute.metric_counts(records, result.metrics),
            "evaluatedUpTo": compute.evaluated_up_to(records),
            "references": compute.references(records),
        },
        "copies": compute.copy_rates(records, result.players),
        "toolReports": folder.tool_reports,
        "unchanged": folder.run.spec.attribution.unchanged,
        "attribution": result.model_dump(by_alias=True, mode="json"),
        "tasks": compute.task_breakdown(records, folder.run),
        "usage": usage.summary(folder.run, folder.usage),
        "provenance": provenance(folder, created_at),
    }


def draw(report: dict[str, Any]) -> dict[str, bytes]:
    # matplotlib only here: the operator computes report.json without it (its image has no plotting).
    from cudanalyst.report import figures

    att = report["attribution"]
    return {
        "attribution.png": figures.attribution_figure(att),
        "interactions.png": figures.interactions_figure(att),
        "coalitions.png": figures.coalitions_figure(att),
        "tasks.png": figures.tasks_figure(report["tasks"], att["players"], att["metrics"]),
    }


def build(folder: RunFolder) -> BuiltReport:
    report = compute_report(folder)
    pngs = draw(report)
    report["figures"] = list(pngs)
    from cudanalyst.report.html import render_html

    return BuiltReport(report, pngs, render_html(report, pngs))


def write(built: BuiltReport, target: ObjectStore) -> str:
    """Write the report into `target` (a run's report/ folder); returns the HTML's URI.

    The PNGs and JSON go first and the HTML last, so a reader that finds report.html finds the rest.
    """
    for name, png in built.figures.items():
        target.put_bytes(name, png, "image/png")
    target.put_json(REPORT_JSON, built.report)
    target.put_bytes(REPORT_HTML, built.html.encode("utf-8"), "text/html; charset=utf-8")
    return target.uri_of(REPORT_HTML)


def build_and_write(run_store: ObjectStore, out: ObjectStore | None = None) -> tuple[BuiltReport, str]:
    """Load `run_store` (a run folder), build its report, write it to `out` (default: its report/)."""
    built = build(load_run_folder(run_store))
    return built, write(built, out or run_store.child(REPORT))
