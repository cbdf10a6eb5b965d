"""The run folder: every object a run keeps under `<spec.output.uri>/<name>/`, named here once.

  spec.json                     the AttributionRun as started (operator or `cudanalyst run`: `write_start`)
  plan.json                     the schedule's summary (units, shards, digest); the units themselves are a
                                pure function of spec + trajectory, so they are not stored
  secret.json                   the run's secret input seed, drawn from the OS's randomness when the run starts
                                (written once, read by every shard; never in the plan, a prompt or the spec),
                                so nobody knows the inputs candidates are judged on before the run starts
  feedback/<programId>.json     the feedback tools' reports of one frozen program, computed once
  feedback/summaries/<programId>/<player>.json   the summarizer's text, per program and player
  plans/<groupKey>.json         the planner model's text, shared by the samples of one rollout (written once,
                                so a resumed shard gives the missing samples the same plan)
  candidates/<unitKey>.json     the LLM stage's record of a finished unit (written once, never replaced)
  errors/<unitKey>.json         why an unfinished unit failed this time; replaced on each try, deleted once
                                the unit finishes, so a resumed shard retries exactly the units without one
  outcomes/<unitKey>.json       the kernel stage's outcome (the only writer of outcomes)
  progress/shard-<i>.json       one shard's `ShardProgress`; a process running only the kernel stage writes
                                progress/shard-<i>.kernels.json beside it (`read_shard_progress` folds the two)
  usage/shard-<i>.json          one shard's tokens per stage and model, from the servers' usage fields
                                (`cudanalyst.usage`); a resumed shard adds to it
  report/                       report.json, report.html, *.png (`cudanalyst report`, the operator)

An archived run folder (`scripts/archive_run.py`: results kept in git, brought back from a GPU machine) holds
outcomes.jsonl.gz, every outcome record one JSON line, instead of outcomes/; the readers take either.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from cudanalyst.api import AttributionRun, AttributionRunSpec
from cudanalyst.store import ObjectNotFound, ObjectStore, S3Settings, open_store

SPEC = "spec.json"
PLAN = "plan.json"
SECRET = "secret.json"
FEEDBACK = "feedback/"
PLANNER_TEXTS = "plans/"
CANDIDATES = "candidates/"
ERRORS = "errors/"
OUTCOMES = "outcomes/"
OUTCOMES_ARCHIVE = "outcomes.jsonl.gz"
PROGRESS = "progress/"
USAGE = "usage/"
REPORT = "report/"
REPORT_JSON = REPORT + "report.json"
REPORT_HTML = REPORT + "report.html"

# Spec parts that do not change what a unit computes: a run folder may be resumed with other values.
RESUMABLE_FIELDS = ("resources", "suspend", "ttlSecondsAfterFinished")
# A model server's capacity, per role: how long a prompt it takes and how much GPU memory it holds. A unit that
# finished computes the same with more of either; one its prompt did not fit (prompt-too-long) can then finish.
RESUMABLE_MODEL_FIELDS = ("maxModelLen", "gpuMemoryUtilization",
                          # How the model is reached and paid for, not what it writes.
                          "apiKey", "maxConcurrency", "price")
# Which metrics are tabulated, not what a unit computes (the estimator does: msr plans fewer coalitions). A spec
# without `metrics` got [compiled, pass, fast] before both fast metrics existed; its folder resumes with the new ones.
RESUMABLE_ATTRIBUTION_FIELDS = ("metrics",)


def run_store(run: AttributionRun, s3: S3Settings | None = None) -> ObjectStore:
    """The run's own folder: `<output.uri>/<name>/`."""
    return open_store(run.spec.output.uri, s3 or S3Settings.from_spec(run.spec.s3)).child(f"{run.metadata.name}/")


def outcome_spec(spec: AttributionRunSpec) -> dict[str, Any]:
    """The spec fields that decide what a unit computes, in one normal form (defaults filled in): what a resumed
    run folder (runner.local.executor) and a study's run folder (analysis.study) must agree on."""
    dumped = spec.model_dump(by_alias=True, mode="json")
    models = {role: {k: v for k, v in model.items() if k not in RESUMABLE_MODEL_FIELDS}
              for role, model in (dumped.get("models") or {}).items() if isinstance(model, dict)}
    attribution = {k: v for k, v in (dumped.get("attribution") or {}).items() if k not in RESUMABLE_ATTRIBUTION_FIELDS}
    return {**{k: v for k, v in dumped.items() if k not in RESUMABLE_FIELDS}, "models": models,
            "attribution": attribution}


def resume_problem(ours: AttributionRunSpec, theirs: AttributionRunSpec) -> str | None:
    """Why a folder made by `theirs` cannot be resumed by `ours` (None when it can). A unit's key does not depend on
    how many rollouts a run has, so a run may add rollouts to its folder (a pilot's units become the first rollout of
    the study it sized: docs/decisions.md), never drop them: the folder would hold outcomes its plan does not have."""
    a, b = outcome_spec(ours), outcome_spec(theirs)
    r_ours, r_theirs = (d.get("sampling", {}).pop("rollouts", None) for d in (a, b))
    if a != b:
        return f"spec.{', spec.'.join(sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)))} differ"
    if (r_ours or 0) < (r_theirs or 0):
        return (f"spec.sampling.rollouts differ: the folder holds {r_theirs} rollouts and this spec asks for {r_ours}; "
                "a run may add rollouts to its folder, not drop them")
    return None


def candidate_key(unit_key: str) -> str:
    return f"{CANDIDATES}{unit_key}.json"


def outcome_key(unit_key: str) -> str:
    return f"{OUTCOMES}{unit_key}.json"


def error_key(unit_key: str) -> str:
    return f"{ERRORS}{unit_key}.json"


def planner_text_key(group_key: str) -> str:
    return f"{PLANNER_TEXTS}{group_key}.json"


def feedback_key(program_id: str) -> str:
    return f"{FEEDBACK}{program_id}.json"


def summary_key(program_id: str, player: str) -> str:
    return f"{FEEDBACK}summaries/{program_id}/{player}.json"


def progress_key(shard: int, stage: str | None = None) -> str:
    """A shard's progress object; a process that runs only the kernel stage writes its own (`stage`
    "kernels") beside the LLM stage's, so two processes never overwrite each other's counts."""
    return f"{PROGRESS}shard-{shard}.json" if stage is None else f"{PROGRESS}shard-{shard}.{stage}.json"


def usage_key(shard: int) -> str:
    return f"{USAGE}shard-{shard}.json"


def keys_under(store: ObjectStore, prefix: str) -> set[str]:
    """The names of the `<name>.json` objects directly under a prefix, from one paginated listing."""
    out = set()
    for key in store.list(prefix):
        name = key[len(prefix):]
        if name.endswith(".json") and "/" not in name:
            out.add(name[: -len(".json")])
    return out


def write_start(store: ObjectStore, run: Any, plan_summary: dict[str, Any]) -> None:
    """spec.json (the whole AttributionRun without status: `cudanalyst report` reads it back as one) and
    plan.json, as the operator and `cudanalyst run` both record a run they start."""
    store.put_json(SPEC, {k: v for k, v in run.to_dict().items() if k != "status"})
    store.put_json(PLAN, plan_summary)
    run_secret(store, run.spec.evaluation)


def run_secret(store: ObjectStore, evaluation: Any) -> int:
    """The seed every input a candidate is judged on derives from (the runner's requests.derive_seeds).

    `evaluation.seed` when the spec fixes one (a bit-for-bit replay; the inputs are then public). Else the
    run folder's secret.json, drawn from the OS's randomness by the first caller (the run's start: the
    operator or `cudanalyst run`) and written once, so a resumed run and every shard judge on the same
    inputs. It is kept out of plan.json: the plan's digest is a pure function of spec and trajectory."""
    fixed = getattr(evaluation, "seed", None)
    if fixed is not None:
        return int(fixed)
    drawn = {"seed": secrets.randbits(63)}
    store.put_if_absent(SECRET, json.dumps(drawn).encode(), "application/json")  # the first writer wins
    try:
        seed = store.get_json(SECRET)["seed"]
    except (KeyError, TypeError):
        raise ValueError(f"{store.uri_of(SECRET)}: not a secret seed file (expected {{\"seed\": <int>}})") from None
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"{store.uri_of(SECRET)}: seed must be a non-negative integer, got {seed!r}")
    return seed


# ---- shard progress: written by the runner (runner.units.ProgressTracker), read by the operator and
# `cudanalyst run` through `read_shard_progress` only.

class _Wire(BaseModel):
    # Unknown keys are ignored: a newer runner's object stays readable by an older reader.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class StageCount(_Wire):
    done: int = Field(0, ge=0)
    total: int = Field(0, ge=0)


class FailureNote(_Wire):
    """Units (or a whole phase) that did not finish, and why; at most 10 unit keys are named."""

    stage: str = ""
    kind: str = ""
    reason: str = ""
    units: int = Field(0, ge=0)
    unit_keys: list[str] = Field(default_factory=list)


class ShardProgress(_Wire):
    """One shard's progress object. `done` counts units with an outcome (finished end to end)."""

    shard: int = 0
    of: int = 1
    done: int = Field(0, ge=0)
    total: int = Field(0, ge=0)
    by_stage: dict[str, StageCount] = Field(default_factory=dict, description="'llm' and 'kernels'.")
    gpu_seconds: float = Field(0.0, ge=0)
    failures: list[FailureNote] = Field(default_factory=list)
    failed_units: int = Field(0, ge=0, description="Distinct units in failures (which names at most 20).")
    state: Literal["running", "succeeded", "failed"] = "running"
    waiting: str = Field("", description="While an endpoint's outage is waited out: which, and why.")
    stages: list[str] = Field(default_factory=list, description="The stages the writing process runs.")
    started_at: float = 0.0
    updated_at: float = 0.0

    @model_validator(mode="before")
    @classmethod
    def _stage_totals(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        # A stage's total defaults to the shard's, and failedUnits to the failures listed (older writers).
        if isinstance(data.get("byStage"), dict):
            total = data.get("total", 0)
            data = {**data, "byStage": {k: {"total": total, **v} if isinstance(v, dict) else v
                                        for k, v in data["byStage"].items()}}
        if "failedUnits" not in data and "failed_units" not in data and isinstance(data.get("failures"), list):
            data = {**data, "failedUnits": len(data["failures"])}
        return data

    def stage(self, name: str) -> StageCount:
        return self.by_stage.get(name) or StageCount(total=self.total)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def _read_one(store: ObjectStore, key: str) -> ShardProgress | None:
    try:
        return ShardProgress.model_validate(store.get_json(key))
    except (ObjectNotFound, ValueError, ValidationError):
        return None  # not written yet, or unreadable: counts as nothing done, never as an error


def read_shard_progress(store: ObjectStore, shard: int) -> ShardProgress | None:
    """A shard's progress, with a separate kernel-stage object folded in (its counts win for that stage)."""
    base, kernels = _read_one(store, progress_key(shard)), _read_one(store, progress_key(shard, "kernels"))
    if base is None or kernels is None:
        return base or kernels
    states = {base.state, kernels.state}
    state = "failed" if "failed" in states else "running" if "running" in states else "succeeded"
    return base.model_copy(update={
        "done": kernels.done, "by_stage": {**base.by_stage, "kernels": kernels.stage("kernels")},
        "gpu_seconds": base.gpu_seconds + kernels.gpu_seconds, "failures": [*base.failures, *kernels.failures],
        "failed_units": base.failed_units + kernels.failed_units, "state": state,
        "stages": sorted({*base.stages, *kernels.stages}), "updated_at": max(base.updated_at, kernels.updated_at)})
