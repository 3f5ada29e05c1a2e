"""Profiles and the features their tests judge: core features every implementation of a profile has,
extended features it may claim in its descriptor.

A conformance marker names one (profile, level, feature) of this registry and a descriptor claims extended
features from it; an unknown name is an error naming the test or key, never a silently unsupported feature.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

#: The conformance profiles: what a plain ``agn-conformance run`` judges.
CONFORMANCE_PROFILES: tuple[str, ...] = ("consumer", "producer", "provider", "mesh")
#: The profile of demo claims: it judges a demo's claims, not an implementation's conformance, so it runs
#: only when asked for (``--profile demos`` or ``agn-conformance demo``).
DEMOS_PROFILE = "demos"
#: The profile of a grid gateway choosing sites by measured availability (grid_site_route, routing guide 7b).
#: It judges conformance, but runs only when asked for (``--profile serving``): a gateway that routes by
#: overlays alone (intelligent_route) has no grid_site_route to judge.
SERVING_PROFILE = "serving"
PROFILES: tuple[str, ...] = (*CONFORMANCE_PROFILES, SERVING_PROFILE, DEMOS_PROFILE)
#: ``demo`` is the level of the demos profile's tests, and only of them.
DEMO_LEVEL = "demo"
LEVELS: tuple[str, ...] = ("core", "extended", DEMO_LEVEL)

#: The extended feature an overlay_sync section is judged under.
OVERLAY_SYNC_FEATURE = "overlaySync"
#: The extended feature of the experimental pressure-driven weights (needs operator.dynamic_weights).
DYNAMIC_WEIGHTS_FEATURE = "dynamicWeights"
#: The extended feature of the sidecar's Prometheus series (needs overlay_sync.metrics_path).
OVERLAY_SYNC_METRICS_FEATURE = "overlaySyncMetrics"
#: The extended feature of the operator's signals endpoint (needs operator.signals_args).
SIGNALS_RELAY_FEATURE = "signalsRelay"

#: Extended features an implementation may claim, each with what it covers and where its rule comes from.
#: Core features are not listed: they are always tested. A feature whose rule no sentence of the spec
#: gives names the public code it was taken from, so an implementation that follows the spec alone can
#: decline it.
FEATURE_DESCRIPTIONS: Mapping[str, str] = MappingProxyType({
    "weightedRandom": "weightedRandom selection inside the first viable group (routing guide 5)",
    "cookieAffinity": "session affinity keyed by a cookie (routing guide 8)",
    "skipPaths": "skip_paths bypass model lookup (intelligent_route filter: Behavior)",
    "managementCluster": "skipped paths go to management_cluster (intelligent_route filter: Behavior)",
    "clustersAllowlist": "reloads naming a cluster outside `clusters` are rejected (intelligent_route filter: Scope)",
    "prometheusMetrics": "the praxis_ai_intelligent_route_* series (intelligent_route filter: Metrics)",
    "mcpToolRouting": "tools/call matched against mcp_tool candidates (intelligent_route filter: MCP lookup)",
    "strictOverlayValidation": (
        "overlay rules of the public Praxis AI code (praxis-proxy/ai, routing overlay and group index) that no "
        "spec sentence states: selection groups non-decreasing, all-or-none grouped and one admission state per "
        "group; selection_policy has no member besides mode; unknown candidate kinds and admission states, "
        "duplicate candidates, a provenance.source_name other than scope.network and a rendered_at that is not "
        "RFC 3339 are rejected"),
    "exactValueLimits": (
        "the exact bounds of the public Praxis AI code (praxis-proxy/ai): names, sites, clusters and model values "
        "of 1-256 bytes, model values of visible ASCII, at most 1024 candidates, overlay files of at most 2 MiB; "
        "the spec only says reads are bounded and oversized values are rejected"),
    OVERLAY_SYNC_FEATURE: (
        "the overlay-sync sidecar of the descriptor's overlay_sync section, judged on its own: it follows a "
        "ConfigMap, validates each envelope and digest, atomically replaces the serving file, keeps the last "
        "accepted revision and exposes readiness and liveness (overlay contract: How the new overlay reaches "
        "Praxis); the sidecar is an optional deployment choice"),
    OVERLAY_SYNC_METRICS_FEATURE: (
        "the sidecar's Prometheus series under the names of the public grid-overlay-sync (praxis-proxy/grid, "
        "crates/overlay-sync/src/metrics.rs): grid_overlay_sync_ready, grid_overlay_sync_degraded, "
        "grid_overlay_sync_validation_failures_total, grid_overlay_sync_last_write_timestamp_seconds and "
        "grid_overlay_sync_payload_bytes; the spec names delivery health and revision metrics, not the series"),
    "projectedCredentials": (
        "credential_inject's projected credential resolver, `projected_credential_mount_base`, reading a selected "
        "reference from <base>/<namespace>/<name>/<key> (the public credential_inject of praxis-proxy/ai and its "
        "projected-credentials example); the spec says such a resolver can use a newly selected, already-mounted "
        "Secret without rebuilding the pipeline, not how it is configured"),
    # producer profile (an operator)
    "stabilizedAdmission": "stabilized admission hysteresis (overlay contract: Admission state derivation)",
    "kvCachePressure": "the kvCachePressure scoring strategy (provider scoring)",
    "tlsMetrics": "metrics scraped over TLS, failing closed (overlay contract: Stale metrics grace period)",
    "toolCandidates": "AgentToolProvider resources rendered as mcp_tool candidates",
    "toolDiscovery": (
        "the operator probes an AgentToolProvider's MCP endpoint and records the advertised tools in "
        "status.discoveredTools (routing guide 15); the probe speaks MCP (initialize, tools/list over its HTTP "
        "transport), which the guide does not spell out, and the directory mode records the status in "
        "{out}/<name>.agenttoolprovider.yaml"),
    "localityTierNames": (
        "selection_tier values same_site, same_zone, same_region, cross_region and unknown (the public grid "
        "operator); the spec names only the unknown tier and gives the tiers' order, not their field values"),
    "presetCluster": (
        "a cluster set by an earlier filter is preserved by intelligent_route (intelligent_route filter: Behavior); "
        "the suites set it with the Praxis core router filter (path_prefix routes, as the public "
        "praxis-configs/credential-injection.yaml uses it), which the spec does not name; two cluster-selecting "
        "filters before one load_balancer need insecure_options.skip_pipeline_checks.conflicting_cluster_selectors: "
        "true in the public Praxis (praxis-proxy/praxis pipeline checks), which the rendered config sets"),
    DYNAMIC_WEIGHTS_FEATURE: (
        "experimental pressure-driven weights (routing guide 7, Dynamic pressure-based weighting - experimental): "
        "under weightedRandom each provider's traffic_weight is its available capacity, configured capacity * "
        "(1 - normalized pressure), so its traffic share is that over the group's; no stable GridNetwork field "
        "turns it on, so the descriptor's operator.dynamic_weights gives the GridNetwork spec that does"),
    "generatedConsumerConfig": (
        "the consumer Praxis config the operator generates beside the overlay when a gateway reference enables "
        "consumerConfig: a ConfigMap of that name with a praxis.yaml key, cluster endpoints from "
        "consumerConfig.clusterEndpoints (the public grid operator, crates/operator/src/resources/consumer_config.rs); "
        "the spec says the operator generates it and what it holds, not where"),
    "configMapNaming": (
        "the overlay ConfigMap is named grid-overlay-{network}-{gateway} (past 63 characters, 20-character prefixes "
        "and an FNV-1a hash of network/gateway) and each gateway's status entry names it in configMapName: the public "
        "grid operator's rule (praxis-proxy/grid operator/src/resources/routing_overlay.rs); the spec names the "
        "ConfigMap's keys and annotations, not its name"),
    "siteNameLocality": (
        "a provider of the consumer's own site is same_site by its site name even without GridSite geography (the "
        "public grid operator); the spec's text says only that without geography all candidates are unknown tier"),
    SIGNALS_RELAY_FEATURE: (
        "the operator's signals endpoint, GET /v1/site/signals over mutual TLS: the raw EPP series of each provider "
        "it scrapes (running and waiting per endpoint, ready endpoints, what flow control holds) as Prometheus "
        "text labelled grid_site and grid_provider with a millisecond timestamp (praxis-proxy/grid, "
        "gateway/ai-grid-filters/src/signals/llm_d.rs and the operator's /v1/site/signals); the routing guide "
        "(7b) says the operator relays these raw series, not where or how; the descriptor's "
        "operator.signals_args says how to turn it on"),
    # serving profile (a grid gateway with grid_site_route)
    "servingRequestErrors": (
        "the answers of grid_site_route to requests it cannot route: 400 without a model, 404 for a model no "
        "candidate names, 503 with Retry-After when no site serving the model is ready (praxis-proxy/grid, "
        "gateway/ai-grid-filters/src/route.rs); the routing guide (7b) names only the 429 of shedding"),
    "gridSiteHeaders": (
        "a routed response names the chosen site and cluster in x-grid-site and x-grid-backend (praxis-proxy/grid, "
        "gateway/ai-grid-filters/src/route.rs); the guide names no response header"),
    "betweenTwoShare": (
        "the weighted pick between two sites with room gives a site the share capacity/(1+rho) of the pair, "
        "clamped to 0.1..0.9 (praxis-proxy/grid, gateway/ai-grid-filters/src/route.rs, between_two); the routing "
        "guide (7b) says only that two sites get a weighted pick"),
    "distinctDraws": (
        "the two choices at three or more sites are two distinct sites (praxis-proxy/grid, "
        "gateway/ai-grid-filters/src/route.rs, two_choices: \"Two distinct draws\"), so the most saturated of three "
        "sites with room gets nothing; the guide says only \"two choices\", which draws with replacement also are"),
    "routeMetricLabels": (
        "the label vocabulary of the routing metrics: grid_route_site_ceiling, _rho and _weight carry site and "
        "cluster, grid_route_selections_total{path} counts two_choices, between_two, lone and by_capacity, each "
        "in its situation (praxis-proxy/grid, gateway/ai-grid-filters/src/route.rs, select); the guide names the "
        "metrics and the paths two_choices and by_capacity"),
    # provider profile (a provider gateway)
    "credentialValueSource": "credential_inject with an inline `value` token source",
    "credentialEnvSource": "credential_inject with an `env_var` token source",
    "credentialFailClosed": (
        "credential_inject answers 503 when the selected credential reference is partial, unsupported or unknown "
        "(the public credential_inject of praxis-proxy/ai); the spec only says the token never leaks"),
    "clientAuthorizationStripped": (
        "provider_route removes the client's Authorization also on a route without a credential (the public "
        "provider_route of praxis-proxy/ai); the spec states only that the provider token is injected"),
    "providerRouteStatus": (
        "the exact answers of the public provider_route (praxis-proxy/ai): 403 for a missing or unknown candidate, "
        "a missing hop request id or a malformed revision, 400 for a missing model, 404 for a model or path "
        "outside the candidate's route; the spec only says the hop is validated and refused"),
})
EXTENDED_FEATURES: frozenset[str] = frozenset(FEATURE_DESCRIPTIONS)

#: Extended features whose tests cannot exercise them without another extended feature: claiming the first
#: means having the second. A management cluster is where *skipped* paths go; the sidecar's series are the
#: sidecar's; tool discovery probes AgentToolProviders; the routing guide gives the generated consumer config
#: in its MCP tool section, by what it leaves out of tool candidates.
REQUIRES: Mapping[str, frozenset[str]] = MappingProxyType({
    "managementCluster": frozenset({"skipPaths"}),
    OVERLAY_SYNC_METRICS_FEATURE: frozenset({OVERLAY_SYNC_FEATURE}),
    "toolDiscovery": frozenset({"toolCandidates"}),
    "generatedConsumerConfig": frozenset({"toolCandidates"}),
})

#: Core features per profile, each with what its tests judge. Every implementation of the profile must have
#: them: they are always tested, and a descriptor cannot decline them.
CORE_FEATURES: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "consumer": MappingProxyType({
        "overlayValidation": "overlays are validated before they serve; a bad one is refused with its reason",
        "scope": "an overlay's scope must match the scope the gateway expects",
        "legacyPayload": "the legacy flat overlay payload",
        "hotReload": "a changed overlay file is reloaded; a rejected reload keeps the last good snapshot",
        "admission": "admission_state: none is never eligible, existing_only only through a bound session",
        "groups": "the first viable selection group is the one selected from",
        "deterministic": "deterministic selection, and missing group or policy metadata",
        "roundRobin": "roundRobin selection inside the first viable group",
        "random": "random selection inside the first viable group",
        "headerAffinity": "session affinity keyed by a header",
        "hopHeaders": "the x-ai-routing-* hop headers set from the serving snapshot, client copies stripped",
        "requestErrors": "the answers to requests that cannot be routed (400, 404, 503)",
        "staticMode": "inline static candidate lists",
        "credentialInject": "the consumer side of credential_inject",
    }),
    "producer": MappingProxyType({
        "envelope": "the overlay envelope: revision, digest, provenance, scope and the ConfigMap it travels in",
        "ordering": "candidate order by routingPolicy, the tie-break and locality tiers",
        "groups": "selection groups and ranks",
        "scoring": "scores from the network's scoring strategy",
        "metrics": "metrics scraping, normalisation, missing and stale values, and the reconcile cadence",
        "admission": "admission states derived from pressure and health",
        "weights": "traffic_weight from capacityWeight under static weighted placement",
        "access": "accessPolicy.siteSelector matched against the consumer site",
        "credentials": "credential references in candidates, never the secret values",
        "status": "the GridNetwork status the operator writes",
        "resources": "the custom resources the operator reads, and malformed ones",
    }),
    "provider": MappingProxyType({
        "providerMtls": "the hop's mutual TLS",
        "peerIdentityTrust": "peer_identity_trust: which consumer identities the provider admits",
        "providerRoute": "provider_route: the hop's candidate, model and path matched to a route",
        "providerHop": "a request crossing the hop end to end",
        "hopHeaders": "the hop headers the provider consumes and strips",
        "credentialInject": "credential_inject on the provider side: the provider token replaces the client's",
        "credentialReference": "a credential reference resolved from the files the gateway was given",
        "providerStartupValidation": "provider configs refused at start-up, naming the key",
    }),
    "mesh": MappingProxyType({
        "gossip": "provider records spread through the mesh, with their metrics and weights",
        "eligibility": "the GridSite gate: only Active, trusted sites are routable",
        "filtering": "records of another network, and the site's own echoed records, are never rendered",
        "staleness": "failure detection, degraded candidates and the stale-candidate TTL",
        "providerHop": "a request at one site served by another site's provider over the hop",
    }),
    SERVING_PROFILE: MappingProxyType({
        "sitePick": "sites chosen by saturation: two choices at three or more with room, a weighted pick between two",
        "ceilings": "each site's learned ceiling: the most in-flight held with nothing waiting, its floor and decay",
        "saturation": "saturation (rho) as in-flight over the ceiling, concluded from the relayed series alone",
        "shedding": "with shedding on, 429 with Retry-After while every site of a model is full; off by default",
        "availabilityConfig": "the availability block of grid_site_route: every field defaulted, nothing to set",
        "routeMetrics": "the grid_route_* metrics the routing guide's tuning advice reads",
        "prefixAffinity": "grid_site_route prefers the site holding a request's prompt",
    }),
    DEMOS_PROFILE: MappingProxyType({}),  # its tests are of the demo level, one feature per demo (DEMOS)
})


@dataclass(frozen=True)
class Demo:
    """A public demo whose routing claims the demos profile judges: where it lives and what it shows."""

    name: str
    repository: str  # praxis-proxy/demos or praxis-proxy/experimental
    shows: str  # the routing behaviour the routing guide's demo-to-capability map gives it

    @property
    def experimental(self) -> bool:
        return self.repository.endswith("/experimental")

    @property
    def source(self) -> str:
        return f"{self.repository}, demos/{self.name}/README.md"


#: The demos of the routing guide's demo-to-capability map (routing guide 12), by name: each is the
#: feature of its demo-level tests.
DEMOS: Mapping[str, Demo] = MappingProxyType({d.name: d for d in (
    Demo("grid-combined-site", "praxis-proxy/demos",
         "local-first routing, remote fallback, existing-session behavior, and recovery"),
    Demo("grid-llmd-pool-metrics", "praxis-proxy/demos",
         "queueDepth, kvCachePressure, scoreFirst, dynamic provider re-ranking, pressure and recovery"),
    Demo("grid-glb-demo", "praxis-proxy/demos",
         "session affinity, provider withdrawal/recovery, hot reload, and separation of edge selection from AGN "
         "provider selection"),
    Demo("grid-workload-inference", "praxis-proxy/demos",
         "workload-originated local-first routing, health-based failover, and recovery"),
    Demo("grid-route53-edge-entry", "praxis-proxy/demos",
         "independent public-edge selection and private AGN provider selection"),
    Demo("grid-weighted-dynamic-routing", "praxis-proxy/experimental",
         "static weighted random, three-provider proportional selection, hot reload, and experimental "
         "pressure-driven dynamic weights"),
    Demo("grid-cloud-burst", "praxis-proxy/experimental",
         "site-local selection groups, round robin, geography-first preference, queue-driven admission, regional "
         "fallback, external overflow, hot reload"),
    Demo("grid-distributed-token-rate-limit", "praxis-proxy/experimental",
         "round-robin provider selection after quota admission; request-time routing remains local to Praxis"),
)})

#: The extended features each profile's tests may judge (a feature may belong to more than one profile).
EXTENDED_BY_PROFILE: Mapping[str, frozenset[str]] = MappingProxyType({
    "consumer": frozenset({"weightedRandom", "cookieAffinity", "skipPaths", "managementCluster", "clustersAllowlist",
                           "prometheusMetrics", "mcpToolRouting", "strictOverlayValidation", "exactValueLimits",
                           "presetCluster", "projectedCredentials"}),
    "producer": frozenset({"stabilizedAdmission", "kvCachePressure", "tlsMetrics", "toolCandidates", "toolDiscovery",
                           "localityTierNames", "generatedConsumerConfig", "siteNameLocality", "configMapNaming",
                           OVERLAY_SYNC_FEATURE,
                           OVERLAY_SYNC_METRICS_FEATURE, DYNAMIC_WEIGHTS_FEATURE, SIGNALS_RELAY_FEATURE}),
    "provider": frozenset({"credentialValueSource", "credentialEnvSource", "credentialFailClosed",
                           "clientAuthorizationStripped", "providerRouteStatus"}),
    "mesh": frozenset({"toolCandidates"}),
    SERVING_PROFILE: frozenset({"servingRequestErrors", "gridSiteHeaders", "betweenTwoShare", "distinctDraws",
                                "routeMetricLabels"}),
    DEMOS_PROFILE: frozenset(),
})


def parse_profiles(text: str) -> list[str]:
    """Profile names from one comma-separated command-line value; ValueError naming what is unknown."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in PROFILES]
    if not names or unknown:
        raise ValueError(f"unknown profile {', '.join(unknown) or repr(text)} (choose from {', '.join(PROFILES)})")
    return names


def marker_problem(profile: str, level: str, feature: str) -> str | None:
    """Why a conformance marker's (profile, level, feature) is not one this registry knows (None: it is)."""
    if profile not in PROFILES:
        return f"unknown profile {profile!r} (known: {', '.join(PROFILES)})"
    if level not in LEVELS:
        return f"unknown level {level!r} (known: {', '.join(LEVELS)})"
    if (level == DEMO_LEVEL) != (profile == DEMOS_PROFILE):
        return f"the {DEMO_LEVEL} level is the {DEMOS_PROFILE} profile's, and its only one (got {profile}/{level})"
    if level == DEMO_LEVEL:
        if feature not in DEMOS:
            return f"{feature!r} is not a demo (known: {', '.join(sorted(DEMOS))})"
        return None
    known = set(CORE_FEATURES[profile]) if level == "core" else set(EXTENDED_BY_PROFILE[profile])
    if feature not in known:
        return f"{feature!r} is not a {level} feature of the {profile} profile (known: {', '.join(sorted(known))})"
    return None
