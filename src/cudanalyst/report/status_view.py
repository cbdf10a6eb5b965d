"""Printing an AttributionRun object (as the API server returns it): conditions, progress, result table,
and the report object's per-generation tables when it can be read. No Kubernetes client needed here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from cudanalyst.api.spec import METRICS
from cudanalyst.api.status import Results
from cudanalyst.report.build import REPORT_HTML, REPORT_JSON
from cudanalyst.report.compute import reached_line
from cudanalyst.report.table import from_report, from_status, render
from cudanalyst.store import S3Settings, StoreError, open_store

CONDITION_ORDER = ("Ready", "Reconciling", "Stalled", "Succeeded", "Failed", "Suspended", "Queued")


def conditions_table(conditions: list[Mapping[str, Any]]) -> Table:
    table = Table(title="Conditions", title_justify="left")
    for col in ("type", "status", "reason", "message", "since"):
        table.add_column(col, overflow="fold")
    order = {t: i for i, t in enumerate(CONDITION_ORDER)}
    for c in sorted(conditions, key=lambda c: order.get(c.get("type", ""), 99)):
        style = "green" if c.get("status") == "True" and c.get("type") in ("Ready", "Succeeded") else (
            "red" if c.get("status") == "True" and c.get("type") in ("Stalled", "Failed") else None)
        table.add_row(c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", ""),
                      c.get("lastTransitionTime") or "", style=style)
    return table


def progress_lines(status: Mapping[str, Any]) -> list[str]:
    p = status.get("progress") or {}
    lines = [f"progress: {p.get('text', '0/0')} units ({p.get('percent', 0):.1f}%)"
             + (f", ETA {p['etaSeconds']} s" if p.get("etaSeconds") is not None else "")
             + (f", {p['failures']} failure(s)" if p.get("failures") else "")]
    llm, kernels = p.get("llm") or {}, p.get("kernels") or {}
    if llm or kernels:
        lines.append(f"stages: LLM {llm.get('done', 0)}/{llm.get('total', 0)}, "
                     f"kernels {kernels.get('done', 0)}/{kernels.get('total', 0)}")
    shards = status.get("shards") or {}
    if status.get("jobName") or shards:
        lines.append(f"job: {status.get('jobName') or '-'} (shards active {shards.get('active', 0)}, "
                     f"succeeded {shards.get('succeeded', 0)}, failed {shards.get('failed', 0)})")
    lines.append(f"GPU time: {float(status.get('gpuSeconds') or 0):.0f} s")
    for key, label in (("startTime", "started"), ("completionTime", "completed")):
        if status.get(key):
            lines.append(f"{label}: {status[key]}")
    if status.get("message"):
        lines.append(f"message: {status['message']}")
    return lines


def results_lines(results: Results) -> list[str]:
    """Metrics not (fully) evaluated with the records' reasons, estimator notes, the samples reaching each metric,
    and references of fast."""
    lines = []
    reasons = {e.metric: e for e in results.exclusions}
    for metric in results.not_evaluated:
        why = (reasons[metric].reason if metric in reasons else "") or "no program's outcome could be established"
        lines.append(f"not evaluated: {metric} ({why}); shown as such, not as zeros")
    for metric, item in reasons.items():
        if metric not in results.not_evaluated:
            lines.append(f"{metric}: {item.excluded} of {item.of} programs not evaluated, left out of "
                         f"its games ({item.reason}); attributed over the rest")
    lines += [f"estimator: {note}" for note in results.estimator_notes]
    if results.reached:
        lines.append(reached_line({c.metric: {"reached": c.reached, "known": c.known} for c in results.reached},
                                  results.reached[0].units))
    refs = results.references
    if refs:
        lines.append(f"fast measured against: frozen program {refs.frozen} units, task baseline "
                     f"{refs.baseline}, not timed {refs.not_timed}")
    return lines


def _split_report_uri(uri: str) -> tuple[str, str]:
    """(folder URI, key) of a report object; a folder URI means its report.json."""
    path = urlparse(uri).path if "://" in uri else uri
    if path.endswith(".json"):
        folder, _, key = uri.rpartition("/")
        return folder + "/", key
    return uri.rstrip("/") + "/", REPORT_JSON


def read_report(uri: str, spec: Mapping[str, Any], s3_endpoint: str | None) -> dict[str, Any]:
    """The report object at `uri`, reached with the run's spec.s3 settings and the local credential chain."""
    s3 = spec.get("s3") or {}
    settings = S3Settings(endpoint=s3_endpoint if s3_endpoint is not None else s3.get("endpoint", ""),
                          region=s3.get("region", ""), addressing_style=s3.get("addressingStyle", "auto"),
                          max_attempts=2, connect_timeout=3, read_timeout=20)
    folder, key = _split_report_uri(uri)
    data = open_store(folder, settings).get_json(key)
    if isinstance(data, dict) and "attribution" not in data and isinstance(data.get("games"), list):
        # The operator's aggregate writes the bare attribution result (no figures, no provenance).
        gens = sorted({g["generation"] for g in data["games"] if not g.get("pooled") and g.get("generation") is not None})
        data = {"attribution": data, "generations": gens}
    if not isinstance(data, dict) or "attribution" not in data:
        raise StoreError(f"{uri} is not a cudanalyst report object (neither a report nor an attribution result)")
    return data


def _results(raw: Any, console: Console) -> Results | None:
    """status.results as the model the operator wrote it from; a status this version cannot read is said so."""
    if not raw:
        return None
    try:
        return Results.model_validate(raw)
    except ValidationError as exc:
        console.print(f"[yellow]status.results not readable by this version[/]: {exc}", highlight=False)
        return None


def print_status(obj: Mapping[str, Any], console: Console, with_report: bool = True,
                 s3_endpoint: str | None = None) -> None:
    """Print everything `cudanalyst status` shows for one AttributionRun object."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    players = list(spec.get("players") or [])
    metrics = list((spec.get("attribution") or {}).get("metrics") or [])
    console.print(f"[bold]{meta.get('namespace', '')}/{meta.get('name', '')}[/]: phase {status.get('phase') or 'Pending'}"
                  f" (observed generation {status.get('observedGeneration', '-')} of {meta.get('generation', '-')})")
    for line in progress_lines(status):
        console.print(line, highlight=False)
    if status.get("conditions"):
        console.print(conditions_table(status["conditions"]))
    results = _results(status.get("results"), console)
    if results and not metrics:
        # The spec as stored names no metrics (the CRD gives no default): the ones its results hold, else the default.
        metrics = list(dict.fromkeys([v.metric for v in results.banzhaf] + list(results.not_evaluated))) or list(METRICS)
    if results:
        console.print(render(from_status(results, players, metrics), title="Banzhaf values from status (pooled, "
                             f"{results.confidence * 100:g}% intervals)"))
        if results.top_player:
            console.print(f"top player on {results.metric}: {results.top_player}")
        for line in results_lines(results):
            console.print(line, highlight=False)
    elif not status.get("results"):
        console.print("no results yet")
    uri = status.get("reportUri")
    if not uri:
        return
    console.print(f"report: {uri}", highlight=False)
    if not with_report:
        return
    try:
        report = read_report(uri, spec, s3_endpoint)
    except (StoreError, ValueError, json.JSONDecodeError) as exc:
        console.print(f"[yellow]report not reachable from here[/]: {exc}", highlight=False)
        return
    for gen in report.get("generations", []):
        console.print(render(from_report(report, gen)))
    if "provenance" in report:  # a full report (cudanalyst report / run) has its page beside it
        console.print(f"report page: {_split_report_uri(uri)[0]}{REPORT_HTML}", highlight=False)
