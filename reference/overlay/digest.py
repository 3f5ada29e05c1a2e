"""The v1 semantic revision: SHA-256 of the RFC 8785 form of the routing-relevant fields."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def semantic_payload(overlay: dict[str, Any]) -> dict[str, Any]:
    """The fields the revision covers: network, local_site, raw ordered candidates, selection_policy."""
    payload: dict[str, Any] = {
        "network": overlay.get("network"),
        "local_site": overlay.get("local_site"),
        "candidates": overlay.get("candidates"),
    }
    if "selection_policy" in overlay:
        payload["selection_policy"] = overlay["selection_policy"]
    return payload


def canonical_digest(overlay: dict[str, Any]) -> str:
    """Lowercase hex digest; raises rfc8785's errors for values it cannot encode."""
    return hashlib.sha256(rfc8785.dumps(semantic_payload(overlay))).hexdigest()
