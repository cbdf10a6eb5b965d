"""The feedback tools that can be players, one entry each: adding a tool is one entry here and its function.

An entry names the tool, the function that makes its report from a frozen program (a `module:function`
path: the function lives in the runner, which the core never imports, so only the runner resolves it:
runner.kernels.feedback.reporter), and the OpenEvolve artifact names importers read as its feedback. A spec
may still name players that are not tools here (recorded feedback only); the runner has no report for them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class FeedbackTool:
    name: str
    report: str = ""
    """`module:function` taking the runner's `ProgramFacts` of one frozen program and returning the raw text."""
    artifacts: str = ""
    """Regex over lowercased OpenEvolve artifact names that are this tool's feedback ('' = none)."""
    artifact_order: int = 0
    """Importers try lower orders first; broad words (error, compile) go last."""


_REPORTS = "cudanalyst.runner.kernels.feedback.reports"

TOOLS: tuple[FeedbackTool, ...] = (
    FeedbackTool("debugger", f"{_REPORTS}:debugger_report",
                 r"stderr|stdout|traceback|error|exception|compil|build|nvcc|sanitiz|memcheck|racecheck|"
                 r"failure|verif|correct|mismatch|crash",
                 # after analyzer and profiler, so that "ptxas_compile_log" is static analysis and
                 # "profile_stderr" is profiling
                 artifact_order=1),
    FeedbackTool("analyzer", f"{_REPORTS}:analyzer_report",
                 r"ptxas|register|spill|shared_?mem|smem|sass|\bptx\b|static|analy[sz]|resource"),
    FeedbackTool("profiler", f"{_REPORTS}:profiler_report_of",
                 r"profil|ncu|nsys|nsight|timing|runtime|latency|bench|perf|occupancy|throughput|speed"),
)


def tool_names() -> list[str]:
    """The tools' names in registry order (the default players)."""
    return [t.name for t in TOOLS]


def artifact_rules() -> list[tuple[str, str]]:
    """(pattern, player) in the order importers try them: first match wins."""
    ordered = sorted((t for t in TOOLS if t.artifacts), key=lambda t: t.artifact_order)
    return [(t.artifacts, t.name) for t in ordered]


def player_for_artifact_name(name: str) -> str | None:
    lowered = name.lower()
    for pattern, player in artifact_rules():
        if re.search(pattern, lowered):
            return player
    return None
