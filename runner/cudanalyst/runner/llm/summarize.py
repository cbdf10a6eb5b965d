"""Feedback summaries: a summarizer model condenses one player's report of one frozen program.

A summary depends only on (program, player), never on the coalition, so it is made once per run and
cached in the store (`feedback/summaries/<programId>/<player>.json`); every coalition, rollout and
shard that shows that report in `summary` mode reads the same text. Greedy decoding (temperature 0)
with a seed derived from the program and player, so a summary made again reads the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cudanalyst.runner.llm.client import ClientSettings, GenerationRequest, generate
from cudanalyst.runner.llm.prompts import TEMPLATE_VERSION, summarizer_prompt
from cudanalyst.runner.llm.serving import Endpoint
from cudanalyst.runner.units import UnitStore

SUMMARY_MAX_TOKENS = 512

SummaryKey = tuple[str, str]  # (programId, player)


@dataclass(frozen=True)
class SummaryFailure:
    kind: str
    reason: str


def cached_summaries(store: UnitStore, keys: Sequence[SummaryKey]) -> tuple[dict[SummaryKey, str], list[SummaryKey]]:
    """Summaries already in the store, and the keys still to summarize (in the given order)."""
    found: dict[SummaryKey, str] = {}
    todo: list[SummaryKey] = []
    for pid, player in keys:
        cached = store.read_summary(pid, player)
        if cached is not None:
            found[(pid, player)] = str(cached["summary"])
        else:
            todo.append((pid, player))
    return found, todo


def summarize(
    endpoint: Endpoint, reports: Mapping[SummaryKey, str], store: UnitStore, *, model: str, seed_of: Callable[
        [str, str], int], settings: ClientSettings | None = None,
) -> dict[SummaryKey, str | SummaryFailure]:
    """Summaries of `reports` ({(programId, player): raw report}) by the model at `endpoint`, stored once."""
    keys = list(reports)
    prompts = {key: summarizer_prompt(key[1], reports[key]).rendered(endpoint.api) for key in keys}
    requests = [GenerationRequest(f"{pid}/{player}", prompts[(pid, player)], 1, seed_of(pid, player),
                                  SUMMARY_MAX_TOKENS, temperature=0.0, top_p=1.0, role="summarizer")
                for pid, player in keys]
    out: dict[SummaryKey, str | SummaryFailure] = {}
    for (pid, player), res in zip(keys, generate(endpoint, requests, settings), strict=True):
        if not res.ok:
            out[(pid, player)] = SummaryFailure(res.error_kind or "error", res.error or "")
            continue
        prompt = prompts[(pid, player)]
        stored = store.write_summary(pid, player, {
            "programId": pid, "player": player, "summary": res.texts[0].strip(), "model": model,
            "api": endpoint.api, "promptVersion": TEMPLATE_VERSION, "seed": res.seed,
            "prompt": prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False),
            "tokens": {"prompt": res.prompt_tokens, "completion": res.completion_tokens[0]},
        })
        out[(pid, player)] = str(stored["summary"])  # a racing shard's stored summary wins
    return out
