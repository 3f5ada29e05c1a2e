"""From providers, tool providers and remote records to ordered overlay candidate dicts.

Hard constraints (network, phase, access policy, site eligibility, stale TTL, exclusion) are applied
before ordering; ordering never brings back a provider a constraint removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reference.operator.core.admission import EXCLUDED, NEW_AND_EXISTING, Policy, instantaneous_state, observe
from reference.operator.core.ids import stable_id
from reference.operator.core.locality import derive_tier
from reference.operator.core.model import (
    GatewayRef,
    GridNetworkSpec,
    GridSiteSpec,
    ProviderSpec,
    RemoteProviderRecord,
    ToolProviderSpec,
)
from reference.operator.core.ordering import Entry, order
from reference.operator.core.scoring import Signals, dynamic_weight, normalise_ratio, pressure, score
from reference.operator.core.site_names import discovered_site_k8s_name

INFERENCE = "inference_model"
TOOL = "mcp_tool"


@dataclass(frozen=True)
class ProviderState:
    """What render decided about one local provider this reconcile: its signals and admission."""

    signals: Signals | None
    admission_state: str


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def consumer_allowed(selector: Mapping[str, str], gateway: GatewayRef, sites: Mapping[str, GridSiteSpec]) -> bool:
    """accessPolicy.siteSelector: an unknown consumer site fails closed when the selector is non-empty."""
    if not selector:
        return True
    consumer = sites.get(gateway.local_site)
    return consumer is not None and labels_match(selector, consumer.labels)


def hosting_sites(
    selector: Mapping[str, str], gateway: GatewayRef, sites: Mapping[str, GridSiteSpec], site: str | None = None
) -> list[str]:
    """`spec.site` names the hosting GridSite; absent, a siteSelector picks GridSites, else the local site."""
    if site:
        return [site]
    if not selector:
        return [gateway.local_site]
    return sorted(name for name, site in sites.items() if labels_match(selector, site.labels))


def credential_dict(credential: Any) -> dict[str, Any] | None:
    if credential is None:
        return None
    return {
        "strategy": credential.strategy,
        "secretRef": {"name": credential.name, "namespace": credential.namespace, "key": credential.key},
    }


def local_entries(
    network: GridNetworkSpec,
    gateway: GatewayRef,
    providers: list[ProviderSpec],
    states: Mapping[str, ProviderState],
    sites: Mapping[str, GridSiteSpec],
) -> list[Entry]:
    out = []
    for provider in providers:
        state = states.get(provider.name)
        if state is None or state.admission_state == EXCLUDED or provider.phase == "Unavailable":
            continue
        if not consumer_allowed(provider.access_selector, gateway, sites):
            continue
        value = score(network.scoring_strategy, state.signals)
        load = pressure(network.scoring_strategy, state.signals)
        for site in hosting_sites(provider.site_selector, gateway, sites, provider.site):
            for model in provider.models:
                out.append(
                    Entry(
                        kind=INFERENCE,
                        name=model,
                        site=site,
                        cluster=provider.cluster,
                        fresh=provider.phase != "Degraded",
                        admission_state=state.admission_state,
                        tier=derive_tier(gateway.local_site, site, sites),
                        score=value,
                        capacity_weight=provider.capacity_weight,
                        pressure=load,
                        credential=provider.credential,
                    )
                )
    return out


def allowed_tools(tool_provider: ToolProviderSpec) -> list[str]:
    """spec.tools is an allowlist over the discovered tools; empty spec.tools exposes all of them."""
    discovered = list(dict.fromkeys(tool_provider.discovered_tools))
    if tool_provider.tools:
        allow = set(tool_provider.tools)
        return [tool for tool in discovered if tool in allow]
    return discovered


def tool_entries(
    gateway: GatewayRef, tool_providers: list[ToolProviderSpec], sites: Mapping[str, GridSiteSpec]
) -> list[Entry]:
    out = []
    for provider in tool_providers:
        if provider.phase == "Unavailable" or not consumer_allowed(provider.access_selector, gateway, sites):
            continue
        for site in hosting_sites(provider.site_selector, gateway, sites, provider.site):
            for tool in allowed_tools(provider):
                out.append(
                    Entry(
                        kind=TOOL,
                        name=tool,
                        site=site,
                        cluster=provider.cluster,
                        fresh=provider.phase != "Degraded",
                        admission_state=NEW_AND_EXISTING,
                        tier=derive_tier(gateway.local_site, site, sites),
                        score=0.0,
                    )
                )
    return out


def remote_site_name(record: RemoteProviderRecord, sites: Mapping[str, GridSiteSpec]) -> str | None:
    """The GridSite that vouches for a remote record's site, if any.

    The auto-discovered name `discovered_site_k8s_name(network, site)` is looked up first, then a GridSite
    declared under the site's own name; either must reference the record's network.
    """
    for name in (discovered_site_k8s_name(record.network, record.site), record.site):
        site = sites.get(name)
        if site is not None and site.network == record.network:
            return name
    return None


def remote_eligible(
    record: RemoteProviderRecord, network: GridNetworkSpec, gateway: GatewayRef, sites: Mapping[str, GridSiteSpec]
) -> bool:
    """Right network, not our own echo, its GridSite Active, not Unavailable, not past the stale TTL.

    Only Degraded remote records age out, once `age_secs >= staleCandidateTtlSeconds`; an age of 0 means
    the age is unknown (a just-failed member or a snapshot without ages) and the record is retained.
    """
    if record.network != network.name or record.site == gateway.local_site:
        return False
    name = remote_site_name(record, sites)
    if name is None or sites[name].phase != "Active" or record.phase == "Unavailable":
        return False
    ttl = network.stale_candidate_ttl_seconds
    return not (record.phase == "Degraded" and ttl and record.age_secs > 0 and record.age_secs >= ttl)


def remote_entries(
    network: GridNetworkSpec,
    gateway: GatewayRef,
    records: list[RemoteProviderRecord],
    policy: Policy,
    sites: Mapping[str, GridSiteSpec],
) -> list[Entry]:
    out = []
    for record in records:
        if not remote_eligible(record, network, gateway, sites):
            continue
        signals = Signals(
            queue_depth=normalise_ratio(record.queue_depth),
            kv_cache_utilization=normalise_ratio(record.kv_cache_utilization),
            healthy=record.healthy,
        )
        has_metrics = signals.queue_depth is not None or signals.kv_cache_utilization is not None
        if record.kind == TOOL:
            state, value = (NEW_AND_EXISTING if record.healthy else EXCLUDED), 0.0
        else:
            state = instantaneous_state(observe(signals, None, policy, has_metrics), policy)
            value = score(network.scoring_strategy, signals if has_metrics else None)
        load = pressure(network.scoring_strategy, signals if has_metrics else None)
        if state == EXCLUDED:
            continue
        for model in record.models:
            out.append(
                Entry(
                    kind=record.kind,
                    name=model,
                    site=record.site,
                    cluster=record.cluster,
                    fresh=record.phase != "Degraded",
                    admission_state=state,
                    tier=derive_tier(gateway.local_site, remote_site_name(record, sites) or record.site, sites),
                    score=value,
                    capacity_weight=record.capacity_weight,
                    pressure=load,
                )
            )
    return out


def weighted(network: GridNetworkSpec) -> bool:
    """traffic_weight is published only for static (or the experimental dynamic) placement with weightedRandom."""
    return (network.placement_static or network.placement_dynamic) and network.selection_mode == "weightedRandom"


def traffic_weight(entry: Entry, network: GridNetworkSpec) -> int:
    """Static placement copies capacityWeight; dynamic scales it by the pressure the provider reports."""
    if network.placement_dynamic:
        return dynamic_weight(entry.capacity_weight, entry.pressure)
    return entry.capacity_weight


def to_dicts(entries: list[Entry], network: GridNetworkSpec) -> list[dict[str, Any]]:
    out = []
    used: set[str] = set()
    for entry in entries:
        identifier = stable_id(*entry.identity)
        if identifier in used:
            identifier = "/".join(entry.identity)
        used.add(identifier)
        item: dict[str, Any] = {
            "kind": entry.kind,
            "name": entry.name,
            "site": entry.site,
            "cluster": entry.cluster,
            "fresh": entry.fresh,
            "stable_id": identifier,
            "admission_state": entry.admission_state,
            "selection_tier": entry.tier,
            "rank": entry.rank,
            "selection_group": entry.selection_group,
        }
        if weighted(network):
            item["traffic_weight"] = traffic_weight(entry, network)
        credential = credential_dict(entry.credential)
        if credential is not None:
            item["credential"] = credential
        out.append(item)
    return out


def build_candidates(
    network: GridNetworkSpec,
    gateway: GatewayRef,
    providers: list[ProviderSpec],
    states: Mapping[str, ProviderState],
    tool_providers: list[ToolProviderSpec],
    records: list[RemoteProviderRecord],
    policy: Policy,
    sites: Mapping[str, GridSiteSpec],
) -> list[dict[str, Any]]:
    entries = local_entries(network, gateway, providers, states, sites)
    entries += tool_entries(gateway, tool_providers, sites)
    entries += remote_entries(network, gateway, records, policy, sites)
    return to_dicts(order(entries, network.routing_policy), network)
