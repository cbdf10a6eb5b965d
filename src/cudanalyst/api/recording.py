"""The TrajectoryRecording API: record an agent trajectory with OpenEvolve on a local model, then replay it.

The single source of the recording's schema (its CRD is generated from these models, as AttributionRun's).
A recording runs OpenEvolve on each task from the task's baseline kernel, evaluates every program with the
kernel stage's tools, and imports the checkpoints into the trajectory format under
`<output.uri>/<name>/trajectory/`, ready as an AttributionRun's `spec.trajectory.uri`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from cudanalyst.api import KubeObject, parse_model, read_document
from cudanalyst.api.policy import PolicySpec
from cudanalyst.api.spec import (
    EvaluationSpec,
    Model,
    ModelSpec,
    OutputSpec,
    ResourcesSpec,
    S3Spec,
)
from cudanalyst.api.status import Condition

RECORDING_KIND = "TrajectoryRecording"
RECORDING_PLURAL = "trajectoryrecordings"
RECORDING_SHORT_NAMES = ["trec"]
TRAJECTORY_FOLDER = "trajectory/"


class SearchSpec(Model):
    """OpenEvolve's search strategy: how a child is written and how its parent and inspirations are chosen.

    The defaults are what every recording before this field used (whole rewrites; OpenEvolve's own sampling
    ratios, migration and prompt sizes), so a spec without `search` records as it always did. A second agent
    configuration for a study (issue 29) changes these: diff-based evolution, islands with migration, another
    balance of exploration and exploitation."""

    evolution: Literal["rewrite", "diff"] = Field(
        "rewrite", description="rewrite: the model writes the whole program each iteration (small models rarely write "
        "a diff that applies, and a failed diff is no program at all); diff: SEARCH/REPLACE blocks against the "
        "parent (OpenEvolve's own default), with fullRewriteProbability of a whole rewrite instead.")
    full_rewrite_probability: float = Field(
        0.0, ge=0, le=1, description="evolution diff only: the chance that an iteration asks for a whole rewrite "
        "(seeded per iteration by seed).")
    exploration_ratio: float = Field(
        0.2, ge=0, le=1, description="Chance that a parent is drawn at random from its island (exploration).")
    exploitation_ratio: float = Field(
        0.7, ge=0, le=1, description="Chance that a parent is drawn from the elite archive (exploitation); the rest, "
        "1 - explorationRatio - exploitationRatio, is drawn from the island weighted by fitness.")
    elite_selection_ratio: float = Field(0.1, ge=0, le=1, description="Share of a population kept as its elite.")
    migration_interval: int = Field(
        50, ge=1, le=100000, description="Island generations between migrations of the best programs to the next "
        "island (islands > 1).")
    migration_rate: float = Field(0.1, ge=0, le=1, description="Share of an island's programs that migrate.")
    top_programs: int = Field(3, ge=0, le=32, description="Best programs shown in each prompt.")
    diverse_programs: int = Field(2, ge=0, le=32, description="Diverse programs shown in each prompt.")

    @model_validator(mode="after")
    def _consistent(self) -> SearchSpec:
        if self.exploration_ratio + self.exploitation_ratio > 1:
            raise ValueError("explorationRatio + exploitationRatio must be at most 1 (the rest is fitness-weighted)")
        if self.evolution == "rewrite" and self.full_rewrite_probability > 0:
            raise ValueError("fullRewriteProbability is for evolution: diff (rewrite always writes the whole program)")
        return self


class RecordingSpec(Model):
    """Which tasks OpenEvolve evolves, with which model, for how long; where the trajectory goes."""

    tasks: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        min_length=1, max_length=64, description="Bundled tasks (`cudanalyst tasks`); each is evolved from its baseline."
    )
    model: ModelSpec = Field(description="The agent's model: served locally with vLLM, or an existing endpoint.")
    iterations: int = Field(10, ge=1, le=100000, description="OpenEvolve iterations per task (one child program each).")
    islands: int = Field(1, ge=1, le=64, description="OpenEvolve islands per task.")
    population: int = Field(50, ge=2, le=100000, description="OpenEvolve population size per task.")
    seed: int = Field(0, ge=0, description="OpenEvolve's random seed (selection and every request).")
    temperature: float = Field(0.8, ge=0, le=2)
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(2048, ge=16, le=131072, description="Tokens per answer.")
    parallel: int = Field(1, ge=1, le=64, description="OpenEvolve's parallel iterations (worker processes) per task.")
    checkpoint_interval: int = Field(
        1, ge=1, le=100000, description="Iterations between checkpoints: the resume granularity."
    )
    iterations_per_generation: int | None = Field(
        None, ge=1, le=100000,
        description="A recorded program's generation: unset, OpenEvolve's lineage depth; N, the window of N iterations "
        "it was found in, named by the window's first iteration (N = 10: iterations 20..29 are generation 20). "
        "Only the import reads it, so it may change between passes.",
    )
    search: SearchSpec = Field(
        default_factory=SearchSpec, description="OpenEvolve's search strategy (evolution by rewrites or diffs, "
        "sampling ratios, migration between islands); the defaults record as before this field existed.")
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    policy: PolicySpec | None = Field(
        None, description="A FeedbackPolicy's spec, inline (`cudanalyst policy` writes one; `cudanalyst record "
        "--policy FILE` puts it here): per parent program state, which reports the child's prompt shows and in "
        "which form, and whether a planner writes a plan first. Unset: every report shown raw (ungated).")
    gating: Literal["policy", "random"] = Field(
        "policy", description="policy: withhold what the policy withholds; random (the control): per parent "
        "program, the same number of components, drawn at random (seeded by spec.seed and the program's source).")
    run_tools: Literal["all", "shown"] = Field(
        "all", description="all: every feedback tool runs on every program, whatever its children's prompts show "
        "(the checkpoints hold every report). shown: with a policy, a tool runs on a program only when the policy "
        "(or the random control's draw) shows its report in the program's state; the others are not run and their "
        "reports are absent from the checkpoints, so the recording costs what the gated agent would (Nsight Compute "
        "is most of an evaluation's GPU time). Without a policy every report is shown, so every tool runs.")
    planner: ModelSpec | None = Field(
        None, description="The model that writes a plan before each child when the policy names a planner "
        "(policy.models.planner); served like `model`.")
    output: OutputSpec
    s3: S3Spec = Field(default_factory=S3Spec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)

    @model_validator(mode="after")
    def _unique_tasks(self) -> RecordingSpec:
        dupes = sorted({t for t in self.tasks if self.tasks.count(t) > 1})
        if dupes:
            raise ValueError(f"tasks must be unique; repeated: {', '.join(dupes)}")
        return self

    @model_validator(mode="after")
    def _planner_served(self) -> RecordingSpec:
        wants = self.policy is not None and self.policy.models.planner is not None
        if wants and self.planner is None:
            raise ValueError(f"planner: the policy names a planner ({self.policy.models.planner}) "  # type: ignore[union-attr]
                             "(policy.models.planner); give spec.planner, the model that serves it")
        if self.planner is not None and self.planner.api != "chat":
            raise ValueError("planner.api: the recorder asks the planner through the chat API only")
        return self


class RecordingProgress(Model):
    done: int = Field(0, ge=0, description="Iterations finished, over all tasks.")
    total: int = Field(0, ge=0)
    percent: float = Field(0, ge=0, le=100)
    text: str = Field("", description="done/total, for display.")


class TrajectoryRecordingStatus(Model):
    """kstatus-style status: Ready, Reconciling, Stalled conditions; the trajectory's URI once Ready."""

    model_config = ConfigDict(extra="allow")

    observed_generation: int | None = None
    phase: str | None = Field(None, description="Pending, Running, Succeeded, Failed (display only).")
    conditions: list[Condition] = Field(default_factory=list)
    progress: RecordingProgress | None = None
    trajectory_uri: str | None = Field(None, description="The recorded trajectory, for spec.trajectory.uri.")
    programs: int | None = Field(None, description="Programs in the recorded trajectory.")
    job_name: str | None = None
    start_time: str | None = None
    completion_time: str | None = None
    message: str | None = None


class TrajectoryRecording(KubeObject):
    """A whole TrajectoryRecording object, as applied to the cluster or recorded locally."""

    kind: Literal["TrajectoryRecording"]
    spec: RecordingSpec
    status: TrajectoryRecordingStatus | None = None


def trajectory_uri(recording: TrajectoryRecording) -> str:
    """Where the recording's trajectory lands: `<output.uri>/<name>/trajectory/`."""
    base = recording.spec.output.uri
    return f"{base.rstrip('/')}/{recording.name}/{TRAJECTORY_FOLDER}"


def parse_recording(data: Any, source: str = "<input>") -> TrajectoryRecording:
    return parse_model(data, source, TrajectoryRecording, RECORDING_KIND)


def load_recording(path: str | Path) -> TrajectoryRecording:
    """Read one TrajectoryRecording from a YAML or JSON file (SpecError names the field)."""
    return parse_recording(read_document(path), str(Path(path)))
