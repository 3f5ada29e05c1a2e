"""Turn a validated config into live filters and pipelines.

Filters are built once per filter chain and shared by every listener that runs the chain, so one
overlay file has one watcher, one serving snapshot and one session table. Building an overlay-mode
intelligent_route performs the cold-start read: an unreadable or invalid overlay fails startup.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from reference.gateway.config import ChainConfig, FilterSpec, GatewayConfig, declared_after
from reference.gateway.filters.base import Filter
from reference.gateway.filters.credential_inject import CredentialInjectFilter
from reference.gateway.filters.grid_site_route import GridSiteRouteFilter, build_site_route
from reference.gateway.filters.intelligent_route import IntelligentRouteFilter
from reference.gateway.filters.intelligent_route_config import IntelligentRouteConfig
from reference.gateway.filters.json_body_field import JsonBodyFieldFilter
from reference.gateway.filters.load_balancer import LoadBalancerFilter
from reference.gateway.filters.mcp import McpFilter
from reference.gateway.filters.peer_identity_trust import PeerIdentityTrustFilter
from reference.gateway.filters.provider_route import ProviderRouteFilter
from reference.gateway.filters.router import RouterFilter
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.pipeline import Pipeline
from reference.gateway.reload import load_cold_start
from reference.gateway.schema import ConfigError, key
from reference.gateway.selection import make_rng
from reference.gateway.snapshot import Snapshot
from reference.gateway.snapshot_store import build_snapshot
from reference.overlay import OverlayRejected


@dataclass
class Built:
    pipelines: dict[str, Pipeline]
    routes: list[IntelligentRouteFilter] = field(default_factory=list)
    site_routes: list[GridSiteRouteFilter] = field(default_factory=list)
    # filter key path -> the clusters the load_balancers after that filter declare (grid_site_route)
    declared: dict[str, frozenset[str]] = field(default_factory=dict)


def initial_snapshot(config: IntelligentRouteConfig, path: str) -> Snapshot:
    """The snapshot a filter starts with: its static list, or the overlay file read now."""
    if config.static is not None:
        return Snapshot(config.static, "static")
    assert config.overlay_file is not None
    where = key(path, "overlay_file")
    try:
        return load_cold_start(config.overlay_file, config.expected_scope, config.clusters)
    except OSError as exc:
        raise ConfigError(
            where, f"cannot read overlay {str(config.overlay_file)!r}: {exc.strerror or exc}"
        ) from None
    except OverlayRejected as exc:
        raise ConfigError(where, f"overlay rejected ({exc.reason}): {exc.detail}") from None


def build_filter(spec: FilterSpec, metrics: GatewayMetrics, rng: random.Random,
                 declared: frozenset[str] = frozenset()) -> Filter:
    if spec.type == "json_body_field":
        return JsonBodyFieldFilter(spec.options)
    if spec.type == "mcp":
        return McpFilter(spec.options)
    if spec.type == "load_balancer":
        return LoadBalancerFilter(spec.options)
    if spec.type == "peer_identity_trust":
        return PeerIdentityTrustFilter(spec.options)
    if spec.type == "provider_route":
        return ProviderRouteFilter(spec.options)
    if spec.type == "credential_inject":
        return CredentialInjectFilter(spec.options)
    if spec.type == "router":
        return RouterFilter(spec.options)
    if spec.type == "grid_site_route":
        return build_site_route(spec, metrics, random.Random(rng.getrandbits(128)), declared)
    if spec.type == "intelligent_route":
        snapshot = initial_snapshot(spec.options, spec.path)
        return IntelligentRouteFilter(
            spec.options, snapshot, metrics, rng=random.Random(rng.getrandbits(128))
        )
    raise ConfigError(key(spec.path, "filter"), f"unknown filter type {spec.type!r}")


def build(config: GatewayConfig, metrics: GatewayMetrics, rng: random.Random | None = None) -> Built:
    """Build every chain's filters and each listener's pipeline; raises ConfigError."""
    rng = rng or make_rng()
    chains: dict[str, list[Filter]] = {}
    built = Built(pipelines={})
    built.declared = {
        spec.path: declared_after(config, spec)
        for chain in config.chains.values()
        for spec in chain.filters
        if spec.type == "grid_site_route"
    }
    try:
        for chain in config.chains.values():
            chains[chain.name] = _build_chain(chain, metrics, rng, built)
    except BaseException:
        for route in built.routes:
            route.close()
        raise
    observe = metrics.enable_filter_duration() if config.filter_duration else None
    for listener in config.listeners:
        filters = [f for name in listener.chains for f in chains[name]]
        types = [spec.type for name in listener.chains for spec in config.chains[name].filters]
        built.pipelines[listener.name] = Pipeline(listener.name, filters, types, observe)
    return built


def _build_chain(
    chain: ChainConfig, metrics: GatewayMetrics, rng: random.Random, built: Built
) -> list[Filter]:
    out: list[Filter] = []
    for spec in chain.filters:
        instance = build_filter(spec, metrics, rng, built.declared.get(spec.path, frozenset()))
        if isinstance(instance, IntelligentRouteFilter):
            built.routes.append(instance)
        elif isinstance(instance, GridSiteRouteFilter):
            built.site_routes.append(instance)
        out.append(instance)
    return out


__all__ = ["Built", "build", "build_filter", "build_snapshot", "initial_snapshot"]
