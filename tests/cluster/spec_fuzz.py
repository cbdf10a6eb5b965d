"""AttributionRun specs generated from the CRD's own schema: valid, boundary and invalid (issue 33, part 2).

Two sources, both deterministic (the same list on every machine):

- `field_cases`: a valid base spec mutated one field at a time, for every field the schema declares (nested
  ones too, absent optional ones included): each bound and one past it, every enum value and one outside,
  the pattern broken, strings at and past maxLength, Unicode and ASCII whitespace the regex engines may read
  differently, wrong JSON types (a number as a string, a float for an integer, a bool), null, an empty or
  over-long list, duplicates, unknown fields, a required field dropped.
- `random_cases`: hypothesis, derandomized, draws 1-4 fields at a time and gives each a value from the
  schema's valid domain or from the field's boundary/invalid mutations.

No pytest here: bench scripts can use it (put tests/cluster on sys.path).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cudanalyst.api import API_GROUP, API_VERSION
from cudanalyst.crd import openapi_schema

DROP = object()  # a mutation that removes the field
# What the regex engines disagree on: Go's RE2 (the API server) reads \s as ASCII whitespace only; Python's re and
# pydantic-core's Rust regex read it as Unicode whitespace.
ODD_SPACES = ("\u00a0", "\u2003", "\x0b", "\x85")
INT64_MAX = 2**63 - 1


@dataclass
class Case:
    name: str  # the object's name in the cluster
    how: str  # what was changed, e.g. "spec.resources.shards = 1025 (max+1)"
    paths: list[str]  # the field paths changed ("spec.resources.shards")
    body: dict[str, Any]


def base_spec(output: str, planner_endpoint: str) -> dict[str, Any]:
    """A small valid spec over the bundled trajectory; the store is a local folder (nothing leaves the machine)."""
    return {
        "trajectory": {"uri": "builtin://example", "generations": [0], "programsPerGeneration": 1, "tasks": ["sum_reduction"]},
        "players": ["debugger", "analyzer"],
        "feedback": {"mode": "raw"},
        "planning": "explicit",
        "controls": [],
        "models": {"planner": {"endpoint": planner_endpoint, "model": "tiny"}},
        "sampling": {"rollouts": 1, "samplesPerCoalition": 1, "temperature": 0.8, "maxTokens": 16, "seed": 0},
        "attribution": {"metrics": ["compiled", "pass", "fast"], "estimator": "exact", "confidence": 0.95},
        "resources": {"shards": 1, "gpusPerShard": 1, "image": "registry.invalid/cudanalyst-runner:fuzz",
                      "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
        "output": {"uri": output},
    }


def body_of(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "AttributionRun", "metadata": {"name": name},
            "spec": spec}


def spec_schema() -> dict[str, Any]:
    return dict(openapi_schema()["properties"]["spec"])


# --- the schema's fields ---------------------------------------------------------------------------------


def fields(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every property the schema declares, depth first, with its own schema (array items are not descended into:
    a list is mutated as a whole, and through its first item)."""
    for name, sub in (schema.get("properties") or {}).items():
        yield (*path, name), sub
        if sub.get("type") == "object" and "properties" in sub:
            yield from fields(sub, (*path, name))


def _example_string(schema: dict[str, Any]) -> str:
    """A short string that the field accepts (its enum's first value, else a pattern-friendly word)."""
    if "enum" in schema:
        return str(schema["enum"][0])
    pattern = schema.get("pattern", "")
    if pattern.startswith("^https?"):
        return "http://127.0.0.1:9/v1"
    if "s3://" in pattern:
        return "builtin://example"
    return "abc"


def example(schema: dict[str, Any]) -> Any:
    """A valid value of a sub-schema (used for list items and map values)."""
    kind = schema.get("type")
    if kind == "integer":
        return int(schema.get("minimum", 0)) + (1 if schema.get("exclusiveMinimum") else 0)
    if kind == "number":
        low = float(schema.get("minimum", 0.0))
        high = float(schema.get("maximum", low + 1.0))
        return (low + high) / 2
    if kind == "boolean":
        return False
    if kind == "array":
        return [example(schema.get("items") or {})] * max(1, int(schema.get("minItems", 0)))
    if kind == "object":
        return {}
    return _example_string(schema)


def mutations(schema: dict[str, Any], required: bool) -> list[tuple[str, Any]]:
    """(label, value) mutations of one field, valid and invalid; DROP removes it."""
    out: list[tuple[str, Any]] = []
    kind = schema.get("type")
    nullable = bool(schema.get("nullable"))
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None:
            low = int(low) + (1 if schema.get("exclusiveMinimum") else 0)
            out += [("min", low), ("min-1", low - 1)]
        if high is not None:
            high = int(high) - (1 if schema.get("exclusiveMaximum") else 0)
            out += [("max", high), ("max+1", high + 1)]
        else:
            out += [("int64 max", INT64_MAX), ("past int64", INT64_MAX + 1)]
        good = low if low is not None else 0
        out += [("float for integer", good + 0.5), ("integral float", float(good)), ("number as string", str(good)),
                ("bool for integer", True)]
    elif kind == "number":
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None:
            out += [("min", low), ("below min", low - 0.001)]
        if high is not None:
            out += [("max", high), ("above max", high + 0.001)]
        good = example(schema)
        out += [("number as string", str(good)), ("bool for number", True), ("integer for number", int(good))]
    elif kind == "boolean":
        out += [("true", True), ("false", False), ("string for bool", "true"), ("integer for bool", 1)]
    elif kind == "string":
        if "enum" in schema:
            out += [(f"enum {v}", v) for v in schema["enum"]]
            out += [("outside enum", "bogus"), ("enum in other case", str(schema["enum"][0]).upper())]
        else:
            good = _example_string(schema)
            out += [("empty", "")]
            if "maxLength" in schema:
                n = int(schema["maxLength"])
                long = good + "a" * max(0, n - len(good))
                out += [("at maxLength", long[:n]), ("past maxLength", long[:n] + "a")]
            if "pattern" in schema:
                out += [("pattern broken", "Not Valid!")]
            out += [(f"whitespace {ch!r}", good + ch + "x") for ch in ODD_SPACES]
            out += [("trailing newline", good + "\n")]
        out += [("number for string", 7)]
    elif kind == "array":
        item = schema.get("items") or {}
        good = example(item)
        out += [("empty list", [])]
        if "maxItems" in schema:
            n = int(schema["maxItems"])
            distinct = _distinct(item, n + 1)
            if distinct is not None:
                out += [("at maxItems", distinct[:n]), ("past maxItems", distinct)]
        out += [("duplicates", [good, good]), ("item of wrong type", [{"x": 1}]), ("not a list", "x")]
        out += [(f"item {label}", [value]) for label, value in mutations(item, True)
                if value is not DROP and value is not None][:6]
    elif kind == "object":
        if "properties" in schema:
            out += [("empty object", {}), ("unknown field", {"noSuchField": 1}), ("not an object", "x")]
        else:
            value_schema = schema.get("additionalProperties") or {}
            out += [("empty map", {}), ("one entry", {"debugger": example(value_schema)}),
                    ("entry of wrong type", {"debugger": {"x": 1}}), ("not a map", ["x"])]
            if "maxProperties" in schema:
                n = int(schema["maxProperties"]) + 1
                out += [("past maxProperties", {f"k{i}": example(value_schema) for i in range(n)})]
    out += [("null", None)] if nullable or not required else [("null (not nullable)", None)]
    if not required:
        out += [("absent", DROP)]
    else:
        out += [("required dropped", DROP)]
    return out


def _distinct(item: dict[str, Any], n: int) -> list[Any] | None:
    if "enum" in item:
        values = list(item["enum"])
        return values[:n] if len(values) >= n else None
    kind = item.get("type")
    if kind == "integer":
        low = int(item.get("minimum", 0))
        return [low + i for i in range(n)]
    if kind == "string":
        pattern = item.get("pattern", "")
        if pattern.startswith("^[a-z]"):
            return [f"p{i}" for i in range(n)]
        return [f"t{i}" for i in range(n)]
    return None


# Objects valid only with more than their required fields, as a new one starts: strata need at least one count
# (a rule of the whole object), so `strata: {per: task}` alone would be refused for a field the mutation did not touch.
NEW_OBJECTS: dict[tuple[str, ...], dict[str, Any]] = {("trajectory", "strata"): {"broken": 1}}


def set_path(spec: dict[str, Any], path: tuple[str, ...], value: Any, schema: dict[str, Any] | None = None) -> None:
    """Set one field; an object above it that the spec lacks is made with its required fields (from `schema`), so
    that a refusal is about the changed field, not about a sibling the mutation left out."""
    node, sub = spec, schema
    for depth, key in enumerate(path[:-1]):
        sub = ((sub or {}).get("properties") or {}).get(key)
        child = node.get(key)
        if not isinstance(child, dict):
            # A model spec needs its model or endpoint: a new coder or summarizer starts as a copy of the planner.
            planner = (spec.get("models") or {}).get("planner")
            filled = path[: depth + 1] in (("models", "coder"), ("models", "summarizer")) and isinstance(planner, dict)
            child = copy.deepcopy(planner) if filled else copy.deepcopy(NEW_OBJECTS.get(path[: depth + 1])) or {
                name: example(((sub or {}).get("properties") or {}).get(name) or {})
                for name in (sub or {}).get("required") or []}
            node[key] = child
        node = child
    if value is DROP:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = copy.deepcopy(value)


def _required(schema: dict[str, Any], path: tuple[str, ...]) -> bool:
    node = schema
    for key in path[:-1]:
        node = node["properties"][key]
    return path[-1] in (node.get("required") or [])


def _show(value: Any) -> str:
    if value is DROP:
        return "<dropped>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_cases(output: str, planner_endpoint: str, prefix: str = "f") -> list[Case]:
    schema = spec_schema()
    base = base_spec(output, planner_endpoint)
    cases: list[Case] = []
    for path, sub in fields(schema):
        for label, value in mutations(sub, _required(schema, path)):
            spec = copy.deepcopy(base)
            set_path(spec, path, value, schema)
            dotted = "spec." + ".".join(path)
            cases.append(Case(f"{prefix}{len(cases):04d}", f"{dotted} = {_show(value)} ({label})", [dotted],
                              body_of(f"{prefix}{len(cases):04d}", spec)))
    # Whole-spec cases: an unknown top-level field, an empty spec, no spec.
    for label, spec in (("unknown field at spec", {**base, "noSuchField": True}), ("empty spec", {})):
        cases.append(Case(f"{prefix}{len(cases):04d}", label, ["spec"], body_of(f"{prefix}{len(cases):04d}", spec)))
    return cases


def random_cases(count: int, output: str, planner_endpoint: str, prefix: str = "h") -> list[Case]:
    """`count` specs from hypothesis (derandomized: the same list every time), 1-4 fields changed each."""
    if count <= 0:  # hypothesis refuses max_examples=0
        return []
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    schema = spec_schema()
    base = base_spec(output, planner_endpoint)
    table = [(path, sub, mutations(sub, _required(schema, path))) for path, sub in fields(schema)]
    cases: list[Case] = []

    def valid_values(sub: dict[str, Any]) -> st.SearchStrategy[Any]:
        kind = sub.get("type")
        if kind == "integer":
            low = sub.get("minimum")
            high = sub.get("maximum")
            return st.integers(min_value=None if low is None else int(low) + bool(sub.get("exclusiveMinimum")),
                               max_value=min(INT64_MAX, int(high) if high is not None else 10**6))
        if kind == "number":
            low, high = sub.get("minimum", 0.0), sub.get("maximum", 1000.0)
            return st.floats(min_value=low, max_value=high, exclude_min=bool(sub.get("exclusiveMinimum")),
                             exclude_max=bool(sub.get("exclusiveMaximum")), allow_nan=False)
        if kind == "boolean":
            return st.booleans()
        if kind == "string" and "enum" in sub:
            return st.sampled_from(sub["enum"])
        if kind == "string" and "pattern" in sub and "s3://" not in sub["pattern"] and "http" not in sub["pattern"]:
            n = int(sub.get("maxLength", 64))
            return st.from_regex(sub["pattern"], fullmatch=True).filter(lambda s: len(s) <= n)
        if kind == "string":
            n = min(int(sub.get("maxLength", 64)), 64)
            return st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=n)
        if kind == "array":
            item = sub.get("items") or {}
            return st.lists(valid_values(item), min_size=int(sub.get("minItems", 0)),
                            max_size=min(int(sub.get("maxItems", 4)), 4))
        return st.just(example(sub))

    @settings(max_examples=count, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        if len(cases) >= count:
            return
        picks = data.draw(st.lists(st.integers(0, len(table) - 1), min_size=1, max_size=4, unique=True))
        spec = copy.deepcopy(base)
        hows, paths = [], []
        for index in picks:
            path, sub, muts = table[index]
            if data.draw(st.booleans()):
                value = data.draw(valid_values(sub))
                label = "drawn"
            else:
                label, value = muts[data.draw(st.integers(0, len(muts) - 1))]
            set_path(spec, path, value, schema)
            dotted = "spec." + ".".join(path)
            paths.append(dotted)
            hows.append(f"{dotted} = {_show(value)} ({label})")
        name = f"{prefix}{len(cases):04d}"
        cases.append(Case(name, "; ".join(hows), paths, body_of(name, spec)))

    draw()
    return cases


FIELD_PATH = re.compile(r"spec(\.[A-Za-z0-9]+|\[\d+\])*")


def names_a_field(message: str, paths: list[str]) -> bool:
    """The refusal names one of the changed fields, or a field within one, or an object above one together with the
    changed field's own name (a rule of a whole object, e.g. `spec.trajectory: generations must be unique`)."""
    named = {re.sub(r"\[\d+\]", "", m.group(0)) for m in FIELD_PATH.finditer(message)}
    for path in paths:
        leaf = path.rsplit(".", 1)[-1]
        for plain in named:
            if plain == path or plain.startswith(path + "."):
                return True
            if path.startswith(plain + ".") and re.search(rf"\b{re.escape(leaf)}\b", message.replace(plain, "")):
                return True
    return False
