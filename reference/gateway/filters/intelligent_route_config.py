"""The intelligent_route config block: parsing, bounds and the clusters it reports for validation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference.gateway.filters.base import header_name
from reference.gateway.schema import (
    ConfigError,
    boolean,
    integer,
    item,
    key,
    mapping,
    sequence,
    string,
    string_list,
)
from reference.overlay import Overlay, OverlayRejected, parse_static_candidates

TYPE = "intelligent_route"
DEFAULT_MODEL_HEADER = "X-Model"
RESERVED_HEADER_PREFIXES = ("x-praxis-", "x-mcp-")
DEFAULT_SKIP_PATHS = ("/v1/models", "/v1/subscriptions", "/v1/api-keys", "/health")
MAX_SKIP_PATHS = 64
MAX_SKIP_PATH_LEN = 256
MAX_CLUSTERS = 1024
DEFAULT_DEBOUNCE_MS = 500
MAX_DEBOUNCE_MS = 60_000
DEFAULT_TTL_SECS = 3600
MAX_TTL_SECS = 86_400
DEFAULT_MAX_ENTRIES = 10_000
MAX_MAX_ENTRIES = 1_000_000
MAX_PATH_BYTES = 4096
SCOPE_KEYS = ("network", "gateway", "namespace", "local_site")
_BAD_SKIP_CHARS = re.compile(r"[\s?#\x00-\x1f\x7f]")

_KEYS = (
    "local_site",
    "model_header",
    "candidates",
    "overlay_file",
    "reload",
    "session_affinity",
    "skip_paths",
    "management_cluster",
    "clusters",
    "provider_hop_clusters",
    "expected_overlay_scope",
)


@dataclass(frozen=True)
class AffinityConfig:
    header: str | None
    cookie: str | None
    ttl_secs: int = DEFAULT_TTL_SECS
    max_entries: int = DEFAULT_MAX_ENTRIES


@dataclass(frozen=True)
class IntelligentRouteConfig:
    model_header: str = DEFAULT_MODEL_HEADER
    local_site: str | None = None
    static: Overlay | None = None
    overlay_file: Path | None = None
    reload_enabled: bool = False
    debounce_ms: int = DEFAULT_DEBOUNCE_MS
    affinity: AffinityConfig | None = None
    skip_paths: tuple[str, ...] = DEFAULT_SKIP_PATHS
    management_cluster: str | None = None
    clusters: tuple[str, ...] | None = None
    provider_hop_clusters: frozenset[str] = frozenset()
    expected_scope: dict[str, str] | None = None
    # (key path, cluster name) pairs the downstream load_balancer must declare
    reported: tuple[tuple[str, str], ...] = field(default=(), compare=False)


def _model_header(raw: Any, path: str) -> str:
    text = header_name(raw, path)
    if text.lower().startswith(RESERVED_HEADER_PREFIXES):
        raise ConfigError(
            path, f"must not use a reserved internal header prefix ({', '.join(RESERVED_HEADER_PREFIXES)})"
        )
    return text


def _skip_paths(raw: Any, path: str) -> tuple[str, ...]:
    out: list[str] = []
    for index, entry in enumerate(sequence(raw, path, max_items=MAX_SKIP_PATHS)):
        where = item(path, index)
        text = string(entry, where, max_len=MAX_SKIP_PATH_LEN)
        if not text.startswith("/"):
            raise ConfigError(where, "must start with '/'")
        if _BAD_SKIP_CHARS.search(text):
            raise ConfigError(where, "must not contain whitespace, control characters, '?' or '#'")
        text = text.rstrip("/")
        if text not in out:
            out.append(text)
    return tuple(out)


def _reload(raw: Any, path: str) -> tuple[bool, int]:
    mapping(raw, path, optional=("enabled", "debounce_ms"))
    enabled = boolean(raw.get("enabled", True), key(path, "enabled"))
    debounce = integer(
        raw.get("debounce_ms", DEFAULT_DEBOUNCE_MS), key(path, "debounce_ms"), 0, MAX_DEBOUNCE_MS
    )
    return enabled, debounce


def _affinity(raw: Any, path: str) -> AffinityConfig | None:
    mapping(raw, path, optional=("enabled", "header", "cookie", "ttl_secs", "max_entries"))
    enabled = boolean(raw.get("enabled", False), key(path, "enabled"))
    header = header_name(raw["header"], key(path, "header")) if raw.get("header") is not None else None
    cookie = header_name(raw["cookie"], key(path, "cookie")) if raw.get("cookie") is not None else None
    ttl = integer(raw.get("ttl_secs", DEFAULT_TTL_SECS), key(path, "ttl_secs"), 1, MAX_TTL_SECS)
    max_entries = integer(
        raw.get("max_entries", DEFAULT_MAX_ENTRIES), key(path, "max_entries"), 1, MAX_MAX_ENTRIES
    )
    if not enabled:
        return None
    if header is None and cookie is None:
        raise ConfigError(path, "session_affinity requires at least one of header or cookie")
    return AffinityConfig(header=header, cookie=cookie, ttl_secs=ttl, max_entries=max_entries)


def _scope(raw: Any, path: str) -> dict[str, str]:
    mapping(raw, path, optional=SCOPE_KEYS)
    if not raw:
        raise ConfigError(path, f"must set at least one of {', '.join(SCOPE_KEYS)}")
    return {name: string(raw[name], key(path, name)) for name in SCOPE_KEYS if name in raw}


def _static(raw: Any, path: str, local_site: str, clusters: tuple[str, ...] | None) -> Overlay:
    try:
        return parse_static_candidates(raw, local_site, clusters)
    except OverlayRejected as exc:
        detail = exc.detail
        if detail.startswith("candidates["):
            where, _, rest = detail.partition(" ")
            where = where.rstrip(":")
            raise ConfigError(f"{path[: -len('.candidates')]}.{where}", f"{rest} ({exc.reason})") from None
        raise ConfigError(path, f"{detail} ({exc.reason})") from None


def parse(raw: dict[str, Any], path: str) -> IntelligentRouteConfig:
    """Parse and cross-check one intelligent_route block (static candidates are validated here)."""
    mapping(raw, path, required=("filter",), optional=_KEYS)
    has_candidates = "candidates" in raw
    has_file = "overlay_file" in raw
    if has_candidates and has_file:
        raise ConfigError(path, "cannot set both overlay_file and candidates")
    if not has_candidates and not has_file:
        raise ConfigError(path, "either overlay_file or candidates must be set")

    model_header = _model_header(raw.get("model_header", DEFAULT_MODEL_HEADER), key(path, "model_header"))
    local_site = string(raw["local_site"], key(path, "local_site")) if "local_site" in raw else None
    skip_paths = (
        _skip_paths(raw["skip_paths"], key(path, "skip_paths")) if "skip_paths" in raw else DEFAULT_SKIP_PATHS
    )
    reported: list[tuple[str, str]] = []
    management = None
    if "management_cluster" in raw:
        management = string(raw["management_cluster"], key(path, "management_cluster"))
        if not skip_paths:
            raise ConfigError(key(path, "management_cluster"), "requires a non-empty skip_paths")
    clusters = None
    if "clusters" in raw:
        clusters = tuple(string_list(raw["clusters"], key(path, "clusters"), max_items=MAX_CLUSTERS))
        if not clusters:
            raise ConfigError(key(path, "clusters"), "must list at least one cluster")
        reported += [(item(key(path, "clusters"), i), name) for i, name in enumerate(clusters)]
    hop: list[str] = []
    if "provider_hop_clusters" in raw:
        hop = string_list(
            raw["provider_hop_clusters"], key(path, "provider_hop_clusters"), max_items=MAX_CLUSTERS
        )

    static = None
    overlay_file = None
    reload_enabled, debounce = False, DEFAULT_DEBOUNCE_MS
    expected_scope = None
    if has_candidates:
        if local_site is None:
            raise ConfigError(key(path, "local_site"), "is required when candidates is set")
        if "reload" in raw:
            raise ConfigError(key(path, "reload"), "is not valid with static candidates")
        if "expected_overlay_scope" in raw:
            raise ConfigError(key(path, "expected_overlay_scope"), "requires overlay_file mode")
        static = _static(raw["candidates"], key(path, "candidates"), local_site, clusters)
        if clusters is None:
            reported += [
                (f"{key(path, 'candidates')}[{i}].cluster", c.cluster)
                for i, c in enumerate(static.candidates)
            ]
    else:
        overlay_file = Path(string(raw["overlay_file"], key(path, "overlay_file"), max_len=MAX_PATH_BYTES))
        reload_enabled, debounce = _reload(raw.get("reload", {}), key(path, "reload"))
        if "expected_overlay_scope" in raw:
            expected_scope = _scope(raw["expected_overlay_scope"], key(path, "expected_overlay_scope"))
    if management is not None:
        reported.append((key(path, "management_cluster"), management))
    reported += [(item(key(path, "provider_hop_clusters"), i), name) for i, name in enumerate(hop)]
    affinity = (
        _affinity(raw["session_affinity"], key(path, "session_affinity"))
        if "session_affinity" in raw
        else None
    )
    return IntelligentRouteConfig(
        model_header=model_header,
        local_site=local_site,
        static=static,
        overlay_file=overlay_file,
        reload_enabled=reload_enabled,
        debounce_ms=debounce,
        affinity=affinity,
        skip_paths=skip_paths,
        management_cluster=management,
        clusters=clusters,
        provider_hop_clusters=frozenset(hop),
        expected_scope=expected_scope,
        reported=tuple(reported),
    )
