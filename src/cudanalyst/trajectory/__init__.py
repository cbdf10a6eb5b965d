"""Frozen trajectories: the format, loading from any store, and the seeded choice of frozen programs."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

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
from cudanalyst.trajectory.freeze import StratumDraw, freeze, freeze_strata

if TYPE_CHECKING:
    from cudanalyst.store import ObjectStore

__all__ = [
    "FrozenProgram", "Manifest", "ProgramContext", "StratumDraw", "Trajectory", "TrajectoryError",
    "builtin_path", "dump_programs", "freeze", "freeze_strata", "load_trajectory", "manifest_for", "parse_programs",
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
    try:
        found = any((path / name).is_file() for name in (PROGRAMS, PROGRAMS + ".gz"))
    except OSError as exc:  # e.g. a name too long for the file system (issue 33's fuzzed specs)
        raise TrajectoryError(f"no builtin trajectory {name[:40]!r}...: {exc.strerror}") from None
    if not found:
        known = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        raise TrajectoryError(f"no builtin trajectory {name!r} (known: {', '.join(known) or 'none'})")
    return path


def read_programs_text(store: ObjectStore, uri: str) -> tuple[str, str]:
    """(programs.jsonl's text, the object it came from): plain, or gzipped as `programs.jsonl.gz` (a recorded
    trajectory's prompts make it several MB; the bundled recording ships compressed)."""
    from cudanalyst.store import ObjectNotFound

    try:
        return store.get_text(PROGRAMS), PROGRAMS
    except ObjectNotFound:
        pass
    try:
        data = store.get_bytes(PROGRAMS + ".gz")
    except ObjectNotFound:
        raise TrajectoryError(f"{uri}: no {PROGRAMS} (is this a trajectory folder? "
                              "convert other formats with `cudanalyst import`)") from None
    try:
        return gzip.decompress(data).decode("utf-8"), PROGRAMS + ".gz"
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TrajectoryError(f"{uri.rstrip('/')}/{PROGRAMS}.gz: not a gzipped text file ({exc})") from None


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
    text, name = read_programs_text(store, uri)
    programs = parse_programs(text, f"{uri.rstrip('/')}/{name}")
    if not programs:
        raise TrajectoryError(f"{uri.rstrip('/')}/{name}: no programs")
    try:
        manifest = Manifest.model_validate(store.get_json(MANIFEST))
    except ObjectNotFound:
        manifest = manifest_for(programs)
    return Trajectory(uri=uri, manifest=manifest, programs=programs)
