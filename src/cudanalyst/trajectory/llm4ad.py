"""Read LLM4AD / EoH sample files as frozen programs.

LLM4AD's profiler appends every evaluated sample to ``samples/samples_{a}~{b}.json`` (200 per
file): a JSON list of ``{"sample_order", "function", "score"}``; the EoH profiler adds
``"algorithm"`` (the thought), some versions ``"prompt"``, ``"program"`` and ``"operation"``
(e1, e2, m1, ...). ``samples_best.json`` repeats the running best and is skipped. EoH also
writes ``population/pop_{g}.json``: the population kept after generation ``g`` (a list of
``{"algorithm", "function", "score"}``).

Samples carry no generation, so one is assigned, in this order: the sample's own
``generation`` field; ``samples_per_generation`` given by the user (generation =
(sample_order - 1) // n); else the first population file that holds the same function (samples
that never entered a population are left out, and counted in the provenance). Program ids are
``sample-<sample_order>``. LLM4AD records no feedback reports and no parents.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from cudanalyst.store import ObjectStore, StoreError
from cudanalyst.trajectory.format import FrozenProgram, ProgramContext, TrajectoryError

SOURCE_FORMAT = "llm4ad"

_SAMPLES_RE = re.compile(r"(^|/)samples_(\d+)~(\d+)\.json$")
_POP_RE = re.compile(r"(^|/)pop_(\d+)\.json$")


def _read_json_list(store: ObjectStore, key: str) -> list[Any]:
    where = store.uri_of(key)
    try:
        data = json.loads(store.get_bytes(key))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TrajectoryError(f"{where}: not valid JSON ({exc})") from None
    except StoreError as exc:
        raise TrajectoryError(f"{where}: cannot read ({exc})") from None
    if not isinstance(data, list):
        raise TrajectoryError(f"{where}: expected a JSON list of samples, got {type(data).__name__}")
    return data


def _int_field(item: dict[str, Any], field: str, where: str) -> int | None:
    value = item.get(field)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TrajectoryError(f"{where}: field {field!r} must be an integer >= 0, got {value!r}")
    return value


def _score(value: Any, where: str) -> Any:
    """A number, null (the sample failed to evaluate), or a list of numbers (multi-objective)."""
    ok = value is None or (isinstance(value, int | float) and not isinstance(value, bool)) or (
        isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )
    if not ok:
        raise TrajectoryError(f"{where}: field 'score' must be a number, null or a list of numbers, got {value!r}")
    return value


def _normal(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.strip().splitlines())


def find_files(store: ObjectStore) -> tuple[list[str], list[tuple[int, str]]]:
    """(samples_*.json keys, (generation, pop_*.json key)) under the store; any nesting."""
    samples: list[tuple[int, str]] = []
    pops: list[tuple[int, str]] = []
    for key in store.list():
        if m := _SAMPLES_RE.search(key):
            samples.append((int(m.group(2)), key))
        elif (m := _POP_RE.search(key)) and (key.startswith("population/") or "/population/" in key
                                              or "/" not in key):
            pops.append((int(m.group(2)), key))
    if not samples:
        raise TrajectoryError(
            f"{store.uri} holds no LLM4AD sample files: expected samples/samples_<a>~<b>.json "
            "(the run folder, its samples/ folder, or one such file)"
        )
    return [k for _, k in sorted(samples)], sorted(pops)


def read_llm4ad(
    store: ObjectStore,
    task: str,
    *,
    samples_per_generation: int | None = None,
    only_key: str | None = None,
) -> tuple[list[FrozenProgram], dict[str, Any]]:
    """All samples under ``store`` (or just ``only_key``) and the provenance for the manifest."""
    if samples_per_generation is not None and samples_per_generation < 1:
        raise TrajectoryError(f"samples per generation must be >= 1, got {samples_per_generation}")
    if only_key is not None:
        sample_keys, pop_keys = [only_key], []
    else:
        sample_keys, pop_keys = find_files(store)

    rows: dict[int, tuple[dict[str, Any], str]] = {}
    for key in sample_keys:
        for index, item in enumerate(_read_json_list(store, key)):
            where = f"{store.uri_of(key)}[{index}]"
            if not isinstance(item, dict):
                raise TrajectoryError(f"{where}: expected an object, got {type(item).__name__}")
            for field in ("sample_order", "function"):
                if field not in item:
                    raise TrajectoryError(f"{where}: missing field {field!r}; is this an LLM4AD samples file?")
            order = _int_field(item, "sample_order", where)
            if not isinstance(item["function"], str):
                raise TrajectoryError(f"{where}: field 'function' must be a string")
            _score(item.get("score"), where)
            _int_field(item, "generation", where)
            assert order is not None
            if order in rows:
                raise TrajectoryError(f"{where}: sample_order {order} appears twice (also {rows[order][1]})")
            rows[order] = (item, where)
    if not rows:
        raise TrajectoryError(f"{store.uri}: the sample files hold no samples")

    # First population each function entered: the state the search kept it in.
    first_pop: dict[str, int] = {}
    for generation, key in pop_keys:
        for index, member in enumerate(_read_json_list(store, key)):
            where = f"{store.uri_of(key)}[{index}]"
            if not isinstance(member, dict) or not isinstance(member.get("function"), str):
                raise TrajectoryError(f"{where}: expected an object with a string field 'function'")
            first_pop.setdefault(_normal(member["function"]), generation)

    programs: list[FrozenProgram] = []
    skipped: list[int] = []
    placed_by: set[str] = set()
    for order in sorted(rows):
        item, where = rows[order]
        generation = item.get("generation")
        if generation is None and samples_per_generation is not None:
            generation = (order - 1) // samples_per_generation
        elif generation is None and pop_keys:
            generation = first_pop.get(_normal(item["function"]))
            if generation is None:
                skipped.append(order)
                continue
        elif generation is None:
            raise TrajectoryError(
                f"{where}: sample {order} has no generation, and there are no population/pop_<g>.json files "
                "to place it; give the samples per generation (--samples-per-generation)"
            )
        placed_by.add("field" if item.get("generation") is not None
                      else "samplesPerGeneration" if samples_per_generation is not None else "population")
        extras = {k: item[k] for k in ("algorithm", "operation", "program", "execute_time", "sample_time")
                  if item.get(k) not in (None, "")}
        extras.update({"sampleOrder": order, "file": where[len(store.uri):] if where.startswith(store.uri) else where})
        try:
            programs.append(FrozenProgram(
                task=task,
                generation=generation,
                program_id=f"sample-{order}",
                parent_id=None,
                source=item["function"],
                metrics={"score": item.get("score"), "valid": item.get("score") is not None, SOURCE_FORMAT: extras},
                feedback={},
                context=ProgramContext(prompt=str(item.get("prompt") or "")),
            ))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise TrajectoryError(f"{where}: {field}: {err['msg']}") from None
    if not programs:
        raise TrajectoryError(
            f"{store.uri}: none of the {len(rows)} samples appears in a population file; "
            "give the samples per generation (--samples-per-generation) instead"
        )
    provenance: dict[str, Any] = {
        "format": SOURCE_FORMAT,
        "uri": store.uri,
        "files": sample_keys,
        "populations": [k for _, k in pop_keys],
        "generationFrom": sorted(placed_by),
        "samples": len(rows),
    }
    if samples_per_generation is not None:
        provenance["samplesPerGeneration"] = samples_per_generation
    if skipped:
        provenance["skippedSamples"] = {"count": len(skipped), "reason": "never entered a population",
                                        "sampleOrders": skipped}
    return programs, provenance
