"""Provider scores: one signal per network strategy, neutral values where telemetry is missing.

A score only orders providers; it never becomes a traffic weight and never splits a selection group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NEUTRAL = 0.5


@dataclass(frozen=True)
class Signals:
    """Normalised provider signals in [0, 1]; `None` means no usable value was observed."""

    queue_depth: float | None = None
    kv_cache_utilization: float | None = None
    healthy: bool = True


def finite(value: float | None) -> float | None:
    """Drop NaN and infinities: they are treated exactly like an absent sample."""
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def clamp_ratio(value: float) -> float:
    return min(1.0, max(0.0, value))


def normalise_queue(raw: float | None, queue_capacity: int | None) -> float | None:
    """Raw queue counts divided by queueCapacity when configured, always clamped to [0, 1]."""
    value = finite(raw)
    if value is None:
        return None
    if queue_capacity:
        value = value / queue_capacity
    return clamp_ratio(value)


def normalise_ratio(raw: float | None) -> float | None:
    value = finite(raw)
    return None if value is None else clamp_ratio(value)


def score(strategy: str, signals: Signals | None) -> float:
    """noMetrics scores 0 for everyone; the others prefer the less pressured provider."""
    if strategy == "noMetrics":
        return 0.0
    if strategy == "queueDepth":
        value = signals.queue_depth if signals else None
    elif strategy == "kvCachePressure":
        value = signals.kv_cache_utilization if signals else None
    else:
        raise ValueError(f"unknown scoring strategy {strategy!r}")
    return 1.0 - (NEUTRAL if value is None else value)


def pressure(strategy: str, signals: Signals | None) -> float:
    """The normalised pressure of the scoring strategy's signal, 0 when it has none (noMetrics, no sample)."""
    if strategy == "queueDepth" and signals is not None and signals.queue_depth is not None:
        return signals.queue_depth
    if strategy == "kvCachePressure" and signals is not None and signals.kv_cache_utilization is not None:
        return signals.kv_cache_utilization
    return 0.0


def dynamic_weight(capacity_weight: int, pressure_value: float) -> int:
    """Experimental pressure-driven weight (routing guide 7): available capacity = configured capacity *
    (1 - normalised pressure), as a traffic_weight in the overlay's 1-1000 range."""
    return max(1, min(1000, round(capacity_weight * (1.0 - min(1.0, max(0.0, pressure_value))))))
