"""Named breakages of the reference operator's mesh behaviour, each a monkeypatch the mesh suite must see.

Applied in the operator process before it starts (``selfcheck.operator_launch --break NAME``, the same
launcher as the producer breakages). Each reproduces a mistake a real operator could make while still
joining the mesh, announcing its providers and rendering overlays: a missing eligibility gate, pins not
compared, the own echo or another network's records rendered, degraded candidates dropped at once or
never, a slow failure detector, a site that leaves treated as a crash, a wrong discovered-site name, and
peers routed to a provider's cluster name instead of the site's routing cluster.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from reference.operator import scrape
from reference.operator.core import candidates
from reference.operator.core.model import GatewayRef, GridNetworkSpec, GridSiteSpec, RemoteProviderRecord, Resources
from reference.operator.mesh import announce, records, runtime, sites, swim
from reference.operator.mesh.records import Key, ProviderRecord
from selfcheck.registry import Breakage, patch, registrar

__all__ = ["BREAKAGES", "Breakage"]

BREAKAGES: dict[str, Breakage] = {}
breakage = registrar(BREAKAGES)

_remote_eligible = candidates.remote_eligible
_remote_entries = candidates.remote_entries
_core_records = records.core_records
_own_content = announce.own_content
_parse_pins = sites.parse_pins
_check_gateway = sites.check_gateway
_suspicion_timeout = swim.SwimConfig.suspicion_timeout
_member_state = sites._member_state


def _ttl_passed(record: RemoteProviderRecord, network: GridNetworkSpec) -> bool:
    ttl = network.stale_candidate_ttl_seconds
    return bool(record.phase == "Degraded" and ttl and record.age_secs > 0 and record.age_secs >= ttl)


@breakage("no-eligibility-gate", "remote records are rendered whatever their GridSite's phase")
def _no_gate() -> None:
    def eligible(record: RemoteProviderRecord, network: GridNetworkSpec, gateway: GatewayRef,
                 grid_sites: Mapping[str, GridSiteSpec]) -> bool:
        return (record.network == network.name and record.site != gateway.local_site
                and record.phase != "Unavailable" and not _ttl_passed(record, network))

    patch(candidates, "remote_eligible", eligible)


@breakage("pins-not-compared", "any certificate the gateway presents makes its site Active")
def _pins_not_compared() -> None:
    async def check(address: str | None, pins: object, **kwargs: Any) -> sites.ProbeResult:
        result = await _check_gateway(address, pins, **kwargs)
        if result.outcome == sites.PIN_MISMATCH:
            return sites.ProbeResult(sites.VERIFIED, "accepted without comparing pins", result.fingerprint)
        return result

    patch(runtime, "check_gateway", check)


@breakage("first-pin-only", "only the first canonical fingerprint is compared (rotation breaks)")
def _first_pin_only() -> None:
    patch(sites, "parse_pins", lambda raw: _parse_pins(raw)[:1])


@breakage("self-echo-kept", "the site merges its own records echoed back by its peers and renders them as remote "
          "candidates reached through the site itself")
def _self_echo_kept() -> None:
    def merge(self: announce.RecordStore, incoming: Iterable[ProviderRecord]) -> bool:
        changed = False
        for record in incoming:
            current = self._records.get(record.key)
            winner = record if current is None else records.merge_record(current, record)
            if winner is not current:
                self._records[record.key] = winner
                changed = True
        return changed

    def eligible(record: RemoteProviderRecord, network: GridNetworkSpec, gateway: GatewayRef,
                 grid_sites: Mapping[str, GridSiteSpec]) -> bool:
        elsewhere = dataclasses.replace(gateway, local_site=f"{gateway.local_site}\x00not-here")
        return _remote_eligible(record, network, elsewhere, grid_sites)

    def remote_entries(network: GridNetworkSpec, gateway: GatewayRef, rows: list[RemoteProviderRecord],
                       policy: Any, grid_sites: Mapping[str, GridSiteSpec]) -> list[Any]:
        # an echo named by its provider's own cluster would coincide with the local candidate and be merged
        # into it; rendered as remote it is reached through its site
        echoes = [dataclasses.replace(r, cluster=r.site) if r.site == gateway.local_site else r for r in rows]
        return _remote_entries(network, gateway, echoes, policy, grid_sites)

    patch(announce.RecordStore, "merge", merge)
    patch(records, "remote_records",
          lambda rows, network, local_site: [r for r in rows if r.network == network])
    patch(candidates, "remote_eligible", eligible)
    patch(candidates, "remote_entries", remote_entries)


@breakage("network-filter-missing", "every remote record is taken as one of the network being rendered")
def _network_filter_missing() -> None:
    def core(rows: Iterable[ProviderRecord], network: str, local_site: str,
             members: Mapping[str, Any] | None = None) -> list[RemoteProviderRecord]:
        rows = [dataclasses.replace(r, network=network) for r in rows]
        return _core_records(rows, network, local_site, members)

    patch(runtime, "core_records", core)


@breakage("degraded-dropped-at-once", "a remote candidate is dropped as soon as its site is suspect or dead")
def _degraded_dropped() -> None:
    def eligible(record: RemoteProviderRecord, network: GridNetworkSpec, gateway: GatewayRef,
                 grid_sites: Mapping[str, GridSiteSpec]) -> bool:
        return record.phase != "Degraded" and _remote_eligible(record, network, gateway, grid_sites)

    patch(candidates, "remote_eligible", eligible)


@breakage("stale-never-evicted", "staleCandidateTtlSeconds is ignored: degraded candidates stay for ever")
def _stale_never_evicted() -> None:
    def eligible(record: RemoteProviderRecord, network: GridNetworkSpec, gateway: GatewayRef,
                 grid_sites: Mapping[str, GridSiteSpec]) -> bool:
        return _remote_eligible(record, dataclasses.replace(network, stale_candidate_ttl_seconds=None), gateway,
                                grid_sites)

    patch(candidates, "remote_eligible", eligible)


@breakage("ttl-deletes-records", "once a down site's age passes a stale TTL, its CRDT records are deleted from the "
          "store, not only left out of the overlay")
def _ttl_deletes_records() -> None:
    original = runtime.MeshRuntime.remote_records

    def remote_records(self: runtime.MeshRuntime) -> list[RemoteProviderRecord]:
        """Deleted in the render that evicts them, so the mesh status written after it no longer lists them."""
        down = {view.name for view in self.members() if view.status in (swim.SUSPECT, swim.DEAD)
                and any(view.age_secs >= ttl for ttl in self._ttls)}
        store = self.store._records
        for key in [key for key, record in store.items() if record.site in down]:
            self.store._floors[key] = store.pop(key).version  # so a copy a peer still gossips stays out
        return original(self)

    patch(runtime.MeshRuntime, "remote_records", remote_records)


@breakage("remote-metrics-ignored", "remote providers are scored neutral: the metrics in their CRDT records are "
          "dropped on receipt")
def _remote_metrics_ignored() -> None:
    original = records.to_core

    def to_core(record: ProviderRecord, member: Any = None) -> RemoteProviderRecord:
        return dataclasses.replace(original(record, member), queue_depth=None, kv_cache_utilization=None)

    patch(records, "to_core", to_core)


@breakage("token-gossiped", "a provider's bearer token is read from its Secret and travels in its record (as one more "
          "model name), so other sites store it")
def _token_gossiped() -> None:
    tokens: dict[str, str] = {}
    original_update, original_to_dict = runtime.MeshRuntime.update_local, records.record_to_dict

    def secret_value(name: str, key: str) -> str | None:
        manifests = Path(sys.argv[sys.argv.index("--manifests") + 1])  # the operator's resource directory
        for path in manifests.glob("*.yaml"):
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            if isinstance(doc, dict) and doc.get("kind") == "Secret" and doc["metadata"]["name"] == name:
                return str((doc.get("stringData") or {}).get(key))
        return None

    def update_local(self: runtime.MeshRuntime, resources: Resources, objects: Any, samples: Any) -> None:
        for provider in resources.providers:
            if provider.credential is not None:
                value = secret_value(provider.credential.name, provider.credential.key)
                if value is not None:
                    tokens[provider.name] = value
        original_update(self, resources, objects, samples)

    def record_to_dict(record: ProviderRecord) -> dict[str, Any]:
        out = original_to_dict(record)
        if record.provider in tokens:
            out["models"] = [*out["models"], tokens[record.provider]]
        return out

    patch(runtime.MeshRuntime, "update_local", update_local)
    patch(records, "record_to_dict", record_to_dict)
    patch(announce, "record_to_dict", record_to_dict)


@breakage("slow-failure-detection", "suspicion lasts six times what the configured timing says")
def _slow_detection() -> None:
    patch(swim.SwimConfig, "suspicion_timeout",
          lambda self, members: 6 * _suspicion_timeout(self, members))


@breakage("leave-as-crash", "a site that leaves gracefully is handled like a crashed one")
def _leave_as_crash() -> None:
    def member_state(member: object) -> str | None:
        state = _member_state(member)
        return sites.DEAD if state == sites.MEMBER_LEFT else state

    patch(sites, "_member_state", member_state)
    patch(records, "STALE_MEMBER_STATES", frozenset({"suspect", "dead", "left"}))


@breakage("discovered-name-reversed", "discovered GridSites are named {site}-{network}")
def _name_reversed() -> None:
    original = sites.discovered_site_k8s_name

    def name(network: str, site: str) -> str:
        return original(site, network)

    for module in (sites, runtime, candidates):
        patch(module, "discovered_site_k8s_name", name)


@breakage("site-cluster-announced", "every provider's record names the site's routing cluster, so two providers of "
          "one model at one site become one candidate at the other sites")
def _site_cluster_announced() -> None:
    def own(resources: Resources, samples: Iterable[Any], site: str, cluster: str,
            now: float) -> dict[Key, ProviderRecord]:
        content = _own_content(resources, samples, site, cluster, now)
        return {key: dataclasses.replace(r, cluster=cluster) for key, r in content.items()}

    patch(announce, "own_content", own)


@breakage("trust-revocation-ignored", "an Active site stays Active when its pins stop matching")
def _trust_revocation_ignored() -> None:
    original = sites.next_phase

    def next_phase(current: str | None, observation: sites.SiteObservation) -> sites.Transition:
        transition = original(current, observation)
        if current == sites.ACTIVE and transition.phase == sites.CONNECTING:
            return sites.Transition(sites.ACTIVE, "Verified", "kept Active after a trust failure")
        return transition

    patch(sites, "next_phase", next_phase)


@breakage("remote-weight-dropped", "records leave the provider's capacityWeight out, so peers render weight 1")
def _remote_weight_dropped() -> None:
    def own(resources: Resources, samples: Iterable[Any], site: str, cluster: str,
            now: float) -> dict[Key, ProviderRecord]:
        content = _own_content(resources, samples, site, cluster, now)
        return {key: dataclasses.replace(r, capacity_weight=1) for key, r in content.items()}

    patch(announce, "own_content", own)


@breakage("age-restarts-at-death", "a member's age restarts when it moves from suspect to dead")
def _age_restarts_at_death() -> None:
    original = swim.SwimNode._set_state

    def set_state(self: swim.SwimNode, member: Any, status: Any, incarnation: int, now: float,
                  added: bool = False) -> None:
        was = member.status
        original(self, member, status, incarnation, now, added)
        if status == swim.DEAD and was == swim.SUSPECT:
            member.status_changed_at = now

    patch(swim.SwimNode, "_set_state", set_state)


@breakage("rejoin-keeps-instant", "a member's down instant is not cleared when it rejoins, so a later suspicion "
          "reports the age since the first outage")
def _rejoin_keeps_instant() -> None:
    original = swim.SwimNode._set_state

    def set_state(self: swim.SwimNode, member: Any, status: Any, incarnation: int, now: float,
                  added: bool = False) -> None:
        kept = member.status_changed_at
        original(self, member, status, incarnation, now, added)
        if status == swim.ALIVE and kept is not None:
            member.status_changed_at = kept

    patch(swim.SwimNode, "_set_state", set_state)


# ------------------------------------------------------------------------------------- tools and ratios


@breakage("tools-not-gossiped", "only InferenceProvider records are announced: remote AgentToolProviders never reach "
          "other sites")
def _tools_not_gossiped() -> None:
    def own(resources: Resources, samples: Iterable[Any], site: str, cluster: str,
            now: float) -> dict[Key, ProviderRecord]:
        content = _own_content(resources, samples, site, cluster, now)
        return {key: r for key, r in content.items() if r.kind != records.TOOL}

    patch(announce, "own_content", own)


@breakage("tool-identity-unprefixed", "tool records are keyed by the bare Kubernetes name, so an AgentToolProvider "
          "named like an InferenceProvider replaces its record")
def _tool_identity_unprefixed() -> None:
    def own(resources: Resources, samples: Iterable[Any], site: str, cluster: str,
            now: float) -> dict[Key, ProviderRecord]:
        out: dict[Key, ProviderRecord] = {}
        for r in _own_content(resources, samples, site, cluster, now).values():
            bare = r.provider.removeprefix(announce.TOOL_IDENTITY_PREFIX) if r.kind == records.TOOL else r.provider
            record = dataclasses.replace(r, provider=bare)
            out[record.key] = record
        return out

    patch(announce, "own_content", own)


@breakage("remote-tools-ungated", "remote tool records are rendered whatever their GridSite's phase (the gate is "
          "applied to models only)")
def _remote_tools_ungated() -> None:
    def remote_eligible(record: RemoteProviderRecord, network: GridNetworkSpec, gateway: GatewayRef,
                        sites_: Mapping[str, GridSiteSpec]) -> bool:
        if record.kind == records.TOOL:
            return record.network == network.name and record.site != gateway.local_site
        return _remote_eligible(record, network, gateway, sites_)

    patch(candidates, "remote_eligible", remote_eligible)


def _announce_queues(raw: Callable[[float | None], float | None], ratio: Callable[[float], float]) -> None:
    """This site's records carry each provider's queue as `ratio(raw(sample) / queueCapacity)`: the one step
    of the usable-signal rule a breakage changes (expiry, kv utilization and health stay as they are)."""
    from reference.operator.core import scoring

    def signals(provider: Any, sample: Any, now: float) -> tuple[Any, int | None]:
        if sample is None or (sample.expires_at is not None and now > sample.expires_at):
            return None, None
        queue = raw(sample.queue_depth)
        if queue is not None and provider.queue_capacity:
            queue = queue / provider.queue_capacity
        return scoring.Signals(queue_depth=None if queue is None else ratio(queue),
                               kv_cache_utilization=scoring.normalise_ratio(sample.kv_cache_utilization),
                               healthy=bool(sample.healthy)), sample.revision

    patch(announce, "usable_signals", signals)


@breakage("remote-ratios-unclamped", "a site gossips its providers' queue ratios before clamping them, and peers score "
          "received ratios as they come")
def _remote_ratios_unclamped() -> None:
    from reference.operator.core import scoring

    _announce_queues(scoring.finite, lambda queue: queue)
    patch(records, "clamp_ratio", records.finite)
    patch(candidates, "normalise_ratio", scoring.finite)


@breakage("remote-nonfinite-as-number", "a site keeps non-finite queue samples and gossips them as numbers (NaN as an "
          "empty queue, +Inf as a full one) instead of leaving them out, and peers score them")
def _remote_nonfinite_as_number() -> None:
    def extract_all(text: str, target: Any) -> dict[str, float]:
        """The scrape, non-finite samples kept (the pool filter and first-sample rule unchanged)."""
        wanted = {metric: signal for signal, metric in target.signal_names.items()}
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                signal = wanted.get(sample.name)
                if signal is None or signal in found:
                    continue
                if target.pool_name is None or sample.labels.get(scrape.POOL_LABEL) == target.pool_name:
                    found[signal] = float(sample.value)
        return found

    patch(scrape, "extract", extract_all)
    _announce_queues(lambda queue: queue, lambda queue: min(1.0, max(0.0, queue)))  # NaN -> 0.0, +Inf -> 1.0
