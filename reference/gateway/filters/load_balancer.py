"""load_balancer: resolve the cluster an earlier filter chose to an endpoint group.

Clusters are declared inline. Each request that reaches this filter with ``ctx.cluster`` set to one of
its clusters gets that cluster as its upstream; the proxy then picks an endpoint round robin.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from reference.gateway.context import Reject, RequestContext
from reference.gateway.schema import (
    ConfigError,
    address,
    integer,
    item,
    key,
    mapping,
    sequence,
    string,
)
from reference.gateway.tls import ClusterTls, parse_cluster_tls

TYPE = "load_balancer"
MAX_CLUSTERS = 1024
MAX_ENDPOINTS = 256
DEFAULT_CONNECT_MS = 5_000
DEFAULT_READ_MS = 300_000
DEFAULT_WRITE_MS = 300_000
DEFAULT_IDLE_MS = 30_000
MAX_TIMEOUT_MS = 3_600_000
STRATEGIES = ("round_robin",)
_TIMEOUT_KEYS = (
    "connection_timeout_ms",
    "read_timeout_ms",
    "write_timeout_ms",
    "idle_timeout_ms",
    "total_connection_timeout_ms",
)


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    endpoints: tuple[str, ...]
    connection_timeout_ms: int = DEFAULT_CONNECT_MS
    read_timeout_ms: int = DEFAULT_READ_MS
    write_timeout_ms: int = DEFAULT_WRITE_MS
    idle_timeout_ms: int = DEFAULT_IDLE_MS
    total_connection_timeout_ms: int | None = None
    tls: ClusterTls | None = None

    @property
    def ip_endpoints(self) -> tuple[str, ...]:
        """Endpoints given as IP literals (TLS to them needs an explicit sni for name verification)."""
        out = []
        for endpoint in self.endpoints:
            try:
                ipaddress.ip_address(endpoint.rpartition(":")[0].strip("[]"))
            except ValueError:
                continue
            out.append(endpoint)
        return tuple(out)

    @property
    def private_endpoints(self) -> tuple[str, ...]:
        """Endpoints on loopback, private or link-local addresses (names are not resolved)."""
        out = []
        for endpoint in self.endpoints:
            host = endpoint.rpartition(":")[0].strip("[]")
            try:
                ip = ipaddress.ip_address(host)
            except ValueError:
                if host == "localhost":
                    out.append(endpoint)
                continue
            if ip.is_private or ip.is_loopback or ip.is_link_local:
                out.append(endpoint)
        return tuple(out)


@dataclass(frozen=True)
class LoadBalancerConfig:
    clusters: tuple[ClusterConfig, ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(c.name for c in self.clusters)


def _strategy(raw: Any, path: str) -> str:
    if raw in STRATEGIES:
        return str(raw)
    shown = raw if isinstance(raw, str) else next(iter(raw), raw) if isinstance(raw, dict) and raw else raw
    raise ConfigError(
        path, f"load_balancer_strategy {shown!r} is not supported by this gateway build (round_robin)"
    )


def _parse_cluster(raw: Any, path: str) -> ClusterConfig:
    mapping(
        raw,
        path,
        required=("name", "endpoints"),
        optional=(*_TIMEOUT_KEYS, "load_balancer_strategy", "tls"),
    )
    tls = parse_cluster_tls(raw["tls"], key(path, "tls")) if "tls" in raw else None
    if "load_balancer_strategy" in raw:
        _strategy(raw["load_balancer_strategy"], key(path, "load_balancer_strategy"))
    endpoints: list[str] = []
    endpoints_path = key(path, "endpoints")
    for index, entry in enumerate(sequence(raw["endpoints"], endpoints_path, max_items=MAX_ENDPOINTS)):
        where = item(endpoints_path, index)
        host, port = address(entry, where)
        if port == 0:
            raise ConfigError(where, "endpoint port must be 1..65535")
        endpoints.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    timeouts = {
        name: integer(raw[name], key(path, name), 1, MAX_TIMEOUT_MS) for name in _TIMEOUT_KEYS if name in raw
    }
    return ClusterConfig(
        name=string(raw["name"], key(path, "name")), endpoints=tuple(endpoints), tls=tls, **timeouts
    )


def parse(raw: dict[str, Any], path: str) -> LoadBalancerConfig:
    mapping(raw, path, required=("filter", "clusters"))
    clusters_path = key(path, "clusters")
    clusters: list[ClusterConfig] = []
    seen: set[str] = set()
    for index, entry in enumerate(
        sequence(raw["clusters"], clusters_path, max_items=MAX_CLUSTERS, min_items=1)
    ):
        cluster = _parse_cluster(entry, item(clusters_path, index))
        if cluster.name in seen:
            raise ConfigError(key(item(clusters_path, index), "name"), f"duplicate cluster {cluster.name!r}")
        seen.add(cluster.name)
        clusters.append(cluster)
    return LoadBalancerConfig(clusters=tuple(clusters))


class Cluster:
    """A cluster at run time: its endpoints, a round-robin cursor, its timeouts in seconds and, for TLS
    clusters, the client SSLContext and the server name to verify (the configured sni, else the host)."""

    __slots__ = ("name", "endpoints", "connect_timeout", "read_timeout", "idle_timeout", "ssl", "sni", "_next")

    def __init__(self, config: ClusterConfig) -> None:
        self.name = config.name
        self.endpoints = tuple(_split(endpoint) for endpoint in config.endpoints)
        connect_ms = config.connection_timeout_ms
        if config.total_connection_timeout_ms is not None:
            connect_ms = min(connect_ms, config.total_connection_timeout_ms)
        self.connect_timeout = connect_ms / 1000
        self.read_timeout = config.read_timeout_ms / 1000
        self.idle_timeout = config.idle_timeout_ms / 1000
        self.ssl = config.tls.context if config.tls is not None else None
        self.sni = config.tls.sni if config.tls is not None else None
        self._next = 0

    def next_endpoint(self) -> tuple[str, int] | None:
        """The next (host, port) in round-robin order, or None when the cluster has no endpoints."""
        endpoints = self.endpoints
        if not endpoints:
            return None
        index = self._next
        self._next = (index + 1) % len(endpoints)
        return endpoints[index]


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


class LoadBalancerFilter:
    needs_body = False

    def __init__(self, config: LoadBalancerConfig) -> None:
        self.clusters = {c.name: Cluster(c) for c in config.clusters}

    def on_request(self, ctx: RequestContext) -> Reject | None:
        if ctx.cluster is not None and ctx.upstream is None:
            cluster = self.clusters.get(ctx.cluster)
            if cluster is not None:
                ctx.upstream = cluster
        return None
