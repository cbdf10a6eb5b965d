"""Read OpenEvolve checkpoints as frozen programs.

OpenEvolve's ``ProgramDatabase.save`` writes ``checkpoint_N/programs/<id>.json``: one program per
file with ``id``, ``code``, ``language``, ``parent_id``, ``generation`` (lineage depth),
``iteration_found``, ``timestamp``, ``metrics``, ``metadata`` (``changes``, ``island``,
``parent_metrics``), ``artifacts_json`` (a JSON *string* of small artifacts), ``artifact_dir``
(a folder of large ones) and, with ``log_prompts``, ``prompts`` ({template: {system, user,
responses}}). The source may be one checkpoint folder, a ``checkpoints/`` folder or the run's
output folder; with several checkpoints the programs of all of them are merged (OpenEvolve drops
programs past its population limit, so earlier checkpoints hold programs the last one lacks).

Mapping (docs/trajectory-format.md): code -> source; parent_id -> parentId; generation (or
iteration_found) -> generation; metrics -> metrics; artifacts that are feedback -> feedback under
the player their name suggests (each tool's `artifacts` rule in :mod:`cudanalyst.players`); the ancestors' ``changes`` notes ->
context.history; the logged prompt -> context.prompt; everything else -> metrics["openevolve"].
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from cudanalyst.players import player_for_artifact_name
from cudanalyst.store import FileStore, ObjectNotFound, ObjectStore, StoreError
from cudanalyst.trajectory.format import FrozenProgram, ProgramContext, TrajectoryError

SOURCE_FORMAT = "openevolve"

_CHECKPOINT_RE = re.compile(r"^checkpoint_(\d+)$")

GenerationFrom = Literal["generation", "iteration"]


def player_for_artifact(name: str, overrides: Mapping[str, str] | None = None) -> str | None:
    """The player an artifact's text is feedback for, or None to keep it as provenance only."""
    if overrides and name in overrides:
        player = overrides[name]
        return None if player in ("", "none") else player
    return player_for_artifact_name(name)


def find_checkpoints(store: ObjectStore) -> list[tuple[int | None, ObjectStore]]:
    """The checkpoint folders under ``store``, oldest first: (N or None for a bare folder, view)."""
    numbers: set[int] = set()
    has_programs = False
    prefix_of_checkpoints = ""
    for key in store.list():
        first, _, rest = key.partition("/")
        if first == "programs" and rest.endswith(".json"):
            has_programs = True
        elif (m := _CHECKPOINT_RE.match(first)) and rest.startswith("programs/"):
            numbers.add(int(m.group(1)))
        elif first == "checkpoints":
            second, _, rest2 = rest.partition("/")
            if (m := _CHECKPOINT_RE.match(second)) and rest2.startswith("programs/"):
                numbers.add(int(m.group(1)))
                prefix_of_checkpoints = "checkpoints/"
    if has_programs:
        return [(None, store)]
    if not numbers:
        raise TrajectoryError(
            f"{store.uri} is not an OpenEvolve checkpoint: expected programs/*.json, checkpoint_N/programs/ "
            "or checkpoints/checkpoint_N/programs/"
        )
    return [(n, store.child(f"{prefix_of_checkpoints}checkpoint_{n}")) for n in sorted(numbers)]


def _expect(value: Any, kind: type | tuple[type, ...], where: str, field: str, what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise TrajectoryError(f"{where}: field {field!r} must be {what}, got {type(value).__name__}")
    return value


def _load_artifacts(raw: dict[str, Any], where: str, checkpoint: ObjectStore) -> tuple[dict[str, Any], str]:
    """Small artifacts (artifacts_json, or a plain 'artifacts' object) plus large ones from artifact_dir."""
    artifacts: dict[str, Any] = {}
    if isinstance(raw.get("artifacts"), dict):
        artifacts.update(raw["artifacts"])
    text = raw.get("artifacts_json")
    if text:
        _expect(text, str, where, "artifacts_json", "a JSON string")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TrajectoryError(f"{where}: field 'artifacts_json' is not valid JSON ({exc.msg})") from None
        _expect(parsed, dict, where, "artifacts_json", "a JSON object")
        artifacts.update(parsed)
    missing = ""
    folder = raw.get("artifact_dir")
    if folder:
        found = _read_artifact_dir(str(folder), str(raw["id"]), checkpoint)
        if found is None:
            missing = str(folder)
        else:
            artifacts.update(found)
    return artifacts, missing


def _read_artifact_dir(folder: str, program_id: str, checkpoint: ObjectStore) -> dict[str, Any] | None:
    """artifact_dir is a path on the machine that ran OpenEvolve; read it when it is here."""
    path = Path(folder)
    if isinstance(checkpoint, FileStore) and not path.is_absolute():
        path = checkpoint.root / path
    if not path.is_dir():
        return None
    out: dict[str, Any] = {}
    for item in sorted(path.iterdir()):
        if item.is_file():
            data = item.read_bytes()
            try:
                out[item.name] = data.decode("utf-8")
            except UnicodeDecodeError:
                out[item.name] = {"__bytes__": f"<{len(data)} bytes>"}
    return out


def _as_text(value: Any) -> str | None:
    """Artifact value as report text; binary artifacts are not feedback."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "__bytes__" in value:
        return None
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _prompt_text(prompts: Any, where: str) -> tuple[str, list[str]]:
    """(system + user prompt, LLM responses) of the logged prompt(s)."""
    if not prompts:
        return "", []
    _expect(prompts, dict, where, "prompts", "an object {template: {system, user, responses}}")
    parts: list[str] = []
    responses: list[str] = []
    for template in sorted(prompts):
        entry = _expect(prompts[template], dict, where, f"prompts.{template}", "an object")
        parts += [str(entry[k]) for k in ("system", "user") if entry.get(k)]
        responses += [str(r) for r in entry.get("responses") or []]
    return "\n\n".join(parts), responses


def _parse_program(raw: Any, where: str) -> dict[str, Any]:
    _expect(raw, dict, where, "<file>", "a JSON object (one OpenEvolve program)")
    for field in ("id", "code"):
        if field not in raw:
            raise TrajectoryError(f"{where}: missing field {field!r}; is this an OpenEvolve program file?")
    _expect(raw["id"], str, where, "id", "a string")
    _expect(raw["code"], str, where, "code", "a string")
    for field in ("generation", "iteration_found"):
        if raw.get(field) is not None:
            _expect(raw[field], int, where, field, "an integer")
            if raw[field] < 0:
                raise TrajectoryError(f"{where}: field {field!r} must be >= 0, got {raw[field]}")
    if raw.get("parent_id") is not None:
        _expect(raw["parent_id"], str, where, "parent_id", "a string or null")
    _expect(raw.get("metrics") or {}, dict, where, "metrics", "an object")
    _expect(raw.get("metadata") or {}, dict, where, "metadata", "an object")
    return raw


def read_openevolve(
    store: ObjectStore,
    task: str,
    *,
    checkpoint: int | None = None,
    generation_from: GenerationFrom = "generation",
    iterations_per_generation: int = 1,
    feedback_map: Mapping[str, str] | None = None,
) -> tuple[list[FrozenProgram], dict[str, Any]]:
    """All programs of the checkpoint(s) under ``store`` and the provenance for the manifest.

    A program's generation is OpenEvolve's ``generation`` (lineage depth), or with ``generation_from="iteration"``
    the window of ``iterations_per_generation`` iterations it was found in, named by the window's first iteration
    (N = 10: iterations 20..29 are generation 20), so that a generation's number stays an iteration number.

    Everything is parsed before anything is returned, so a caller that writes afterwards never
    writes a partial trajectory. Errors name the file and the field.
    """
    if iterations_per_generation < 1:
        raise TrajectoryError(f"iterations per generation must be >= 1, got {iterations_per_generation}")
    checkpoints = find_checkpoints(store)
    if checkpoint is not None:
        chosen = [c for c in checkpoints if c[0] == checkpoint]
        if not chosen:
            have = ", ".join(str(n) for n, _ in checkpoints if n is not None) or "none"
            raise TrajectoryError(f"{store.uri}: no checkpoint_{checkpoint} (checkpoints here: {have})")
        checkpoints = chosen

    raws: dict[str, tuple[dict[str, Any], str, ObjectStore]] = {}
    for _, folder in checkpoints:  # later checkpoints win for a program present in several
        files = [k for k in folder.list("programs/") if k.endswith(".json") and "/" not in k[len("programs/"):]]
        for key in files:
            where = folder.uri_of(key)
            try:
                raw = json.loads(folder.get_bytes(key))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise TrajectoryError(f"{where}: not valid JSON ({exc})") from None
            except (ObjectNotFound, StoreError) as exc:
                raise TrajectoryError(f"{where}: cannot read ({exc})") from None
            raws[str(_parse_program(raw, where)["id"])] = (raw, where, folder)
    if not raws:
        raise TrajectoryError(f"{store.uri}: the checkpoint holds no programs/*.json")

    changes = {pid: str((raw.get("metadata") or {}).get("changes") or "") for pid, (raw, _, _) in raws.items()}
    parents = {pid: raw.get("parent_id") for pid, (raw, _, _) in raws.items()}
    programs: list[tuple[tuple[int, int, str], FrozenProgram]] = []
    missing_dirs: list[str] = []
    used_players: dict[str, str] = {}
    for pid, (raw, where, folder) in raws.items():
        artifacts, missing = _load_artifacts(raw, where, folder)
        original = _migrated_from(pid, raws)
        if original is not None and not artifacts:
            # An island's copy: OpenEvolve copies the program and its metrics under a new id but not its
            # artifacts, so the tools' reports about this very source are under the original's id.
            o_raw, o_where, o_folder = raws[original]
            artifacts, missing = _load_artifacts(o_raw, o_where, o_folder)
        if missing:
            missing_dirs.append(missing)
        feedback: dict[str, list[str]] = {}
        kept: dict[str, Any] = {}
        for name in sorted(artifacts):
            player = player_for_artifact(name, feedback_map)
            text = _as_text(artifacts[name])
            if player is None or text is None or not text.strip():
                kept[name] = artifacts[name]
                continue
            used_players[name] = player
            feedback.setdefault(player, []).append(f"[{name}]\n{text.rstrip()}")
        prompt, responses = _prompt_text(raw.get("prompts"), where)
        metadata = dict(raw.get("metadata") or {})
        extras = {
            "language": raw.get("language", "python"),
            "iterationFound": raw.get("iteration_found", 0),
            "timestamp": raw.get("timestamp"),
            "complexity": raw.get("complexity"),
            "diversity": raw.get("diversity"),
            "metadata": metadata,
            "artifacts": kept,
            "responses": responses,
            "file": where[len(store.uri):] if where.startswith(store.uri) else where,
        }
        if missing:
            extras["artifactDirMissing"] = missing
        if original is not None:
            extras["migratedFrom"] = original
        generation = raw.get("generation") or 0
        if generation_from == "iteration":
            found = raw.get("iteration_found") or 0
            generation = found - found % iterations_per_generation
        metrics = dict(raw.get("metrics") or {})
        if SOURCE_FORMAT in metrics:
            raise TrajectoryError(f"{where}: metrics already has a key {SOURCE_FORMAT!r}, which the import uses")
        metrics[SOURCE_FORMAT] = {k: v for k, v in extras.items() if v not in (None, {}, [], "")}
        try:
            program = FrozenProgram(
                task=task,
                generation=generation,
                program_id=pid,
                parent_id=raw.get("parent_id"),
                source=raw["code"],
                metrics=metrics,
                feedback={player: "\n\n".join(texts) for player, texts in feedback.items()},
                context=ProgramContext(history=_history(pid, parents, changes), prompt=prompt),
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise TrajectoryError(f"{where}: {field}: {err['msg']} (value {err.get('input')!r})") from None
        programs.append(((generation, int(raw.get("iteration_found") or 0), pid), program))

    programs.sort(key=lambda item: item[0])
    provenance: dict[str, Any] = {
        "format": SOURCE_FORMAT,
        "uri": store.uri,
        "checkpoints": [n for n, _ in checkpoints if n is not None],
        "generationFrom": generation_from,
        **({"iterationsPerGeneration": iterations_per_generation} if generation_from == "iteration" else {}),
        "feedbackFromArtifacts": dict(sorted(used_players.items())),
    }
    if missing_dirs:
        provenance["artifactDirsMissing"] = len(missing_dirs)
    return [p for _, p in programs], provenance


def _migrated_from(pid: str, raws: Mapping[str, tuple[dict[str, Any], str, ObjectStore]]) -> str | None:
    """The program an island migrant copies (``metadata.migrant``, its parent with the same code), followed back to
    the first that is not a copy; None for any other program or when the original is not in the checkpoint."""
    seen = {pid}
    current = pid
    while True:
        raw = raws[current][0]
        parent = raw.get("parent_id")
        if not (raw.get("metadata") or {}).get("migrant") or parent not in raws or parent in seen:
            return None if current == pid else current
        if raws[parent][0].get("code") != raw.get("code"):
            return None if current == pid else current
        seen.add(parent)
        current = parent


def _history(pid: str, parents: Mapping[str, Any], changes: Mapping[str, str]) -> list[str]:
    """Change notes of the program and its ancestors, oldest first: what this lineage tried."""
    notes: list[str] = []
    seen: set[str] = set()
    current: Any = pid
    while current and current in parents and current not in seen:  # a cycle would be a corrupt file
        seen.add(current)
        if changes.get(current):
            notes.append(changes[current])
        current = parents.get(current)
    return notes[::-1]
