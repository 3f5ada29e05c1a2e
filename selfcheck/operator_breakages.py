"""Named breakages of the reference operator, each a monkeypatch of one behaviour the producer suite judges.

A breakage is applied in the operator process before it starts (see ``selfcheck.operator_launch``). Each
one reproduces a mistake a real operator could make (locality compared before admission, a stale sample
reused forever, a timestamp in the digest) while the operator still starts, reads the same resources and
renders an envelope, so a producer test that fails against it fails because of the broken behaviour.

Patches replace module or class attributes that the operator looks up at call time; they never edit files.
A breakage whose output the consumer contract forbids (a wrong digest, weights outside weightedRandom, group
numbers shared between capabilities) also drops the reference operator's self-check: a vendor operator
with that bug would publish the overlay, and the suite must see it in what is published.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import importlib
import math
import pickle
import ssl
import types
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import rfc8785
import yaml
from prometheus_client.parser import text_string_to_metric_families

from reference.operator import loop, scrape, signals, sinks, sources, tool_probe, triggers
from reference.operator.core import admission, candidates, configmap, consumer_config, model, ordering, scoring
from reference.operator.core.admission import (
    EXISTING_ONLY,
    FRESH,
    MISSING,
    NEW_AND_EXISTING,
    NOT_CONFIGURED,
    AdmissionMemory,
    Observation,
    Policy,
)
from reference.operator.core.locality import CROSS_REGION, SAME_REGION, SAME_SITE, SAME_ZONE, TIER_ORDER, UNKNOWN
from reference.operator.core.model import GatewayRef, GridNetworkSpec, GridSiteSpec, MetricSample, ResourceError
from reference.operator.core.ordering import ADMISSION_ORDER, Entry
from reference.operator.scrape import POOL_LABEL, ScrapeError, Scraper, ScrapeTarget
from reference.operator.sources import DirSource, Loaded, resource_files
from reference.overlay.digest import semantic_payload
from selfcheck.registry import Breakage, patch, registrar

__all__ = ["BREAKAGES", "Breakage", "apply"]

# The package re-exports its `render` function under the submodule's name, so reach the module directly.
render = importlib.import_module("reference.operator.core.render")


BREAKAGES: dict[str, Breakage] = {}
breakage = registrar(BREAKAGES)


def apply(name: str) -> None:
    """Apply the named breakage to the imported operator modules; KeyError for an unknown name."""
    BREAKAGES[name].apply()


_patch = patch


def _unchecked() -> None:
    """Publish what was rendered without running the consumer's validator over it first."""
    _patch(render, "check", lambda envelope, *args, **kwargs: None)


# -------------------------------------------------------------------------------------------- ordering

_SPEC_KEYS = {"geographyFirst": ("admission", "tier", "stale", "score"),
              "scoreFirst": ("admission", "stale", "score", "tier")}


@functools.total_ordering
class _Descending:
    """A string that sorts in reverse."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and self.text == other.text

    def __lt__(self, other: _Descending) -> bool:
        return self.text > other.text

    def __hash__(self) -> int:
        return hash(self.text)


def _tie(entry: Entry) -> tuple[Any, ...]:
    return (entry.site, entry.name, entry.cluster, entry.kind)


def _sort_by(keys: Mapping[str, tuple[str, ...]], tie: Callable[[Entry], tuple[Any, ...]] = _tie,
             ascending_score: bool = False) -> None:
    """Replace the order of the sort keys per policy (names from `_SPEC_KEYS`) or the tie-break."""

    def sort_key(entry: Entry, routing_policy: str) -> tuple[Any, ...]:
        parts = {"admission": ADMISSION_ORDER[entry.admission_state], "tier": TIER_ORDER[entry.tier],
                 "stale": 0 if entry.fresh else 1, "score": entry.score if ascending_score else -entry.score}
        return (*(parts[name] for name in keys[routing_policy]), *tie(entry))

    _patch(ordering, "sort_key", sort_key)


@breakage("locality-before-admission", "locality is compared before admission under both policies")
def _locality_before_admission() -> None:
    _sort_by({policy: ("tier", *(k for k in keys if k != "tier")) for policy, keys in _SPEC_KEYS.items()})


@breakage("freshness-ignored", "Degraded (stale) candidates are ordered as if they were fresh")
def _freshness_ignored() -> None:
    _sort_by({policy: tuple(k for k in keys if k != "stale") for policy, keys in _SPEC_KEYS.items()})


@breakage("score-ascending", "candidates are ordered by score ascending: the more loaded provider first")
def _score_ascending() -> None:
    _sort_by(_SPEC_KEYS, ascending_score=True)


@breakage("tie-break-reversed", "the (site, name, cluster) tie-break is applied in descending order")
def _tie_break_reversed() -> None:
    _sort_by(_SPEC_KEYS, tie=lambda e: tuple(_Descending(part) for part in _tie(e)))


@breakage("score-splits-groups", "a change of score starts a new selection group")
def _score_splits_groups() -> None:
    original = ordering.group_key
    _patch(ordering, "group_key", lambda entry, routing_policy: (*original(entry, routing_policy), entry.score))


def _reorder(fix: Callable[[list[Entry]], list[Entry]]) -> None:
    """Post-process the ordered entries (ranks and groups assigned) before they become candidates."""
    original = candidates.order
    _patch(candidates, "order", lambda entries, routing_policy: fix(original(entries, routing_policy)))


@breakage("ranks-per-capability", "ranks restart at 0 for every model instead of counting the whole list")
def _ranks_per_capability() -> None:
    def fix(entries: list[Entry]) -> list[Entry]:
        seen: dict[tuple[str, str], int] = {}
        out = []
        for entry in entries:
            capability = (entry.kind, entry.name)
            out.append(dataclasses.replace(entry, rank=seen.get(capability, 0)))
            seen[capability] = seen.get(capability, 0) + 1
        return out

    _reorder(fix)


@breakage("ranks-before-dedup", "ranks are numbered over the sorted list before repeated candidates are dropped")
def _ranks_before_dedup() -> None:
    original = ordering.order

    def order(entries: list[Entry], routing_policy: str) -> list[Entry]:
        ordered = sorted(entries, key=lambda e: ordering.sort_key(e, routing_policy))
        position: dict[tuple[str, str, str, str], int] = {}
        for index, entry in enumerate(ordered):
            position.setdefault(entry.identity, index)  # the kept (first) copy's place before the repeat goes
        return [dataclasses.replace(e, rank=position[e.identity]) for e in original(entries, routing_policy)]

    _patch(candidates, "order", order)


@breakage("groups-across-capabilities", "selection groups are numbered over the whole list, not per capability")
def _groups_across_capabilities() -> None:
    def fix(entries: list[Entry]) -> list[Entry]:
        out: list[Entry] = []
        number, previous = 0, None
        for entry in entries:
            key = (entry.admission_state, entry.tier, entry.fresh)
            if previous is not None and key != previous:
                number += 1
            previous = key
            out.append(dataclasses.replace(entry, selection_group=number))
        return out

    _reorder(fix)
    _unchecked()


# -------------------------------------------------------------------------------------------- locality

Tier = Callable[[str, str, Mapping[str, GridSiteSpec]], str]


def _tier(fix: Callable[[str, GridSiteSpec | None, GridSiteSpec | None], str]) -> None:
    original: Tier = candidates.derive_tier

    def derive_tier(consumer_site: str, provider_site: str, sites: Mapping[str, GridSiteSpec]) -> str:
        return fix(original(consumer_site, provider_site, sites), sites.get(consumer_site), sites.get(provider_site))

    _patch(candidates, "derive_tier", derive_tier)


@breakage("zone-without-region", "zones are compared before (and without) regions: a shared zone name is same_zone")
def _zone_without_region() -> None:
    original: Tier = candidates.derive_tier

    def derive_tier(consumer_site: str, provider_site: str, sites: Mapping[str, GridSiteSpec]) -> str:
        consumer, provider = sites.get(consumer_site), sites.get(provider_site)
        if consumer_site != provider_site and consumer is not None and provider is not None \
                and consumer.zone is not None and consumer.zone == provider.zone:
            return SAME_ZONE
        return original(consumer_site, provider_site, sites)

    _patch(candidates, "derive_tier", derive_tier)


@breakage("same-region-as-cross-region", "another zone of the consumer's region is ranked as cross_region")
def _same_region_as_cross_region() -> None:
    _tier(lambda tier, consumer, provider: CROSS_REGION if tier == SAME_REGION else tier)


@breakage("missing-region-matches", "two GridSites without a region count as the same region")
def _missing_region_matches() -> None:
    def fix(tier: str, consumer: GridSiteSpec | None, provider: GridSiteSpec | None) -> str:
        both_blank = consumer is not None and provider is not None and consumer.region is None \
            and provider.region is None
        return SAME_REGION if tier == UNKNOWN and both_blank else tier

    _tier(fix)


@breakage("own-site-needs-geography", "the consumer's own site is same_site only when its GridSite has a region")
def _own_site_needs_geography() -> None:
    def fix(tier: str, consumer: GridSiteSpec | None, provider: GridSiteSpec | None) -> str:
        no_region = consumer is None or consumer.region is None
        return UNKNOWN if tier == SAME_SITE and no_region else tier

    _tier(fix)


# ------------------------------------------------------------------------------- exclusion and access


def _providers_read_as(fix: Callable[[Mapping[str, Any], model.ProviderSpec], model.ProviderSpec]) -> None:
    """Read each InferenceProvider as `fix(resource, spec)` instead of the spec the operator parsed."""
    original = model.provider_from_resource
    _patch(model, "provider_from_resource", lambda obj: fix(obj, original(obj)))


@breakage("unavailable-kept", "an Unavailable provider is kept as a Degraded (stale) candidate")
def _unavailable_kept() -> None:
    _providers_read_as(lambda obj, spec: dataclasses.replace(spec, phase="Degraded")
                       if spec.phase == "Unavailable" else spec)


@breakage("api-provider-dropped", "only self-hosted backends are rendered: a backendKind api_provider provider is "
          "treated as Unavailable")
def _api_provider_dropped() -> None:
    _providers_read_as(lambda obj, spec: dataclasses.replace(spec, phase="Unavailable")
                       if (obj.get("spec") or {}).get("backendKind") == "api_provider" else spec)


@breakage("no-metrics-all-fresh", "with the noMetrics strategy nothing counts as stale: Degraded providers are "
          "published fresh")
def _no_metrics_all_fresh() -> None:
    original = candidates.local_entries

    def local_entries(network: GridNetworkSpec, *args: Any) -> list[Entry]:
        entries = original(network, *args)
        if network.scoring_strategy == "noMetrics":
            entries = [dataclasses.replace(entry, fresh=True) for entry in entries]
        return entries

    _patch(candidates, "local_entries", local_entries)


@breakage("consumer-config-verbatim", "the generated consumer config copies overlay candidates verbatim, "
          "overlay-only fields included")
def _consumer_config_verbatim() -> None:
    _patch(consumer_config, "_static_candidate", lambda candidate, local_site: dict(candidate))


@breakage("consumer-config-kept", "a generated consumer config stays in place once no inference candidate is left")
def _consumer_config_kept() -> None:
    original = render.render_consumer_config

    def keep(*args: Any, **kwargs: Any) -> consumer_config.ConsumerConfigOutput:
        output = original(*args, **kwargs)
        if output.configmap is None and output.problem is None:
            return dataclasses.replace(output, problem="no inference candidates; the last config stays")
        return output

    _patch(render, "render_consumer_config", keep)


@breakage("unhealthy-kept", "a provider reporting no ready pods is not excluded")
def _unhealthy_kept() -> None:
    _patch(Observation, "hard_failure", property(lambda self: False))


Allowed = Callable[[Mapping[str, str], GatewayRef, Mapping[str, GridSiteSpec]], bool]


@breakage("access-fails-open", "a siteSelector lets an unknown consumer site (no GridSite) see the provider")
def _access_fails_open() -> None:
    original: Allowed = candidates.consumer_allowed

    def consumer_allowed(selector: Mapping[str, str], gateway: GatewayRef, sites: Mapping[str, GridSiteSpec]) -> bool:
        return gateway.local_site not in sites or original(selector, gateway, sites)

    _patch(candidates, "consumer_allowed", consumer_allowed)


@breakage("access-selector-ignored", "accessPolicy.siteSelector is ignored: every consumer sees every provider")
def _access_selector_ignored() -> None:
    _patch(candidates, "consumer_allowed", lambda selector, gateway, sites: True)


@breakage("tools-allowlist-ignored", "every discovered tool becomes a candidate whatever spec.tools allows")
def _tools_allowlist_ignored() -> None:
    _patch(candidates, "allowed_tools", lambda provider: list(dict.fromkeys(provider.discovered_tools)))


def _tool_providers(fix: Callable[[model.ToolProviderSpec], model.ToolProviderSpec]) -> None:
    """Change what the tool path sees of each AgentToolProvider (the inference path is untouched)."""
    original = candidates.tool_entries

    def tool_entries(gateway: GatewayRef, tool_providers: list[model.ToolProviderSpec],
                     sites: Mapping[str, GridSiteSpec]) -> list[Entry]:
        entries: list[Entry] = original(gateway, [fix(p) for p in tool_providers], sites)
        return entries

    _patch(candidates, "tool_entries", tool_entries)


def _tools_through_inference(field: str) -> None:
    """The tool path borrows one signal of the InferenceProvider on the same cluster: its admission state,
    its queue score or its capacityWeight (the inference path is untouched)."""

    def build_candidates(network: GridNetworkSpec, gateway: GatewayRef, providers: list[model.ProviderSpec],
                         states: Mapping[str, candidates.ProviderState], tool_providers: list[model.ToolProviderSpec],
                         records: list[model.RemoteProviderRecord], policy: Policy,
                         sites: Mapping[str, GridSiteSpec]) -> list[dict[str, Any]]:
        pools = {provider.cluster: provider for provider in providers}
        entries = candidates.local_entries(network, gateway, providers, states, sites)
        for entry in candidates.tool_entries(gateway, tool_providers, sites):
            pool = pools.get(entry.cluster)
            state = states.get(pool.name) if pool is not None else None
            if pool is not None and state is not None and state.admission_state != admission.EXCLUDED:
                borrowed: dict[str, Any] = {"admission_state": state.admission_state,
                            "score": scoring.score(network.scoring_strategy, state.signals),
                            "capacity_weight": pool.capacity_weight}
                entry = dataclasses.replace(entry, **{field: borrowed[field]})
            entries.append(entry)
        entries += candidates.remote_entries(network, gateway, records, policy, sites)
        return candidates.to_dicts(candidates.order(entries, network.routing_policy), network)

    _patch(render, "build_candidates", build_candidates)


@breakage("tools-admitted-by-pool", "a tool candidate takes the admission state of the same-cluster inference pool")
def _tools_admitted_by_pool() -> None:
    _tools_through_inference("admission_state")


@breakage("tools-scored-by-pool", "tool candidates are ordered by the queue score of the same-cluster inference pool")
def _tools_scored_by_pool() -> None:
    _tools_through_inference("score")


@breakage("tools-capacity-weighted", "a tool candidate's traffic_weight is the same-cluster provider's capacityWeight")
def _tools_capacity_weighted() -> None:
    _tools_through_inference("capacity_weight")


@breakage("tool-unavailable-kept", "an Unavailable AgentToolProvider still publishes its tools (the phase is not read)")
def _tool_unavailable_kept() -> None:
    _tool_providers(lambda p: dataclasses.replace(p, phase=None) if p.phase == "Unavailable" else p)


@breakage("tool-access-ignored", "the tool path skips accessPolicy.siteSelector: every consumer sees every tool")
def _tool_access_ignored() -> None:
    _tool_providers(lambda p: dataclasses.replace(p, access_selector={}))


@breakage("tool-allowlist-undiscovered", "a non-empty spec.tools is published as is, discovered or not")
def _tool_allowlist_undiscovered() -> None:
    def allowed_tools(provider: model.ToolProviderSpec) -> list[str]:
        return list(dict.fromkeys(provider.tools or provider.discovered_tools))

    _patch(candidates, "allowed_tools", allowed_tools)


# -------------------------------------------------------------------------------------------- envelope


def _wrap_envelope(fix: Callable[[dict[str, Any], datetime], None], source_generation: int | None = None) -> None:
    """Post-process each envelope; `source_generation` replaces the GridNetwork's generation when given."""
    original = render.build_envelope

    def build_envelope(overlay: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if source_generation is not None:
            kwargs["generation"] = source_generation
        envelope: dict[str, Any] = original(overlay, **kwargs)
        fix(envelope, kwargs["rendered_at"])
        return envelope

    _patch(render, "build_envelope", build_envelope)


@breakage("timestamp-in-digest", "the revision and content digest cover provenance.rendered_at as well")
def _timestamp_in_digest() -> None:
    def fix(envelope: dict[str, Any], rendered_at: datetime) -> None:
        stamp = rendered_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        envelope["provenance"]["rendered_at"] = stamp
        digested = {**semantic_payload(envelope["overlay"]), "rendered_at": stamp}
        digest = hashlib.sha256(rfc8785.dumps(digested)).hexdigest()
        envelope["revision"]["value"] = envelope["content_digest"]["value"] = digest

    _wrap_envelope(fix)
    _unchecked()


@breakage("generation-fixed", "provenance.source_generation is always 1 instead of the GridNetwork's generation")
def _generation_fixed() -> None:
    _wrap_envelope(lambda envelope, rendered_at: None, source_generation=1)


@breakage("configmap-rewritten", "the ConfigMap is rewritten on every reconcile, even when its revision is unchanged")
def _configmap_rewritten() -> None:
    _patch(sinks, "needs_write", lambda existing, rendered: True)


def _name_rule(rule: Callable[[str, str, str], str]) -> None:
    """Replace the ConfigMap name rule wherever the operator applies it (object and status)."""

    def configmap_name(network: str, gateway: str, kind: str = "grid-overlay") -> str:
        return rule(network, gateway, kind)

    _patch(configmap, "configmap_name", configmap_name)
    _patch(sinks, "configmap_name", configmap_name)


@breakage("long-name-truncated-wrong", "a ConfigMap name over 63 characters is cut at 63, without the hash")
def _long_name_truncated_wrong() -> None:
    _name_rule(lambda network, gateway, kind: f"{kind}-{network}-{gateway}"[: configmap.MAX_NAME].rstrip("-"))


@breakage("configmap-named-after-network", "the ConfigMap is named grid-overlay-{network}, without the gateway")
def _configmap_named_after_network() -> None:
    _name_rule(lambda network, gateway, kind: f"{kind}-{network}")


@breakage("legacy-key-frozen", "routing-config.json keeps the overlay of the ConfigMap's first write")
def _legacy_key_frozen() -> None:
    original = render.build_configmap
    first: dict[tuple[str, str], str] = {}

    def build_configmap(envelope: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        built: dict[str, Any] = original(envelope, *args, **kwargs)
        metadata = built["metadata"]
        key = (metadata["namespace"], metadata["name"])
        built["data"][configmap.LEGACY_KEY] = first.setdefault(key, built["data"][configmap.LEGACY_KEY])
        return built

    _patch(render, "build_configmap", build_configmap)


@breakage("legacy-key-missing", "the ConfigMap carries routing-overlay.json only, without routing-config.json")
def _legacy_key_missing() -> None:
    original = render.build_configmap

    def build_configmap(envelope: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        built: dict[str, Any] = original(envelope, *args, **kwargs)
        built["data"].pop(configmap.LEGACY_KEY, None)
        return built

    _patch(render, "build_configmap", build_configmap)


@breakage("selection-policy-dropped", "selectionPolicy.mode never reaches overlay.selection_policy")
def _selection_policy_dropped() -> None:
    original = render.build_overlay
    _patch(render, "build_overlay",
           lambda network, local_site, found, selection_mode, *args: original(network, local_site, found, None, *args))
    _unchecked()


def _network(fix: Callable[[GridNetworkSpec], GridNetworkSpec]) -> None:
    original = model.network_from_resource
    _patch(model, "network_from_resource", lambda obj: fix(original(obj)))


@breakage("default-mode-invented", "a network without selectionPolicy is published as roundRobin")
def _default_mode_invented() -> None:
    _network(lambda spec: spec if spec.selection_mode else dataclasses.replace(spec, selection_mode="roundRobin"))


@breakage("first-gateway-only", "only the first gatewayRef of a network is rendered")
def _first_gateway_only() -> None:
    _network(lambda spec: dataclasses.replace(spec, gateway_refs=spec.gateway_refs[:1]))


@breakage("one-perspective", "every gateway of a network is ranked from the first gateway's local site")
def _one_perspective() -> None:
    original = render.build_candidates

    def build_candidates(network: GridNetworkSpec, gateway: GatewayRef, *args: Any) -> list[dict[str, Any]]:
        first = network.gateway_refs[0].local_site
        found: list[dict[str, Any]] = original(network, dataclasses.replace(gateway, local_site=first), *args)
        return found

    _patch(render, "build_candidates", build_candidates)


# ---------------------------------------------------------------------------------------------- status


GatewayEntry = Callable[..., dict[str, Any]]


def _wrap_status(fix: Callable[[dict[str, Any]], None]) -> None:
    original: GatewayEntry = sinks.DirSink._gateway

    def gateway(self: sinks.DirSink, *args: Any) -> dict[str, Any]:
        entry = original(self, *args)
        fix(entry)
        return entry

    _patch(sinks.DirSink, "_gateway", gateway)


@breakage("status-not-distributed", "status never reports a distributed revision or phase Distributed")
def _status_not_distributed() -> None:
    def fix(entry: dict[str, Any]) -> None:
        entry.pop("distributedRevision", None)
        if entry.get("phase") == "Distributed":
            entry.update(phase="Rendered", reason="Rendered")

    _wrap_status(fix)


@breakage("distributed-when-rendered", "status names the rendered revision distributed even when writing the "
          "ConfigMap failed")
def _distributed_when_rendered() -> None:
    def fix(entry: dict[str, Any]) -> None:
        if entry.get("reason") == "WriteFailed":
            entry.update(distributedRevision=entry.get("renderedRevision"), phase="Distributed", reason="Distributed")

    _wrap_status(fix)


@breakage("candidate-count-providers", "status.candidateCount counts providers (site, cluster), not candidates")
def _candidate_count_providers() -> None:
    original = loop.render

    def render_(*args: Any, **kwargs: Any) -> list[Any]:
        out = []
        for rendered in original(*args, **kwargs):
            rows = rendered.envelope["overlay"]["candidates"]
            providers = len({(row["site"], row["cluster"]) for row in rows})
            out.append(dataclasses.replace(rendered, candidate_count=providers))
        return out

    _patch(loop, "render", render_)


@breakage("invalid-not-reported", "resources that break their CRD schema are skipped without a log line")
def _invalid_not_reported() -> None:
    original = DirSource.load

    def load(self: DirSource) -> Loaded:
        loaded = original(self)
        return Loaded(loaded.resources, loaded.objects, ())

    _patch(DirSource, "load", load)


# ------------------------------------------------------------------------------ credentials and weights


@breakage("credential-dropped", "the provider's auth secretRef never reaches its candidate")
def _credential_dropped() -> None:
    _patch(candidates, "credential_dict", lambda credential: None)


def _secret_values(directory: Path) -> dict[str, str]:
    """Every value of every Secret in the resource directory, by secret/key."""
    values: dict[str, str] = {}
    for path in resource_files(directory):
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        for doc in documents:
            if not isinstance(doc, dict) or doc.get("kind") != "Secret":
                continue
            name = str((doc.get("metadata") or {}).get("name"))
            for key, value in (doc.get("stringData") or {}).items():
                values[f"{name}/{key}"] = str(value)
            for key, value in (doc.get("data") or {}).items():
                values[f"{name}/{key}"] = base64.b64decode(str(value)).decode(errors="replace")
    return values


@breakage("token-leak", "the resolved credential token values are written into the GridNetwork status")
def _token_leak() -> None:
    resolved: dict[str, str] = {}
    original = loop.Operator.reconcile

    async def reconcile(self: loop.Operator, loaded: Loaded) -> bool:
        resolved.clear()
        resolved.update(_secret_values(cast(DirSource, self.source).directory))
        result: bool = await original(self, loaded)
        return result

    def fix(entry: dict[str, Any]) -> None:
        if resolved:
            entry["resolvedCredentials"] = dict(resolved)

    _patch(loop.Operator, "reconcile", reconcile)
    _wrap_status(fix)


@breakage("dynamic-as-static", "dynamic placement publishes each capacityWeight as it is, ignoring pressure")
def _dynamic_as_static() -> None:
    _patch(candidates, "traffic_weight", lambda entry, network: entry.capacity_weight)


@breakage("weights-not-copied", "traffic_weight is always 1 instead of the provider's capacityWeight")
def _weights_not_copied() -> None:
    original = candidates.to_dicts

    def to_dicts(entries: list[Entry], network: GridNetworkSpec) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = original(entries, network)
        for row in rows:
            if "traffic_weight" in row:
                row["traffic_weight"] = 1
        return rows

    _patch(candidates, "to_dicts", to_dicts)


@breakage("weights-always", "traffic_weight is published whatever the placement and selection mode")
def _weights_always() -> None:
    _patch(candidates, "weighted", lambda network: True)
    _unchecked()
    _unchecked()


@breakage("weights-from-mode", "traffic_weight is published whenever the mode is weightedRandom, static placement "
          "or not")
def _weights_from_mode() -> None:
    _patch(candidates, "weighted", lambda network: network.selection_mode == "weightedRandom")


def _weight_bound(upper: int) -> None:
    """capacityWeight accepted in 1..`upper` instead of 1..1000, by both of the operator's checks (the CRD schema
    check of the dir source and the model's own range check): one bound written off by one."""
    original = model.provider_from_resource
    original_errors = sources.schema_errors

    def weight(obj: Any) -> Any:
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        value = spec.get("capacityWeight") if isinstance(spec, Mapping) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def as_valid(obj: Any) -> Any:
        """A weight the broken bound accepts but the CRD's does not is checked as 1000 would be."""
        value = weight(obj)
        if value is not None and 1000 < value <= upper:
            return {**obj, "spec": {**obj["spec"], "capacityWeight": 1000}}
        return obj

    def schema_errors(obj: Any, kinds: Any) -> list[str]:
        errors: list[str] = original_errors(as_valid(obj), kinds)
        value = weight(obj)
        if value is not None and upper < value <= 1000:
            errors.append(f"spec.capacityWeight: {value} is greater than the maximum of {upper}")
        return errors

    def provider_from_resource(obj: Mapping[str, Any]) -> model.ProviderSpec:
        spec = original(as_valid(obj))
        value = weight(obj)
        if value is None:
            return spec
        if not 1 <= value <= upper:
            raise ResourceError(f"spec.capacityWeight: must be 1..{upper}")
        return dataclasses.replace(spec, capacity_weight=value)

    _patch(sources, "schema_errors", schema_errors)
    _patch(model, "provider_from_resource", provider_from_resource)


@breakage("weight-bound-exclusive", "capacityWeight is bounded 1..999 (1000 taken as exclusive): 1000 is refused")
def _weight_bound_exclusive() -> None:
    _weight_bound(999)


@breakage("weight-bound-1001", "capacityWeight is bounded 1..1001 (one too high): 1001 accepted")
def _weight_bound_1001() -> None:
    _weight_bound(1001)
    _unchecked()


# --------------------------------------------------------------------------------------------- scoring


@breakage("neutral-zero", "a provider without a usable sample scores 0 instead of the neutral 0.5")
def _neutral_zero() -> None:
    _patch(scoring, "NEUTRAL", 1.0)  # score = 1 - NEUTRAL; admission keeps its own neutral pressure


def _score(fix: Callable[[Callable[[str, Any], float], str, Any], float]) -> None:
    original = candidates.score
    _patch(candidates, "score", lambda strategy, signals: fix(original, strategy, signals))


@breakage("no-metrics-scored", "scoringPolicy noMetrics (or none) still scores providers by queue depth")
def _no_metrics_scored() -> None:
    _score(lambda score, strategy, signals: score("queueDepth" if strategy == "noMetrics" else strategy, signals))


@breakage("queue-capacity-ignored", "raw queue depths are scored without dividing by queueCapacity")
def _queue_capacity_ignored() -> None:
    original = render.normalise_queue
    _patch(render, "normalise_queue", lambda raw, queue_capacity: original(raw, None))


@breakage("no-clamp", "queue/queueCapacity is not clamped to [0, 1]")
def _no_clamp() -> None:
    def normalise_queue(raw: float | None, queue_capacity: int | None) -> float | None:
        value = scoring.finite(raw)
        return None if value is None else value / (queue_capacity or 1)

    _patch(render, "normalise_queue", normalise_queue)


@breakage("queue-capacity-assumed", "a queue series without queueCapacity is divided by a default capacity of 10")
def _queue_capacity_assumed() -> None:
    original = render.normalise_queue
    _patch(render, "normalise_queue", lambda raw, queue_capacity: original(raw, queue_capacity or 10))


@breakage("strategy-cached", "a network keeps the scoring strategy it was first rendered with")
def _strategy_cached() -> None:
    first: dict[str, str] = {}

    def fix(spec: GridNetworkSpec) -> GridNetworkSpec:
        strategy = first.setdefault(spec.name, spec.scoring_strategy)
        return dataclasses.replace(spec, scoring_strategy=strategy)

    _network(fix)


@breakage("local-phase-filtered", "local providers hosted at a site whose GridSite is not Active are left out")
def _local_phase_filtered() -> None:
    original = candidates.local_entries

    def local_entries(network: GridNetworkSpec, gateway: GatewayRef, providers: list[model.ProviderSpec],
                      states: Mapping[str, Any], sites: Mapping[str, GridSiteSpec]) -> list[Entry]:
        return [e for e in original(network, gateway, providers, states, sites)
                if e.site not in sites or sites[e.site].phase == "Active"]

    _patch(candidates, "local_entries", local_entries)


@breakage("periodic-ignored", "the operator reconciles on resource changes and forced refreshes only")
def _periodic_ignored() -> None:
    original = triggers.Triggers.due

    def due(self: triggers.Triggers, interval: float, current_fingerprint: str,
            tokens: Mapping[str, str]) -> list[str]:
        return [reason for reason in original(self, interval, current_fingerprint, tokens) if reason != "periodic"]

    _patch(triggers.Triggers, "due", due)


def _resources_as(fix: Callable[[model.Resources], model.Resources]) -> None:
    """Render from `fix(resources)` instead of the resources the operator read."""
    original = loop.render
    _patch(loop, "render", lambda resources, *args, **kwargs: original(fix(resources), *args, **kwargs))


@breakage("providers-across-networks", "every network lists every provider and tool provider, whatever it references")
def _providers_across_networks() -> None:
    def everywhere(resources: model.Resources) -> model.Resources:
        nets = [n.name for n in resources.networks]
        return dataclasses.replace(
            resources,
            providers=tuple(dataclasses.replace(p, network=n) for p in resources.providers for n in nets),
            tool_providers=tuple(dataclasses.replace(t, network=n) for t in resources.tool_providers for n in nets))

    _resources_as(everywhere)


@breakage("signal-name-falls-back", "a configured signal name that matches no series falls back to the default name")
def _signal_name_falls_back() -> None:
    original = scrape.extract

    def extract(text: str, target: ScrapeTarget) -> dict[str, float]:
        found = original(text, target)
        missing = {s: _DEFAULT_NAMES[s] for s in target.signal_names if s not in found and s in _DEFAULT_NAMES}
        if missing:
            found.update({k: v for k, v in original(text, dataclasses.replace(target, signal_names=missing)).items()
                          if k not in found})
        return found

    _patch(scrape, "extract", extract)


@breakage("scores-as-weights", "with a metrics strategy active every candidate is published with a traffic_weight")
def _scores_as_weights() -> None:
    original = candidates.weighted
    _patch(candidates, "weighted", lambda network: original(network) or network.scoring_strategy != "noMetrics")
    _unchecked()


@breakage("kv-scored-squared", "kvCachePressure scores 1 - kv^2 instead of 1 - kv")
def _kv_scored_squared() -> None:
    def fix(score: Callable[[str, Any], float], strategy: str, signals: Any) -> float:
        kv = signals.kv_cache_utilization if signals is not None else None
        if strategy != "kvCachePressure" or kv is None:
            return score(strategy, signals)
        return 1.0 - kv * kv

    _score(fix)


def _policy_as(fix: Callable[[Policy, Any], Policy]) -> None:
    """Use `fix(policy, admissionPolicy)` instead of the admission policy read from a network's spec."""
    original = Policy.from_spec.__func__  # type: ignore[attr-defined]

    def from_spec(cls: type[Policy], config: Any, strategy: str) -> Policy:
        return fix(cast(Policy, original(cls, config, strategy)), config)

    _patch(Policy, "from_spec", classmethod(from_spec))


@breakage("admission-reads-queue", "admission pressure is read from queue depth whatever the scoring strategy")
def _admission_reads_queue() -> None:
    _policy_as(lambda policy, config: dataclasses.replace(policy, signal="queueDepth")
               if policy.signal is not None else policy)


@breakage("tools-keyed-by-name", "an AgentToolProvider named like an InferenceProvider is dropped as a duplicate")
def _tools_keyed_by_name() -> None:
    def unique(resources: model.Resources) -> model.Resources:
        taken = {(p.network, p.name) for p in resources.providers}
        kept = tuple(t for t in resources.tool_providers if (t.network, t.name) not in taken)
        return dataclasses.replace(resources, tool_providers=kept)

    _resources_as(unique)


@breakage("nan-kept", "NaN and infinite samples are used as values instead of being discarded")
def _nan_kept() -> None:
    def finite(value: float | None) -> float | None:
        return None if value is None or isinstance(value, bool) else float(value)

    _patch(scrape, "math", types.SimpleNamespace(isfinite=lambda value: True))
    _patch(scoring, "finite", finite)


def _health_read_as(non_finite: Callable[[float], float | None]) -> None:
    """Prometheus text parsed as the reference does, except a non-finite ready-pods sample becomes `non_finite(v)`."""

    def extract(text: str, target: ScrapeTarget) -> dict[str, float]:
        wanted = {metric: signal for signal, metric in target.signal_names.items()}
        found: dict[str, float] = {}
        try:
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    signal = wanted.get(sample.name)
                    if signal is None or signal in found:
                        continue
                    if target.pool_name is not None and sample.labels.get(POOL_LABEL) != target.pool_name:
                        continue
                    value: float | None = float(sample.value)
                    if value is not None and not math.isfinite(value):
                        value = non_finite(value) if signal == "healthy" else None
                    if value is not None:
                        found[signal] = value
        except (ValueError, TypeError, IndexError) as exc:
            raise ScrapeError(f"unparsable metrics text: {exc}") from exc
        return found

    _patch(scrape, "extract", extract)


@breakage("health-nan-as-zero", "a NaN or infinite ready-pods sample is read as 0 ready pods (unhealthy)")
def _health_nan_as_zero() -> None:
    _health_read_as(lambda value: 0.0)


@breakage("health-non-finite-kept", "non-finite ready-pods samples are kept as values (NaN > 0 is false: unhealthy)")
def _health_non_finite_kept() -> None:
    _health_read_as(lambda value: value)


# --------------------------------------------------------------------------------------------- metrics

OnFailure = Callable[[Scraper, ScrapeTarget], MetricSample | None]


def _on_failure(fix: Callable[[OnFailure, Scraper, ScrapeTarget], MetricSample | None]) -> None:
    original: OnFailure = Scraper._on_failure
    _patch(Scraper, "_on_failure", lambda self, target: fix(original, self, target))


@breakage("stale-cache-wins", "inside staleMetricsSeconds the cached sample is served even when a scrape succeeds")
def _stale_cache_wins() -> None:
    original = Scraper.scrape_one

    async def scrape_one(self: Scraper, client: Any, target: ScrapeTarget) -> MetricSample | None:
        cached = self._cache.get(target.provider)
        if cached is not None and cached.good_until is not None and self._clock.now() <= cached.good_until:
            return dataclasses.replace(cached.sample, expires_at=cached.good_until)
        return await original(self, client, target)

    _patch(Scraper, "scrape_one", scrape_one)


@breakage("stale-sample-reused", "after a failed scrape the last good sample is reused forever")
def _stale_sample_reused() -> None:
    def fix(original: OnFailure, self: Scraper, target: ScrapeTarget) -> MetricSample | None:
        cached = self._cache.get(target.provider)
        return dataclasses.replace(cached.sample, expires_at=None) if cached else original(self, target)

    _on_failure(fix)


@breakage("stale-sample-dropped", "a failed scrape never reuses the last good sample, even inside its window")
def _stale_sample_dropped() -> None:
    def fix(original: OnFailure, self: Scraper, target: ScrapeTarget) -> MetricSample | None:
        self._cache.pop(target.provider, None)
        return original(self, target)

    _on_failure(fix)


@breakage("tools-not-probed", "tool providers are never probed: only tools already in their status are published")
def _tools_not_probed() -> None:
    async def discover_tools(self: loop.Operator, resources: Any) -> Any:
        return resources

    _patch(loop.Operator, "discover_tools", discover_tools)


@breakage("tools-probed-once", "each tool provider's MCP endpoint is probed once; later changes are never seen")
def _tools_probed_once() -> None:
    probe_all = tool_probe.probe_all
    seen: dict[str, tuple[str, ...]] = {}

    async def once(endpoints: Mapping[str, str]) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
        found, failed = await probe_all({name: url for name, url in endpoints.items() if name not in seen})
        seen.update(found)
        return {name: seen[name] for name in endpoints if name in seen}, failed

    _patch(tool_probe, "probe_all", once)


@breakage("tool-status-not-recorded", "discovered tools are published but never recorded in the provider's status")
def _tool_status_not_recorded() -> None:
    _patch(sinks.DirSink, "write_tool_status", lambda self, name, discovered: False)


def _keep_across_restarts(filename: str, attributes: Callable[[loop.Operator], dict[str, tuple[Any, str]]]) -> None:
    """Save the named in-memory state of the operator after every reconcile into its working directory
    (where each backend the judges use starts it) and load it back when a new process starts."""
    path = Path.cwd() / filename
    init, reconcile = loop.Operator.__init__, loop.Operator.reconcile

    def load(self: loop.Operator, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if path.exists():
            for name, value in pickle.loads(path.read_bytes()).items():
                owner, attribute = attributes(self)[name]
                setattr(owner, attribute, value)

    async def save(self: loop.Operator, loaded: Loaded) -> bool:
        outcome = await reconcile(self, loaded)
        state = {name: getattr(owner, attribute) for name, (owner, attribute) in attributes(self).items()}
        path.write_bytes(pickle.dumps(state))
        return outcome

    _patch(loop.Operator, "__init__", load)
    _patch(loop.Operator, "reconcile", save)


@breakage("stale-cache-kept-across-restart", "the last good scrape of each provider is saved to disk and reused by "
          "the next operator process")
def _stale_cache_kept_across_restart() -> None:
    _keep_across_restarts(".scrape-cache.pickle", lambda op: {"cache": (op.scraper, "_cache"),
                                                              "revision": (op.scraper, "_revision")})


@breakage("admission-kept-across-restart", "the stabilized admission counters are saved to disk and resumed by the "
          "next operator process")
def _admission_kept_across_restart() -> None:
    _keep_across_restarts(".admission.pickle", lambda op: {"entries": (op.memory, "_entries"),
                                                           "revision": (op.scraper, "_revision")})


@breakage("plaintext-fails-closed", "a failed plaintext scrape excludes the provider, as if it were TLS")
def _plaintext_fails_closed() -> None:
    _on_failure(lambda original, self, target: original(self, dataclasses.replace(target, tls=True)))


@breakage("tls-fails-open", "a failed TLS scrape scores neutral like a plaintext one instead of failing closed")
def _tls_fails_open() -> None:
    _on_failure(lambda original, self, target: original(self, dataclasses.replace(target, tls=False)))


@breakage("spec-tls-ignored", "only a metricsConfig.tls override counts as metrics TLS, not the provider's spec.tls")
def _spec_tls_ignored() -> None:
    def uses_tls(obj: Mapping[str, Any]) -> bool:
        config = (obj.get("spec") or {}).get("metricsConfig") or {}
        return isinstance(config.get("tls"), Mapping)

    _patch(scrape, "uses_tls", uses_tls)
    _patch(triggers, "uses_tls", uses_tls)


@breakage("metrics-ca-ignored", "TLS metrics endpoints are verified against the system CAs, not --metrics-ca")
def _metrics_ca_ignored() -> None:
    original = Scraper.__init__

    def init(self: Scraper, clock: model.Clock, ssl_context: Any = None) -> None:
        original(self, clock, None)

    _patch(Scraper, "__init__", init)


@breakage("scrape-once", "each provider is scraped once; later reconciles reuse that first sample")
def _scrape_once() -> None:
    original = Scraper.scrape_one

    async def scrape_one(self: Scraper, client: Any, target: ScrapeTarget) -> MetricSample | None:
        cached = self._cache.get(target.provider)
        if cached is not None:
            return dataclasses.replace(cached.sample, expires_at=None)
        sample: MetricSample | None = await original(self, client, target)
        return sample

    _patch(Scraper, "scrape_one", scrape_one)


def _extract(fix: Callable[[ScrapeTarget], ScrapeTarget]) -> None:
    original = scrape.extract
    _patch(scrape, "extract", lambda text, target: original(text, fix(target)))


@breakage("pool-filter-ignored", "the first series of a metric is read whatever its pool label")
def _pool_filter_ignored() -> None:
    _extract(lambda target: dataclasses.replace(target, pool_name=None))


#: The metric names a careless operator hard-codes instead of reading metricsConfig.signalNames.
_DEFAULT_NAMES = {"queueDepth": "inference_pool_average_queue_size",
                  "kvCacheUtilization": "inference_pool_average_kv_cache_utilization",
                  "healthy": "inference_pool_ready_pods"}


@breakage("signal-names-ignored", "metricsConfig.signalNames is ignored; fixed default metric names are read")
def _signal_names_ignored() -> None:
    _extract(lambda target: dataclasses.replace(target, signal_names=dict(_DEFAULT_NAMES)))


# ------------------------------------------------------------------------------------------- admission

Evaluate = Callable[[AdmissionMemory, str, Observation, Policy, float], str]


def _evaluate(fix: Callable[[Evaluate, AdmissionMemory, str, Observation, Policy, float], str]) -> None:
    original: Evaluate = AdmissionMemory.evaluate

    def evaluate(self: AdmissionMemory, key: str, observation: Observation, policy: Policy, now: float) -> str:
        return fix(original, self, key, observation, policy, now)

    _patch(AdmissionMemory, "evaluate", evaluate)


@breakage("pressure-ignored", "instantaneous admission never restricts a pressured provider to existing_only")
def _pressure_ignored() -> None:
    original = admission.instantaneous_state

    def instantaneous_state(observation: Observation, policy: Policy) -> str:
        state: str = original(observation, policy)
        return NEW_AND_EXISTING if state == EXISTING_ONLY and observation.kind == FRESH else state

    _patch(admission, "instantaneous_state", instantaneous_state)


@breakage("pressure-latched", "under instantaneous admission an existing_only provider never recovers")
def _pressure_latched() -> None:
    def fix(original: Evaluate, self: AdmissionMemory, key: str, observation: Observation, policy: Policy,
            now: float) -> str:
        before = self.state_of(key)
        state = original(self, key, observation, policy, now)
        if policy.mode == "instantaneous" and before == EXISTING_ONLY and state == NEW_AND_EXISTING:
            self._entries[key].state = state = EXISTING_ONLY
        return state

    _evaluate(fix)


def _stabilized_as(change: Callable[[Policy], Policy]) -> None:
    _evaluate(lambda original, self, key, observation, policy, now: original(
        self, key, observation, change(policy) if policy.mode == "stabilized" else policy, now))


@breakage("hysteresis-ignored", "a stabilized admissionPolicy behaves like instantaneous admission")
def _hysteresis_ignored() -> None:
    _stabilized_as(lambda policy: dataclasses.replace(policy, mode="instantaneous"))


@breakage("hold-down-ignored", "stabilized recovery does not wait for recoveryHoldDown")
def _hold_down_ignored() -> None:
    _stabilized_as(lambda policy: dataclasses.replace(policy, recovery_hold_down=0.0))


@breakage("minimum-state-on-entry-only", "minimumStateDuration holds a provider in new_and_existing, never in "
                                       "existing_only")
def _minimum_state_on_entry_only() -> None:
    original = AdmissionMemory._step

    def step(entry: Any, observation: Observation, policy: Policy, now: float) -> None:
        if entry.state == EXISTING_ONLY:
            policy = dataclasses.replace(policy, minimum_state_duration=0.0)
        original(entry, observation, policy, now)

    _patch(AdmissionMemory, "_step", staticmethod(step))


@breakage("interval-whole-seconds-only", "metricsRefreshInterval in milliseconds ('1500ms') is read as seconds")
def _interval_whole_seconds_only() -> None:
    original = triggers.parse_interval

    def parse_interval(text: str) -> float:
        value = original(text)
        return value * 1000.0 if isinstance(text, str) and text.endswith("ms") else value

    _patch(triggers, "parse_interval", parse_interval)


@breakage("malformed-interval-defaulted", "a metricsRefreshInterval the schema refuses is replaced by the 300 s "
          "default instead of failing the network's reconciliation")
def _malformed_interval_defaulted() -> None:
    original_errors, original_parse = sources.schema_errors, triggers.parse_interval

    def schema_errors(obj: Any, kinds: Any) -> list[str]:
        return [e for e in original_errors(obj, kinds) if "metricsRefreshInterval" not in e]

    def parse_interval(text: str) -> float:
        try:
            return original_parse(text)
        except ValueError:
            return triggers.DEFAULT_INTERVAL

    _patch(sources, "schema_errors", schema_errors)
    _patch(triggers, "parse_interval", parse_interval)


@breakage("recovery-kept-on-relapse", "a pressured sample in stabilized recovery does not reset the low-sample count")
def _recovery_kept_on_relapse() -> None:
    original = AdmissionMemory._step

    def step(entry: Any, observation: Observation, policy: Policy, now: float) -> None:
        counted = entry.recovery_count if entry.state == EXISTING_ONLY else 0
        original(entry, observation, policy, now)
        if entry.state == EXISTING_ONLY and entry.recovery_count == 0:
            entry.recovery_count = counted  # the relapse branch resets the hold-down start only

    _patch(AdmissionMemory, "_step", staticmethod(step))


def _observed_as(change: Callable[[Observation], Observation | None]) -> None:
    def fix(original: Evaluate, self: AdmissionMemory, key: str, observation: Observation, policy: Policy,
            now: float) -> str:
        changed = change(observation) if policy.mode == "stabilized" else None
        return original(self, key, changed or observation, policy, now)

    _evaluate(fix)


@breakage("missing-metrics-ignored", "a stabilized provider whose signal is missing is admitted as new_and_existing")
def _missing_metrics_ignored() -> None:
    _observed_as(lambda o: dataclasses.replace(o, kind=NOT_CONFIGURED) if o.kind == MISSING else None)


@breakage("pressure-defaults-own", "an omitted pressure block means enterThreshold 0.80 and failureThreshold 1")
def _pressure_defaults_own() -> None:
    _patch(admission, "_DEFAULT_PRESSURE", {**admission._DEFAULT_PRESSURE, "enterThreshold": 0.80,
                                            "failureThreshold": 1})


@breakage("recovery-defaults-own", "an omitted pressure block recovers at the first low sample: no hold-down, no "
                                 "minimum state duration")
def _recovery_defaults_own() -> None:
    def fix(policy: Policy, config: Any) -> Policy:
        if not isinstance(config, dict) or "pressure" in config:
            return policy
        return dataclasses.replace(policy, success_threshold=1, recovery_hold_down=0.0, minimum_state_duration=0.0)

    _policy_as(fix)


@breakage("minimum-state-default-zero", "an omitted pressure block has no minimum state duration")
def _minimum_state_default_zero() -> None:
    def fix(policy: Policy, config: Any) -> Policy:
        if not isinstance(config, dict) or "pressure" in config:
            return policy
        return dataclasses.replace(policy, minimum_state_duration=0.0)

    _policy_as(fix)


@breakage("missing-default-excluded", "an omitted missingMetrics is defaulted to excluded, not existingOnly")
def _missing_default_excluded() -> None:
    original = sources._fill_defaults

    def fill(value: Any, schema: Mapping[str, Any]) -> None:
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        if isinstance(value, dict) and isinstance(properties, Mapping) and "missingMetrics" in properties \
                and "missingMetrics" not in value:
            value["missingMetrics"] = "excluded"
        original(value, schema)

    _patch(sources, "_fill_defaults", fill)


@breakage("not-configured-as-missing", "a stabilized provider with no configured signal counts as missing metrics")
def _not_configured_as_missing() -> None:
    _observed_as(lambda o: dataclasses.replace(o, kind=MISSING) if o.kind == NOT_CONFIGURED else None)


@breakage("sample-counted-twice", "a sample reused inside the stale window counts as a new stabilized observation")
def _sample_counted_twice() -> None:
    _observed_as(lambda o: dataclasses.replace(o, revision=None) if o.kind == FRESH else None)


@breakage("stale-window-from-failure", "the stale window counts from the first failed scrape, not the last good one")
def _stale_window_from_failure() -> None:
    restarted: dict[str, object] = {}

    def fix(original: OnFailure, self: Scraper, target: ScrapeTarget) -> MetricSample | None:
        cached = self._cache.get(target.provider)
        if cached is not None and target.stale_seconds and restarted.get(target.provider) is not cached:
            cached = dataclasses.replace(cached, good_until=self._clock.now() + target.stale_seconds)
            self._cache[target.provider] = cached
            restarted[target.provider] = cached
        return original(self, target)

    _on_failure(fix)


@breakage("tier-names-hyphenated", "selection_tier is written as same-site, same-zone, same-region, cross-region")
def _tier_names_hyphenated() -> None:
    original = candidates.to_dicts

    def to_dicts(entries: list[Any], network: GridNetworkSpec) -> list[dict[str, Any]]:
        out = original(entries, network)
        for item in out:
            if isinstance(item.get("selection_tier"), str):
                item["selection_tier"] = item["selection_tier"].replace("_", "-")
        return out

    _patch(candidates, "to_dicts", to_dicts)


# ------------------------------------------------------------------------------------- reconcile cadences


@breakage("no-default-interval", "a network without metricsRefreshInterval is reconciled only on resource changes "
          "and forced refreshes: there is no periodic default")
def _no_default_interval() -> None:
    _patch(triggers, "DEFAULT_INTERVAL", 86400.0)


@breakage("tls-cadence-uncapped", "TLS metric credentials change nothing: the plaintext 300 s default and any "
          "custom interval apply to TLS networks as well")
def _tls_cadence_uncapped() -> None:
    _patch(triggers, "TLS_CAP", math.inf)


@breakage("tls-cap-default-only", "with TLS metrics the 60 s bound replaces only an absent interval: a custom one "
          "longer than 60 s is honoured")
def _tls_cap_default_only() -> None:
    def refresh_interval(objects: Any) -> float:
        objects = list(objects)
        custom = [triggers.parse_interval(o["spec"]["metricsRefreshInterval"]) for o in objects
                  if o.get("kind") == "GridNetwork" and (o.get("spec") or {}).get("metricsRefreshInterval")]
        if custom:
            return min(custom)
        tls = any(o.get("kind") == "InferenceProvider" and isinstance((o.get("spec") or {}).get("metricsConfig"),
                                                                         Mapping) and scrape.uses_tls(o)
                  for o in objects)
        return triggers.TLS_CAP if tls else triggers.DEFAULT_INTERVAL

    _patch(loop, "refresh_interval", refresh_interval)


# ------------------------------------------------------------------------------------- signals endpoint


@breakage("signals-in-flight-concluded", "the signals endpoint relays a conclusion, the pool's in-flight "
          "((running + waiting) * ready endpoints), as the running series and leaves waiting out, instead of the "
          "EPP's raw series")
def _signals_in_flight_concluded() -> None:
    original = signals.select

    def select(text: str, pool: str | None) -> dict[str, float]:
        found = dict(original(text, pool))
        running, waiting = signals.RELAYED[0], signals.RELAYED[1]
        ready = found.get(signals.RELAYED[2], 1.0)
        if running in found:
            found[running] = (found[running] + found.pop(waiting, 0.0)) * ready
        return found

    _patch(signals, "select", select)


@breakage("signals-without-client-certificates", "the signals endpoint is served over TLS to any client: no "
          "client certificate is asked for")
def _signals_without_client_certificates() -> None:
    original = signals.SignalsServer.start

    async def start(self: signals.SignalsServer, host: str, port: int, context: ssl.SSLContext) -> tuple[str, int]:
        context.verify_mode = ssl.CERT_NONE
        return await original(self, host, port, context)

    _patch(signals.SignalsServer, "start", start)
