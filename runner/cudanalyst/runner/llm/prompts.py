"""Planner, coder and summarizer prompts for one frozen program under one coalition.

Layout is chosen for vLLM's prefix cache: every section that is the same for all coalitions of a
frozen program (system text, task contract, current program, history, instruction) comes first,
and the sections that differ between coalitions (the feedback of each player in S, or the plan that
the feedback led to) come last, so all 2^n prompts of a program share one cached head. In explicit
planning the plan sits before the history in the coder's prompt (as the method prescribes), so
there the shared head is system + task + program.

A prompt is a list of sections; chat models get it as [system, user] messages, base models
(`api: completion`) as one text with the same sections and a short answer cue. Templates are
files under templates/<version>/, and every unit records the version and the rendered prompt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template
from typing import Literal

from cudanalyst.trajectory.toolruns import shown_report

TEMPLATE_VERSION = "v2"  # v2: coder prompts for base models open the code fence themselves
CODE_OPENER = "```cuda\n"
MAX_PLAN_STEPS = 6
MAX_SUMMARY_WORDS = 200

Api = Literal["chat", "completion"]
FeedbackMode = Literal["raw", "summary"]


@cache
def template_text(name: str, version: str = TEMPLATE_VERSION) -> str:
    """The text of templates/<version>/<name>; a missing file is an error naming it."""
    path = resources.files("cudanalyst.runner.llm.templates").joinpath(version, name)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"prompt template {version}/{name} not found in {path}") from None


def render(name: str, version: str = TEMPLATE_VERSION, **values: object) -> str:
    return Template(template_text(name, version)).substitute({k: str(v) for k, v in values.items()})


@dataclass(frozen=True)
class Section:
    """A titled piece of a prompt; `shared` is True when it is identical across coalitions."""

    name: str
    text: str
    shared: bool


@dataclass(frozen=True)
class Prompt:
    """System text plus ordered sections; rendered for a chat or a completion endpoint."""

    system: str
    sections: tuple[Section, ...]
    version: str = TEMPLATE_VERSION
    # A base model (completion API) starts writing code far more often when the prompt has already
    # opened the code block; the opener is then put back in front of the completion (`answer_text`).
    opens_code: bool = False

    def user_text(self) -> str:
        return "\n".join(s.text.rstrip("\n") + "\n" for s in self.sections)

    def chat(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user_text()}]

    def completion(self) -> str:
        cue = render("completion_code_cue.tmpl" if self.opens_code else "completion_cue.tmpl", self.version)
        return f"{self.system.rstrip()}\n\n{self.user_text()}\n{cue}"

    def answer_text(self, api: Api, completion: str | None) -> str | None:
        """The model's answer as it reads in full: with the code opener the prompt supplied."""
        if completion is None or api != "completion" or not self.opens_code:
            return completion
        return CODE_OPENER + completion

    def rendered(self, api: Api) -> list[dict[str, str]] | str:
        return self.chat() if api == "chat" else self.completion()

    def shared_prefix(self) -> str:
        """The part of the user text that is the same for every coalition of the program."""
        head = []
        for s in self.sections:
            if not s.shared:
                break
            head.append(s.text.rstrip("\n") + "\n")
        return "\n".join(head)


@dataclass(frozen=True)
class FeedbackReport:
    """One player's feedback as shown to a model: the raw report or its summary."""

    player: str
    text: str
    mode: FeedbackMode = "raw"


@dataclass(frozen=True)
class ProgramView:
    """What the prompts need of a frozen program (kept apart from the trajectory model for tests)."""

    task_contract: str
    source: str
    generation: int
    history: Sequence[str] = ()


def _head(program: ProgramView, version: str) -> list[Section]:
    return [
        Section("task", render("task.tmpl", version, contract=program.task_contract.strip()), True),
        Section("program", render("program.tmpl", version, generation=program.generation,
                                  source=program.source.rstrip("\n")), True),
    ]


def _history(program: ProgramView, version: str, shared: bool) -> Section:
    if not program.history:
        return Section("history", render("history_empty.tmpl", version), shared)
    lines = "\n".join(f"- {h.strip()}" for h in program.history)
    return Section("history", render("history.tmpl", version, history=lines), shared)


def feedback_sections(reports: Sequence[FeedbackReport], version: str = TEMPLATE_VERSION) -> list[Section]:
    """The coalition's reports, in the order given (the spec's player order), or a 'no feedback' note.

    A raw report passes `shown_report` here, the one gate every prompt goes through: a GPU tool's failure text
    in a trajectory recorded before issue 28 becomes the plain statement that the tool could not run."""
    if not reports:
        return [Section("feedback", render("no_feedback.tmpl", version), False)]
    return [
        Section(
            f"feedback:{r.player}",
            render("feedback_summary.tmpl" if r.mode == "summary" else "feedback.tmpl", version,
                   player=r.player, report=_shown(r).strip() or "(empty report)"),
            False,
        )
        for r in reports
    ]


def _shown(report: FeedbackReport) -> str:
    return report.text if report.mode == "summary" else shown_report(report.player, report.text)


def planner_prompt(program: ProgramView, reports: Sequence[FeedbackReport], version: str = TEMPLATE_VERSION) -> Prompt:
    """Explicit planning, step one: the planner sees the coalition's reports (last) and writes a plan."""
    sections = [
        *_head(program, version),
        _history(program, version, True),
        Section("instruction", render("planner_instruction.tmpl", version, max_steps=MAX_PLAN_STEPS), True),
        *feedback_sections(reports, version),
    ]
    return Prompt(template_text("planner_system.txt", version).strip(), tuple(sections), version)


def coder_prompt_with_plan(program: ProgramView, plan: str, version: str = TEMPLATE_VERSION) -> Prompt:
    """Explicit planning, step two: the plan goes before the program history."""
    sections = [
        *_head(program, version),
        Section("plan", render("plan.tmpl", version, plan=plan.strip() or "(empty plan)"), False),
        _history(program, version, False),
        Section("instruction", render("coder_instruction.tmpl", version), False),
    ]
    return Prompt(template_text("coder_system.txt", version).strip(), tuple(sections), version, opens_code=True)


def coder_prompt_implicit(program: ProgramView, reports: Sequence[FeedbackReport], version: str = TEMPLATE_VERSION) -> Prompt:
    """Implicit planning: the reports go straight to the coder, after everything shared."""
    sections = [
        *_head(program, version),
        _history(program, version, True),
        Section("instruction", render("coder_instruction_feedback.tmpl", version), True),
        *feedback_sections(reports, version),
    ]
    return Prompt(template_text("coder_system.txt", version).strip(), tuple(sections), version, opens_code=True)


def summarizer_prompt(player: str, report: str, version: str = TEMPLATE_VERSION) -> Prompt:
    section = Section("report", render("summarizer.tmpl", version, player=player,
                                       report=shown_report(player, report).strip(),
                                       max_words=MAX_SUMMARY_WORDS), True)
    return Prompt(template_text("summarizer_system.txt", version).strip(), (section,), version)


def dummy_plan(version: str = TEMPLATE_VERSION) -> str:
    """The dummyPlan control's plan: generic steps that carry no information from the feedback."""
    return template_text("dummy_plan.txt", version).strip()


def coalition_reports(
    coalition: Sequence[str], players: Sequence[str], texts: Mapping[str, str], modes: Mapping[str, str],
) -> list[FeedbackReport]:
    """Reports of the players in the coalition, in the spec's player order; players off or without a report skipped."""
    members = set(coalition)
    out = []
    for player in players:
        mode = modes.get(player, "raw")
        if player in members and mode != "off" and player in texts:
            out.append(FeedbackReport(player, texts[player], "summary" if mode == "summary" else "raw"))
    return out
