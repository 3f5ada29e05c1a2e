"""The v1 envelope: scope, provenance and a content-addressed revision over the routing payload.

Revision and content digest come from the same canonical digest every consumer recomputes, so
timestamps and provenance never change the revision.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from reference.overlay import canonical_digest, parse_overlay

SCHEMA_VERSION = "1.0.0"
PRODUCER = "agn-reference-operator"
PRODUCER_VERSION = "0.1.0"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def source_uid(network: str, uid: str) -> str:
    """The network's UID, or a stable one derived from its name when the source has none."""
    return uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"grid.praxis.fast/GridNetwork/{network}"))


def build_overlay(
    network: str, local_site: str, candidates: list[dict[str, Any]], selection_mode: str | None
) -> dict[str, Any]:
    overlay: dict[str, Any] = {"network": network, "local_site": local_site}
    if selection_mode is not None:
        overlay["selection_policy"] = {"mode": selection_mode}
    overlay["candidates"] = candidates
    return overlay


def build_envelope(
    overlay: dict[str, Any],
    *,
    gateway: str,
    namespace: str,
    uid: str,
    generation: int,
    rendered_at: datetime,
) -> dict[str, Any]:
    digest = canonical_digest(overlay)
    network = overlay["network"]
    return {
        "schema_version": SCHEMA_VERSION,
        "revision": {"kind": "content_addressed", "algorithm": "sha256", "value": digest},
        "content_digest": {"algorithm": "sha256", "value": digest},
        "scope": {
            "network": network,
            "gateway": gateway,
            "namespace": namespace,
            "local_site": overlay["local_site"],
        },
        "provenance": {
            "producer": PRODUCER,
            "producer_version": PRODUCER_VERSION,
            "source_name": network,
            "source_uid": source_uid(network, uid),
            "source_generation": max(1, generation),
            "rendered_at": rfc3339(rendered_at),
        },
        "overlay": overlay,
    }


def encode(document: dict[str, Any]) -> str:
    """Stable compact JSON text: sorted keys, so identical state is byte-identical apart from timestamps.

    Compact separators keep the C encoder in play, which matters at a thousand candidates.
    """
    return json.dumps(document, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def check(envelope: dict[str, Any], text: str | None = None) -> None:
    """Run the consumer's own validator over what is about to be published; raises OverlayRejected.

    `text` is the encoded envelope when the caller already has it, so the bytes checked are the bytes
    published.
    """
    scope = envelope["scope"]
    parse_overlay((text if text is not None else encode(envelope)).encode("utf-8"), expected_scope=scope)
