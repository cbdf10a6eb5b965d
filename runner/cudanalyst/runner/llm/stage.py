"""The LLM stage of one shard: summaries, plans and candidate kernels for the shard's pending units.

Order of work (each phase sends all its requests at once, then the next phase starts):
  1. summaries of the reports in `summary` mode, cached per program and player;
  2. plans (explicit planning), one per (program, coalition, arm, rollout), stored once;
  3. candidates: one coder request per (program, coalition, arm, rollout) with n = samplesPerCoalition.
When the planner and the coder are the same model (one server), phases 2 and 3 are one: each group's
coder request leaves as soon as its plan is stored, so no coder request waits for the slowest plan.
Seeds and prompts are the same either way, so the records are too.

Models (model_servers.py): phases run one after the other on the shard's GPU. A local server is kept
between phases whose model spec is identical (coder defaults to planner: one server for both), and
replaced when it differs (plan transfer: the planner's server serves every plan of the shard, is
stopped, then the coder's server starts). So one model at a time holds the GPU, and every server is
stopped before the kernel stage times anything.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cudanalyst.api import AttributionRun, ModelSpec
from cudanalyst.outcomes import UnitCandidate
from cudanalyst.plan import Unit
from cudanalyst.runfolder import usage_key
from cudanalyst.runner.llm import timeline as llm_timeline
from cudanalyst.runner.llm.client import (
    GenerationRequest,
    GenerationResult,
    generate,
    generate_chained,
    warm_up,
)
from cudanalyst.runner.llm.extract import extract_kernel
from cudanalyst.runner.llm.model_servers import ModelServers, StageSettings, stopping
from cudanalyst.runner.llm.prompts import (
    TEMPLATE_VERSION,
    FeedbackReport,
    ProgramView,
    Prompt,
    coder_prompt_implicit,
    coder_prompt_with_plan,
    dummy_plan,
    planner_prompt,
)
from cudanalyst.runner.llm.serving import Endpoint, ServingError
from cudanalyst.runner.llm.summarize import SummaryFailure, cached_summaries, summarize
from cudanalyst.runner.units import Failure, ProgressTracker, UnitStore, group_key
from cudanalyst.tasks import get_task
from cudanalyst.trajectory import FrozenProgram
from cudanalyst.usage import ShardUsage, read_shard_usage

log = logging.getLogger("cudanalyst.runner.llm")

PLAN_MAX_TOKENS = 1024
# Requests in flight to a server of ours: every plan of a shard at once, and vLLM's scheduler queues what it cannot
# run (issue 32: a bound of 64 a shard left the last plans waiting behind coder requests). Still bounded, so that a
# request queued at the server is answered well within the request timeout (600 s in a pod): 4 shards x 512
# requests of up to 5 x 1,024 tokens are minutes of an H200's generation, not more.
OURS_CONCURRENCY = 512
PROGRESS_EVERY_S = 5.0


@dataclass
class Group:
    """Units that share one prompt: same program, coalition, arm and rollout; one request, n samples."""

    key: str
    program: FrozenProgram
    coalition: tuple[str, ...]
    arm: str
    rollout: int
    units: list[Unit]
    plan: str | None = None
    planner_prompt: Prompt | None = None
    planner_meta: dict[str, Any] = field(default_factory=dict)
    failed: bool = False


def derive_seed(*parts: object) -> int:
    """A request seed from the run seed and the request's identity: stable across retries and shards."""
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def make_groups(run_name: str, units: Sequence[Unit], programs: dict[str, FrozenProgram]) -> list[Group]:
    groups: dict[str, Group] = {}
    for u in units:
        key = group_key(run_name, u.program_id, u.coalition, u.arm, u.rollout)
        if key not in groups:
            groups[key] = Group(key, programs[u.program_id], u.coalition, u.arm, u.rollout, [])
        groups[key].units.append(u)
    return list(groups.values())


def no_report_text(player: str) -> str:
    return f"(the {player} produced no report for this program)"


def donor_program(program: FrozenProgram, player: str, programs: Sequence[FrozenProgram], seed: int) -> FrozenProgram:
    """randomizedFeedback: another program of the run, seeded, whose report stands in for this one's.

    Same task preferred (the report then looks plausible), and one that has a report of this player.
    """
    others = [p for p in programs if p.program_id != program.program_id]
    if not others:
        return program
    for pool in ([p for p in others if p.task == program.task and player in p.feedback],
                 [p for p in others if player in p.feedback], others):
        if pool:
            pool = sorted(pool, key=lambda p: p.program_id)
            return random.Random(derive_seed(seed, "randomizedFeedback", program.program_id, player)).choice(pool)
    return others[0]


class LlmStage:
    """Runs the LLM stage for a shard's units; records go to the store as each request finishes."""

    def __init__(self, run: AttributionRun, programs: Sequence[FrozenProgram], units: Sequence[Unit],
                 store: UnitStore, progress: ProgressTracker, shard: int, settings: StageSettings) -> None:
        self.run = run
        self.spec = run.spec
        self.name = run.metadata.name
        self.all_programs = list(programs)
        self.programs = {p.program_id: p for p in programs}
        self.units = list(units)
        self.store = store
        self.progress = progress
        self.shard = shard
        self.settings = settings
        self.failures: list[Failure] = []
        self._lock = threading.Lock()
        self._last_progress = 0.0
        self.token_counts = {"prompt": 0, "completion": 0, "planner": 0, "coder": 0}
        # The servers' usage fields per stage, kept in usage/shard-<i>.json (a resumed shard adds to its own).
        self.usage = read_shard_usage(store.store, usage_key(shard)) or ShardUsage(shard=shard)
        self._usage_written = self.usage.wire()
        # Every request of this stage reports its usage and any outage it waits out, and is counted while it waits.
        self.inflight = llm_timeline.InFlight()
        self.client = replace(settings.client, on_stall=self._stall, meter=self._meter, inflight=self.inflight,
                              ours_concurrency=settings.client.ours_concurrency or OURS_CONCURRENCY)
        self._started = time.monotonic()
        self._started_epoch = time.time()
        # Seconds from the stage's start to the first and last plan and coder result (for the shard's log).
        self.timeline_marks: dict[str, float] = {}
        self._done_before = progress.llm_done

    # ------------------------------------------------------------------ inputs
    def view(self, program: FrozenProgram) -> ProgramView:
        return ProgramView(get_task(program.task).contract(), program.source, program.generation,
                           tuple(program.context.history))

    def _shown_players(self, group: Group) -> list[str]:
        if group.arm == "noFeedback":
            return []
        return [p for p in self.spec.players if p in group.coalition and self.spec.mode_of(p) != "off"]

    def _report_source(self, group: Group, player: str) -> FrozenProgram:
        if group.arm == "randomizedFeedback":
            return donor_program(group.program, player, self.all_programs, self.spec.sampling.seed)
        return group.program

    def reports(self, group: Group, summaries: dict[tuple[str, str], str]) -> list[FeedbackReport]:
        out = []
        for player in self._shown_players(group):
            source = self._report_source(group, player)
            raw = source.feedback.get(player)
            if self.spec.mode_of(player) == "summary" and raw:
                out.append(FeedbackReport(player, summaries[(source.program_id, player)], "summary"))
            else:
                out.append(FeedbackReport(player, raw or no_report_text(player), "raw"))
        return out

    # ------------------------------------------------------------------ bookkeeping
    def _ref(self, unit: Unit) -> dict[str, Any]:
        return {"key": unit.key, "run": self.name, "task": unit.task, "generation": unit.generation,
                "program_id": unit.program_id, "coalition": list(unit.coalition), "arm": unit.arm,
                "rollout": unit.rollout, "sample": unit.sample}

    def _fail_units(self, units: Sequence[Unit], phase: str, kind: str, reason: str,
                    prompts: dict[str, str] | None = None, plan: str | None = None) -> None:
        for u in units:
            self.store.write_error(UnitCandidate(**self._ref(u), prompt_version=TEMPLATE_VERSION,
                                                   prompts=prompts or {}, plan_text=plan, reason=reason,
                                                   error=f"{phase}: {reason}", errorKind=kind, phase=phase))
        with self._lock:
            self.failures.append(Failure("llm", f"{phase}:{kind}", reason, [u.key for u in units]))
            self.progress.failures = list(self.failures)

    def _tick(self, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if force or now - self._last_progress >= PROGRESS_EVERY_S:
                self._last_progress = now
                self.store.write_progress(self.shard, self.progress)
                usage = self.usage.wire()
                if usage != self._usage_written:
                    self.store.store.put_json(usage_key(self.shard), usage)
                    self._usage_written = usage

    def _meter(self, res: GenerationResult) -> None:
        role = res.role or "coder"
        model = getattr(self.spec.models, f"resolved_{role}", None) if role != "planner" else self.spec.models.planner
        with self._lock:
            self.usage.count(role, (model.model if model is not None else None) or res.model,
                             res.usage_prompt, res.usage_completion)

    def _stall(self, reason: str | None) -> None:
        """An endpoint answers only 429/5xx (reason) or is back (None): the shard's progress says so at once."""
        with self._lock:
            began_or_ended = bool(self.progress.waiting) != bool(reason)
            self.progress.waiting = reason or ""
        self._tick(force=began_or_ended)

    # ------------------------------------------------------------------ phases
    def _mark(self, what: str) -> None:
        at = time.monotonic() - self._started
        with self._lock:
            self.timeline_marks.setdefault(f"first{what}", at)
            self.timeline_marks[f"last{what}"] = at

    def time_note(self) -> str:
        """One line on where the stage's time went: when plans and kernels came back, and the tokens."""
        t = self.timeline_marks
        parts = [f"{self.progress.llm_done - self._done_before} candidates in {time.monotonic() - self._started:.1f} s"]
        for what, label in (("Plan", "plans"), ("Code", "kernels")):
            if f"first{what}" in t:
                parts.append(f"{label} back from {t[f'first{what}']:.1f} s to {t[f'last{what}']:.1f} s")
        parts.append(f"{self.token_counts['completion']} tokens generated")
        return ", ".join(parts)

    def timeline(self) -> dict[str, Any]:
        """The stage on the epoch clock (llm/timeline.py): start, end, first and last plan and kernel back, tokens
        by role, and the in-flight samples."""
        out: dict[str, Any] = {"started": self._started_epoch, "ended": time.time(),
                               "planTokens": self.token_counts["planner"], "codeTokens": self.token_counts["coder"],
                               "inFlight": self.inflight.samples}
        for key, at in self.timeline_marks.items():
            out[key] = self._started_epoch + at
        return out

    def run_stage(self) -> list[Failure]:
        self._started = time.monotonic()
        self._started_epoch = time.time()
        groups = make_groups(self.name, self.units, self.programs)
        if not groups:
            return []
        self.inflight.start()
        try:
            return self._run_groups(groups)
        finally:
            self.inflight.stop()
            llm_timeline.write(self.settings.log_dir, self.shard, self.timeline())

    def _run_groups(self, groups: list[Group]) -> list[Failure]:
        sampling = self.spec.sampling
        servers = ModelServers(self.settings, sampling.seed,
                               warm_up=lambda ep: warm_up(ep, sampling.temperature, sampling.top_p))
        with stopping(servers):
            summaries = self._summaries(groups, servers)
            live = [g for g in groups if not g.failed]
            if self.spec.planning == "explicit" and self._one_model_plans_and_codes():
                self._plans_into_candidates(live, summaries, servers)
            else:
                if self.spec.planning == "explicit":
                    self._plans(live, summaries, servers)
                    live = [g for g in live if not g.failed]
                self._candidates(live, summaries, servers)
        # Time a local model held the shard's GPU(s); endpoints cost this shard nothing.
        self.progress.gpu_seconds += servers.served_seconds
        self.progress.waiting = ""  # an outage that outlasted its allowance is in the failures now
        self._tick(force=True)
        return self.failures

    def _endpoint_or_fail(self, servers: ModelServers, spec: ModelSpec, phase: str,
                          units: Sequence[Unit]) -> Endpoint | None:
        try:
            return servers.endpoint(spec)
        except ServingError as exc:
            self._fail_units(units, phase, "serving", str(exc))
            return None

    def _summaries(self, groups: list[Group], servers: ModelServers) -> dict[tuple[str, str], str]:
        """Summaries of every report shown in summary mode, from the cache or the summarizer."""
        needed: dict[tuple[str, str], list[Group]] = {}
        for g in groups:
            for player in self._shown_players(g):
                source = self._report_source(g, player)
                if self.spec.mode_of(player) == "summary" and source.feedback.get(player):
                    needed.setdefault((source.program_id, player), []).append(g)
        summaries, todo = cached_summaries(self.store, list(needed))
        if not todo:
            return summaries
        spec = self.spec.models.resolved_summarizer
        units = [u for key in todo for g in needed[key] for u in g.units]
        endpoint = self._endpoint_or_fail(servers, spec, "summarizer", units)
        if endpoint is None:
            for key in todo:
                for g in needed[key]:
                    g.failed = True
            return summaries
        reports = {(pid, player): self.programs[pid].feedback[player] for pid, player in todo}
        made = summarize(endpoint, reports, self.store, model=spec.model or endpoint.model,
                         seed_of=lambda pid, player: derive_seed(self.spec.sampling.seed, "summary", pid, player),
                         settings=self.client)
        for key, result in made.items():
            if isinstance(result, SummaryFailure):
                self._fail_units([u for g in needed[key] for u in g.units], "summarizer", result.kind, result.reason)
                for g in needed[key]:
                    g.failed = True
            else:
                summaries[key] = result
        return summaries

    def _plans_needed(self, groups: list[Group], summaries: dict[tuple[str, str], str]) -> list[Group]:
        """Set every group's planner prompt, and the plan where it is known (dummy or stored); the rest."""
        todo = []
        for g in groups:
            g.planner_prompt = planner_prompt(self.view(g.program), self.reports(g, summaries))
            if g.arm == "dummyPlan":
                g.plan = dummy_plan()
                g.planner_meta = {"dummy": True}
                continue
            stored = self.store.read_planner_text(g.key)
            if stored is not None:
                g.plan, g.planner_meta = str(stored["plan"]), stored
            else:
                todo.append(g)
        return todo

    def _request_seed(self, role: str, key: str) -> int | None:
        """The seed a request carries: derived from the run's seed and its identity, or none (sampling.requestSeeds
        false: vLLM's seeded rows are drawn one by one, which costs the whole batch)."""
        sampling = self.spec.sampling
        return derive_seed(sampling.seed, role, key) if sampling.request_seeds else None

    def _planner_request(self, g: Group, endpoint: Endpoint) -> GenerationRequest:
        assert g.planner_prompt is not None
        return GenerationRequest(
            g.key, g.planner_prompt.rendered(endpoint.api), 1, self._request_seed("planner", g.key),
            min(PLAN_MAX_TOKENS, self.spec.sampling.max_tokens), self.spec.sampling.temperature,
            self.spec.sampling.top_p, role="planner")

    def _store_plan(self, g: Group, res: GenerationResult, endpoint: Endpoint) -> bool:
        """Record a planner result on its group (a failure fails the group's units); True when planned."""
        assert g.planner_prompt is not None
        prompt_text = _prompt_text(g.planner_prompt.rendered(endpoint.api))
        if not res.ok:
            g.failed = True
            self._fail_units(g.units, "planner", res.error_kind or "error", res.error or "",
                             prompts={"planner": prompt_text})
            return False
        self._count(res)
        self._mark("Plan")
        meta = self.store.write_planner_text(g.key, {
            "groupKey": g.key, "plan": res.texts[0], "model": self.spec.models.planner.model, "api": endpoint.api,
            "seed": res.seed, "promptVersion": TEMPLATE_VERSION, "prompt": prompt_text,
            "finishReason": res.finish_reasons[0],
            "tokens": {"prompt": res.prompt_tokens, "completion": res.completion_tokens[0]},
        })
        g.plan, g.planner_meta = str(meta["plan"]), meta
        return True

    def _plans(self, groups: list[Group], summaries: dict[tuple[str, str], str], servers: ModelServers) -> None:
        todo = self._plans_needed(groups, summaries)
        if not todo:
            return
        endpoint = self._endpoint_or_fail(servers, self.spec.models.planner, "planner",
                                          [u for g in todo for u in g.units])
        if endpoint is None:
            for g in todo:
                g.failed = True
            return
        requests = [self._planner_request(g, endpoint) for g in todo]
        for g, res in zip(todo, generate(endpoint, requests, self.client), strict=True):
            self._store_plan(g, res, endpoint)

    def _one_model_plans_and_codes(self) -> bool:
        """Whether one server writes plans and kernels (the coder defaults to the planner)."""
        return self.spec.models.resolved_coder.model_dump_json() == self.spec.models.planner.model_dump_json()

    def _plans_into_candidates(self, groups: list[Group], summaries: dict[tuple[str, str], str],
                               servers: ModelServers) -> None:
        """Explicit planning on one model: each coder request leaves as soon as its group's plan is stored."""
        if not groups:
            return
        todo = self._plans_needed(groups, summaries)
        todo_keys = {g.key for g in todo}
        planned = [g for g in groups if g.key not in todo_keys]
        try:
            endpoint = servers.endpoint(self.spec.models.resolved_coder)
        except ServingError as exc:  # as the two phases would say it: plans first, then the coder's units
            for phase, failed in (("planner", todo), ("coder", planned)):
                if failed:
                    self._fail_units([u for g in failed for u in g.units], phase, "serving", str(exc))
            return
        by_key = {g.key: g for g in groups}
        prompts: dict[str, Prompt] = {}

        def coder_request(g: Group) -> GenerationRequest:
            prompts[g.key] = self._coder_prompt(g, summaries)
            return self._coder_request(g, prompts[g.key], endpoint)

        def after_plan(res: GenerationResult) -> GenerationRequest | None:
            g = by_key[res.key]
            return coder_request(g) if self._store_plan(g, res, endpoint) else None

        def record(res: GenerationResult) -> None:
            g = by_key[res.key]
            self._write_group(g, res, prompts[g.key], endpoint)
            self._tick()

        generate_chained(endpoint, [self._planner_request(g, endpoint) for g in todo], after_plan,
                         [coder_request(g) for g in planned], self.client, on_result=record)

    def _coder_prompt(self, g: Group, summaries: dict[tuple[str, str], str]) -> Prompt:
        if g.arm == "dummyPlan" and g.plan is None:
            # Implicit planning has no planner; the control still hands the coder an empty-of-content plan.
            g.plan = dummy_plan()
        if self.spec.planning == "explicit" or g.arm == "dummyPlan":
            return coder_prompt_with_plan(self.view(g.program), g.plan or "")
        return coder_prompt_implicit(self.view(g.program), self.reports(g, summaries))

    def _candidates(self, groups: list[Group], summaries: dict[tuple[str, str], str],
                    servers: ModelServers) -> None:
        if not groups:
            return
        spec = self.spec.models.resolved_coder
        endpoint = self._endpoint_or_fail(servers, spec, "coder", [u for g in groups for u in g.units])
        if endpoint is None:
            return
        prompts = {g.key: self._coder_prompt(g, summaries) for g in groups}
        by_key = {g.key: g for g in groups}
        requests = [self._coder_request(g, prompts[g.key], endpoint) for g in groups]

        def record(res: GenerationResult) -> None:
            g = by_key[res.key]
            self._write_group(g, res, prompts[g.key], endpoint)
            self._tick()

        generate(endpoint, requests, self.client, on_result=record)

    def _coder_request(self, g: Group, prompt: Prompt, endpoint: Endpoint) -> GenerationRequest:
        sampling = self.spec.sampling
        return GenerationRequest(g.key, prompt.rendered(endpoint.api), sampling.samples_per_coalition,
                                 self._request_seed("coder", g.key), sampling.max_tokens,
                                 sampling.temperature, sampling.top_p, role="coder")

    def _write_group(self, g: Group, res: GenerationResult, coder: Prompt, endpoint: Endpoint) -> None:
        prompts = {"coder": _prompt_text(coder.rendered(endpoint.api))}
        if g.planner_prompt is not None and self.spec.planning == "explicit" and g.arm != "dummyPlan":
            prompts["planner"] = str(g.planner_meta.get("prompt") or
                                     _prompt_text(g.planner_prompt.rendered(self.spec.models.planner.api)))
        if not res.ok:
            self._fail_units(g.units, "coder", res.error_kind or "error", res.error or "", prompts, g.plan)
            return
        self._count(res)
        self._mark("Code")
        models = {"coder": self.spec.models.resolved_coder.model or endpoint.model}
        if self.spec.planning == "explicit":
            models["planner"] = "" if g.arm == "dummyPlan" else (self.spec.models.planner.model or "")
        task_kernels = get_task(g.program.task).kernel_names
        for u in g.units:
            text = coder.answer_text(endpoint.api, res.texts[u.sample] if u.sample < len(res.texts) else None)
            ex = extract_kernel(text, task_kernels)
            reason = "" if ex.ok else (ex.reason or "no usable code")
            tokens = {"coderPrompt": res.prompt_tokens or 0}
            count = res.completion_tokens[u.sample] if u.sample < len(res.completion_tokens) else None
            if count is not None:
                tokens["coderCompletion"] = count
            plan_tokens = g.planner_meta.get("tokens") or {}
            if plan_tokens.get("prompt") is not None:
                tokens["plannerPrompt"] = int(plan_tokens["prompt"])
            if plan_tokens.get("completion") is not None:
                tokens["plannerCompletion"] = int(plan_tokens["completion"])
            record = UnitCandidate(
                **self._ref(u), prompt_version=TEMPLATE_VERSION, prompts=prompts, plan_text=g.plan,
                completion=text or "", code=ex.code, reason=reason, models=models, seed=res.seed,
                tokens=tokens,
                api={"coder": endpoint.api, "planner": str(g.planner_meta.get("api", self.spec.models.planner.api))},
                sampleIndex=u.sample, samplesInRequest=len(res.texts),
                finishReason=res.finish_reasons[u.sample] if u.sample < len(res.finish_reasons) else None,
                plannerSeed=g.planner_meta.get("seed"),
                extraction={"method": ex.method, "blocks": ex.blocks, "kernels": ex.kernels, "notes": ex.notes},
            )
            if self.store.write_candidate(record):
                with self._lock:
                    self.progress.llm_done += 1

    def _count(self, res: GenerationResult) -> None:
        with self._lock:
            generated = sum(c or 0 for c in res.completion_tokens)
            self.token_counts["prompt"] += res.prompt_tokens or 0
            self.token_counts["completion"] += generated
            self.token_counts["planner" if res.role == "planner" else "coder"] += generated


def _prompt_text(rendered: list[dict[str, str]] | str) -> str:
    """The exact prompt as sent: the text for completion endpoints, the JSON messages for chat."""
    return rendered if isinstance(rendered, str) else json.dumps(rendered, ensure_ascii=False)
