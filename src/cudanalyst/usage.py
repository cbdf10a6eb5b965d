"""Token accounting of a run: prompt and completion tokens per stage (planner, coder, summarizer) and model.

Each shard's LLM stage counts what the servers' `usage` fields say of every answered request and keeps the
sum in `usage/shard-<i>.json` (a resumed shard reads its own and adds to it, so tokens spent before an
interruption still count). The run's usage is the sum over shards; its cost is the tokens times the spec's
`models.<role>.price` per million. `estimate` says the same before a run, for `cudanalyst plan`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from cudanalyst.api import AttributionRun, ModelSpec
from cudanalyst.runfolder import USAGE
from cudanalyst.store import ObjectNotFound, ObjectStore, StoreError

STAGES = ("summarizer", "planner", "coder")
# `cudanalyst plan`'s rough sizes (characters per token as in cudanalyst.plan; the templates' own text).
CHARS_PER_TOKEN = 4
TEMPLATE_TOKENS = 400
PLAN_MAX_TOKENS = 1024  # runner.llm.stage.PLAN_MAX_TOKENS, the core may not import the runner
SUMMARY_MAX_TOKENS = 512  # runner.llm.summarize.SUMMARY_MAX_TOKENS


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class StageUsage(_Wire):
    """What one stage's requests cost, as the server counted it."""

    model: str = ""
    requests: int = Field(0, ge=0)
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    # Answers that carried no usage fields: their tokens are missing from the counts, and said so.
    without_usage: int = Field(0, ge=0)

    def add(self, other: StageUsage) -> StageUsage:
        return StageUsage(model=self.model or other.model, requests=self.requests + other.requests,
                          prompt_tokens=self.prompt_tokens + other.prompt_tokens,
                          completion_tokens=self.completion_tokens + other.completion_tokens,
                          without_usage=self.without_usage + other.without_usage)


class ShardUsage(_Wire):
    """usage/shard-<i>.json."""

    shard: int = 0
    stages: dict[str, StageUsage] = Field(default_factory=dict)

    def count(self, stage: str, model: str, prompt: int | None, completion: int | None) -> None:
        seen = self.stages.get(stage) or StageUsage(model=model)
        if prompt is None and completion is None:
            self.stages[stage] = seen.add(StageUsage(model=model, requests=1, without_usage=1))
        else:
            self.stages[stage] = seen.add(StageUsage(model=model, requests=1, prompt_tokens=prompt or 0,
                                                     completion_tokens=completion or 0))

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def read_shard_usage(store: ObjectStore, key: str) -> ShardUsage | None:
    try:
        return ShardUsage.model_validate(store.get_json(key))
    except (ObjectNotFound, ValueError):
        return None


def total(shards: Iterable[ShardUsage]) -> dict[str, StageUsage]:
    out: dict[str, StageUsage] = {}
    for shard in shards:
        for stage, used in shard.stages.items():
            out[stage] = out[stage].add(used) if stage in out else used
    return out


def read_usage(store: ObjectStore) -> dict[str, StageUsage]:
    """The run's tokens per stage, summed over the shards' objects (none yet: empty)."""
    try:
        keys = [k for k in store.list(USAGE) if k.endswith(".json")]
    except StoreError:
        return {}
    found = [read_shard_usage(store, k) for k in keys]
    return total(u for u in found if u is not None)


def model_of(run: AttributionRun, stage: str) -> ModelSpec:
    models = run.spec.models
    return {"planner": models.planner, "coder": models.resolved_coder, "summarizer": models.resolved_summarizer}[stage]


def cost(model: ModelSpec, prompt_tokens: float, completion_tokens: float) -> float | None:
    if model.price is None:
        return None
    return (prompt_tokens * model.price.input_per_million + completion_tokens * model.price.output_per_million) / 1e6


def summary(run: AttributionRun, stages: dict[str, StageUsage]) -> dict[str, Any]:
    """report.json's `usage`: per stage and per model, tokens and the estimated cost where the spec prices it."""
    by_stage: dict[str, Any] = {}
    by_model: dict[str, dict[str, Any]] = {}
    priced_total = 0.0
    unpriced: list[str] = []
    currencies: set[str] = set()
    for stage in STAGES:
        used = stages.get(stage)
        if used is None:
            continue
        spec = model_of(run, stage)
        spent = cost(spec, used.prompt_tokens, used.completion_tokens)
        row = used.model_dump(by_alias=True, mode="json") | {"model": used.model or spec.model or "",
                                                             "cost": None if spent is None else round(spent, 6)}
        if spec.price is not None:
            row["currency"] = spec.price.currency
            currencies.add(spec.price.currency)
            priced_total += spent or 0.0
        else:
            unpriced.append(stage)
        by_stage[stage] = row
        model = by_model.setdefault(row["model"], {"requests": 0, "promptTokens": 0, "completionTokens": 0,
                                                   "cost": None, "stages": []})
        model["stages"].append(stage)
        for k in ("requests", "promptTokens", "completionTokens"):
            model[k] += row[k]
        if spent is not None:
            model["cost"] = round((model["cost"] or 0.0) + spent, 6)
    return {
        "stages": by_stage,
        "models": by_model,
        "promptTokens": sum(r["promptTokens"] for r in by_stage.values()),
        "completionTokens": sum(r["completionTokens"] for r in by_stage.values()),
        "cost": round(priced_total, 6) if currencies else None,
        "currency": ", ".join(sorted(currencies)) or None,
        "unpriced": unpriced,
    }


def lines(usage: dict[str, Any]) -> list[str]:
    """Plain lines for a console: one per stage, then the total."""
    out = []
    for stage, row in (usage.get("stages") or {}).items():
        spent = f", about {row['cost']:.4f} {row.get('currency', '')}" if row.get("cost") is not None else ""
        missing = f" ({row['withoutUsage']} answers without usage fields)" if row.get("withoutUsage") else ""
        out.append(f"tokens, {stage} ({row['model']}): {row['promptTokens']:,} prompt + "
                   f"{row['completionTokens']:,} completion in {row['requests']:,} requests{spent}{missing}")
    if out and usage.get("cost") is not None:
        note = f" (not priced: {', '.join(usage['unpriced'])})" if usage.get("unpriced") else ""
        out.append(f"estimated cost: {usage['cost']:.4f} {usage['currency']}{note}")
    return out


def estimate(run: AttributionRun, programs: list[Any], units: list[Any]) -> dict[str, Any]:
    """Tokens and cost per stage before a run: requests as the LLM stage makes them (one per rollout group;
    n samples share a prompt), prompts sized from the programs and reports in characters, completions at
    their caps (so the completion tokens and the cost are upper bounds)."""
    spec = run.spec
    sampling = spec.sampling
    by_id = {p.program_id: p for p in programs}
    groups = {(u.program_id, u.coalition, u.arm, u.rollout) for u in units}
    stages: dict[str, dict[str, float]] = {s: {"requests": 0, "promptTokens": 0.0, "maxCompletionTokens": 0.0}
                                           for s in STAGES}
    longest: dict[str, tuple[float, str]] = {}  # stage -> (its longest prompt's tokens, that program's id)

    def ask(stage: str, prompt: float, completion: float, pid: str) -> None:
        row = stages[stage]
        row["requests"] += 1
        row["promptTokens"] += prompt
        row["maxCompletionTokens"] += completion
        if prompt > longest.get(stage, (-1.0, ""))[0]:
            longest[stage] = (prompt, pid)

    def shown(arm: str, coalition: tuple[str, ...], program: Any) -> int:
        if arm in ("noFeedback", "dummyPlan"):
            return 0
        return sum(len(program.feedback.get(p, "")) for p in coalition if spec.mode_of(p) != "off")

    plan_tokens = min(PLAN_MAX_TOKENS, sampling.max_tokens)
    for pid, coalition, arm, _ in groups:
        program = by_id[pid]
        head = len(program.source) / CHARS_PER_TOKEN + TEMPLATE_TOKENS
        reports = shown(arm, coalition, program) / CHARS_PER_TOKEN
        samples = sampling.samples_per_coalition * sampling.max_tokens
        if spec.planning == "explicit":
            ask("coder", head + (plan_tokens if arm != "dummyPlan" else 100), samples, pid)
            if arm != "dummyPlan":
                ask("planner", head + reports, plan_tokens, pid)
        else:
            ask("coder", head + reports, samples, pid)
    summaries = {(p.program_id, player) for p in programs for player in spec.players
                 if spec.mode_of(player) == "summary" and p.feedback.get(player)}
    for pid, player in summaries:
        ask("summarizer", len(by_id[pid].feedback[player]) / CHARS_PER_TOKEN + TEMPLATE_TOKENS, SUMMARY_MAX_TOKENS,
            pid)
    out: dict[str, Any] = {}
    costs: list[float] = []
    currencies: set[str] = set()
    for stage, row in stages.items():
        if not row["requests"]:
            continue
        model = model_of(run, stage)
        spent = cost(model, row["promptTokens"], row["maxCompletionTokens"])
        out[stage] = {"model": model.model or "", "requests": int(row["requests"]),
                      "promptTokens": round(row["promptTokens"]), "maxCompletionTokens": round(row["maxCompletionTokens"]),
                      "maxCost": None if spent is None else round(spent, 4),
                      "longestPrompt": {"tokens": round(longest[stage][0]), "programId": longest[stage][1]}}
        if spent is not None and model.price is not None:
            costs.append(spent)
            currencies.add(model.price.currency)
    return {"stages": out, "maxCost": round(sum(costs), 4) if costs else None,
            "currency": ", ".join(sorted(currencies)) or None}


def context_warnings(run: AttributionRun, est: dict[str, Any], programs: list[Any]) -> list[str]:
    """One line per stage whose longest estimated prompt plus its completion cap exceeds its model's maxModelLen:
    vLLM refuses such a request, and its units fail as prompt-too-long after the GPU time is spent (pure)."""
    fields = {"planner": "planner", "coder": "coder" if run.spec.models.coder else "planner",
              "summarizer": "summarizer" if run.spec.models.summarizer else "planner"}
    completion = {"planner": min(PLAN_MAX_TOKENS, run.spec.sampling.max_tokens),
                  "coder": run.spec.sampling.max_tokens, "summarizer": SUMMARY_MAX_TOKENS}
    task_of = {p.program_id: p.task for p in programs}
    out = []
    for stage, row in est.get("stages", {}).items():
        limit = model_of(run, stage).max_model_len
        longest = row.get("longestPrompt")
        if limit is None or not longest or longest["tokens"] + completion[stage] <= limit:
            continue
        out.append(f"warning: spec.models.{fields[stage]}.maxModelLen: the longest {stage} prompt is about "
                   f"{longest['tokens']:,} tokens (program {longest['programId']}, task "
                   f"{task_of.get(longest['programId'], '?')}) + {completion[stage]:,} completion > {limit:,}: the "
                   "server refuses such requests, and their units fail as prompt-too-long")
    return out
