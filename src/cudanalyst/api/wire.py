"""What the Kubernetes API server does to a document before it validates it, done here too, so that local mode
(`cudanalyst validate`, `cudanalyst run`) and the cluster judge every spec alike (issue 33's fuzzed specs found
where they did not).

Read with the kind's own schema, as the CRD has it (`cudanalyst.crd` generates the CRD from the same models):

- a null where the schema does not allow one is dropped, as the API server prunes it (the field's default
  applies);
- an integer written as a float (`3.0`) is the integer, as the API server stores it, except in a list of
  integers, where the API server's CEL rules (uniqueness) fail on it;
- an integer outside 64 bits is refused (the API server cannot decode it as an integer), and so is a null for a
  field with an enum (the API server checks the enum, which has no null).

Types are then checked strictly (parse_model): "3" is not a number and "true" not a bool, as for the API server.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@cache
def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The parts of the model's schema the API server's decoding reads (types, nullable, enums, properties, items),
    with references inlined and `X | None` as nullable X, as `cudanalyst.crd` writes them into the CRD."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _inline(raw, raw.get("$defs", {}))


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        return _inline({**target, **{k: v for k, v in node.items() if k != "$ref"}}, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            out = _inline({**options[0], **{k: v for k, v in node.items() if k != "anyOf"}}, defs)
            if len(options) < len(node["anyOf"]):
                out["nullable"] = True
            return out
    return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def as_served(data: Any, schema: dict[str, Any], path: str = "") -> tuple[Any, list[tuple[str, str]]]:
    """The document as the API server would read it, and the problems only its decoding finds (field path, text)."""
    problems: list[tuple[str, str]] = []
    kind = schema.get("type")
    if isinstance(data, bool):
        return data, problems
    if isinstance(data, int) and not (INT64_MIN <= data <= INT64_MAX):
        problems.append((path, f"{data} is outside the 64-bit integer range"))
        return data, problems
    if kind == "integer" and isinstance(data, float) and data.is_integer():
        return int(data), problems
    if kind == "object" and isinstance(data, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else None
        out: dict[str, Any] = {}
        for key, value in data.items():
            sub = (props or {}).get(key) if props is not None else extra
            if sub is None:
                out[key] = value  # unknown: the models refuse it, naming it
                continue
            if value is None and not sub.get("nullable"):
                continue  # pruned
            if value is None and "enum" in sub and None not in sub["enum"]:
                # Nullable, but the API server checks the enum first: null is not one of its values.
                supported = ", ".join(repr(v) for v in sub["enum"])
                problems.append((_path(path, key), f"null is not a supported value (supported: {supported})"))
                continue
            out[key], found = as_served(value, sub, _path(path, key))
            problems += found
        return out, problems
    if kind == "array" and isinstance(data, list):
        item = schema.get("items") or {}
        out_list = []
        for i, value in enumerate(data):
            if item.get("type") == "integer" and isinstance(value, float):
                problems.append((_path(path, i), f"expected an integer, got {value!r}"))
                out_list.append(value)
                continue
            served, found = as_served(value, item, _path(path, i))
            out_list.append(served)
            problems += found
        return out_list, problems
    return data, problems
