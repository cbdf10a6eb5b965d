"""A FeedbackPolicy in OpenEvolve's prompt: the parent's reports gated by its state, a plan first if asked.

OpenEvolve renders a parent's artifacts (our three reports) into its child's prompt in `PromptSampler.build_prompt`,
inside its worker processes. `install_from_env` wraps that method in every process that loads our evaluation file
(OpenEvolve's workers do, before they build a prompt): the parent's state comes from its own metrics
(cudanalyst.gating.program_state), each report is shown raw, summarised or withheld as the policy says (or, the
control, the same number withheld at random, drawn per parent program), and when the policy names a planner its plan
is asked for on the gated prompt and put under the coder's prompt. Each iteration's decisions, the prompt tokens the
gating saved (the ungated prompt's count minus the gated one's, by the served model's tokenizer) and the planner's
tokens are appended as one JSON line to the gating log, and go with the prompt (key `gating`) into the checkpoint.

The settings reach the workers through one environment variable naming a JSON file (evolve.py writes it); the
evaluator reads them too (`current`): under `runTools: shown` it runs only the tools whose reports the program's
state shows, and the gate logs the others as `notRun` (their reports were never made, so `savedTokens` leaves
them out).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudanalyst import players
from cudanalyst.api.policy import PolicySpec
from cudanalyst.gating import decisions, program_state, withheld_components

ENV = "CUDANALYST_RECORD_GATING"
CHARS_PER_TOKEN = 4  # only when the server has no /tokenize (a hosted endpoint): the count says "estimated"
log = logging.getLogger("cudanalyst.record.gate")


@dataclass(frozen=True)
class GateSettings:
    policy: PolicySpec
    gating: str  # policy | random
    seed: int
    log_path: str
    coder_url: str  # OpenAI-compatible base URL (…/v1) and served name: summaries and token counts
    coder_model: str
    planner_url: str = ""
    planner_model: str = ""
    max_tokens: int = 512
    temperature: float = 0.8
    run_tools: str = "all"  # all | shown (RecordingSpec.run_tools)

    def to_json(self) -> str:
        return json.dumps({**self.__dict__, "policy": self.policy.model_dump(by_alias=True, mode="json")})

    @classmethod
    def from_json(cls, text: str) -> GateSettings:
        data = json.loads(text)
        return cls(**{**data, "policy": PolicySpec.model_validate(data["policy"])})


def not_run(s: GateSettings | None, metrics: dict[str, Any], source: str) -> frozenset[str]:
    """The feedback tools the evaluator leaves unrun for this program: under `runTools: shown`, those whose report its
    state withholds (the rule, or the random control's draw for this program); none otherwise."""
    if s is None or s.run_tools != "shown":
        return frozenset()
    withheld = withheld_components(s.policy, program_state(metrics)[0], s.gating, s.seed, source)
    return withheld & set(players.tool_names())


_current: tuple[str, GateSettings] | None = None


def current() -> GateSettings | None:
    """This process's settings (the file ENV names), or None: no policy."""
    global _current
    path = os.environ.get(ENV)
    if not path:
        return None
    if _current is None or _current[0] != path:
        _current = (path, GateSettings.from_json(Path(path).read_text()))
    return _current[1]


# ---- the model calls --------------------------------------------------------------------------------------


def count_tokens(url: str, model: str, text: str) -> tuple[int, bool]:
    """(tokens, exact): vLLM's /tokenize beside the OpenAI routes; else an estimate."""
    import httpx

    try:
        r = httpx.post(url.rstrip("/").removesuffix("/v1") + "/tokenize", json={"model": model, "prompt": text},
                       timeout=60)
        r.raise_for_status()
        return int(r.json()["count"]), True
    except Exception:  # a server without /tokenize: the estimate, said to be one
        return len(text) // CHARS_PER_TOKEN, False


def chat(url: str, model: str, system: str, user: str, max_tokens: int, temperature: float,
         seed: int) -> tuple[str, int, int]:
    """(text, prompt tokens, completion tokens) of one chat request. A server that does not answer is said in
    OpenEvolve's words for it, so the iteration counts as the model's failure, not the agent's
    (runner.record.iterations stops the task)."""
    from openai import APIError, OpenAI

    from cudanalyst.runner.record.iterations import MODEL_FAILURES

    client = OpenAI(base_url=url, api_key="none", timeout=3600, max_retries=3)
    try:
        res = client.chat.completions.create(
            model=model, messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            max_tokens=max_tokens, temperature=temperature, seed=seed)
    except APIError as exc:
        raise RuntimeError(f"{MODEL_FAILURES[0]}: {model} at {url}: {exc}") from exc
    usage = res.usage
    return (res.choices[0].message.content or "", usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0)


def summarize(s: GateSettings, player: str, report: str, seed: int) -> str:
    from cudanalyst.runner.llm.prompts import summarizer_prompt

    prompt = summarizer_prompt(player, report)
    user = "\n\n".join(sec.text for sec in prompt.sections)
    text, _, _ = chat(s.coder_url, s.coder_model, prompt.system, user, s.max_tokens, s.temperature, seed)
    return text.strip() or "(empty summary)"


def plan_for(s: GateSettings, user: str, seed: int) -> tuple[str, int, int]:
    from cudanalyst.runner.llm.prompts import MAX_PLAN_STEPS, render, template_text

    system = template_text("planner_system.txt").strip()
    ask = user + "\n\n" + render("planner_instruction.tmpl", max_steps=MAX_PLAN_STEPS).strip()
    return chat(s.planner_url, s.planner_model, system, ask, s.max_tokens, s.temperature, seed)


# ---- the wrapped build_prompt -----------------------------------------------------------------------------


def gated_prompt(s: GateSettings, build: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`build(**kwargs)` (OpenEvolve's build_prompt, bound) with the parent's reports gated; adds `gating`."""
    artifacts = dict(kwargs.get("program_artifacts") or {})
    iteration = int(kwargs.get("evolution_round") or 0)
    metrics = kwargs.get("program_metrics") or {}
    source = str(kwargs.get("current_program") or "")
    state, why = program_state(metrics)
    unrun = sorted(c for c in not_run(s, metrics, source) if c not in artifacts)
    made = decisions(s.policy, state, artifacts, s.gating, s.seed, source, unrun)
    shown: dict[str, Any] = {}
    for d in made:
        if d.shown and d.artifact in artifacts:
            text = artifacts[d.artifact]
            if d.form == "summary" and d.component is not None:
                text = summarize(s, d.component, text if isinstance(text, str) else text.decode(errors="replace"),
                                 s.seed + iteration)
            shown[d.artifact] = text
    prompt = dict(build(**{**kwargs, "program_artifacts": shown or None}))
    full = build(**kwargs)
    full_tokens, exact = count_tokens(s.coder_url, s.coder_model, full["user"])
    gated_tokens, exact2 = count_tokens(s.coder_url, s.coder_model, prompt["user"])
    record: dict[str, Any] = {
        "iteration": iteration, "state": state, "why": why, "gating": s.gating,
        "decisions": [d.to_dict() for d in made],
        "shown": [d.artifact for d in made if d.shown], "withheld": [d.artifact for d in made if not d.shown],
        "notRun": unrun,
        "promptTokens": gated_tokens, "ungatedPromptTokens": full_tokens, "savedTokens": full_tokens - gated_tokens,
        "tokensExact": exact and exact2,
    }
    if s.planner_url:
        plan, p_in, p_out = plan_for(s, prompt["user"], s.seed + iteration)
        from cudanalyst.runner.llm.prompts import render

        prompt["user"] = prompt["user"] + "\n\n" + render("plan.tmpl", plan=plan.strip() or "(empty plan)").strip()
        record.update({"planner": s.planner_model, "plan": plan, "plannerPromptTokens": p_in,
                       "plannerCompletionTokens": p_out})
    prompt["gating"] = record
    with open(s.log_path, "a") as f:  # one line per write, appended: the workers share the file
        f.write(json.dumps(record) + "\n")
    log.info("iteration %d: parent %s; shown %s; withheld %s; saved %d prompt tokens", iteration, state,
             record["shown"], record["withheld"], record["savedTokens"])
    return prompt


_installed = False


def install(s: GateSettings) -> None:
    """Wrap PromptSampler.build_prompt in this process (once)."""
    global _installed
    if _installed:
        return
    from openevolve.prompt.sampler import PromptSampler

    original = PromptSampler.build_prompt

    def build_prompt(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # The evaluator's own sampler (LLM feedback, off here) and positional callers pass through.
        if args or getattr(self, "user_template_override", None) or getattr(self, "system_template_override", None):
            return original(self, *args, **kwargs)
        return gated_prompt(s, lambda **kw: original(self, **kw), kwargs)

    PromptSampler.build_prompt = build_prompt  # type: ignore[method-assign]
    _installed = True


def install_from_env() -> None:
    path = os.environ.get(ENV)
    if path:
        install(GateSettings.from_json(Path(path).read_text()))
