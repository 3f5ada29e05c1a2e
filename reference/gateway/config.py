"""praxis.yaml: the public Praxis config format, read strictly.

Unknown keys are errors at every level; every error names its key path. Beyond per-block checks this
module cross-checks the whole file: listeners reference existing chains, and every cluster an
intelligent_route filter reports is declared by a load_balancer after it in each pipeline it runs in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reference.gateway.filters import (
    credential_inject,
    intelligent_route_config,
    json_body_field,
    load_balancer,
    mcp,
    peer_identity_trust,
    provider_route,
    router,
)
from reference.gateway.filters.intelligent_route_config import IntelligentRouteConfig
from reference.gateway.filters.load_balancer import LoadBalancerConfig
from reference.gateway.filters.provider_route import ProviderRouteConfig
from reference.gateway.schema import (
    ConfigError,
    address,
    boolean,
    integer,
    item,
    key,
    mapping,
    sequence,
    string,
    string_list,
)
from reference.gateway.site_route import settings as grid_site_route
from reference.gateway.tls import ListenerTls, parse_listener_tls

MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: libyaml's safe loader where PyYAML has it (its wheels do): a tenth of the pure-Python loader's cost.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_LISTENERS = 64
MAX_CHAINS = 256
MAX_FILTERS = 64
MAX_SHUTDOWN_SECS = 3600
DEFAULT_SHUTDOWN_SECS = 30
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_BODY_LIMIT = 1 << 40
MAX_THREADS = 1024
INSECURE_OPTIONS = (
    "allow_private_endpoints",
    "allow_root",
    "allow_public_admin",
    "allow_unbounded_body",
    "skip_pipeline_validation",
    "allow_tls_without_sni",
    "allow_private_health_checks",
)
#: The per-check pipeline validation bypasses of insecure_options.skip_pipeline_checks. The reference runs
#: none of these checks, so each is accepted and recorded as `skip_pipeline_checks.<name>`.
PIPELINE_CHECKS = (
    "conditional_security",
    "conflicting_cluster_selectors",
    "duplicate_load_balancers",
    "duplicate_rewrite_filters",
    "duplicate_routers",
    "lb_without_router",
    "misaligned_clusters",
    "unreachable_filters",
)

PARSERS: dict[str, Callable[[dict[str, Any], str], Any]] = {
    json_body_field.TYPE: json_body_field.parse,
    mcp.TYPE: mcp.parse,
    intelligent_route_config.TYPE: intelligent_route_config.parse,
    load_balancer.TYPE: load_balancer.parse,
    peer_identity_trust.TYPE: peer_identity_trust.parse,
    provider_route.TYPE: provider_route.parse,
    credential_inject.TYPE: credential_inject.parse,
    router.TYPE: router.parse,
    grid_site_route.TYPE: grid_site_route.parse,
}


@dataclass(frozen=True)
class FilterSpec:
    type: str
    path: str
    options: Any


@dataclass(frozen=True)
class ChainConfig:
    name: str
    path: str
    filters: tuple[FilterSpec, ...]


@dataclass(frozen=True)
class ListenerConfig:
    name: str
    host: str
    port: int
    chains: tuple[str, ...]
    tls: ListenerTls | None = None


@dataclass(frozen=True)
class GatewayConfig:
    listeners: tuple[ListenerConfig, ...]
    chains: dict[str, ChainConfig]
    admin: tuple[str, int] | None
    shutdown_timeout_secs: int
    allow_private_endpoints: bool
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_response_bytes: int | None = None
    insecure_options: frozenset[str] = frozenset()
    filter_duration: bool = False  # metrics.filter_duration: time each filter into praxis_filter_duration_seconds

    def pipeline(self, listener: ListenerConfig) -> list[FilterSpec]:
        """The filters a listener runs, in order: its chains concatenated."""
        return [spec for name in listener.chains for spec in self.chains[name].filters]


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a config file; raises ConfigError."""
    where = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError("", f"cannot read {where}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError("", f"{where} exceeds {MAX_CONFIG_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("", f"{where} is not UTF-8") from None
    return parse_config_text(text, where)


def parse_config_text(text: str, source: str = "<config>") -> GatewayConfig:
    try:
        raw = yaml.load(text, Loader=_YAML_LOADER)  # a safe loader: plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise ConfigError("", f"{source}: invalid YAML{at}: {' '.join(str(problem).split())}") from None
    if raw is None:
        raise ConfigError("", f"{source} is empty")
    return parse_config(raw)


def parse_config(raw: Any) -> GatewayConfig:
    mapping(
        raw,
        "",
        required=("listeners",),
        optional=(
            "filter_chains",
            "admin",
            "shutdown_timeout_secs",
            "insecure_options",
            "runtime",
            "body_limits",
            "metrics",
        ),
    )
    chains = _chains(raw.get("filter_chains", []))
    listeners = _listeners(raw["listeners"], chains)
    admin = None
    if raw.get("admin") is not None:
        mapping(raw["admin"], "admin", optional=("address", "verbose"))
        if "address" in raw["admin"]:
            admin = address(raw["admin"]["address"], "admin.address")
        if "verbose" in raw["admin"]:
            boolean(raw["admin"]["verbose"], "admin.verbose")
    shutdown = integer(
        raw.get("shutdown_timeout_secs", DEFAULT_SHUTDOWN_SECS), "shutdown_timeout_secs", 0, MAX_SHUTDOWN_SECS
    )
    insecure = _insecure_options(raw.get("insecure_options"))
    if raw.get("runtime") is not None:
        mapping(raw["runtime"], "runtime", optional=("threads", "work_stealing"))
        if "threads" in raw["runtime"]:
            integer(raw["runtime"]["threads"], "runtime.threads", 0, MAX_THREADS)
        if "work_stealing" in raw["runtime"]:
            boolean(raw["runtime"]["work_stealing"], "runtime.work_stealing")
    max_request, max_response = DEFAULT_MAX_REQUEST_BYTES, None
    if raw.get("body_limits") is not None:
        limits = mapping(
            raw["body_limits"], "body_limits", optional=("max_request_bytes", "max_response_bytes")
        )
        if limits.get("max_request_bytes") is not None:
            max_request = integer(
                limits["max_request_bytes"], "body_limits.max_request_bytes", 1, MAX_BODY_LIMIT
            )
        if limits.get("max_response_bytes") is not None:
            max_response = integer(
                limits["max_response_bytes"], "body_limits.max_response_bytes", 1, MAX_BODY_LIMIT
            )
    filter_duration = False
    if raw.get("metrics") is not None:
        mapping(raw["metrics"], "metrics", optional=("filter_duration",))
        if raw["metrics"].get("filter_duration") is not None:
            filter_duration = boolean(raw["metrics"]["filter_duration"], "metrics.filter_duration")
    config = GatewayConfig(
        listeners=listeners,
        chains=chains,
        admin=admin,
        shutdown_timeout_secs=shutdown,
        allow_private_endpoints="allow_private_endpoints" in insecure,
        max_request_bytes=max_request,
        max_response_bytes=max_response,
        insecure_options=insecure,
        filter_duration=filter_duration,
    )
    _check_addresses(config)
    _check_clusters(config)
    _check_cluster_tls(config)
    _check_provider_boundary(config)
    return config


def _insecure_options(raw: Any) -> frozenset[str]:
    """The insecure options switched on. They are accepted for compatibility; only
    allow_private_endpoints changes anything here (it silences the private-endpoint warning)."""
    if raw is None:
        return frozenset()
    mapping(raw, "insecure_options", optional=(*INSECURE_OPTIONS, "skip_pipeline_checks"))
    enabled = {name for name in INSECURE_OPTIONS if boolean(raw.get(name, False), key("insecure_options", name))}
    checks = raw.get("skip_pipeline_checks")
    if checks is not None:
        path = key("insecure_options", "skip_pipeline_checks")
        mapping(checks, path, optional=PIPELINE_CHECKS)
        enabled |= {f"skip_pipeline_checks.{name}" for name in PIPELINE_CHECKS
                    if boolean(checks.get(name, False), key(path, name))}
    return frozenset(enabled)


def _chains(raw: Any) -> dict[str, ChainConfig]:
    chains: dict[str, ChainConfig] = {}
    for index, entry in enumerate(sequence(raw, "filter_chains", max_items=MAX_CHAINS)):
        path = item("filter_chains", index)
        mapping(entry, path, required=("name", "filters"))
        name = string(entry["name"], key(path, "name"))
        if name in chains:
            raise ConfigError(key(path, "name"), f"duplicate filter chain {name!r}")
        filters_path = key(path, "filters")
        specs = tuple(
            _filter(spec, item(filters_path, i))
            for i, spec in enumerate(sequence(entry["filters"], filters_path, max_items=MAX_FILTERS))
        )
        chains[name] = ChainConfig(name=name, path=path, filters=specs)
    return chains


def _filter(raw: Any, path: str) -> FilterSpec:
    if not isinstance(raw, dict):
        raise ConfigError(path, "must be a mapping")
    if "filter" not in raw:
        raise ConfigError(key(path, "filter"), "is required")
    kind = raw["filter"]
    if not isinstance(kind, str) or kind not in PARSERS:
        raise ConfigError(
            key(path, "filter"),
            f"unknown filter type {kind!r} (supported: {', '.join(sorted(PARSERS))})",
        )
    return FilterSpec(type=kind, path=path, options=PARSERS[kind](raw, path))


def _listeners(raw: Any, chains: dict[str, ChainConfig]) -> tuple[ListenerConfig, ...]:
    out: list[ListenerConfig] = []
    names: set[str] = set()
    for index, entry in enumerate(sequence(raw, "listeners", max_items=MAX_LISTENERS, min_items=1)):
        path = item("listeners", index)
        mapping(entry, path, required=("name", "address"), optional=("filter_chains", "tls"))
        name = string(entry["name"], key(path, "name"))
        if name in names:
            raise ConfigError(key(path, "name"), f"duplicate listener {name!r}")
        names.add(name)
        host, port = address(entry["address"], key(path, "address"))
        chain_names = string_list(
            entry.get("filter_chains", []), key(path, "filter_chains"), max_items=MAX_CHAINS
        )
        for i, chain in enumerate(chain_names):
            if chain not in chains:
                raise ConfigError(item(key(path, "filter_chains"), i), f"unknown filter chain {chain!r}")
        tls = parse_listener_tls(entry["tls"], key(path, "tls")) if entry.get("tls") is not None else None
        out.append(ListenerConfig(name=name, host=host, port=port, chains=tuple(chain_names), tls=tls))
    return tuple(out)


def _check_addresses(config: GatewayConfig) -> None:
    seen: dict[tuple[str, int], str] = {}
    bound = [
        (item("listeners", i) + ".address", (lst.host, lst.port)) for i, lst in enumerate(config.listeners)
    ]
    if config.admin is not None:
        bound.append(("admin.address", config.admin))
    for path, addr in bound:
        if addr[1] == 0:
            continue
        if addr in seen:
            raise ConfigError(path, f"address {addr[0]}:{addr[1]} is already used by {seen[addr]}")
        seen[addr] = path


def _pipelines(config: GatewayConfig) -> list[tuple[str, list[FilterSpec]]]:
    """Every pipeline a filter runs in: each listener's, and each chain no listener runs, by itself."""
    pipelines: list[tuple[str, list[FilterSpec]]] = [
        (f"listener {lst.name!r}", config.pipeline(lst)) for lst in config.listeners
    ]
    used = {name for lst in config.listeners for name in lst.chains}
    pipelines += [
        (f"filter chain {c.name!r}", list(c.filters)) for c in config.chains.values() if c.name not in used
    ]
    return pipelines


def declared_after(config: GatewayConfig, spec: FilterSpec) -> frozenset[str]:
    """The clusters the load_balancers after `spec` declare in every pipeline it runs in."""
    found: frozenset[str] | None = None
    for _label, specs in _pipelines(config):
        for position, candidate in enumerate(specs):
            if candidate is not spec:
                continue
            later = [s.options for s in specs[position + 1 :] if isinstance(s.options, LoadBalancerConfig)]
            names = frozenset().union(*(lb.names for lb in later))
            found = names if found is None else found & names
    return found or frozenset()


def _check_clusters(config: GatewayConfig) -> None:
    """Each intelligent_route's reported clusters must be declared by a load_balancer after it; a
    grid_site_route needs one after it too (its candidates are checked when the serving config is read)."""
    routes = (intelligent_route_config.TYPE, provider_route.TYPE, router.TYPE, grid_site_route.TYPE)
    for label, specs in _pipelines(config):
        for position, spec in enumerate(specs):
            if spec.type not in routes:
                continue
            route: (IntelligentRouteConfig | ProviderRouteConfig | router.RouterConfig
                    | grid_site_route.GridSiteRouteConfig) = spec.options
            later = [s.options for s in specs[position + 1 :] if s.type == load_balancer.TYPE]
            if not later:
                raise ConfigError(spec.path, f"{spec.type} needs a load_balancer after it in {label}")
            declared = frozenset().union(*(lb.names for lb in later if isinstance(lb, LoadBalancerConfig)))
            for path, cluster in route.reported:
                if cluster not in declared:
                    raise ConfigError(
                        path,
                        f"cluster {cluster!r} is not declared by a later load_balancer in {label}",
                    )


def _check_cluster_tls(config: GatewayConfig) -> None:
    """Upstream TLS with verification needs a name to verify: an sni, or a DNS-name endpoint."""
    if "allow_tls_without_sni" in config.insecure_options:
        return
    for chain in config.chains.values():
        for spec in chain.filters:
            if not isinstance(spec.options, LoadBalancerConfig):
                continue
            for index, cluster in enumerate(spec.options.clusters):
                tls = cluster.tls
                if tls is None or not tls.verify or tls.sni is not None or not cluster.ip_endpoints:
                    continue
                raise ConfigError(
                    key(item(key(spec.path, "clusters"), index), "tls"),
                    f"upstream tls is not supported without a name to verify: cluster {cluster.name!r} verifies "
                    f"the upstream certificate but has no sni, and endpoint {cluster.ip_endpoints[0]} is an IP "
                    "address; set tls.sni (or insecure_options.allow_tls_without_sni: true)",
                )


def _check_provider_boundary(config: GatewayConfig) -> None:
    """A listener running provider_route must demand client certificates and run an unconditional
    peer_identity_trust as its very first filter. No option relaxes this: the x-ai-routing-* fields
    provider_route trusts are only as good as the peer that sent them."""
    for index, listener in enumerate(config.listeners):
        specs = config.pipeline(listener)
        providers = [i for i, spec in enumerate(specs) if spec.type == provider_route.TYPE]
        if not providers:
            continue
        where = item("listeners", index)
        tls = listener.tls
        if tls is None or tls.client_ca is None or tls.client_cert_mode != "require":
            path = key(where, "tls") if tls is None else key(where, "tls.client_cert_mode")
            raise ConfigError(
                path, f"listener {listener.name!r}: provider_route requires tls.client_cert_mode: require"
            )
        for position in providers:
            peers = [i for i in range(position) if specs[i].type == peer_identity_trust.TYPE]
            if not peers:
                raise ConfigError(
                    key(specs[position].path, "filter"),
                    f"listener {listener.name!r}: provider_route requires a preceding peer_identity_trust",
                )
            if peers[-1] != 0:
                raise ConfigError(
                    key(specs[peers[-1]].path, "filter"),
                    f"listener {listener.name!r}: peer_identity_trust must be the first filter in a provider chain",
                )
