"""Whether each GPU tool behind a report really ran on the program, and if not, why (issue 28).

Two tools' outputs sit inside the players' reports: compute-sanitizer in the debugger's, Nsight Compute in the
profiler's. Either can fail for reasons that say nothing about the program (no GPU memory left for its context, a
time limit, counters the driver denies); a report must never hand such a failure to the agent as if it were
feedback. The runner writes a failed tool's part as one plain statement (`statement`), keeps the tool's own
output out of the text, and types it in `FrozenProgram.tools` (a `ToolRun` per tool). Trajectories written
before that carry no `tools` and the failure text itself; `classify` recognises both (the old texts by the
phrases the old tools wrote), and `shown_report` rewrites an old failure into the statement before a prompt
shows it.

Pure: no runner import, so plan, the report and the importers use it too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.alias_generators import to_camel

SANITIZER = "compute-sanitizer"
NCU = "nsight-compute"
TOOL_NAMES = (SANITIZER, NCU)
LABELS = {SANITIZER: "compute-sanitizer", NCU: "Nsight Compute"}
HOST_PLAYER = {SANITIZER: "debugger", NCU: "profiler"}  # whose report holds the tool's part

Status = Literal["ok", "failed", "not-run"]

# A failure's cause: a short code (counted, typed) and the plain words the agent may read.
CAUSES: dict[str, str] = {
    "gpu-memory": "the GPU had no memory free for the tool's own CUDA context (another process held it)",
    "timeout": "the tool did not finish within its time limit",
    "not-installed": "the tool is not installed on this machine",
    "counters-denied": "the driver denies access to the GPU's performance counters here (ERR_NVGPUCTRPERM)",
    "program-failed": "the program itself failed when the tool launched it",
    "not-launchable": "the program's kernels could not be launched (it breaks the task's contract)",
    "tool-error": "the tool itself failed",
}
# Causes that are the program's doing: the statement then carries the program's own error, which is feedback.
PROGRAM_CAUSES = frozenset({"program-failed", "not-launchable"})
MOSTLY = 0.5  # "mostly failed": more than half of a tool's reports on the programs it should have examined


class ToolRun(BaseModel):
    """One tool's run behind a program's report."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    status: Status
    cause: str | None = Field(None, description="Why it failed: a key of CAUSES (failed only).")
    detail: str = Field("", description="The tool's own words (kept for people, never shown to the agent).")
    timings: bool = Field(False, description="Nsight Compute: the CUDA event timings stand in the report.")
    seconds: float | None = Field(None, ge=0, description="Wall seconds the tool ran on the program, over all its "
                                  "launches (None: not measured, as in trajectories before 2026-12-01).")
    waited_seconds: float | None = Field(None, ge=0, description="Wall seconds its launches waited for a slot of "
                                         "the machine's GPU-tools queue (or backed off when no memory was free).")
    passes: int | None = Field(None, ge=0, description="Nsight Compute: the replay passes it made, summed over the "
                               "profiled kernels (None: not measured). Says whether its seconds are the passes or "
                               "its start.")

    @model_serializer(mode="wrap")
    def _unmeasured_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Written only when measured, so a trajectory from before the seconds were kept writes back byte for byte.
        out = handler(self)
        for key in ("seconds", "waited_seconds", "waitedSeconds", "passes"):
            if key in out and out[key] is None:
                del out[key]
        return out


_STATEMENT = re.compile(r"^(?P<label>compute-sanitizer|Nsight Compute) could not (?:run here|check the program) "
                        r"\((?P<cause>[a-z-]+)\)")


def statement(tool: str, cause: str, program_error: str = "") -> str:
    """The one line a report carries for a tool that did not run on the program.

    For a tool failure it says plainly that this is not about the program; for the program's own failure it
    carries the program's error (that is feedback)."""
    label = LABELS[tool]
    if cause in PROGRAM_CAUSES:
        return f"{label} could not check the program ({cause}): {program_error or CAUSES[cause]}"
    return (f"{label} could not run here ({cause}): {CAUSES.get(cause, CAUSES['tool-error'])}. "
            "This says nothing about the program.")


# ---- reading reports, old and new ---------------------------------------------------------------------

_SAN_HEAD = re.compile(r"^compute-sanitizer \(", re.MULTILINE)
LAUNCHED_HEAD = "its kernels launched:"
_NCU_OK = "Nsight Compute (--clock-control none):"
_TIMINGS = "Event timings (CUDA events"


def _statement_cause(text: str, label: str) -> str | None:
    for line in text.splitlines():
        m = _STATEMENT.match(line.strip())
        if m and m["label"] == label:
            return m["cause"]
    return None


def _old_sanitizer_cause(part: str) -> str | None:
    """The cause of a pre-issue-28 sanitizer part that did not check a kernel, or None when it did."""
    if "out of memory" in part and "cuCtxCreate" in part:
        return "gpu-memory"
    if "named symbol not found" in part or "ContractError" in part:
        return "not-launchable"
    if "did not finish within" in part:
        return "timeout"
    if any("could not run (exit status" in x and "RACECHECK SUMMARY" not in x for x in part.splitlines()):
        return "tool-error"  # (a clean racecheck run was misread as "could not run" then)
    return None


def sanitizer_run(debugger: str | None) -> ToolRun:
    text = debugger or ""
    if (cause := _statement_cause(text, LABELS[SANITIZER])) is not None:
        return ToolRun(status="failed", cause=cause)
    if "compute-sanitizer: not found on this machine" in text:
        return ToolRun(status="failed", cause="not-installed")
    m = _SAN_HEAD.search(text)
    if m is None:
        return ToolRun(status="not-run")
    part = text[m.start():]
    if LAUNCHED_HEAD in part.splitlines()[0]:
        return ToolRun(status="ok")  # written since issue 28: only a launched kernel's checks get this head
    cause = _old_sanitizer_cause(part)
    if cause is not None:
        return ToolRun(status="failed", cause=cause, detail=part[:2000])
    return ToolRun(status="ok")


def ncu_run(profiler: str | None) -> ToolRun:
    text = profiler or ""
    timings = _TIMINGS in text
    if _NCU_OK in text:
        return ToolRun(status="ok", timings=timings)
    if (cause := _statement_cause(text, LABELS[NCU])) is not None:
        return ToolRun(status="failed", cause=cause, timings=timings)
    line = next((x.strip() for x in text.splitlines() if x.strip().startswith("Nsight Compute")), None)
    if line is None:
        return ToolRun(status="not-run", timings=timings)
    if "ERR_NVGPUCTRPERM" in line:
        cause = "counters-denied"
    elif "out of memory" in line:
        cause = "gpu-memory"  # before any launch: the machine's state (as the runner now types it)
    elif "application returned an error code" in line or "program's launch under it failed" in line:
        cause = "program-failed"  # the old wording blamed the counters for this (issue 28)
    elif "did not finish within" in line:
        cause = "timeout"
    elif "is not installed" in line:
        cause = "not-installed"
    elif "could not read the GPU's performance counters" in line:
        cause = "counters-denied"
    else:
        cause = "tool-error"
    return ToolRun(status="failed", cause=cause, detail=line, timings=timings)


def classify(feedback: Mapping[str, str]) -> dict[str, ToolRun]:
    """Each tool's run, read from the reports' text (old or new)."""
    return {SANITIZER: sanitizer_run(feedback.get("debugger")), NCU: ncu_run(feedback.get("profiler"))}


def tool_runs(program: Any) -> dict[str, ToolRun]:
    """A frozen program's typed runs (`tools`), else what its report text says."""
    typed = dict(getattr(program, "tools", None) or {})
    return {**classify(program.feedback), **typed}


VERIFICATION_NO_CONTEXT = ("Run-time verification could not run here (gpu-memory): the GPU had no memory free for a "
                           "CUDA context. This says nothing about the program.")


def verification_lacked_memory(reason: str) -> bool:
    """Whether a verification failure was the machine's: no GPU memory for the worker's CUDA context."""
    return "out of memory" in reason and "cuCtxCreate" in reason


def shown_report(player: str, text: str) -> str:
    """The report as an agent may see it: an old tool failure's text replaced by its plain statement."""
    if player == HOST_PLAYER[SANITIZER]:
        text = "\n".join(VERIFICATION_NO_CONTEXT if x.startswith("Run-time verification: FAILED")
                         and verification_lacked_memory(x) else x for x in text.splitlines())
        run = sanitizer_run(text)
        m = _SAN_HEAD.search(text)
        if run.status == "failed" and run.cause and m is not None:
            # The old sanitizer part is always the report's last part.
            return text[:m.start()] + statement(SANITIZER, run.cause, _program_error(text[m.start():]))
    if player == HOST_PLAYER[NCU]:
        run = ncu_run(text)
        if run.status == "failed" and run.cause and run.detail:
            error = _program_error(run.detail.replace("(launch_once:", "\nlaunch_once:").split(");")[0])
            line = statement(NCU, run.cause, error and f"the program failed under it: {error}")
            return "\n".join(line if x.strip() == run.detail else x for x in text.splitlines())
    return text


def _program_error(part: str) -> str:
    line = next((x.strip() for x in part.splitlines() if x.strip().startswith("launch_once:")), "")
    return line.removeprefix("launch_once:").strip()


# ---- counting -------------------------------------------------------------------------------------------


def compiled(program: Any) -> bool:
    """Whether the program compiled, by its metrics, else by its debugger report."""
    value = program.metrics.get("compiled")
    if isinstance(value, (int, float, bool)):
        return bool(value)
    return "Status: compiled" in program.feedback.get("debugger", "")


@dataclass
class ToolCount:
    """One tool over the programs that compiled: ok, failed by cause, not run."""

    tool: str
    compiled: int = 0
    ok: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    not_run: int = 0
    usable: int = 0  # the target's numerator: a launched kernel (sanitizer); counters or reasoned timings (ncu)

    @property
    def failures(self) -> int:
        return sum(self.failed.values())

    @property
    def tool_failures(self) -> int:
        """Failures that say nothing about the program (the program's own failures excluded)."""
        return sum(n for c, n in self.failed.items() if c not in PROGRAM_CAUSES)

    @property
    def mostly_failed(self) -> bool:
        ran = self.ok + self.failures
        return ran > 0 and self.failures / ran > MOSTLY

    def share(self) -> float | None:
        return self.usable / self.compiled if self.compiled else None

    def line(self) -> str:
        causes = ", ".join(f"{c} {n}" for c, n in sorted(self.failed.items(), key=lambda kv: -kv[1]))
        share = self.share()
        usable = "" if share is None else f"; usable {self.usable}/{self.compiled} ({share:.0%})"
        return (f"{LABELS[self.tool]}: {self.compiled} compiled programs: ok {self.ok}, failed {self.failures}"
                f"{f' ({causes})' if causes else ''}, not run {self.not_run}{usable}")

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "compiled": self.compiled, "ok": self.ok, "failed": dict(self.failed),
                "notRun": self.not_run, "usable": self.usable, "mostlyFailed": self.mostly_failed}


def count_tools(programs: Iterable[Any]) -> dict[str, ToolCount]:
    """Per tool, over the programs that compiled (a program that did not compile gives no tool anything to run)."""
    out = {t: ToolCount(t) for t in TOOL_NAMES}
    for program in programs:
        if not compiled(program):
            continue
        for tool, run in tool_runs(program).items():
            c = out.setdefault(tool, ToolCount(tool))
            c.compiled += 1
            if run.status == "ok":
                c.ok += 1
                c.usable += 1
            elif run.status == "failed":
                cause = run.cause or "tool-error"
                c.failed[cause] = c.failed.get(cause, 0) + 1
                # Event timings with the reason counters were denied meet the profiler's target (issue 28).
                c.usable += int(tool == NCU and cause == "counters-denied" and run.timings)
            else:
                c.not_run += 1
    return out


def failed_report_warnings(programs: Iterable[Any]) -> list[str]:
    """A line per tool whose reports on these programs mostly failed (more than MOSTLY of those it produced)."""
    out = []
    for c in count_tools(programs).values():
        if c.mostly_failed:
            ran = c.ok + c.failures
            out.append(f"{LABELS[c.tool]} failed on {c.failures} of the {ran} frozen programs it ran on "
                       f"(more than {MOSTLY:.0%}): {c.line()}. Players whose reports hold it mostly tell the agent "
                       "that the tool could not run; consider recording the trajectory again (docs/recording.md).")
    return out


def report_lines(programs: Iterable[Any]) -> list[str]:
    """Per GPU tool, its reports on these programs (ok, failed by cause), then a warning per tool whose reports
    mostly failed: what `cudanalyst plan` and `cudanalyst run` print before any GPU time is spent."""
    programs = list(programs)
    lines = [f"tool reports: {c.line()}" for c in count_tools(programs).values() if c.compiled]
    return lines + [f"warning: {w}" for w in failed_report_warnings(programs)]
