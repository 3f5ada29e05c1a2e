"""The `dir` resource source: a directory of YAML resource files, checked against the grid CRD schemas.

An invalid resource is reported (file, document, field) and skipped; the others keep working, so one bad
edit never takes the whole grid down. Schema defaults are filled in the way the API server would.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from reference.operator.core.model import ResourceError, Resources

GROUP_VERSION = "grid.praxis.fast/v1alpha1"
SUFFIXES = (".yaml", ".yml", ".json")
#: libyaml's parser when present (the same safe constructor, several times faster): the resource files are
#: parsed again on every change, on the path from a change to its reconcile.
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_METADATA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 253, "pattern": _NAME},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
_IGNORED = {
    "nullable",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource",
    "format",
    "default",
}


def crd_dir() -> Path:
    """manifests/crds in a checkout, else the CRD files shipped as package data of the distribution."""
    checkout = Path(__file__).resolve().parents[2] / "manifests" / "crds"
    if checkout.is_dir():
        return checkout
    return Path(str(importlib.resources.files("harness.crds_data")))


def _schema(node: Any) -> Any:
    """OpenAPI v3 (with Kubernetes extensions) to JSON Schema; unknown fields rejected unless preserved."""
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {k: v for k, v in node.items() if k not in _IGNORED}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), bool):
            out.pop(bound)
            if node[bound] and limit in node:
                out[bound] = out.pop(limit)
    if "properties" in node:
        out["properties"] = {name: _schema(sub) for name, sub in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _schema(node["additionalProperties"])
    if "items" in node:
        out["items"] = _schema(node["items"])
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in node:
            out[combinator] = [_schema(sub) for sub in node[combinator]]
    if "not" in node:
        out["not"] = _schema(node["not"])
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


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


@dataclass(frozen=True)
class Kind:
    """One CRD's storage version: the OpenAPI schema (for defaults) and its JSON Schema validator."""

    name: str
    api_version: str
    openapi: Mapping[str, Any]
    validator: jsonschema.Draft202012Validator


def load_kinds(directory: Path | None = None) -> dict[str, Kind]:
    """Every CRD in `directory` keyed by kind; a broken CRD file raises ValueError naming the file."""
    kinds: dict[str, Kind] = {}
    root = directory or crd_dir()
    for path in sorted(root.glob("*.yaml")):
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)  # a safe loader
        spec = doc.get("spec") if isinstance(doc, Mapping) else None
        if not isinstance(spec, Mapping) or doc.get("kind") != "CustomResourceDefinition":
            raise ValueError(f"{path}: kind: not a CustomResourceDefinition")
        storage = [v for v in spec.get("versions") or () if v.get("storage")]
        if len(storage) != 1:
            raise ValueError(f"{path}: spec.versions: expected exactly one storage version")
        openapi = (storage[0].get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(openapi, Mapping):
            raise ValueError(f"{path}: spec.versions[].schema.openAPIV3Schema: missing")
        schema = _schema(openapi)
        schema.setdefault("properties", {})["metadata"] = _METADATA
        schema["properties"].setdefault("apiVersion", {"type": "string"})
        schema["properties"].setdefault("kind", {"type": "string"})
        schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
        kind = str(spec["names"]["kind"])
        kinds[kind] = Kind(
            kind, f"{spec['group']}/{storage[0]['name']}", openapi, jsonschema.Draft202012Validator(schema)
        )
    return kinds


@functools.cache
def default_kinds() -> dict[str, Kind]:
    """The project's CRDs, loaded once per process."""
    return load_kinds()


def _field(error: jsonschema.ValidationError) -> str:
    parts = list(error.absolute_path)
    if error.validator == "required":
        missing = re.match(r"'([^']+)' is a required property", error.message)
        if missing:
            parts.append(missing.group(1))
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<root>"


def schema_errors(obj: Any, kinds: Mapping[str, Kind]) -> list[str]:
    """`field: message` for every way `obj` breaks its CRD schema; [] when it is valid."""
    if not isinstance(obj, Mapping):
        return [f"<root>: expected a mapping, got {type(obj).__name__}"]
    kind_name = obj.get("kind")
    kind = kinds.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None:
        return [f"kind: unknown kind {obj.get('kind')!r} (known: {', '.join(sorted(kinds))})"]
    if obj.get("apiVersion") != kind.api_version:
        return [f"apiVersion: expected {kind.api_version!r}, got {obj.get('apiVersion')!r}"]
    return sorted(f"{_field(e)}: {e.message}" for e in kind.validator.iter_errors(obj))


@dataclass(frozen=True)
class Issue:
    """One skipped document: where it was and why."""

    file: str
    document: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file} (document {self.document}): {self.reason}"


@dataclass(frozen=True)
class Loaded:
    resources: Resources
    objects: tuple[dict[str, Any], ...]
    issues: tuple[Issue, ...]


#: kustomize's own files sit beside resources in many repositories; they are not resources.
KUSTOMIZE_FILES = frozenset({"kustomization.yaml", "kustomization.yml", "Kustomization"})


def resource_files(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file()
        and p.name not in KUSTOMIZE_FILES
        and p.suffix in SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )


GROUP = "grid.praxis.fast"
#: The group the grid resources had before `grid.praxis.fast`; such manifests are read as the same kinds.
FORMER_GROUPS = frozenset({"grid.praxis-proxy.io"})


def _foreign(doc: Any) -> bool:
    """Core objects kept beside grid resources (Secrets, ConfigMaps) are not the operator's to read.

    The operator never reads Secret values: credentials reach the overlay as references only.
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("apiVersion"), str):
        return False
    group = doc["apiVersion"].rpartition("/")[0]
    return group != GROUP and group not in FORMER_GROUPS


def _current_group(doc: Any) -> Any:
    """A resource written with a former group name, re-labelled with the current one."""
    if isinstance(doc, Mapping) and isinstance(doc.get("apiVersion"), str):
        group, _, version = doc["apiVersion"].rpartition("/")
        if group in FORMER_GROUPS:
            return {**doc, "apiVersion": f"{GROUP}/{version}"}
    return doc


class DirSource:
    """Reads every YAML file under a directory; each call returns the current valid resources."""

    def __init__(self, directory: Path, kinds: Mapping[str, Kind] | None = None) -> None:
        self.directory = Path(directory)
        self.kinds = dict(kinds) if kinds is not None else default_kinds()

    def load(self) -> Loaded:
        if not self.directory.is_dir():
            raise FileNotFoundError(f"{self.directory}: manifests directory not found")
        objects: list[dict[str, Any]] = []
        issues: list[Issue] = []
        seen: dict[tuple[str, str], str] = {}
        for path in resource_files(self.directory):
            name = str(path)
            try:
                docs = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                issues.append(Issue(name, 0, f"not readable YAML: {exc}".replace("\n", " ")))
                continue
            for index, doc in enumerate(docs):
                if doc is None or _foreign(doc):
                    continue
                doc = _current_group(doc)
                issue = self._check(doc, seen, name)
                if issue:
                    issues.append(Issue(name, index, issue))
                    continue
                obj = copy.deepcopy(doc)
                _fill_defaults(obj, self.kinds[obj["kind"]].openapi)
                seen[(obj["kind"], obj["metadata"]["name"])] = name
                objects.append(obj)
        return Loaded(Resources.from_objects(objects), tuple(objects), tuple(issues))

    def _check(self, doc: Any, seen: Mapping[tuple[str, str], str], name: str) -> str | None:
        errors = schema_errors(doc, self.kinds)
        label = (
            f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"
            if isinstance(doc, Mapping)
            else "?"
        )
        if errors:
            return f"{label} rejected: " + "; ".join(errors)
        key = (doc["kind"], doc["metadata"]["name"])
        if key in seen:
            return f"{label} rejected: metadata.name: duplicate of the one in {seen[key]}"
        try:
            Resources.from_objects([doc])
        except ResourceError as exc:
            return f"{label} rejected: {exc}"
        return None
