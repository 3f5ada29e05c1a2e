"""Typed inputs of the rendering core, and converters from Kubernetes-style resource dicts.

The core never reads a cluster or a clock by itself: everything it decides on arrives here, so a
render is reproducible from its inputs alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

ROUTING_POLICIES = ("geographyFirst", "scoreFirst")
SCORING_STRATEGIES = ("noMetrics", "queueDepth", "kvCachePressure")
SELECTION_MODES = ("deterministic", "roundRobin", "random", "weightedRandom")
#: static copies capacityWeight; dynamic (experimental, routing guide 7) scales it by the pressure not yet used
PLACEMENT_STRATEGIES = ("static", "dynamic")


class ResourceError(ValueError):
    """A resource the core cannot use; the message names the offending key."""


class Clock(Protocol):
    """Time as the core sees it: monotonic seconds for durations, wall time for provenance."""

    def now(self) -> float: ...

    def wall(self) -> datetime: ...


@dataclass
class FixedClock:
    """A clock that only moves when told to; what tests and offline renders use."""

    seconds: float = 0.0
    wall_time: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))

    def now(self) -> float:
        return self.seconds

    def wall(self) -> datetime:
        return self.wall_time

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


class SystemClock:
    """The process clock, for the running operator."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True)
class ClusterEndpoint:
    """Where a generated consumer config reaches one candidate cluster (`host:port`, plaintext or TLS)."""

    cluster: str
    address: str
    mode: str = "plaintext"
    sni: str | None = None


@dataclass(frozen=True)
class ConsumerConfigSpec:
    """`gatewayRefs[].consumerConfig` when enabled: the consumer Praxis config the operator generates."""

    config_map_name: str = "praxis-consumer-config"
    listener_port: int = 8080
    credential_mount_base: str = "/run/secrets/grid-credentials"
    tls_cert_mount_path: str = "/etc/praxis/tls"
    cluster_endpoints: tuple[ClusterEndpoint, ...] = ()


@dataclass(frozen=True)
class GatewayRef:
    name: str
    namespace: str
    local_site: str
    consumer_config: ConsumerConfigSpec | None = None


@dataclass(frozen=True)
class GridNetworkSpec:
    name: str
    uid: str = ""
    generation: int = 1
    routing_policy: str = "geographyFirst"
    scoring_strategy: str = "noMetrics"
    selection_mode: str | None = None
    placement_static: bool = False
    #: experimental pressure-driven weights (routing guide 7): placementPolicy.strategy dynamic
    placement_dynamic: bool = False
    admission_policy: Mapping[str, Any] | None = None
    stale_candidate_ttl_seconds: int | None = None
    gateway_refs: tuple[GatewayRef, ...] = ()


@dataclass(frozen=True)
class GridSiteSpec:
    name: str
    network: str
    region: str | None = None
    zone: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    phase: str | None = None


@dataclass(frozen=True)
class CredentialRef:
    """Where a token lives; the value itself never enters the core."""

    strategy: str
    name: str
    namespace: str
    key: str


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    network: str
    models: tuple[str, ...] = ()
    uid: str = ""
    routing_cluster_ref: str | None = None
    site_selector: Mapping[str, str] = field(default_factory=dict)
    access_selector: Mapping[str, str] = field(default_factory=dict)
    capacity_weight: int = 1
    credential: CredentialRef | None = None
    signal_names: Mapping[str, str] = field(default_factory=dict)
    queue_capacity: int | None = None
    phase: str | None = None
    site: str | None = None

    @property
    def cluster(self) -> str:
        """`spec.clusterName`: the Praxis upstream cluster that reaches the provider."""
        return self.routing_cluster_ref or self.name


@dataclass(frozen=True)
class ToolProviderSpec:
    name: str
    network: str
    tools: tuple[str, ...] = ()
    discovered_tools: tuple[str, ...] = ()
    routing_cluster_ref: str | None = None
    site_selector: Mapping[str, str] = field(default_factory=dict)
    access_selector: Mapping[str, str] = field(default_factory=dict)
    phase: str | None = None
    site: str | None = None
    endpoint: str | None = None  # the MCP server tool discovery probes

    @property
    def cluster(self) -> str:
        return self.routing_cluster_ref or self.name


@dataclass(frozen=True)
class MetricSample:
    """One accepted scrape of a provider, keyed by provider name.

    Values are raw (queue depth before queueCapacity normalisation); non-finite values are treated as
    absent. `revision` identifies the scrape so a reused sample is never counted twice; `expires_at`
    (clock seconds) marks when a cached sample stops being usable.
    """

    provider: str
    revision: int
    observed_at: float = 0.0
    queue_depth: float | None = None
    kv_cache_utilization: float | None = None
    healthy: bool = True
    expires_at: float | None = None


@dataclass(frozen=True)
class RemoteProviderRecord:
    """A provider another site announced through replicated state."""

    network: str
    site: str
    name: str
    cluster: str
    kind: str = "inference_model"
    models: tuple[str, ...] = ()
    phase: str = "Available"
    age_secs: int = 0
    queue_depth: float | None = None
    kv_cache_utilization: float | None = None
    healthy: bool = True
    capacity_weight: int = 1


@dataclass(frozen=True)
class Resources:
    networks: tuple[GridNetworkSpec, ...] = ()
    providers: tuple[ProviderSpec, ...] = ()
    sites: tuple[GridSiteSpec, ...] = ()
    tool_providers: tuple[ToolProviderSpec, ...] = ()

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> Resources:
        """Sort Kubernetes-style objects by kind; unknown kinds are an error naming the kind."""
        parsers = {
            "GridNetwork": network_from_resource,
            "InferenceProvider": provider_from_resource,
            "GridSite": site_from_resource,
            "AgentToolProvider": tool_provider_from_resource,
        }
        buckets: dict[str, list[Any]] = {kind: [] for kind in parsers}
        for obj in objects:
            kind = obj.get("kind")
            if kind not in parsers:
                raise ResourceError(f"kind: unsupported resource kind {kind!r}")
            buckets[str(kind)].append(parsers[str(kind)](obj))
        return cls(
            networks=tuple(buckets["GridNetwork"]),
            providers=tuple(buckets["InferenceProvider"]),
            sites=tuple(buckets["GridSite"]),
            tool_providers=tuple(buckets["AgentToolProvider"]),
        )


# --- converters ---------------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], path: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node or node[part] is None:
            return default
        node = node[part]
    if not isinstance(node, kind) or (isinstance(node, bool) and bool not in _as_tuple(kind)):
        raise ResourceError(f"{path}: expected {_names(kind)}, got {type(node).__name__}")
    return node


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _as_tuple(kind))


def _required(obj: Mapping[str, Any], path: str) -> str:
    value = _get(obj, path, str)
    if not value or not value.strip():
        raise ResourceError(f"{path}: required")
    return str(value)


def _labels(obj: Mapping[str, Any], path: str) -> dict[str, str]:
    raw = _get(obj, path, dict, {})
    return {str(k): str(v) for k, v in raw.items()}


def _consumer_config(ref: Mapping[str, Any], where: str) -> ConsumerConfigSpec | None:
    """The enabled consumer config of one gateway reference (None when absent or disabled)."""
    if not _get(ref, "consumerConfig.enabled", bool, False):
        return None
    defaults = ConsumerConfigSpec()
    endpoints = []
    for index, raw in enumerate(_get(ref, "consumerConfig.clusterEndpoints", list, [])):
        if not isinstance(raw, Mapping):
            raise ResourceError(f"{where}.clusterEndpoints[{index}]: expected an object")
        endpoints.append(ClusterEndpoint(
            cluster=_required(raw, "cluster"),
            address=_required(raw, "address"),
            mode=_get(raw, "transport.mode", str, "plaintext"),
            sni=_get(raw, "transport.sni", str),
        ))
    return ConsumerConfigSpec(
        config_map_name=_get(ref, "consumerConfig.configMapName", str, defaults.config_map_name),
        listener_port=_get(ref, "consumerConfig.listenerPort", int, defaults.listener_port),
        credential_mount_base=_get(ref, "consumerConfig.credentialMountBase", str, defaults.credential_mount_base),
        tls_cert_mount_path=_get(ref, "consumerConfig.tlsCertMountPath", str, defaults.tls_cert_mount_path),
        cluster_endpoints=tuple(endpoints),
    )


def network_from_resource(obj: Mapping[str, Any]) -> GridNetworkSpec:
    name = _required(obj, "metadata.name")
    routing = _get(obj, "spec.routingPolicy", str, "geographyFirst")
    if routing not in ROUTING_POLICIES:
        raise ResourceError(f"spec.routingPolicy: must be one of {list(ROUTING_POLICIES)}")
    scoring = _get(obj, "spec.scoringPolicy", dict)
    strategy = "noMetrics"
    if scoring is not None:
        strategy = _get(obj, "spec.scoringPolicy.strategy", str)
        if strategy not in SCORING_STRATEGIES:
            raise ResourceError(f"spec.scoringPolicy.strategy: must be one of {list(SCORING_STRATEGIES)}")
    mode = _get(obj, "spec.selectionPolicy.mode", str)
    if mode is not None and mode not in SELECTION_MODES:
        raise ResourceError(f"spec.selectionPolicy.mode: must be one of {list(SELECTION_MODES)}")
    placement = _get(obj, "spec.placementPolicy.strategy", str)
    if placement is not None and placement not in PLACEMENT_STRATEGIES:
        raise ResourceError(f"spec.placementPolicy.strategy: must be one of {list(PLACEMENT_STRATEGIES)}")
    ttl = _get(obj, "spec.staleCandidateTtlSeconds", int)
    refs = []
    for index, ref in enumerate(_get(obj, "spec.gatewayRefs", list, [])):
        if not isinstance(ref, Mapping):
            raise ResourceError(f"spec.gatewayRefs[{index}]: expected an object")
        gateway = _required(ref, "name")
        refs.append(
            GatewayRef(
                name=gateway,
                namespace=_get(ref, "namespace", str, "default"),
                local_site=_get(ref, "localSiteName", str) or name,
                consumer_config=_consumer_config(ref, f"spec.gatewayRefs[{index}].consumerConfig"),
            )
        )
    generation = _get(obj, "metadata.generation", int, 1)
    return GridNetworkSpec(
        name=name,
        uid=_get(obj, "metadata.uid", str, ""),
        generation=max(1, generation),
        routing_policy=routing,
        scoring_strategy=strategy,
        selection_mode=mode,
        placement_static=placement == "static",
        placement_dynamic=placement == "dynamic",
        admission_policy=_get(obj, "spec.admissionPolicy", dict),
        stale_candidate_ttl_seconds=ttl if ttl else None,
        gateway_refs=tuple(refs),
    )


def site_from_resource(obj: Mapping[str, Any]) -> GridSiteSpec:
    return GridSiteSpec(
        name=_required(obj, "metadata.name"),
        network=_required(obj, "spec.gridNetworkRef"),
        region=_get(obj, "spec.region", str) or None,
        zone=_get(obj, "spec.zone", str) or None,
        labels=_labels(obj, "metadata.labels"),
        phase=_get(obj, "status.phase", str),
    )


def _credential(obj: Mapping[str, Any]) -> CredentialRef | None:
    auth = _get(obj, "spec.auth", dict)
    if auth is None or _get(obj, "spec.auth.secretRef", dict) is None:
        return None
    strategy = _get(obj, "spec.auth.strategy", str, "bearer_token")
    return CredentialRef(
        strategy=strategy,
        name=_required(obj, "spec.auth.secretRef.name"),
        namespace=_get(obj, "spec.auth.secretRef.namespace", str, "grid-system"),
        key=_get(obj, "spec.auth.secretRef.key", str, "token"),
    )


def provider_from_resource(obj: Mapping[str, Any]) -> ProviderSpec:
    models = []
    for index, model in enumerate(_get(obj, "spec.models", list, [])):
        if not isinstance(model, Mapping) or not isinstance(model.get("name"), str):
            raise ResourceError(f"spec.models[{index}].name: required")
        models.append(model["name"])
    weight = _get(obj, "spec.capacityWeight", int, 1)
    if not 1 <= weight <= 1000:
        raise ResourceError("spec.capacityWeight: must be 1..1000")
    return ProviderSpec(
        name=_required(obj, "metadata.name"),
        network=_required(obj, "spec.gridNetworkRef"),
        models=tuple(models),
        uid=_get(obj, "metadata.uid", str, ""),
        routing_cluster_ref=_get(obj, "spec.clusterName", str) or _get(obj, "spec.routingClusterRef", str),
        site_selector=_labels(obj, "spec.siteSelector.matchLabels"),
        access_selector=_labels(obj, "spec.accessPolicy.siteSelector.matchLabels"),
        site=_get(obj, "spec.site", str),
        capacity_weight=weight,
        credential=_credential(obj),
        signal_names=_labels(obj, "spec.metricsConfig.signalNames"),
        queue_capacity=_get(obj, "spec.metricsConfig.queueCapacity", int),
        phase=_get(obj, "status.phase", str),
    )


def _tool_names(raw: list[Any], path: str) -> tuple[str, ...]:
    names = []
    for index, item in enumerate(raw):
        name = item.get("name") if isinstance(item, Mapping) else item
        if not isinstance(name, str) or not name.strip():
            raise ResourceError(f"{path}[{index}]: expected a tool name")
        names.append(name)
    return tuple(names)


def tool_provider_from_resource(obj: Mapping[str, Any]) -> ToolProviderSpec:
    return ToolProviderSpec(
        name=_required(obj, "metadata.name"),
        network=_required(obj, "spec.gridNetworkRef"),
        tools=_tool_names(_get(obj, "spec.tools", list, []), "spec.tools"),
        discovered_tools=_tool_names(_get(obj, "status.discoveredTools", list, []), "status.discoveredTools"),
        routing_cluster_ref=_get(obj, "spec.clusterName", str) or _get(obj, "spec.routingClusterRef", str),
        site_selector=_labels(obj, "spec.siteSelector.matchLabels"),
        access_selector=_labels(obj, "spec.accessPolicy.siteSelector.matchLabels"),
        site=_get(obj, "spec.site", str),
        phase=_get(obj, "status.phase", str),
        endpoint=_get(obj, "spec.endpoint", str),
    )
