"""The frozen-program trajectory format (see docs/trajectory-format.md).

A trajectory is a folder (local or in the object store) with two files:

- `trajectory.json`: the manifest: {"format": "cudanalyst", "version": 1, "tasks": [...], "players": [...],
  "generations": [...], "description": "...", "source": {...provenance}}
- `programs.jsonl`: one `FrozenProgram` per line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from cudanalyst.trajectory.toolruns import ToolRun

FORMAT = "cudanalyst"
VERSION = 1
MANIFEST = "trajectory.json"
PROGRAMS = "programs.jsonl"


class _Record(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ProgramContext(_Record):
    """What the agent saw when it planned from this program."""

    history: list[str] = Field(default_factory=list, description="Short notes of what earlier generations tried.")
    prompt: str = Field("", description="The agent's own prompt at this step, for provenance.")


class FrozenProgram(_Record):
    """One program state of the recorded trajectory."""

    task: str = Field(min_length=1)
    generation: int = Field(ge=0)
    program_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._:-]+$")
    parent_id: str | None = None
    source: str = Field(description="The CUDA source of the program.")
    metrics: dict[str, Any] = Field(default_factory=dict, description="Recorded metrics: compiled, correct, speedup, ...")
    feedback: dict[str, str] = Field(default_factory=dict, description="Recorded raw report per player.")
    # Absent in trajectories written before issue 28: their reports' text is then read (toolruns.classify).
    tools: dict[str, ToolRun] = Field(default_factory=dict, description="Whether each GPU tool behind the reports "
                                      "ran on the program, or failed and why (compute-sanitizer, nsight-compute).")
    context: ProgramContext = Field(default_factory=ProgramContext)


class Manifest(_Record):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    format: str = FORMAT
    version: int = VERSION
    tasks: list[str] = Field(default_factory=list)
    players: list[str] = Field(default_factory=list)
    generations: list[int] = Field(default_factory=list)
    description: str = ""
    source: dict[str, Any] = Field(default_factory=dict)


class TrajectoryError(ValueError):
    """A trajectory that cannot be read: the message names the file and line."""


def parse_programs(text: str, where: str) -> list[FrozenProgram]:
    """Parse programs.jsonl; every bad line is named by its number."""
    programs: list[FrozenProgram] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            program = FrozenProgram.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise TrajectoryError(f"{where}:{number}: not JSON ({exc.msg})") from None
        except ValidationError as exc:
            err = exc.errors()[0]
            path = ".".join(str(p) for p in err["loc"])
            raise TrajectoryError(f"{where}:{number}: {path}: {err['msg']}") from None
        if program.program_id in seen:
            raise TrajectoryError(f"{where}:{number}: duplicate programId {program.program_id!r}")
        seen.add(program.program_id)
        programs.append(program)
    return programs


def dump_programs(programs: Iterable[FrozenProgram]) -> str:
    # No `tools` key when nothing is typed, so trajectories without it are written as they always were.
    return "".join(p.model_dump_json(by_alias=True, exclude=None if p.tools else {"tools"}) + "\n"
                   for p in programs)


def manifest_for(programs: list[FrozenProgram], **extra: Any) -> Manifest:
    """A manifest describing `programs` (tasks, generations, players seen in recorded feedback)."""
    players: list[str] = []
    for p in programs:
        players += [k for k in p.feedback if k not in players]
    return Manifest(
        tasks=sorted({p.task for p in programs}),
        generations=sorted({p.generation for p in programs}),
        players=players,
        **extra,
    )
