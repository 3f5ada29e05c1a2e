"""Grid CRDs as validators: load manifests/crds and check resources against their openAPIV3Schema.

The operator's `dir` source and the producer suite need the same admission answer a Kubernetes API server
would give, without a cluster. The CRD schema is translated into a JSON Schema (draft 2020-12) and checked
with `jsonschema`; errors name the field path (`spec.scoringPolicy: 'strategy' is a required property`).

Kubernetes extensions are translated as follows:

- `nullable: true` allows `null` next to the declared type;
- `x-kubernetes-int-or-string: true` becomes "integer or string";
- `x-kubernetes-preserve-unknown-fields: true` keeps unknown fields; every other object with declared
  properties rejects unknown fields, as `kubectl apply` does with its default strict field validation;
- `x-kubernetes-list-type: set` becomes `uniqueItems`;
- OpenAPI v3 boolean `exclusiveMinimum`/`exclusiveMaximum` become their numeric JSON Schema form;
- `x-kubernetes-validations` (CEL rules), `x-kubernetes-list-type: map` key uniqueness,
  `x-kubernetes-embedded-resource` and `format` are NOT checked here; each skipped CEL rule and map list is
  recorded in `Crd.notes` so a caller can see what only a real API server enforces.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness import fastyaml


def _crd_dir() -> Path:
    """manifests/crds in a checkout; the harness.crds_data package in an installed distribution."""
    checkout = Path(__file__).resolve().parent.parent / "manifests" / "crds"
    if checkout.is_dir():
        return checkout
    import importlib.resources

    return Path(str(importlib.resources.files("harness.crds_data")))


CRD_DIR = _crd_dir()
GROUP = "grid.praxis.fast"
VERSION = "v1alpha1"

# metadata.name of a cluster-scoped custom resource: a DNS-1123 subdomain.
_NAME_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
}
_METADATA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": _NAME_SCHEMA,
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
_DROPPED_KEYS = (
    "nullable",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource",
    "format",
)


class CrdError(ValueError):
    """A CRD file that cannot be used: unreadable, not a v1 CustomResourceDefinition, or no schema."""


class ResourceInvalid(ValueError):
    """A resource the CRD schema rejects; `errors` holds one `path: message` line per problem."""

    def __init__(self, kind: str, name: str, errors: list[str]) -> None:
        super().__init__(f"{kind}/{name} is invalid: " + "; ".join(errors))
        self.kind = kind
        self.name = name
        self.errors = errors


@dataclass(frozen=True)
class Crd:
    """One loaded CRD version: its identity, the original schema and the translated JSON Schema."""

    kind: str
    group: str
    version: str
    plural: str
    scope: str
    openapi: dict[str, Any]
    json_schema: dict[str, Any]
    notes: tuple[str, ...] = field(default=())

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def _path_text(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<root>"


def _translate(node: Any, path: str, notes: list[str], strict: bool) -> Any:
    """Return the JSON Schema form of one OpenAPI v3 schema node (recursively)."""
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {k: v for k, v in node.items() if k not in _DROPPED_KEYS}
    for rule in node.get("x-kubernetes-validations", ()) or ():
        notes.append(f"{path}: CEL rule not checked offline: {rule.get('rule')} ({rule.get('message', '')})")
    if node.get("x-kubernetes-list-type") == "map":
        notes.append(f"{path}: list-map key uniqueness {node.get('x-kubernetes-list-map-keys')} not checked offline")
    if node.get("x-kubernetes-embedded-resource"):
        notes.append(f"{path}: embedded-resource apiVersion/kind/metadata not checked offline")
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), bool):
            out.pop(bound)
            if node[bound] and limit in node:
                out[bound] = out.pop(limit)
    if "properties" in node:
        out["properties"] = {
            name: _translate(sub, f"{path}.{name}" if path else name, notes, strict)
            for name, sub in node["properties"].items()
        }
        preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))
        if strict and not preserve and "additionalProperties" not in node:
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _translate(node["additionalProperties"], f"{path}.*", notes, strict)
    if "items" in node:
        out["items"] = _translate(node["items"], f"{path}[]", notes, strict)
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in node:
            out[combinator] = [_translate(sub, path, notes, strict) for sub in node[combinator]]
    if "not" in node:
        out["not"] = _translate(node["not"], path, notes, strict)
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def to_json_schema(openapi: Mapping[str, Any], *, strict: bool = True) -> tuple[dict[str, Any], list[str]]:
    """Translate a CRD `openAPIV3Schema` into a JSON Schema plus notes on what is not checked offline."""
    notes: list[str] = []
    schema = _translate(copy.deepcopy(dict(openapi)), "", notes, strict)
    properties = schema.setdefault("properties", {})
    properties["metadata"] = copy.deepcopy(_METADATA_SCHEMA)
    properties.setdefault("apiVersion", {"type": "string"})
    properties.setdefault("kind", {"type": "string"})
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema, notes


def crd_from_document(doc: Any, source: str = "<crd>", *, strict: bool = True) -> Crd:
    """Build a `Crd` from a parsed CustomResourceDefinition (its storage version)."""
    if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
        raise CrdError(f"{source}: kind: not a CustomResourceDefinition")
    if doc.get("apiVersion") != "apiextensions.k8s.io/v1":
        raise CrdError(f"{source}: apiVersion: expected apiextensions.k8s.io/v1, got {doc.get('apiVersion')!r}")
    spec = doc.get("spec") or {}
    versions = [v for v in spec.get("versions") or () if v.get("storage")]
    if len(versions) != 1:
        raise CrdError(f"{source}: spec.versions: expected exactly one storage version")
    version = versions[0]
    openapi = (version.get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(openapi, Mapping):
        raise CrdError(f"{source}: spec.versions[].schema.openAPIV3Schema: missing")
    schema, notes = to_json_schema(openapi, strict=strict)
    names = spec.get("names") or {}
    return Crd(
        kind=str(names.get("kind")),
        group=str(spec.get("group")),
        version=str(version.get("name")),
        plural=str(names.get("plural")),
        scope=str(spec.get("scope")),
        openapi=dict(openapi),
        json_schema=schema,
        notes=tuple(notes),
    )


def load_crds(directory: Path | str | None = None, *, strict: bool = True) -> dict[str, Crd]:
    """Load every `*.yaml` CRD in `directory` (default: the project's manifests/crds), keyed by kind."""
    root = Path(directory) if directory is not None else CRD_DIR
    if not root.is_dir():
        raise CrdError(f"{root}: CRD directory not found")
    crds: dict[str, Crd] = {}
    for path in sorted(root.glob("*.yaml")):
        try:
            doc = fastyaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise CrdError(f"{path}: not valid YAML: {exc}") from exc
        crd = crd_from_document(doc, str(path), strict=strict)
        if crd.kind in crds:
            raise CrdError(f"{path}: duplicate CRD for kind {crd.kind}")
        crds[crd.kind] = crd
    return crds


def _describe(error: jsonschema.ValidationError) -> str:
    path = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = re.match(r"'([^']+)' is a required property", error.message)
        if missing:
            return f"{_path_text([*path, missing.group(1)])}: required field missing ({error.message})"
    return f"{_path_text(path)}: {error.message}"


def resource_errors(resource: Any, crds: Mapping[str, Crd] | None = None) -> list[str]:
    """Every reason the API server would refuse `resource`, as sorted `path: message` lines; [] if valid."""
    crds = load_crds() if crds is None else crds
    if not isinstance(resource, Mapping):
        return [f"<root>: expected a mapping, got {type(resource).__name__}"]
    kind = resource.get("kind")
    crd = crds.get(kind) if isinstance(kind, str) else None
    if crd is None:
        return [f"kind: unknown kind {kind!r} (known: {', '.join(sorted(crds))})"]
    if resource.get("apiVersion") != crd.api_version:
        return [f"apiVersion: expected {crd.api_version!r} for {crd.kind}, got {resource.get('apiVersion')!r}"]
    validator = jsonschema.Draft202012Validator(crd.json_schema)
    return sorted(_describe(err) for err in validator.iter_errors(resource))


def check_resource(resource: Any, crds: Mapping[str, Crd] | None = None) -> None:
    """Raise `ResourceInvalid` naming every offending field when the CRD schema rejects `resource`."""
    errors = resource_errors(resource, crds)
    if errors:
        kind = resource.get("kind", "?") if isinstance(resource, Mapping) else "?"
        meta = resource.get("metadata") if isinstance(resource, Mapping) else None
        name = meta.get("name", "?") if isinstance(meta, Mapping) else "?"
        raise ResourceInvalid(str(kind), str(name), errors)


def apply_defaults(resource: Mapping[str, Any], crd: Crd) -> dict[str, Any]:
    """Return a copy of `resource` with schema defaults filled in where a field is absent, as the API server does."""
    result = copy.deepcopy(dict(resource))
    _fill_defaults(result, crd.openapi)
    return result


def _fill_defaults(value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _fill_defaults(value[name], sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _fill_defaults(item, schema["items"])
