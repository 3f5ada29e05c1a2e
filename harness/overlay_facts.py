"""Finding an operator's overlay ConfigMap by what the spec says about it, not by its name.

The spec names the ConfigMap's data keys (`routing-overlay.json`, `routing-config.json`) and the envelope's
scope, never the ConfigMap's name. The harness first looks where the descriptor (or, by default, the rule the
reference and the public operator share) says; an operator that names it otherwise is still found: the
ConfigMap whose overlay key holds an envelope scoped to the network and gateway reference asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["holds_overlay_of", "pick_by_facts"]


def holds_overlay_of(configmap: Mapping[str, Any], key: str, network: str, gateway: str) -> bool:
    """Whether `configmap`'s data under `key` is an envelope scoped to `network` and gateway `gateway`."""
    data = configmap.get("data")
    if not isinstance(data, Mapping) or not isinstance(data.get(key), str):
        return False
    try:
        envelope = json.loads(data[key])
    except ValueError:
        return False
    scope = envelope.get("scope") if isinstance(envelope, Mapping) else None
    return isinstance(scope, Mapping) and scope.get("network") == network and scope.get("gateway") == gateway


def pick_by_facts(configmaps: Iterable[Mapping[str, Any]], key: str, network: str, gateway: str) -> str | None:
    """The name of the one ConfigMap among `configmaps` holding the overlay of (`network`, `gateway`); None
    when none does, or when several do (which one serves would be a guess)."""
    names = sorted({str((c.get("metadata") or {}).get("name")) for c in configmaps
                    if holds_overlay_of(c, key, network, gateway)})
    return names[0] if len(names) == 1 else None
