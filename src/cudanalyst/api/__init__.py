"""The AttributionRun API: spec and status models, and loading a run from a YAML or JSON file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cudanalyst.api.spec import (
    API_GROUP,
    API_VERSION,
    KIND,
    METRICS,
    PLURAL,
    SHORT_NAMES,
    AttributionRunSpec,
    ModelSpec,
)
from cudanalyst.api.status import AttributionRunStatus, Condition

__all__ = [
    "API_GROUP", "API_VERSION", "KIND", "METRICS", "PLURAL", "SHORT_NAMES",
    "AttributionRun", "AttributionRunSpec", "AttributionRunStatus", "Condition", "KubeObject", "ModelSpec", "Metadata",
    "SpecError", "load_run", "parse_model", "parse_run", "read_document",
]

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class Metadata(BaseModel):
    """The parts of Kubernetes object metadata the tool reads; the rest is kept as is."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    # A run's name becomes Job, ConfigMap and store-folder names, so it must be a DNS label.
    name: str = Field(pattern=NAME_PATTERN, max_length=52)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class KubeObject(BaseModel):
    """What every kind's whole object shares: apiVersion, kind, metadata, unknown fields refused; each kind
    narrows `kind` and adds its spec and status."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    api_version: Literal["cudanalyst.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: str
    metadata: Metadata

    @property
    def name(self) -> str:
        return str(self.metadata.name)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class AttributionRun(KubeObject):
    """A whole AttributionRun object, as applied to the cluster or run locally."""

    kind: Literal["AttributionRun"]
    spec: AttributionRunSpec
    status: AttributionRunStatus | None = None


class SpecError(ValueError):
    """An invalid run: each problem carries the field path where it was found."""

    def __init__(self, source: str, problems: list[tuple[str, str]], kind: str = KIND):
        self.source = source
        self.problems = problems
        if len(problems) == 1 and not problems[0][0]:
            super().__init__(f"{source}: {problems[0][1]}")
            return
        lines = "\n".join(f"  {path or '<root>'}: {msg}" for path, msg in problems)
        super().__init__(f"{source}: invalid {kind}\n{lines}")


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_model(data: Any, source: str, model: type[BaseModel], kind: str = KIND) -> Any:
    """Validate a decoded object as `model`; raise SpecError naming every bad field by its path."""
    if not isinstance(data, dict):
        raise SpecError(source, [("", f"expected a mapping (a {kind} object), got {type(data).__name__}")], kind)
    # As the API server reads it (cudanalyst.api.wire), then with strict types, so a spec valid here is valid there.
    from cudanalyst.api.wire import as_served, structural_schema

    data, decoding = as_served(data, structural_schema(model))
    if decoding:
        raise SpecError(source, decoding, kind)
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            # Model-level validators report at the model's own path; their message names the field.
            msg = err["msg"].removeprefix("Value error, ")
            problems.append((_path(err["loc"]), msg))
        raise SpecError(source, problems, kind) from None


def parse_run(data: Any, source: str = "<input>") -> AttributionRun:
    """Validate a decoded object; raise SpecError naming every bad field by its path."""
    return parse_model(data, source, AttributionRun)


class _Loader(yaml.SafeLoader):
    """YAML as kubectl reads it in one more respect: `1e-5` is a float (PyYAML's YAML 1.1 wants a dot, `1.0e-5`,
    and reads `1e-5` as a string, which the API server, through kubectl, would take as the number)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_document(path: str | Path) -> Any:
    """The one YAML or JSON document of a file; SpecError (naming the file and line) otherwise."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SpecError(str(p), [("", "file not found")]) from None
    except OSError as exc:
        raise SpecError(str(p), [("", f"cannot read: {exc.strerror}")]) from None
    try:
        # JSON as JSON: PyYAML reads a JSON escaped surrogate pair (a character beyond U+FFFF) as two broken
        # characters, and 5e-324 as a string (issue 33's fuzzed specs).
        return json.loads(text)
    except ValueError:
        pass
    try:
        docs = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]  # a SafeLoader with one more resolver
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(str(p), [("", f"malformed YAML at {where}{problem}")]) from None
    if len(docs) != 1:
        raise SpecError(str(p), [("", f"expected exactly one YAML document, found {len(docs)}")])
    return docs[0]


def load_run(path: str | Path) -> AttributionRun:
    """Read one AttributionRun from a YAML or JSON file."""
    return parse_run(read_document(path), str(Path(path)))
