"""The overlay ConfigMap object: both data keys, contract annotations, labels and the name rule."""

from __future__ import annotations

from typing import Any

from reference.operator.core.envelope import encode
from reference.operator.core.ids import fnv1a_hex8

ENVELOPE_KEY = "routing-overlay.json"
LEGACY_KEY = "routing-config.json"
ANNOTATION_SCHEMA_VERSION = "grid.praxis.fast/overlay-schema-version"
ANNOTATION_REVISION = "grid.praxis.fast/overlay-revision"
ANNOTATION_CONTENT_DIGEST = "grid.praxis.fast/overlay-content-digest"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_GATEWAY = "grid.praxis.fast/gateway"
LABEL_NETWORK = "grid.praxis.fast/network"
MANAGED_BY = "grid-operator"
MAX_NAME = 63
MAX_COMPONENT_PREFIX = 20


def configmap_name(network: str, gateway: str, kind: str = "grid-overlay") -> str:
    """`grid-overlay-{network}-{gateway}`; past 63 characters, 20-character prefixes plus a hash."""
    raw = f"{kind}-{network}-{gateway}"
    if len(raw) <= MAX_NAME:
        return raw
    suffix = fnv1a_hex8(f"{network}/{gateway}")
    return f"{kind}-{network[:MAX_COMPONENT_PREFIX]}-{gateway[:MAX_COMPONENT_PREFIX]}-{suffix}"


def labels(network: str, gateway: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_GATEWAY: gateway, LABEL_NETWORK: network}


def build_configmap(envelope: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    """The ConfigMap object; `text` is the already encoded envelope, when the caller has it."""
    scope = envelope["scope"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(scope["network"], scope["gateway"]),
            "namespace": scope["namespace"],
            "labels": labels(scope["network"], scope["gateway"]),
            "annotations": {
                ANNOTATION_SCHEMA_VERSION: envelope["schema_version"],
                ANNOTATION_REVISION: envelope["revision"]["value"],
                ANNOTATION_CONTENT_DIGEST: envelope["content_digest"]["value"],
            },
        },
        "data": {ENVELOPE_KEY: text if text is not None else encode(envelope), LEGACY_KEY: encode(envelope["overlay"])},
    }


def revision_of(configmap: dict[str, Any] | None) -> str | None:
    if not configmap:
        return None
    annotations = configmap.get("metadata", {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_REVISION)
    return value if isinstance(value, str) else None


def needs_write(existing: dict[str, Any] | None, rendered: dict[str, Any]) -> bool:
    """An identical revision is not rewritten, so re-rendering unchanged state touches nothing."""
    return revision_of(existing) != revision_of(rendered)
