"""The CustomResourceDefinition, generated from the pydantic models (the single source of the schema).

`cudanalyst crd --write` regenerates `manifests/crd.yaml` and `charts/cudanalyst/templates/crd.yaml`;
a test fails when the checked-in files drift from the models.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from cudanalyst.api import (
    API_GROUP,
    API_VERSION,
    KIND,
    PLURAL,
    SHORT_NAMES,
    AttributionRun,
    AttributionRunSpec,
)

CRD_NAME = f"{PLURAL}.{API_GROUP}"
MANIFEST_PATH = Path("manifests/crd.yaml")
CHART_PATH = Path("charts/cudanalyst/templates/crd.yaml")
# The second kind (issue 14): its own files, so that every reader of crd.yaml keeps one document.
RECORDING_MANIFEST_PATH = Path("manifests/crd-trajectoryrecording.yaml")
RECORDING_CHART_PATH = Path("charts/cudanalyst/templates/crd-trajectoryrecording.yaml")

# JSON-Schema keys that a structural OpenAPI v3 schema of a CRD does not accept.
_DROP = {"title", "additionalProperties", "$defs", "discriminator", "examples", "const"}

PRINTER_COLUMNS = [
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress.text"},
    {"name": "Top player", "type": "string", "jsonPath": ".status.results.topPlayer"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Reason", "type": "string", "priority": 1,
     "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
]


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Turn pydantic's JSON Schema into a structural OpenAPI v3 schema: refs inlined, nulls as nullable."""
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(node["anyOf"])
        if len(options) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            out = _structural({**options[0], **rest}, defs)
            if nullable:
                out["nullable"] = True
                if out.get("default", 0) is None:
                    del out["default"]
            return out
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "default" and value is None:
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
            continue
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
            continue
        out[key] = _structural(value, defs)
    if node.get("type") == "object" and "properties" not in node:
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = _structural(extra, defs)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _default_nested_objects(schema: dict[str, Any]) -> None:
    """Give optional object properties a `{}` default so the API server fills in their own defaults."""
    required = set(schema.get("required", []))
    for name, sub in schema.get("properties", {}).items():
        if sub.get("type") == "object" and "properties" in sub:
            _default_nested_objects(sub)
            if name not in required and not sub.get("nullable"):
                sub.setdefault("default", {})


def _immutability_rule(spec_model: type[BaseModel], noun: str, mutable: tuple[str, ...] = ()) -> dict[str, str]:
    # Compare every spec field but the mutable ones; a field may be absent on either side.
    names = [f.alias for f in spec_model.model_fields.values() if f.alias not in mutable]
    checks = [f"(has(self.spec.{n}) == has(oldSelf.spec.{n}) && (!has(self.spec.{n}) || "
              f"self.spec.{n} == oldSelf.spec.{n}))" for n in names]
    started = "has(oldSelf.status) && has(oldSelf.status.startTime)"
    message = f"spec is immutable once the {noun} has started (status.startTime is set)"
    if mutable:
        message += "; only " + ", ".join(f"spec.{n}" for n in mutable) + " may change"
    return {"rule": f"!({started}) || ({' && '.join(checks)})", "message": message, "reason": "FieldValueForbidden"}


def _kind_schema(model: type[BaseModel], spec_rules: list[dict[str, str]],
                 immutability: dict[str, str]) -> dict[str, Any]:
    """One kind's openAPIV3Schema: the model made structural, its spec's CEL rules, the root's immutability."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _structural(raw, raw.get("$defs", {}))
    schema["properties"]["metadata"] = {"type": "object"}
    # apiVersion and kind are checked by the API server itself; enums here would only get in the way.
    for key in ("apiVersion", "kind"):
        schema["properties"][key] = {"type": "string"}
    schema["required"] = ["spec"]
    spec = schema["properties"]["spec"]
    _default_nested_objects(spec)
    spec["x-kubernetes-validations"] = spec_rules
    schema["x-kubernetes-validations"] = [immutability]
    return schema


def openapi_schema() -> dict[str, Any]:
    """The CRD's openAPIV3Schema for version v1alpha1."""
    return _kind_schema(AttributionRun, [
        {"rule": "self.players.all(p, self.players.exists_one(q, q == p))",
         "message": "spec.players must be unique", "fieldPath": ".players"},
        {"rule": "!has(self.feedback.modes) || self.feedback.modes.all(k, k in self.players)",
         "message": "spec.feedback.modes may only name players listed in spec.players",
         "fieldPath": ".feedback.modes"},
        {"rule": "self.trajectory.generations.all(g, self.trajectory.generations.exists_one(h, h == g))",
         "message": "spec.trajectory.generations must be unique", "fieldPath": ".trajectory.generations"},
        {"rule": "!has(self.attribution) || !has(self.attribution.metrics) || "
                 "(self.attribution.metrics.all(m, self.attribution.metrics.exists_one(n, n == m)) && "
                 "!('fast' in self.attribution.metrics && 'fastVsFrozen' in self.attribution.metrics))",
         "message": "spec.attribution.metrics must name each metric once (fast is the older name of fastVsFrozen)",
         "fieldPath": ".attribution.metrics"},
        {"rule": "has(self.trajectory.uri) != has(self.trajectory.recording)",
         "message": "spec.trajectory: give exactly one of uri and recording", "fieldPath": ".trajectory"},
        # No rule for "strata ask for at least one program": the API server admits 0.0 for an integer field, and a
        # CEL rule that reads it then fails ("expected int, got float64"). The operator's Stalled condition (and
        # local mode) refuse such a spec with the field path.
    ], _immutability_rule(AttributionRunSpec, "run", mutable=("suspend",)))


def _crd(kind: str, plural: str, short_names: list[str], columns: list[dict[str, Any]],
         schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{API_GROUP}", "labels": {"app.kubernetes.io/name": "cudanalyst"}},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["cudanalyst"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def build_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    return _crd(KIND, PLURAL, SHORT_NAMES, PRINTER_COLUMNS, openapi_schema())


RECORDING_COLUMNS = [
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress.text"},
    {"name": "Programs", "type": "integer", "jsonPath": ".status.programs"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Trajectory", "type": "string", "priority": 1, "jsonPath": ".status.trajectoryUri"},
]


def recording_schema() -> dict[str, Any]:
    """The TrajectoryRecording's openAPIV3Schema: like AttributionRun's, spec immutable once started."""
    from cudanalyst.api.recording import RecordingSpec, TrajectoryRecording

    return _kind_schema(TrajectoryRecording, [
        {"rule": "self.tasks.all(t, self.tasks.exists_one(u, u == t))", "message": "spec.tasks must be unique",
         "fieldPath": ".tasks"},
        {"rule": "!has(self.search) || (has(self.search.explorationRatio) ? self.search.explorationRatio : 0.2) + "
                 "(has(self.search.exploitationRatio) ? self.search.exploitationRatio : 0.7) <= 1.0",
         "message": "spec.search: explorationRatio + exploitationRatio must be at most 1", "fieldPath": ".search"},
        {"rule": "!has(self.search) || !has(self.search.fullRewriteProbability) || "
                 "self.search.fullRewriteProbability == 0.0 || (has(self.search.evolution) && "
                 "self.search.evolution == 'diff')",
         "message": "spec.search: fullRewriteProbability is for evolution: diff", "fieldPath": ".search"},
    ], _immutability_rule(RecordingSpec, "recording"))


def build_recording_crd() -> dict[str, Any]:
    from cudanalyst.api.recording import RECORDING_KIND, RECORDING_PLURAL, RECORDING_SHORT_NAMES

    return _crd(RECORDING_KIND, RECORDING_PLURAL, RECORDING_SHORT_NAMES, RECORDING_COLUMNS, recording_schema())


HEADER = "# Generated by `cudanalyst crd --write` from the pydantic models in src/cudanalyst/api. Do not edit.\n"


def render_manifest(crd: dict[str, Any] | None = None) -> str:
    return HEADER + yaml.safe_dump(crd or build_crd(), sort_keys=False, width=120)


def render_chart_template(crd: dict[str, Any] | None = None) -> str:
    """The chart's copy: kept on uninstall, and optional through `.Values.crds.install`."""
    crd = crd or build_crd()
    crd["metadata"]["annotations"] = {"helm.sh/resource-policy": "keep"}
    body = yaml.safe_dump(crd, sort_keys=False, width=120)
    return HEADER + "{{- if .Values.crds.install }}\n" + body + "{{- end }}\n"


def generated_files() -> list[tuple[Path, str]]:
    """Every generated file (relative path, text): both kinds, plain manifest and chart copy."""
    return [(MANIFEST_PATH, render_manifest()), (CHART_PATH, render_chart_template()),
            (RECORDING_MANIFEST_PATH, render_manifest(build_recording_crd())),
            (RECORDING_CHART_PATH, render_chart_template(build_recording_crd()))]


def write_files(root: Path) -> list[Path]:
    written = []
    for rel, text in generated_files():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        written.append(path)
    return written


def to_json_schema(node: Any) -> Any:
    """The CRD's OpenAPI schema as strict Draft 4 JSON Schema, for checking objects before they are sent.

    Strict: an object field the CRD does not declare is an error here, because the API server would
    prune it silently.
    """
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items()
           if not k.startswith("x-kubernetes-") and k not in ("nullable", "default")}
    if node.get("type") == "object" and "properties" in node:
        out["additionalProperties"] = False
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def validator(part: str | None = None) -> Any:
    """A jsonschema validator for the whole object, or for one top-level part ('spec', 'status')."""
    import jsonschema

    schema = openapi_schema()
    if part:
        schema = schema["properties"][part]
    return jsonschema.Draft4Validator(to_json_schema(schema))
