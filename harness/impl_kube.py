"""The `kubernetes` block of a descriptor's operator: how to install a vendor operator in a cluster.

An operator that only runs as a Kubernetes controller cannot be started as a process on the local
backend; the kind and existing backends install it instead. The block names the container image (the kind
backend loads it into every cluster with `kind load docker-image`, nothing is pulled), the manifests that
install it (plain YAML files, directories of them, or kustomize directories rendered with `kubectl
kustomize`; paths are relative to the descriptor file), the Deployment those manifests make (its name,
namespace, pod selector and container: what the harness patches, scales, restarts and reads the logs of)
and where the harness reads what the operator writes (the overlay ConfigMap and the GridNetwork status).
Every default is what the reference does and the spec names, so a block with only `image` and `manifests`
describes an operator that is installed like the reference's and follows the spec.

It is parsed as strictly as the rest of the descriptor: an unknown key, a wrong type, a path that does
not exist or a template with a placeholder that will never be filled is an error naming its key path.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import producer_oracle
from harness.resources import API_VERSION

__all__ = [
    "DEFAULT_OVERLAY_KEY",
    "DEFAULT_STATUS_RESOURCE",
    "KubeComponent",
    "KubeDescriptorError",
    "KubeOutputs",
    "OperatorWorkload",
    "OverlayOutput",
    "REFERENCE_OPERATOR",
    "StatusOutput",
    "parse_kubernetes",
]

#: The ConfigMap data key the spec puts the envelope under.
DEFAULT_OVERLAY_KEY = "routing-overlay.json"
#: kubectl's name of the GridNetwork resource (cluster-scoped, the spec's API group).
DEFAULT_STATUS_RESOURCE = f"gridnetworks.{API_VERSION.split('/', 1)[0]}"

_KUBERNETES_KEYS = {"image": True, "manifests": True, "deployment": False, "outputs": False}
_DEPLOYMENT_KEYS = {"name": False, "namespace": False, "selector": False, "container": False}
_OUTPUTS_KEYS = {"overlay": False, "status": False}
_OVERLAY_KEYS = {"name": False, "namespace": False, "key": False}
_STATUS_KEYS = {"resource": False, "name": False, "namespace": False, "field": False}
#: Placeholders of the overlay ConfigMap's name and namespace: the GridNetwork, the gateway reference's
#: name and its namespace (where the spec's operator writes the ConfigMap).
OVERLAY_PLACEHOLDERS = frozenset({"network", "gateway", "namespace"})
STATUS_PLACEHOLDERS = frozenset({"network"})
#: The reference operator's Deployment and namespace (manifests/base/operator.yaml).
DEFAULT_OPERATOR_NAME = "agn-operator"
DEFAULT_OPERATOR_NAMESPACE = "agn-system"
#: What the API server accepts as a Deployment name (a DNS-1123 subdomain) and as a namespace or container
#: name (a DNS-1123 label): a name it would refuse can only be a typo, caught before any cluster exists.
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class KubeDescriptorError(ValueError):
    """A `kubernetes` block that cannot be used: the key path and the problem (harness.impl turns it into
    its ImplError; this module does not import harness.impl, which imports it)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class OverlayOutput:
    """Where the operator writes a gateway's overlay: ConfigMap name and namespace templates, and data key.

    ``name`` None is the spec's rule (`grid-overlay-{network}-{gateway}`, shortened with a hash past 63
    characters); ``namespace`` defaults to the gateway reference's own namespace.
    """

    name: str | None = None
    namespace: str = "{namespace}"
    key: str = DEFAULT_OVERLAY_KEY

    def locate(self, network: str, gateway: str, namespace: str) -> tuple[str, str]:
        """(namespace, name) of the ConfigMap for one gateway reference of `network`."""
        values = {"network": network, "gateway": gateway, "namespace": namespace}
        name = (producer_oracle.configmap_name(network, gateway) if self.name is None
                else self.name.format_map(values))
        return self.namespace.format_map(values), name


@dataclass(frozen=True)
class StatusOutput:
    """Where the operator writes a GridNetwork's status: a kubectl resource, its name (and namespace, for a
    namespaced one) and the dotted field path holding the status document."""

    resource: str = DEFAULT_STATUS_RESOURCE
    name: str = "{network}"
    namespace: str | None = None
    field: str = "status"

    def locate(self, network: str) -> tuple[str, str, str | None]:
        """(resource, name, namespace or None) of the object holding `network`'s status."""
        values = {"network": network}
        namespace = self.namespace.format_map(values) if self.namespace is not None else None
        return self.resource, self.name.format_map(values), namespace

    def read(self, obj: Mapping[str, Any] | None) -> dict[str, Any]:
        """The status document at `field` of `obj` ({} when any step is missing or not a mapping)."""
        value: Any = obj or {}
        for part in self.field.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return dict(value) if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class KubeOutputs:
    """How the harness finds what the operator writes; the defaults are the reference's."""

    overlay: OverlayOutput = field(default_factory=OverlayOutput)
    status: StatusOutput = field(default_factory=StatusOutput)


@dataclass(frozen=True)
class OperatorWorkload:
    """The Deployment the operator's manifests make: what the harness finds, patches for a mesh, scales, restarts
    and reads the logs of. The defaults are the reference's.

    ``selector`` (a label selector of its pods) defaults to `app.kubernetes.io/name=<name>`; ``container``
    None picks the container whose command is agn-operator, else the first
    (harness.backends.kube.manifests.operator_container).
    """

    name: str = DEFAULT_OPERATOR_NAME
    namespace: str = DEFAULT_OPERATOR_NAMESPACE
    selector: str = ""
    container: str | None = None

    def __post_init__(self) -> None:
        if not self.selector:
            object.__setattr__(self, "selector", f"app.kubernetes.io/name={self.name}")


#: The reference operator's Deployment (manifests/base/operator.yaml): what a descriptor without a
#: deployment mapping installs.
REFERENCE_OPERATOR = OperatorWorkload()


@dataclass(frozen=True)
class KubeComponent:
    """A component installed from an image and manifests instead of the reference's.

    ``manifests`` are absolute paths (resolved against the descriptor's directory when it was loaded);
    ``deployment`` is the workload they make for the operator, which the backends drive.
    """

    image: str
    manifests: tuple[Path, ...]
    outputs: KubeOutputs = field(default_factory=KubeOutputs)
    deployment: OperatorWorkload = field(default_factory=OperatorWorkload)


def parse_kubernetes(data: Any, section: str, base: Path) -> KubeComponent:
    """`<section>.kubernetes` of a descriptor; relative manifest paths are resolved against `base`."""
    path = f"{section}.kubernetes"
    block = _mapping(data, path, _KUBERNETES_KEYS)
    image = _string(block["image"], f"{path}.image")
    if any(c.isspace() for c in image):
        raise KubeDescriptorError(f"{path}.image", f"must be an image reference without whitespace, got {image!r}")
    return KubeComponent(image=image, manifests=_parse_manifests(block["manifests"], f"{path}.manifests", base),
                         outputs=_parse_outputs(block.get("outputs"), f"{path}.outputs"),
                         deployment=_parse_deployment(block.get("deployment"), f"{path}.deployment"))


def _parse_manifests(data: Any, key: str, base: Path) -> tuple[Path, ...]:
    """A non-empty list of files or directories that exist (a lone string is taken as a one-item list)."""
    items = [data] if isinstance(data, str) else data
    if not isinstance(items, list) or not items:
        raise KubeDescriptorError(key, f"must be a non-empty list of file or directory paths, got {_kind(data)}")
    paths: list[Path] = []
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        path = Path(_string(item, where)).expanduser()
        path = path if path.is_absolute() else base / path
        if not path.exists():
            raise KubeDescriptorError(where, f"no such file or directory: {path}")
        if path.resolve() in {p.resolve() for p in paths}:
            raise KubeDescriptorError(where, f"{path} is listed twice")
        paths.append(path)
    return tuple(paths)


def _parse_outputs(data: Any, key: str) -> KubeOutputs:
    if data is None:
        return KubeOutputs()
    block = _mapping(data, key, _OUTPUTS_KEYS)
    overlay = OverlayOutput()
    if block.get("overlay") is not None:
        part = _mapping(block["overlay"], f"{key}.overlay", _OVERLAY_KEYS)
        values: dict[str, str] = {name: _template(part[name], f"{key}.overlay.{name}", OVERLAY_PLACEHOLDERS)
                                  for name in ("name", "namespace") if name in part}
        if "key" in part:
            values["key"] = _string(part["key"], f"{key}.overlay.key")
        overlay = OverlayOutput(**values)
    status = StatusOutput()
    if block.get("status") is not None:
        part = _mapping(block["status"], f"{key}.status", _STATUS_KEYS)
        values = {name: _template(part[name], f"{key}.status.{name}", STATUS_PLACEHOLDERS)
                  for name in ("name", "namespace") if name in part}
        for name in ("resource", "field"):
            if name in part:
                values[name] = _string(part[name], f"{key}.status.{name}")
        if any(not piece for piece in values.get("field", "status").split(".")):
            raise KubeDescriptorError(f"{key}.status.field",
                                      f"must be a dotted field path such as 'status', got {values['field']!r}")
        status = StatusOutput(**values)
    return KubeOutputs(overlay=overlay, status=status)


def _parse_deployment(data: Any, key: str) -> OperatorWorkload:
    """The operator's Deployment: names the API server would accept, a non-blank selector."""
    if data is None:
        return OperatorWorkload()
    block = _mapping(data, key, _DEPLOYMENT_KEYS)
    values: dict[str, str] = {}
    for name, pattern, limit, what in (
            ("name", _SUBDOMAIN, 253, "a Deployment name (DNS-1123 subdomain: lowercase letters, digits, '-', '.')"),
            ("namespace", _LABEL, 63, "a namespace name (DNS-1123 label: lowercase letters, digits, '-')"),
            ("container", _LABEL, 63, "a container name (DNS-1123 label: lowercase letters, digits, '-')")):
        if name in block:
            text = _string(block[name], f"{key}.{name}")
            if not pattern.fullmatch(text) or len(text) > limit:
                raise KubeDescriptorError(f"{key}.{name}", f"must be {what}, at most {limit} characters, got {text!r}")
            values[name] = text
    if "selector" in block:
        values["selector"] = _string(block["selector"], f"{key}.selector")
    return OperatorWorkload(**values)


def _template(value: Any, key: str, allowed: frozenset[str]) -> str:
    """A name template whose placeholders are all in `allowed` (no format specs or conversions)."""
    text = _string(value, key)
    shown = ", ".join("{" + name + "}" for name in sorted(allowed))
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise KubeDescriptorError(key, f"malformed template {text!r}: {exc}") from None
    for _literal, name, spec, conversion in parts:
        if name is not None and (name not in allowed or spec or conversion):
            raise KubeDescriptorError(key, f"unknown placeholder {{{name}}} (allowed: {shown})")
    return text


def _mapping(data: Any, path: str, keys: Mapping[str, bool]) -> dict[str, Any]:
    """`data` as a mapping with only the allowed keys and every required one."""
    if not isinstance(data, dict):
        raise KubeDescriptorError(path, f"must be a mapping, got {_kind(data)}")
    for key in data:
        if key not in keys:
            raise KubeDescriptorError(f"{path}.{key}", f"unknown key (allowed here: {', '.join(keys)})")
    for key, required in keys.items():
        if required and key not in data:
            raise KubeDescriptorError(f"{path}.{key}", "missing required key")
    return data


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str):
        hint = " (quote it in YAML)" if isinstance(value, int | float) and not isinstance(value, bool) else ""
        raise KubeDescriptorError(key, f"must be a string, got {_kind(value)}{hint}")
    if not value.strip():
        raise KubeDescriptorError(key, "must not be empty")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)
