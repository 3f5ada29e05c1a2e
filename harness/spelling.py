"""Field spellings the spec gives twice, written the way the implementation under test reads them.

provider-scoring's prose (and the newest public operator) writes a provider's metrics URL as
`metricsConfig.endpoint`; the routing guide's examples (and the older public snapshot) write
`metricsConfig.metricsEndpoint`. The harness builds resources with the prose spelling; a descriptor whose
operator reads the other says so (`operator.metrics_endpoint_key`), and each InferenceProvider is written
with that spelling alone: never both, since newer public code refuses an object that sets an old and a new
name together.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["METRICS_ENDPOINT_KEYS", "spelled"]

#: The spellings of a provider's metrics URL inside metricsConfig: the prose's first (the default).
METRICS_ENDPOINT_KEYS: tuple[str, ...] = ("endpoint", "metricsEndpoint")


def spelled(obj: Mapping[str, Any], metrics_endpoint_key: str = "endpoint") -> dict[str, Any]:
    """`obj` as the implementation reads it: an InferenceProvider's metricsConfig URL under
    `metrics_endpoint_key`; anything else as it is."""
    if metrics_endpoint_key not in METRICS_ENDPOINT_KEYS:
        raise ValueError(f"unknown metrics endpoint spelling {metrics_endpoint_key!r} "
                         f"(known: {', '.join(METRICS_ENDPOINT_KEYS)})")
    metrics = (obj.get("spec") or {}).get("metricsConfig") if obj.get("kind") == "InferenceProvider" else None
    if not isinstance(metrics, Mapping) or metrics_endpoint_key == "endpoint" or "endpoint" not in metrics:
        return dict(obj)
    out = copy.deepcopy(dict(obj))
    config = out["spec"]["metricsConfig"]
    config[metrics_endpoint_key] = config.pop("endpoint")
    return out
