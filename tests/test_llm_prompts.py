"""Prompt layout: what is shared across coalitions comes first, the coalition's feedback last."""

from __future__ import annotations

import itertools
import os
import re

from cudanalyst.runner.llm import prompts as P
from cudanalyst.tasks import get_task

PLAYERS = ["debugger", "analyzer", "profiler"]
TEXTS = {"debugger": "line 12: out of bounds write", "analyzer": "registers: 40, spills: 0",
         "profiler": "time 1.2 ms; memory bound"}


def view() -> P.ProgramView:
    return P.ProgramView(get_task("gemm").contract(), "__global__ void gemm() {}\n", 3,
                         ("gen 1: tiled with 16x16", "gen 2: unrolled the k loop"))


def all_coalitions() -> list[tuple[str, ...]]:
    return [c for r in range(len(PLAYERS) + 1) for c in itertools.combinations(PLAYERS, r)]


def common_prefix(a: str, b: str) -> str:
    return os.path.commonprefix([a, b])


def test_planner_prompts_of_all_coalitions_share_the_head_and_differ_only_after_it() -> None:
    prompts = [P.planner_prompt(view(), P.coalition_reports(c, PLAYERS, TEXTS, {})) for c in all_coalitions()]
    heads = {p.shared_prefix() for p in prompts}
    assert len(heads) == 1
    head = heads.pop()
    texts = [p.completion() for p in prompts]
    for a, b in itertools.combinations(texts, 2):
        assert head in common_prefix(a, b)
    # Head holds the task contract, the program, the history and the instruction, in that order.
    order = [head.index(s) for s in ("## Task", "## Current program", "## What earlier", "## Your job")]
    assert order == sorted(order)


def test_feedback_sections_come_last_in_spec_order() -> None:
    prompt = P.planner_prompt(view(), P.coalition_reports(("profiler", "debugger"), PLAYERS, TEXTS, {}))
    names = [s.name for s in prompt.sections]
    assert names[-2:] == ["feedback:debugger", "feedback:profiler"]
    assert all(s.shared for s in prompt.sections[:-2]) and not any(s.shared for s in prompt.sections[-2:])
    user = prompt.user_text()
    assert user.rstrip().endswith(TEXTS["profiler"])


def test_empty_coalition_says_there_is_no_feedback() -> None:
    prompt = P.planner_prompt(view(), [])
    assert prompt.sections[-1].name == "feedback"
    assert "No feedback" in prompt.sections[-1].text


def test_summary_mode_is_labelled_and_off_players_are_never_shown() -> None:
    reports = P.coalition_reports(PLAYERS, PLAYERS, TEXTS, {"analyzer": "off", "profiler": "summary"})
    assert [(r.player, r.mode) for r in reports] == [("debugger", "raw"), ("profiler", "summary")]
    text = P.planner_prompt(view(), reports).user_text()
    assert "Feedback from the profiler (summary)" in text and "analyzer" not in text.split("## Your job")[1]


def test_explicit_coder_prompt_puts_the_plan_before_the_history() -> None:
    prompt = P.coder_prompt_with_plan(view(), "1. tile by 32")
    names = [s.name for s in prompt.sections]
    assert names.index("program") < names.index("plan") < names.index("history")
    assert prompt.shared_prefix().endswith(prompt.sections[1].text.rstrip("\n") + "\n")
    a = P.coder_prompt_with_plan(view(), "1. A").completion()
    b = P.coder_prompt_with_plan(view(), "1. B").completion()
    assert prompt.shared_prefix() in common_prefix(a, b)


def test_implicit_coder_prompt_ends_with_the_reports() -> None:
    prompt = P.coder_prompt_implicit(view(), P.coalition_reports(("analyzer",), PLAYERS, TEXTS, {}))
    assert prompt.sections[-1].name == "feedback:analyzer"
    assert "Read the feedback below" in prompt.user_text()


def test_chat_and_completion_renderings_hold_the_same_sections() -> None:
    prompt = P.planner_prompt(view(), P.coalition_reports(PLAYERS, PLAYERS, TEXTS, {}))
    chat = prompt.chat()
    assert [m["role"] for m in chat] == ["system", "user"]
    assert chat[0]["content"] == P.template_text("planner_system.txt").strip()
    completion = prompt.rendered("completion")
    assert isinstance(completion, str)
    assert completion.startswith(chat[0]["content"]) and chat[1]["content"] in completion
    assert completion.rstrip().endswith("## Answer")


def test_templates_are_versioned_files_and_fully_substituted() -> None:
    assert P.TEMPLATE_VERSION == "v2"
    prompt = P.planner_prompt(view(), P.coalition_reports(PLAYERS, PLAYERS, TEXTS, {}))
    assert prompt.version == "v2"
    for text in (prompt.completion(), P.coder_prompt_with_plan(view(), "x").completion(),
                 P.summarizer_prompt("profiler", TEXTS["profiler"]).completion()):
        assert not re.search(r"\$[a-z_]+", text), "an unsubstituted placeholder"


def test_missing_template_names_the_file() -> None:
    try:
        P.template_text("nope.tmpl")
    except FileNotFoundError as exc:
        assert f"{P.TEMPLATE_VERSION}/nope.tmpl" in str(exc)
    else:
        raise AssertionError("expected FileNotFoundError")


def test_dummy_plan_carries_no_feedback() -> None:
    plan = P.dummy_plan()
    assert plan and not any(t.split()[0] in plan for t in TEXTS.values())


def test_base_model_coder_prompt_opens_the_code_block_and_answer_restores_it() -> None:
    coder = P.coder_prompt_with_plan(view(), "1. tile")
    text = coder.completion()
    assert text.endswith("## Answer\n```cuda\n")
    assert coder.answer_text("completion", "__global__ void k() {}\n```") == "```cuda\n__global__ void k() {}\n```"
    assert coder.answer_text("chat", "x") == "x" and coder.answer_text("completion", None) is None
    planner = P.planner_prompt(view(), P.coalition_reports(PLAYERS, PLAYERS, TEXTS, {}))
    assert planner.completion().rstrip().endswith("## Answer") and planner.answer_text("completion", "y") == "y"
