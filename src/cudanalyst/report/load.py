"""Reading a run folder (`<output.uri>/<name>/`) from the object store: spec, plan, outcomes, provenance."""

from __future__ import annotations

import gzip
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cudanalyst.api import AttributionRun, SpecError, parse_run
from cudanalyst.attribution.values import OutcomeError, parse_records
from cudanalyst.outcomes import UnitOutcome, with_fast_vs_baseline
from cudanalyst.runfolder import CANDIDATES, OUTCOMES, OUTCOMES_ARCHIVE, PLAN, SPEC
from cudanalyst.store import ObjectNotFound, ObjectStore
from cudanalyst.usage import StageUsage, read_usage

# Provenance (prompt-template version, models) is read from this many candidate records: they are
# written by one runner version per run, and reading every one of a large run over S3 costs minutes.
PROVENANCE_SAMPLE = 64
_READERS = 16


class ReportError(ValueError):
    """The folder is not a run folder, or its records cannot be read; the message names the object."""


@dataclass
class RunFolder:
    uri: str
    run: AttributionRun
    plan: dict[str, Any] | None
    outcomes: list[UnitOutcome]
    prompt_versions: list[str] = field(default_factory=list)
    tool_reports: dict[str, Any] | None = None  # per GPU tool over the frozen programs (None: not readable)
    candidate_models: dict[str, list[str]] = field(default_factory=dict)
    candidates_read: int = 0
    usage: dict[str, StageUsage] = field(default_factory=dict)  # tokens per stage (cudanalyst.usage)


def _get_json(store: ObjectStore, key: str) -> Any:
    try:
        return json.loads(store.get_bytes(key))
    except json.JSONDecodeError as exc:
        raise ReportError(f"{store.uri_of(key)}: not valid JSON at line {exc.lineno}: {exc.msg}") from None


def load_spec(store: ObjectStore) -> AttributionRun:
    """spec.json holds the whole AttributionRun (or, from older writers, its spec alone)."""
    try:
        data = _get_json(store, SPEC)
    except ObjectNotFound:
        raise ReportError(f"{store.uri} is not a run folder: it has no {SPEC} "
                          f"(give the run's own folder, <output.uri>/<name>/)") from None
    if isinstance(data, dict) and "spec" not in data and "trajectory" in data:
        name = store.uri.rstrip("/").rsplit("/", 1)[-1]
        data = {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": name},
                "spec": data}
    if isinstance(data, dict):
        data.pop("status", None)  # a snapshot of status says nothing the records do not
    try:
        return parse_run(data, store.uri_of(SPEC))
    except SpecError as exc:
        raise ReportError(str(exc)) from None


def _read_many(store: ObjectStore, keys: list[str]) -> list[tuple[str, Any]]:
    with ThreadPoolExecutor(max_workers=_READERS) as pool:
        return list(pool.map(lambda k: (store.uri_of(k), _get_json(store, k)), keys))


def load_outcomes(store: ObjectStore) -> list[UnitOutcome]:
    keys = [k for k in store.list(OUTCOMES) if k.endswith(".json")]
    if not keys and store.exists(OUTCOMES_ARCHIVE):
        return _load_archive(store)
    if not keys:
        raise ReportError(f"{store.uri.rstrip('/')}/{OUTCOMES}: no outcome records yet (has the kernel stage run?)")
    try:
        return parse_records(_read_many(store, keys))
    except OutcomeError as exc:
        raise ReportError(str(exc)) from None


def _load_archive(store: ObjectStore) -> list[UnitOutcome]:
    """An archived folder's outcomes.jsonl.gz: one record per line, each named by its line in errors."""
    where = store.uri_of(OUTCOMES_ARCHIVE)
    try:
        lines = gzip.decompress(store.get_bytes(OUTCOMES_ARCHIVE)).decode().splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ReportError(f"{where}: not a gzip file of JSON lines ({exc})") from None
    raw = []
    for i, line in enumerate(lines, 1):
        if line.strip():
            try:
                raw.append((f"{where}:{i}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ReportError(f"{where}: line {i}: {exc.msg}") from None
    if not raw:
        raise ReportError(f"{where}: no outcome records")
    try:
        return parse_records(raw)
    except OutcomeError as exc:
        raise ReportError(str(exc)) from None


def load_run_folder(store: ObjectStore) -> RunFolder:
    """Everything a report needs from one run folder.

    Raises ReportError (bad input, naming the object) or StoreError (the store itself failed)."""
    try:
        run = load_spec(store)
        plan = _get_json(store, PLAN) if store.exists(PLAN) else None
        # Records written before fastVsBaseline existed get it from their speedupVsBaseline (outcomes.py).
        outcomes = with_fast_vs_baseline(load_outcomes(store), run.spec.evaluation.fast_tolerance)
        folder = RunFolder(store.uri, run, plan, outcomes)
        candidate_keys = []
        for key in store.list(CANDIDATES):
            if key.endswith(".json"):
                candidate_keys.append(key)
            if len(candidate_keys) >= PROVENANCE_SAMPLE:
                break
        versions: set[str] = set()
        models: dict[str, set[str]] = {}
        for _, cand in _read_many(store, candidate_keys):
            if not isinstance(cand, dict):
                continue
            if cand.get("promptVersion"):
                versions.add(str(cand["promptVersion"]))
            for role, model in (cand.get("models") or {}).items():
                models.setdefault(str(role), set()).add(str(model))
        folder.prompt_versions = sorted(versions)
        folder.candidate_models = {role: sorted(names) for role, names in sorted(models.items())}
        folder.candidates_read = len(candidate_keys)
        folder.usage = read_usage(store)
        folder.tool_reports = tool_reports(store, run)
    except ObjectNotFound as exc:  # listed a moment ago, gone now: the folder changed under us
        raise ReportError(str(exc)) from None
    return folder


def tool_reports(store: ObjectStore, run: AttributionRun) -> dict[str, Any] | None:
    """Whether the GPU tools behind the frozen programs' reports ran (toolruns.count_tools): the recorded
    reports, and for the players the run computed itself its feedback/<programId>.json. None when the
    trajectory cannot be read from here (the report then says so)."""
    from cudanalyst.planned_run import PlanError, plan_run
    from cudanalyst.runfolder import feedback_key
    from cudanalyst.store import StoreError
    from cudanalyst.trajectory.toolruns import ToolRun, count_tools

    try:
        programs = plan_run(run).programs
    except (PlanError, ValueError, OSError, StoreError):
        return None
    merged = []
    for p in programs:
        key = feedback_key(p.program_id)
        cached = _get_json(store, key) if store.exists(key) else None
        if isinstance(cached, dict) and isinstance(cached.get("reports"), dict):
            texts = {k: v for k, v in cached["reports"].items() if isinstance(v, str) and k not in p.feedback}
            typed = cached.get("tools") if isinstance(cached.get("tools"), dict) else {}
            tools = {k: ToolRun.model_validate(v) for k, v in typed.items()}
            p = p.model_copy(update={"feedback": {**texts, **p.feedback}, "tools": {**tools, **p.tools}})
        merged.append(p)
    return {t: c.to_dict() for t, c in count_tools(merged).items()}
