"""The AttributionRun status: small on purpose (etcd objects are about 1 MB at most).

Every field the operator writes is declared here, and so in the CRD: kopf's status patches of undeclared
fields would be pruned silently by the API server. Per-coalition detail lives in the report object whose
URI is `reportUri`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from cudanalyst.api.spec import Metric, Model

CONDITION_TYPES = ("Ready", "Reconciling", "Stalled", "Succeeded", "Failed", "Suspended", "Queued")
Phase = Literal["Pending", "Queued", "Running", "Suspended", "Aggregating", "Succeeded", "Failed", "Stalled"]


class Condition(Model):
    """A kstatus-style condition (Ready, Reconciling and Stalled carry kstatus polarity)."""

    type: Literal["Ready", "Reconciling", "Stalled", "Succeeded", "Failed", "Suspended", "Queued"]
    status: Literal["True", "False", "Unknown"]
    reason: str = Field("", max_length=128, description="CamelCase reason, e.g. Unschedulable, InvalidSpec.")
    message: str = Field("", max_length=4096, description="What happened and, for failures, what to do.")
    last_transition_time: str | None = Field(None, description="RFC 3339 time of the last status change.")
    observed_generation: int | None = Field(None, ge=0)


class StageProgress(Model):
    done: int = Field(0, ge=0)
    total: int = Field(0, ge=0)


class RunProgress(Model):
    """Units finished over units planned; readable without opening unit records."""

    done: int = Field(0, ge=0, description="Units with an outcome record.")
    total: int = Field(0, ge=0, description="Units in the plan.")
    percent: float = Field(0.0, ge=0, le=100)
    text: str = Field("0/0", max_length=64, description="done/total, for the printer column.")
    eta_seconds: int | None = Field(None, ge=0, description="Estimated seconds to completion at the current rate.")
    failures: int = Field(0, ge=0, description="Units that ended in an error of the runner itself.")
    llm: StageProgress = Field(default_factory=StageProgress, description="Units through the LLM stage.")
    kernels: StageProgress = Field(default_factory=StageProgress, description="Units through the kernel stage.")


class ShardCounts(Model):
    active: int = Field(0, ge=0)
    succeeded: int = Field(0, ge=0)
    failed: int = Field(0, ge=0)


class PlayerValue(Model):
    """A Banzhaf value with its interval, for one metric and generation ('pooled' = all generations)."""

    player: str
    metric: Metric
    generation: str = Field(description="A generation number, or 'pooled'.")
    value: float
    low: float | None = Field(None, description="The interval's lower end; absent when the design gives no "
                                                "interval (too few units of replication, e.g. one task pooled).")
    high: float | None = Field(None, description="The interval's upper end; absent when low is.")


class InteractionValue(Model):
    """A pairwise Banzhaf interaction index with its interval."""

    players: str = Field(description="The pair, as 'a,b' in the order of spec.players.")
    metric: Metric
    generation: str
    value: float
    low: float | None = Field(None, description="The interval's lower end; absent when there is no interval.")
    high: float | None = Field(None, description="The interval's upper end; absent when low is.")


class MetricExclusion(Model):
    """Programs left out of a metric's games because their outcome could not be established."""

    metric: Metric
    excluded: int = Field(ge=0, description="Programs left out (the pooled game's).")
    of: int = Field(ge=0, description="Programs in all.")
    reason: str = Field("", max_length=1024, description="The records' own reasons, most common first.")


class MetricCount(Model):
    """Unit samples of the game reaching a metric (sample labels, before best-of-k)."""

    metric: Metric
    reached: int = Field(ge=0, description="Samples that reach the metric.")
    known: int = Field(ge=0, description="Samples whose outcome for the metric is established (reached or not).")
    units: int = Field(ge=0, description="Samples of the game in all.")


class References(Model):
    """What `fast` (fastVsFrozen) was measured against, counted over outcome records; fastVsBaseline is always
    measured against the task's baseline."""

    frozen: int = Field(0, ge=0, description="Units timed against their frozen program.")
    baseline: int = Field(0, ge=0, description="Units timed against the task's baseline (frozen program untimeable).")
    not_timed: int = Field(0, ge=0, description="Units never timed (failed before, or no GPU).")


class Results(Model):
    """The headline numbers; everything else is in the report object."""

    top_player: str = Field("", description="Player with the largest pooled Banzhaf value on the first metric.")
    metric: str = Field("", description="The metric top_player was chosen on.")
    confidence: float = Field(0.95, gt=0, lt=1)
    banzhaf: list[PlayerValue] = Field(default_factory=list, max_length=512)
    top_interactions: list[InteractionValue] = Field(
        default_factory=list, max_length=32, description="The strongest pairwise interactions (by |value|)."
    )
    not_evaluated: list[Metric] = Field(
        default_factory=list, description="Metrics that could not be evaluated for any program (e.g. pass and "
        "fast with no GPU)."
    )
    exclusions: list[MetricExclusion] = Field(
        default_factory=list, max_length=4, description="Per metric, programs left out of its games, and why."
    )
    reached: list[MetricCount] = Field(
        default_factory=list, max_length=4, description="Per metric, the game's samples reaching it: both fast "
        "metrics side by side (fastVsBaseline: the paper's, against the task's baseline; fastVsFrozen or fast: "
        "against the frozen program)."
    )
    estimator_notes: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=16, description="Games whose estimator switched (auto) or whose exact "
        "estimate failed, and why."
    )
    references: References | None = Field(None, description="What fast (fastVsFrozen) was measured against.")


class QueueStatus(Model):
    """What Kueue says of a queued run (spec.resources.queueName set): its Workload and where it stands."""

    name: str = Field("", max_length=253, description="The LocalQueue (spec.resources.queueName).")
    workload: str = Field("", max_length=253, description="The Workload Kueue made for the runner Job.")
    state: Literal["", "Pending", "QuotaReserved", "Admitted", "Evicted", "Inactive", "Finished"] = Field(
        "", description="Admission state of the Workload; empty until Kueue has made it.")
    reason: str = Field("", max_length=128, description="Kueue's reason for that state, when it gives one.")
    message: str = Field("", max_length=1024, description="Kueue's words, e.g. which quota is short.")
    cluster_queue: str = Field("", max_length=253, description="The ClusterQueue that admitted it.")
    priority_class: str = Field("", max_length=253, description="Its WorkloadPriorityClass, if any.")
    priority: int | None = Field(None, description="The priority Kueue orders the queue by.")


class AttributionRunStatus(Model):
    """Observed state, written only by the operator through the status subresource."""

    phase: Phase | None = Field(None, description="For display only; use conditions to judge state.")
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    observed_generation: int | None = Field(None, ge=0)
    start_time: str | None = Field(None, description="RFC 3339 time the run started (spec frozen from then on).")
    completion_time: str | None = None
    progress: RunProgress = Field(default_factory=RunProgress)
    gpu_seconds: float = Field(0.0, ge=0, description="GPU-seconds used by runner pods so far.")
    job_name: str | None = Field(None, max_length=253, description="The child Indexed Job.")
    shards: ShardCounts = Field(default_factory=ShardCounts)
    results: Results | None = None
    report_uri: str | None = Field(None, max_length=2048, description="Full report object in the store.")
    message: str = Field("", max_length=4096, description="Latest human-readable summary.")
    queue: QueueStatus | None = Field(None, description="Kueue's view of a queued run.")


StatusModel = TypeVar("StatusModel", bound=BaseModel)


def read_status(model: type[StatusModel], raw: Mapping[str, Any] | None) -> StatusModel:
    """A kind's status as the API server holds it, validated into its model for reading.

    Lenient where a reader must be: a missing or partial status reads as the model's defaults (a run
    before its first patch has none), keys the model does not declare are ignored, and a top-level field
    that does not validate reads as its default (as the dict readers' `or 0` did), so a stray value never
    stops the operator. Which fields were present is the result's `model_fields_set`.
    """
    known = {field.alias or name for name, field in model.model_fields.items()}
    data = {k: v for k, v in (raw or {}).items() if k in known}
    while True:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            bad = {err["loc"][0] for err in exc.errors() if err["loc"]} & data.keys()
            if not bad:
                return model()
            for key in bad:
                del data[key]
