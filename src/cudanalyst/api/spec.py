"""The AttributionRun spec: the single source of the CRD schema (see `cudanalyst.crd`).

Python attributes are snake_case; the JSON/YAML names are camelCase aliases, as Kubernetes wants.
Field documentation strings become the CRD's descriptions, so `kubectl explain` reads them.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from cudanalyst.outcomes import SAME_METRIC

API_GROUP = "cudanalyst.dev"
API_VERSION = "v1alpha1"
KIND = "AttributionRun"
PLURAL = "attributionruns"
SHORT_NAMES = ["ar"]

# A new spec's metrics: both fast metrics, the paper's (against the task's baseline) and ours (against the frozen
# program). `fast` is the older name of fastVsFrozen: specs and run folders that say it keep reading as they did.
METRICS = ("compiled", "pass", "fastVsBaseline", "fastVsFrozen")
Metric = Literal["compiled", "pass", "fastVsBaseline", "fastVsFrozen", "fast"]
FeedbackMode = Literal["off", "raw", "summary"]
Control = Literal["noFeedback", "randomizedFeedback", "dummyPlan"]

# A player's name is a coalition key's building block ("a,b"), so it may not hold commas or spaces.
PLAYER_PATTERN = r"^[a-z][a-zA-Z0-9_-]{0,62}$"
# Whitespace spelled out, not \s: the API server's regex engine (Go's RE2) reads \s as these five ASCII characters,
# Python's and pydantic's as any Unicode space, and the two must judge a spec alike (issue 33).
NOT_SPACE = r"[^\t\n\f\r ]"
URI_PATTERN = (rf"^(s3://[^/\t\n\f\r ]+(/{NOT_SPACE}*)?|file://{NOT_SPACE}+|builtin://[a-z0-9-]+/?|"
               r"[^:\t\n\f\r ]+)$")


class Model(BaseModel):
    """Base for every spec object: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", validate_default=True
    )


def _check_uri(value: str) -> str:
    if not re.match(URI_PATTERN, value):
        raise ValueError(
            f"not an object-store URI: {value!r} (use s3://bucket/prefix/, file:///path, builtin://example or a path)"
        )
    return value


Uri = Annotated[str, Field(min_length=1, max_length=2048, pattern=URI_PATTERN), AfterValidator(_check_uri)]


class StrataSpec(Model):
    """How many frozen programs of each recorded state to draw (a stratified freeze), seeded by sampling.seed.

    A program's state comes from the metrics its agent recorded (docs/trajectory-format.md, "Stratified
    freezing"); programs whose metrics do not say (no `correct`, e.g. recorded without a GPU) are in no stratum.
    A stratum with fewer programs than asked gives all it has, and `cudanalyst plan` warns."""

    broken: int = Field(0, ge=0, le=1024, description="Programs that did not compile or broke the task's contract.")
    wrong: int = Field(0, ge=0, le=1024, description="Programs that compiled but were not correct.")
    correct: int = Field(0, ge=0, le=1024, description="Correct programs not faster than the task's baseline by "
                         "more than evaluation.fastTolerance (or not timed).")
    fast: int = Field(0, ge=0, le=1024, description="Correct programs faster than the task's baseline by more than "
                      "evaluation.fastTolerance (the rule of fastVsBaseline).")
    per: Literal["task", "generation"] = Field(
        "task", description="task: the counts are per task, drawn from the programs of all listed generations; "
        "generation: per task and listed generation.")

    @model_validator(mode="after")
    def _some(self) -> StrataSpec:
        if self.broken + self.wrong + self.correct + self.fast == 0:
            raise ValueError("strata: ask for at least one program (broken, wrong, correct or fast)")
        return self

    def counts(self) -> dict[str, int]:
        return {"broken": self.broken, "wrong": self.wrong, "correct": self.correct, "fast": self.fast}


class TrajectorySpec(Model):
    """Where the recorded agent trajectory lives and which frozen programs to replay."""

    uri: Uri | None = Field(
        None, description="Folder (s3://, file:// or a path) holding trajectory.json and programs.jsonl. "
        "Exactly one of uri and recording."
    )
    recording: str | None = Field(
        None, pattern=r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$", max_length=52,
        description="Name of a TrajectoryRecording in the run's namespace: the run waits until it is Ready and "
        "replays its trajectory (cluster only). Exactly one of uri and recording.",
    )
    format: Literal["cudanalyst", "openevolve", "llm4ad"] = Field(
        "cudanalyst",
        description="cudanalyst reads the folder as is; openevolve/llm4ad are converted on the fly "
        "(or beforehand with `cudanalyst import`).",
    )
    generations: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=1, max_length=64, description="Generations whose programs are frozen and replayed."
    )
    programs_per_generation: int = Field(
        4, ge=1, le=1024, description="Frozen programs drawn per task and generation (seeded by sampling.seed). "
        "Not used when strata is given."
    )
    strata: StrataSpec | None = Field(
        None, description="Draw the frozen programs by their recorded state (broken, wrong, correct, fast) instead "
        "of programsPerGeneration at random; absent: the draw by generation alone."
    )
    tasks: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=256, description="Tasks to replay; empty means every task of the trajectory."
    )

    @model_validator(mode="after")
    def _unique_generations(self) -> TrajectorySpec:
        if len(set(self.generations)) != len(self.generations):
            raise ValueError("generations must be unique")
        if (self.uri is None) == (self.recording is None):
            raise ValueError("give exactly one of uri and recording")
        return self


class FeedbackSpec(Model):
    """How each player's report reaches the model: off, raw (the formatted report) or summary."""

    mode: FeedbackMode = Field("raw", description="Default mode of every player.")
    modes: dict[str, FeedbackMode] = Field(
        default_factory=dict, max_length=16, description="Per-player override of mode, keyed by player name."
    )


DEFAULT_API_KEY_ENV = "CUDANALYST_API_KEY"


class ApiKeySpec(Model):
    """Where an endpoint's API key comes from. The key itself never appears in the spec or the status."""

    env: str = Field(
        DEFAULT_API_KEY_ENV, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$",
        description="Environment variable of the runner holding the key: set it yourself locally; on a cluster "
        "the operator fills it from secretName/secretKey in the runner pods only.",
    )
    secret_name: str | None = Field(
        None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", max_length=253,
        description="Secret in the run's namespace holding the key (cluster). The operator references it in "
        "the runner pods and never reads it.",
    )
    secret_key: str = Field("api-key", pattern=r"^[-._a-zA-Z0-9]{1,253}$", description="Key within the Secret.")


class PriceSpec(Model):
    """What an endpoint charges, per million tokens, for the estimated cost in `cudanalyst plan` and the report."""

    input_per_million: float = Field(ge=0, description="Price of a million prompt tokens.")
    output_per_million: float = Field(ge=0, description="Price of a million completion tokens.")
    currency: str = Field("USD", max_length=8)


class ModelSpec(Model):
    """One model behind vLLM's OpenAI-compatible API: served locally by the runner, or an existing endpoint."""

    model: str | None = Field(
        None, max_length=2048, description="Model path (local folder or s3:// prefix synced first) or served name."
    )
    serve: Literal["local", "endpoint"] | None = Field(
        None, description="local: the runner starts vLLM on loopback; endpoint: use `endpoint` as is. "
        "Defaults to endpoint when an endpoint is given, else local."
    )
    endpoint: str | None = Field(
        None, max_length=2048, pattern=rf"^https?://{NOT_SPACE}+$", description="Base URL of an OpenAI-compatible server (…/v1)."
    )
    api: Literal["chat", "completion"] = Field(
        "chat", description="chat for instruction-tuned models; completion for base models (no chat template)."
    )
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="vLLM --tensor-parallel-size (serve: local).")
    max_model_len: int | None = Field(None, ge=256, description="vLLM --max-model-len (serve: local).")
    gpu_memory_utilization: float = Field(0.85, gt=0, le=1, description="vLLM --gpu-memory-utilization.")
    dtype: str = Field("auto", max_length=32, description="vLLM --dtype.")
    extra_args: list[Annotated[str, Field(max_length=256)]] = Field(
        default_factory=list, max_length=64, description="Further vLLM server arguments, passed as is."
    )
    api_key: ApiKeySpec | None = Field(
        None, description="serve: endpoint only: send this key (Authorization: Bearer). Absent: no key is sent."
    )
    max_concurrency: int | None = Field(
        None, ge=1, le=4096, description="Requests in flight to this model over the whole run, split evenly over "
        "the shards (at least one each); absent: the runner's --concurrency per shard."
    )
    price: PriceSpec | None = Field(None, description="Price per million tokens, for the estimated cost.")

    @model_validator(mode="after")
    def _serving(self) -> ModelSpec:
        if self.serve is None:
            self.serve = "endpoint" if self.endpoint else "local"
        if self.serve == "local" and not self.model:
            raise ValueError("model is required when serve is local")
        if self.serve == "endpoint" and not self.endpoint:
            raise ValueError("endpoint is required when serve is endpoint")
        if self.serve == "local" and self.api_key is not None:
            # Name what was given inside apiKey too: a refusal should name the field the user wrote.
            given = ", ".join(f"apiKey.{k}" for k in self.api_key.model_dump(by_alias=True, exclude_unset=True))
            raise ValueError("apiKey is for serve: endpoint (a server the runner starts needs no key)"
                             + (f"; given: {given}" if given else ""))
        return self


class ModelsSpec(Model):
    """The planner writes plans, the coder writes kernels, the summarizer condenses reports."""

    planner: ModelSpec = Field(description="The planning model (explicit planning).")
    coder: ModelSpec | None = Field(None, description="The coding model; defaults to the planner. "
                                    "A different coder than planner is plan transfer.")
    summarizer: ModelSpec | None = Field(None, description="Model for feedback summaries; defaults to the planner.")

    # `coder` and `summarizer` are what the user wrote (None: not given); these are the models used.
    @property
    def resolved_coder(self) -> ModelSpec:
        return self.coder or self.planner

    @property
    def resolved_summarizer(self) -> ModelSpec:
        return self.summarizer or self.planner

    @model_validator(mode="after")
    def _one_secret_per_variable(self) -> ModelsSpec:
        # On a cluster one variable of the runner pod holds one Secret's key.
        bound: dict[str, tuple[str, str | None, str]] = {}
        for role in ("planner", "coder", "summarizer"):
            key = getattr(self, role) and getattr(self, role).api_key
            if key is None:
                continue
            other = bound.setdefault(key.env, (role, key.secret_name, key.secret_key))
            if other[1:] != (key.secret_name, key.secret_key):
                # Name the fields that differ: they are what the user wrote, more than the variable they share.
                differ = [f"{name} {mine!r} against {theirs!r}" for name, mine, theirs in
                          (("secretName", key.secret_name, other[1]), ("secretKey", key.secret_key, other[2]))
                          if mine != theirs]
                raise ValueError(f"{role}.apiKey.env {key.env} is also {other[0]}.apiKey.env, with another "
                                 f"{' and '.join(differ)}; give each Secret its own variable")
        return self


class SamplingSpec(Model):
    """Decoding settings, identical for every coalition."""

    rollouts: int = Field(3, ge=1, le=64, description="Independent plans per frozen program and coalition.")
    samples_per_coalition: int = Field(5, ge=1, le=64, description="Kernels sampled per rollout (best-of-k).")
    temperature: float = Field(0.8, ge=0, le=2)
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(4096, ge=16, le=131072, description="Tokens per completion.")
    seed: int = Field(0, ge=0, description="Seeds freezing, randomized feedback and every request.")
    request_seeds: bool = Field(True, description=(
        "Each request carries a seed derived from `seed` and its unit, so that a rerun draws the same samples as far "
        "as the GPU's batching allows. false: requests carry none (vLLM samples a batch at once; its seeded rows are "
        "drawn one by one, 1.32x the generation rate without them on an H100, docs/performance.md), and a rerun "
        "draws other samples."))


class EvaluationSpec(Model):
    """How candidate kernels are verified and timed."""

    correctness_trials: int = Field(5, ge=1, le=100, description="Random inputs (seeds) a candidate must pass.")
    rtol: float = Field(1.0e-4, ge=0)
    atol: float = Field(1.0e-4, ge=0)
    warmup: int = Field(3, ge=0, le=1000)
    trials: int = Field(30, ge=1, le=10000, description="Timed trials; the median is reported.")
    fast_tolerance: float = Field(0.12, ge=0, le=10, description="fast = correct and speedup > 1 + fastTolerance, "
                                  "the speedup over the task's baseline (fastVsBaseline) or over the frozen program "
                                  "(fastVsFrozen, also called fast).")
    timeout_seconds: float = Field(60, gt=0, le=3600, description="Limit for one candidate's verification.")
    compile_workers: int = Field(4, ge=1, le=256, description="Parallel nvcc processes.")
    gpu_workers: int = Field(2, ge=1, le=64, description="Persistent GPU worker processes (one CUDA context each).")
    seed: int | None = Field(
        None, ge=0, le=2**53 - 1, description="Fixes the seed every verification and timing input derives from, "
        "for a bit-for-bit replay. This makes the inputs public: a candidate can then be written to recognise "
        "them. Unset (the default), a secret seed is drawn when the run starts and kept in the run folder."
    )


class AttributionSpec(Model):
    """Which values are computed from the outcomes."""

    metrics: list[Metric] = Field(
        default_factory=lambda: list(METRICS), min_length=1, max_length=4,
        description="Cumulative metrics: compiled, pass, fastVsBaseline (pass and faster than the task's baseline: "
        "the paper's fast), fastVsFrozen (faster than the frozen program, or the baseline where it cannot be "
        "timed). fast is fastVsFrozen's older name (not both in one list).")
    estimator: Literal["exact", "msr", "auto"] = Field(
        "exact", description="exact enumerates all 2^n coalitions (a game missing one is not evaluated, naming "
        "it); msr samples them (Maximum Sample Reuse); auto plans every coalition and uses msr for a game "
        "that misses some, saying so."
    )
    coalition_samples: int | None = Field(
        None, ge=2, description="Coalitions sampled by msr (default min(2^n, 256))."
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="Level of every reported interval.")
    bootstrap: int = Field(1000, ge=0, le=100000, description="Bootstrap resamples (0: t-intervals only).")
    unchanged: Literal["count", "exclude"] = Field(
        "count", description="Candidates that are the frozen program unchanged (up to whitespace and comments): "
        "count them like any other (as the paper does), or leave them out of the rates."
    )


    @model_validator(mode="after")
    def _distinct_metrics(self) -> AttributionSpec:
        names = [SAME_METRIC.get(m, m) for m in self.metrics]
        dupes = sorted({m for m in self.metrics if names.count(SAME_METRIC.get(m, m)) > 1})
        if dupes:
            raise ValueError(f"metrics must name each metric once; repeated: {', '.join(dupes)} "
                             "(fast is the older name of fastVsFrozen)")
        return self


QUANTITY = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
# Kubernetes' own syntaxes for what the Job carries (its labels, node selector, priority class, tolerations): the
# API server refuses a Job with another, after it took the run.
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
DNS_SUBDOMAIN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"
_QUALIFIED_NAME = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


class Toleration(Model):
    """A Kubernetes toleration for the runner pods, held to the API server's rules for a pod's tolerations (a
    toleration it would refuse in the Job's pod template is refused here, naming the field, not at Job creation)."""

    key: str | None = Field(None, max_length=317)
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = Field(None, max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _as_kubernetes_validates_it(self) -> Toleration:
        if self.key and not _QUALIFIED_NAME.fullmatch(self.key):
            raise ValueError(f"key {self.key!r} is not a qualified name (an optional DNS prefix and '/', then up to 63 "
                             "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric)")
        if not self.key and self.operator != "Exists":
            raise ValueError("operator must be Exists when key is empty (the toleration then matches every taint)")
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.value and not re.fullmatch(LABEL_VALUE, self.value):
            raise ValueError(f"value {self.value!r} is not a valid label value")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds is only valid with effect NoExecute")
        return self



class ResourcesSpec(Model):
    """Where and how the runner pods run."""

    shards: int = Field(1, ge=1, le=1024, description="Runner pods (Indexed Job completions).")
    gpus_per_shard: int = Field(1, ge=0, le=16, description="nvidia.com/gpu per runner pod.")
    image: str = Field("ghcr.io/cudanalyst/runner:0.1.0", min_length=1, max_length=512)
    # The API server's quantity syntax: a Job whose pod asks for another is refused (the fuzzed specs found it).
    cpu: str | None = Field(None, max_length=32, pattern=QUANTITY, description="CPU request of a runner pod, e.g. '8'.")
    memory: str | None = Field(None, max_length=32, pattern=QUANTITY,
                               description="Memory request of a runner pod, e.g. '64Gi'.")
    node_selector: dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] = Field(
        default_factory=dict, max_length=32)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    priority_class_name: str = Field("", max_length=253, pattern=DNS_SUBDOMAIN)
    queue_name: str = Field("", max_length=63, pattern=LABEL_VALUE,
                            description="Kueue LocalQueue (label kueue.x-k8s.io/queue-name).")


class OutputSpec(Model):
    """Where unit records and the report go."""

    uri: Uri = Field(description="Prefix under which the run's folder <name>/ is written.")
    delete_with_run: bool = Field(
        False, description="Delete the run's objects when the AttributionRun is deleted (default: keep them)."
    )


class S3Spec(Model):
    """Object-store connection (for every s3:// URI of the run). Credentials never appear here."""

    endpoint: str = Field("", max_length=2048, description="Custom endpoint (MinIO, Ceph); empty for AWS.")
    region: str = Field("", max_length=64)
    credentials_secret: str = Field(
        "", max_length=253, description="Secret with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; "
        "empty: the standard credential chain."
    )
    addressing_style: Literal["auto", "path", "virtual"] = "auto"


class AttributionRunSpec(Model):
    """What to replay, under which coalitions of feedback components, and how to judge the kernels."""

    trajectory: TrajectorySpec
    players: list[Annotated[str, Field(pattern=PLAYER_PATTERN, max_length=63)]] = Field(
        min_length=1, max_length=16, description="The feedback components whose contributions are attributed."
    )
    feedback: FeedbackSpec = Field(default_factory=FeedbackSpec)
    planning: Literal["explicit", "implicit"] = Field(
        "explicit", description="explicit: a planner writes a plan from the reports; implicit: reports go to the coder."
    )
    controls: list[Control] = Field(default_factory=list, max_length=3, description="Control arms run beside the game.")
    models: ModelsSpec
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    attribution: AttributionSpec = Field(default_factory=AttributionSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    output: OutputSpec
    s3: S3Spec = Field(default_factory=S3Spec)
    suspend: bool = Field(False, description="Suspends the runner Job; the only field editable once started.")
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, description="Delete finished child Jobs after this many seconds (never the run itself)."
    )

    @model_validator(mode="after")
    def _cross_field(self) -> AttributionRunSpec:
        dupes = sorted({p for p in self.players if self.players.count(p) > 1})
        if dupes:
            raise ValueError(f"players must be unique; repeated: {', '.join(dupes)}")
        unknown = sorted(set(self.feedback.modes) - set(self.players))
        if unknown:
            raise ValueError(f"feedback.modes names players not in players: {', '.join(unknown)}")
        if len(set(self.controls)) != len(self.controls):
            raise ValueError("controls must be unique")
        return self

    # Convenience views used by the planner and the runner.
    def mode_of(self, player: str) -> FeedbackMode:
        return self.feedback.modes.get(player, self.feedback.mode)

