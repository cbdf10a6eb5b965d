"""Frozen trajectories: the format, loading from any store, and the seeded choice of frozen programs."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from cudanalyst.trajectory.format import (
    MANIFEST,
    PROGRAMS,
    FrozenProgram,
    Manifest,
    ProgramContext,
    TrajectoryError,
    dump_programs,
    manifest_for,
    parse_programs,
)
from cudanalyst.trajectory.freeze import freeze

__all__ = [
    "FrozenProgram", "Manifest", "ProgramContext", "Trajectory", "TrajectoryError",
    "builtin_path", "dump_programs", "freeze", "load_trajectory", "manifest_for", "parse_programs",
]

BUILTIN_SCHEME = "builtin://"


@dataclass(frozen=True)
class Trajectory:
    uri: str
    manifest: Manifest
    programs: list[FrozenProgram]


def builtin_path(name: str) -> Path:
    """Folder of a trajectory shipped inside the package (builtin://example)."""
    root = Path(str(resources.files("cudanalyst") / "data" / "trajectories"))
    path = root / name
    if not (path / PROGRAMS).is_file():
        known = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        raise TrajectoryError(f"no builtin trajectory {name!r} (known: {', '.join(known) or 'none'})")
    return path


def load_trajectory(uri: str, s3: object | None = None, fmt: str = "cudanalyst", task: str | None = None) -> Trajectory:
    """Read a trajectory folder (builtin://, file://, s3:// or a path).

    `cudanalyst` reads trajectory.json and programs.jsonl; `openevolve` and `llm4ad` folders are converted
    on the fly, exactly as `cudanalyst import` would (their programs all belong to `task`, by default the
    folder's name).
    """
    from cudanalyst.store import ObjectNotFound, open_store

    location = builtin_path(uri[len(BUILTIN_SCHEME):].strip("/")) if uri.startswith(BUILTIN_SCHEME) else uri
    store = open_store(str(location), s3)  # type: ignore[arg-type]
    if fmt != "cudanalyst":
        from cudanalyst.trajectory.llm4ad import read_llm4ad
        from cudanalyst.trajectory.openevolve import read_openevolve

        reader = read_openevolve if fmt == "openevolve" else read_llm4ad
        name = task or uri.rstrip("/").rsplit("/", 1)[-1]
        converted, provenance = reader(store, name)
        return Trajectory(uri=uri, manifest=manifest_for(converted, source=provenance), programs=converted)
    try:
        text = store.get_text(PROGRAMS)
    except ObjectNotFound:
        raise TrajectoryError(f"{uri}: no {PROGRAMS} (is this a trajectory folder? "
                              "convert other formats with `cudanalyst import`)") from None
    programs = parse_programs(text, f"{uri.rstrip('/')}/{PROGRAMS}")
    if not programs:
        raise TrajectoryError(f"{uri.rstrip('/')}/{PROGRAMS}: no programs")
    try:
        manifest = Manifest.model_validate(store.get_json(MANIFEST))
    except ObjectNotFound:
        manifest = manifest_for(programs)
    return Trajectory(uri=uri, manifest=manifest, programs=programs)
