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
#: The reload debounce of the configs the harness renders. No test judges debouncing itself (the deadline
#: test runs at the filter's default), so it is short: every overlay a test writes waits it out once.
RELOAD_DEBOUNCE_MS = 20
#: Requests under this path prefix are sent to one cluster by a router ahead of intelligent_route.
PINNED_PREFIX = "/pinned/"


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
    reload_block: bool = True  # False: no `reload` key, so the filter's own default applies
    inject: bool = False  # credential_inject between intelligent_route and load_balancer (a final-hop consumer)
    filter_duration: bool = False  # top-level metrics.filter_duration: the per-filter duration histogram
    pinned: tuple[str, str] | None = None  # (path prefix, cluster) a core `router` sets before intelligent_route
    extra: Mapping[str, Any] = field(default_factory=dict)


def variant_features(variant: Variant) -> dict[str, str]:
    """The extended features a variant's config asks of a gateway, by the keys it renders (harness.feature_use)."""
    keys = {
        "cookieAffinity": variant.affinity == "cookie",
        "skipPaths": variant.skip_paths is not None,
        "managementCluster": variant.management,
        "clustersAllowlist": variant.allowlist,
        "mcpToolRouting": variant.mcp,
        "prometheusMetrics": variant.filter_duration,
        "presetCluster": variant.pinned is not None,
    }
    used = {feature: f"a gateway config of variant {variant.name}" for feature, on in keys.items() if on}
    if variant.feature is not None:
        used.setdefault(variant.feature, f"a gateway config of variant {variant.name}")
    return used


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
        Variant("default-reload", reload_block=False, affinity=None),
        # the final-hop consumer of a direct API provider: no provider hop, the token injected here
        Variant("inject", hop=False, affinity=None, inject=True),
        Variant("filter-duration", feature="prometheusMetrics", affinity=None, filter_duration=True),
        Variant("pinned", feature="presetCluster", affinity=None, pinned=(PINNED_PREFIX, "provider-c")),
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
    hop_tls: Mapping[str, UpstreamTls] | None = None,
    credentials: Sequence[CredentialSource] = (),
    credential_mount_base: str | None = None,
) -> str:
    """The Praxis YAML for one gateway instance.

    `hop_tls` gives clusters (the provider hop clusters) an upstream `tls` block: the CA that signs the
    upstream, the gateway's client certificate and the SNI, so they are reached over mTLS. `credentials`
    are the credential_inject entries of a variant that injects; `credential_mount_base` its
    `projected_credential_mount_base`, where Secrets are mounted as <namespace>/<name>/<key>.
    """
    hop_tls = dict(hop_tls or {})
    missing = sorted(set(hop_tls) - set(clusters))
    if missing:
        raise ValueError(f"hop clusters without an endpoint: {missing}")
    route: dict[str, Any] = {"filter": "intelligent_route", "model_header": MODEL_HEADER}
    if variant.static:
        route["local_site"] = scope.local_site
        route["candidates"] = [dict(c) for c in static_candidates]
    else:
        route["overlay_file"] = overlay_file
        if variant.reload_block:
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
        # The public mcp filter counts a body that is not JSON-RPC as invalid and, by default, rejects it;
        # the variant also serves ordinary chat requests, so it lets those through explicitly.
        filters.append({"filter": "mcp", "on_invalid": "continue"})
    filters.append({"filter": "json_body_field", "field": "model", "header": MODEL_HEADER})
    if variant.pinned is not None:
        filters.append({"filter": "router", "routes": [{"path_prefix": variant.pinned[0],
                                                        "cluster": variant.pinned[1]}]})
    filters.append(route)
    if variant.inject:
        inject: dict[str, Any] = {"filter": "credential_inject", "credentials": [c.as_entry() for c in credentials]}
        if credential_mount_base is not None:
            inject["projected_credential_mount_base"] = credential_mount_base
        filters.append(inject)
    elif credential_mount_base is not None:
        raise ValueError(f"variant {variant.name} has no credential_inject for a projected mount base")
    filters.append({"filter": "load_balancer", "clusters": [_cluster(name, endpoint, hop_tls.get(name))
                                                            for name, endpoint in clusters.items()]})
    config: dict[str, Any] = {
        "listeners": [{"name": "consumer", "address": listen, "filter_chains": ["consumer-chain"]}],
        "filter_chains": [{"name": "consumer-chain", "filters": filters}],
        "admin": {"address": admin},
        "shutdown_timeout_secs": 5,
        "insecure_options": {"allow_private_endpoints": True},
    }
    if variant.pinned is not None:
        # Two cluster-selecting filters (router, intelligent_route) before one load_balancer: the public Praxis
        # pipeline check refuses that chain unless this bypass is set, and a preset cluster needs such a chain.
        config["insecure_options"]["skip_pipeline_checks"] = {"conflicting_cluster_selectors": True}
    if variant.filter_duration:
        config["metrics"] = {"filter_duration": True}
    return yaml.safe_dump(config, sort_keys=False)


def _cluster(name: str, endpoint: str, tls: UpstreamTls | None) -> dict[str, Any]:
    cluster: dict[str, Any] = {"name": name, "endpoints": [endpoint]}
    if tls is not None:
        cluster["tls"] = tls.as_block()
    return cluster


# ------------------------------------------------------------------------------------------- provider hop

PROVIDER_CHAIN = "provider-inference"
#: Filter order of a provider pipeline; `peer_identity_trust` must stay first (startup validation).
PROVIDER_FILTER_ORDER = ("peer_identity_trust", "json_body_field", "provider_route", "credential_inject",
                         "load_balancer")


@dataclass(frozen=True)
class CredentialRef:
    """Where a provider credential lives (a Secret's name/namespace/key); never the token itself."""

    name: str
    namespace: str
    key: str = "token"
    strategy: str = "bearer_token"

    def as_ref(self) -> dict[str, Any]:
        """The overlay / provider_route form: strategy plus secretRef."""
        return {"strategy": self.strategy,
                "secretRef": {"name": self.name, "namespace": self.namespace, "key": self.key}}


@dataclass(frozen=True)
class CredentialSource:
    """One credential_inject entry: the reference and exactly one token source (file, env_var or value)."""

    ref: CredentialRef
    file: str | None = None
    env_var: str | None = None
    value: str | None = None

    def as_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"strategy": self.ref.strategy, "name": self.ref.name,
                                 "namespace": self.ref.namespace, "key": self.ref.key}
        sources = {k: v for k, v in (("file", self.file), ("env_var", self.env_var), ("value", self.value))
                   if v is not None}
        if len(sources) != 1:
            raise ValueError(f"credential {self.ref.name}: exactly one of file, env_var, value (got {sorted(sources)})")
        entry.update(sources)
        return entry


@dataclass(frozen=True)
class ProviderRoute:
    """One exact provider_route entry: an edge candidate id, its model and paths, the local cluster."""

    candidate_id: str
    model: str
    cluster: str
    paths: tuple[str, ...] = ("/v1/chat/completions",)
    credential: CredentialRef | None = None

    def as_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"candidate_id": self.candidate_id, "model": self.model,
                                 "paths": list(self.paths), "cluster": self.cluster}
        if self.credential is not None:
            entry["credential"] = self.credential.as_ref()
        return entry


@dataclass(frozen=True)
class TrustedPeer:
    """One peer_identity_trust entry; every field given must match the client certificate."""

    cert_digest: str | None = None
    organization: str | None = None
    serial_number: str | None = None

    def as_entry(self) -> dict[str, str]:
        entry = {k: v for k, v in (("cert_digest", self.cert_digest), ("organization", self.organization),
                                   ("serial_number", self.serial_number)) if v is not None}
        if not entry:
            raise ValueError("a trusted peer entry needs at least one field")
        return entry


@dataclass(frozen=True)
class ListenerTls:
    """A listener's TLS: server certificate, client CA and client_cert_mode (None = omit the key)."""

    cert: str
    key: str
    client_ca: str | None
    client_cert_mode: str | None = "require"

    def as_block(self) -> dict[str, Any]:
        block: dict[str, Any] = {"certificates": [{"cert_path": self.cert, "key_path": self.key}]}
        if self.client_ca is not None:
            block["client_ca"] = {"ca_path": self.client_ca}
        if self.client_cert_mode is not None:
            block["client_cert_mode"] = self.client_cert_mode
        return block


@dataclass(frozen=True)
class UpstreamTls:
    """A cluster's upstream TLS: the CA that signs the server, the client certificate, and SNI."""

    ca: str
    cert: str
    key: str
    sni: str

    def as_block(self) -> dict[str, Any]:
        return {"ca": {"ca_path": self.ca}, "client_cert": {"cert_path": self.cert, "key_path": self.key},
                "sni": self.sni, "verify": True}


def render_provider_gateway_config(
    *,
    listen: str,
    admin: str,
    tls: ListenerTls | None,
    trusted_peers: Sequence[TrustedPeer] | None,
    provider_id: str,
    routes: Sequence[ProviderRoute],
    credentials: Sequence[CredentialSource],
    clusters: Mapping[str, str],
    filter_order: Sequence[str] = PROVIDER_FILTER_ORDER,
    insecure_options: Mapping[str, bool] | None = None,
) -> str:
    """The Praxis YAML of a provider gateway: mTLS listener, trust, exact routes, credentials, backends.

    `trusted_peers=None` leaves peer_identity_trust out; `filter_order` reorders the chain and
    `insecure_options` adds flags, for configs a provider gateway must refuse to start with.
    """
    filters: dict[str, dict[str, Any]] = {
        "json_body_field": {"filter": "json_body_field", "field": "model", "header": MODEL_HEADER},
        "provider_route": {"filter": "provider_route", "provider_id": provider_id, "model_header": MODEL_HEADER,
                           "routes": [r.as_entry() for r in routes]},
        "credential_inject": {"filter": "credential_inject", "credentials": [c.as_entry() for c in credentials]},
        "load_balancer": {"filter": "load_balancer",
                          "clusters": [{"name": name, "endpoints": [ep]} for name, ep in clusters.items()]},
    }
    if trusted_peers is not None:
        filters["peer_identity_trust"] = {"filter": "peer_identity_trust",
                                          "trusted_peers": [p.as_entry() for p in trusted_peers]}
    listener: dict[str, Any] = {"name": "provider", "address": listen, "filter_chains": [PROVIDER_CHAIN]}
    if tls is not None:
        listener["tls"] = tls.as_block()
    config = {
        "listeners": [listener],
        "filter_chains": [{"name": PROVIDER_CHAIN, "filters": [filters[n] for n in filter_order if n in filters]}],
        "admin": {"address": admin},
        "shutdown_timeout_secs": 5,
        "insecure_options": {"allow_private_endpoints": True, **dict(insecure_options or {})},
    }
    return yaml.safe_dump(config, sort_keys=False)


def render_hop_consumer_config(
    variant: Variant,
    *,
    listen: str,
    admin: str,
    overlay_file: str,
    scope: ScopeSpec,
    clusters: Mapping[str, str],
    hop_tls: Mapping[str, UpstreamTls],
) -> str:
    """A consumer gateway whose provider_hop_clusters are peer provider gateways reached over mTLS.

    Every cluster in `hop_tls` is a provider hop cluster and gets upstream TLS with the client certificate;
    the other clusters stay plain local backends.
    """
    return render_gateway_config(variant, listen=listen, admin=admin, overlay_file=overlay_file, scope=scope,
                                 clusters=clusters, hop_clusters=list(hop_tls), management_cluster=None,
                                 hop_tls=hop_tls)
