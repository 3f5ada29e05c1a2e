"""The grid_site_route filter block: model header, availability tuning and prefix affinity.

Every key is optional and has a default; unknown keys and out-of-range values are errors naming their
key path (``filter_chains[0].filters[1].availability.smoothing``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from reference.gateway.filters.base import header_name
from reference.gateway.schema import ConfigError, boolean, key, mapping

TYPE = "grid_site_route"
DEFAULT_MODEL_HEADER = "X-Model"
RESERVED_HEADER_PREFIXES = ("x-praxis-", "x-mcp-")
MAX_MS = 86_400_000  # a day
MAX_COUNT = 1_000_000_000.0


@dataclass(frozen=True)
class AvailabilitySettings:
    smoothing: float = 0.3
    ceiling_half_life_ms: int = 600_000
    ceiling_floor: float = 8.0
    explore_floor: float = 0.25
    full_after_ms: int = 5_000
    room_after_ms: int = 2_000
    queue_full: float = 1.0
    shedding: bool = False


@dataclass(frozen=True)
class PrefixSettings:
    enabled: bool = True
    threshold: float = 0.8
    exploration: float = 0.02


@dataclass(frozen=True)
class GridSiteRouteConfig:
    model_header: str = DEFAULT_MODEL_HEADER
    availability: AvailabilitySettings = field(default_factory=AvailabilitySettings)
    # on unless the block turns it off: the filter prefers the site holding a request's prompt with nothing set
    prefix: PrefixSettings | None = field(default_factory=PrefixSettings)
    # (key path, cluster) pairs the downstream load_balancer must declare: none are static here,
    # the candidates come from the serving config and are checked when it is read
    reported: tuple[tuple[str, str], ...] = ()


def number(value: Any, path: str, lo: float, hi: float, *, lo_open: bool = False) -> float:
    """A finite number (int or float, not bool) in [lo, hi], or (lo, hi] with lo_open."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(path, "must be a number")
    below = value <= lo if lo_open else value < lo
    if below or value > hi:
        raise ConfigError(path, f"must be a number in {'(' if lo_open else '['}{lo:g}, {hi:g}]")
    return float(value)


def millis(value: Any, path: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= MAX_MS:
        raise ConfigError(path, f"must be an integer {lo}..{MAX_MS} (milliseconds)")
    return value


def _model_header(raw: Any, path: str) -> str:
    text = header_name(raw, path)
    if text.lower().startswith(RESERVED_HEADER_PREFIXES):
        raise ConfigError(
            path, f"must not use a reserved header prefix ({', '.join(RESERVED_HEADER_PREFIXES)})"
        )
    return text


def parse_availability(raw: Any, path: str) -> AvailabilitySettings:
    mapping(raw, path, optional=tuple(AvailabilitySettings.__dataclass_fields__))
    d = AvailabilitySettings()

    def at(name: str) -> str:
        return key(path, name)

    return AvailabilitySettings(
        smoothing=number(raw.get("smoothing", d.smoothing), at("smoothing"), 0.0, 1.0, lo_open=True),
        ceiling_half_life_ms=millis(raw.get("ceiling_half_life_ms", d.ceiling_half_life_ms),
                                    at("ceiling_half_life_ms"), 1),
        ceiling_floor=number(raw.get("ceiling_floor", d.ceiling_floor), at("ceiling_floor"), 1.0, MAX_COUNT),
        explore_floor=number(raw.get("explore_floor", d.explore_floor), at("explore_floor"), 0.0, 1.0),
        full_after_ms=millis(raw.get("full_after_ms", d.full_after_ms), at("full_after_ms"), 0),
        room_after_ms=millis(raw.get("room_after_ms", d.room_after_ms), at("room_after_ms"), 0),
        queue_full=number(raw.get("queue_full", d.queue_full), at("queue_full"), 0.0, MAX_COUNT),
        shedding=boolean(raw.get("shedding", d.shedding), at("shedding")),
    )


def parse_prefix(raw: Any, path: str) -> PrefixSettings | None:
    mapping(raw, path, optional=tuple(PrefixSettings.__dataclass_fields__))
    d = PrefixSettings()
    enabled = boolean(raw.get("enabled", d.enabled), key(path, "enabled"))
    settings = PrefixSettings(
        enabled=enabled,
        threshold=number(raw.get("threshold", d.threshold), key(path, "threshold"), 0.0, 1.0, lo_open=True),
        exploration=number(raw.get("exploration", d.exploration), key(path, "exploration"), 0.0, 1.0),
    )
    return settings if enabled else None


def parse(raw: dict[str, Any], path: str) -> GridSiteRouteConfig:
    """Parse one grid_site_route block; raises ConfigError naming the offending key."""
    mapping(raw, path, required=("filter",), optional=("model_header", "availability", "prefix_affinity"))
    header = _model_header(raw.get("model_header", DEFAULT_MODEL_HEADER), key(path, "model_header"))
    availability = AvailabilitySettings()
    if raw.get("availability") is not None:
        availability = parse_availability(raw["availability"], key(path, "availability"))
    prefix: PrefixSettings | None = PrefixSettings()
    if raw.get("prefix_affinity") is not None:
        prefix = parse_prefix(raw["prefix_affinity"], key(path, "prefix_affinity"))
    return GridSiteRouteConfig(model_header=header, availability=availability, prefix=prefix)
