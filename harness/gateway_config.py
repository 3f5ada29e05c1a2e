"""Renders Praxis-format gateway configs for the consumer suites.

Each variant is one gateway configuration the suites need; a variant uses only the config keys of the
features it exercises, so a gateway that lacks an extended feature still starts the core variants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from harness.contract import ScopeSpec

MODEL_HEADER = "X-Model"
SESSION_HEADER = "x-session-id"
SESSION_COOKIE = "agn-session"
RELOAD_DEBOUNCE_MS = 100


@dataclass(frozen=True)
class Variant:
    """One gateway configuration: which intelligent_route keys it sets and which feature gates it."""

    name: str
    feature: str | None = None  # extended feature that must be claimed; None = core
    expected_scope: bool = True
    affinity: str | None = "header"  # "header", "cookie" or None
    ttl_secs: int = 3600
    skip_paths: Sequence[str] | None = None
    management: bool = False
    allowlist: bool = False
    mcp: bool = False
    static: bool = False
    hop: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("core"),
        Variant("legacy", expected_scope=False),
        Variant("short-ttl", ttl_secs=2),
        Variant("cookie", feature="cookieAffinity", affinity="cookie"),
        Variant("skip", feature="skipPaths", skip_paths=("/v1/models", "/internal"), affinity=None),
        Variant("management", feature="managementCluster", skip_paths=("/v1/models", "/internal"),
                management=True, affinity=None),
        Variant("allowlist", feature="clustersAllowlist", allowlist=True),
        Variant("mcp", feature="mcpToolRouting", affinity=None, mcp=True),
        Variant("static", expected_scope=False, static=True, affinity=None),
    )
}


def render_gateway_config(
    variant: Variant,
    *,
    listen: str,
    admin: str,
    overlay_file: str,
    scope: ScopeSpec,
    clusters: Mapping[str, str],
    hop_clusters: Sequence[str],
    management_cluster: str | None,
    allowlist: Sequence[str] = (),
    static_candidates: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The Praxis YAML for one gateway instance."""
    route: dict[str, Any] = {"filter": "intelligent_route", "model_header": MODEL_HEADER}
    if variant.static:
        route["local_site"] = scope.local_site
        route["candidates"] = [dict(c) for c in static_candidates]
    else:
        route["overlay_file"] = overlay_file
        route["reload"] = {"enabled": True, "debounce_ms": RELOAD_DEBOUNCE_MS}
        if variant.expected_scope:
            route["expected_overlay_scope"] = scope.as_dict()
    if variant.affinity == "header":
        route["session_affinity"] = {"enabled": True, "header": SESSION_HEADER, "ttl_secs": variant.ttl_secs}
    elif variant.affinity == "cookie":
        route["session_affinity"] = {"enabled": True, "cookie": SESSION_COOKIE, "ttl_secs": variant.ttl_secs}
    if variant.skip_paths is not None:
        route["skip_paths"] = list(variant.skip_paths)
    if variant.management and management_cluster:
        route["management_cluster"] = management_cluster
    if variant.allowlist:
        route["clusters"] = list(allowlist)
    if variant.hop and hop_clusters:
        route["provider_hop_clusters"] = list(hop_clusters)
    route.update(variant.extra)
    filters: list[dict[str, Any]] = []
    if variant.mcp:
        filters.append({"filter": "mcp"})
    filters.append({"filter": "json_body_field", "field": "model", "header": MODEL_HEADER})
    filters.append(route)
    filters.append({
        "filter": "load_balancer",
        "clusters": [{"name": name, "endpoints": [endpoint]} for name, endpoint in clusters.items()],
    })
    config = {
        "listeners": [{"name": "consumer", "address": listen, "filter_chains": ["consumer-chain"]}],
        "filter_chains": [{"name": "consumer-chain", "filters": filters}],
        "admin": {"address": admin},
        "shutdown_timeout_secs": 5,
        "insecure_options": {"allow_private_endpoints": True},
    }
    return yaml.safe_dump(config, sort_keys=False)
