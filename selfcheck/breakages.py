"""Named breakages of the reference gateway, each a monkeypatch of one behaviour the suites judge.

A breakage is applied in the gateway process before the gateway starts (see ``selfcheck.launch``). Each
one reproduces a mistake a real gateway could make (a skipped check, an off-by-one policy, a leaked
header) while the gateway still starts and serves valid input, so a conformance test that fails against it
fails because of the broken behaviour and not because the gateway is down.

Patches replace module or class attributes that the gateway looks up at call time; they never edit files.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import ssl
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from multidict import CIMultiDict

from reference.gateway import build, hop_headers, proxy, reload, routing_input, snapshot, snapshot_store, tls
from reference.gateway import config as gateway_config
from reference.gateway.affinity import SessionTable
from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters import credential_inject, intelligent_route, intelligent_route_config
from reference.gateway.filters.credential_inject import NS as CREDENTIAL_NS
from reference.gateway.filters.credential_inject import CredentialInjectFilter
from reference.gateway.filters.intelligent_route import IntelligentRouteFilter
from reference.gateway.filters.mcp import METHOD_KEY, McpFilter
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.reload import OverlayReloader
from reference.gateway.snapshot import ActiveGroup, CapabilityPlan, Snapshot
from reference.gateway.snapshot_store import ReplaceResult, SnapshotStore
from reference.overlay import CANDIDATE_KINDS, Candidate, Overlay, OverlayRejected, canonical_digest
from reference.overlay.validate import default_stable_id
from selfcheck.registry import Breakage, patch, registrar, wrap
from selfcheck.session_bindings import bound_elsewhere, one_binding_per_key

__all__ = ["BREAKAGES", "Breakage", "apply"]

NEW = "new_and_existing"
EXISTING_ONLY = "existing_only"
NONE = "none"


BREAKAGES: dict[str, Breakage] = {}
_register = registrar(BREAKAGES)


def breakage(name: str, summary: str,
             table: dict[str, Breakage] | None = None) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Register the decorated function as the breakage `name` in `table` (default: the gateway breakages)."""
    return (_register if table is None else registrar(table))(name, summary)


def apply(name: str) -> None:
    """Apply the named breakage to the imported gateway modules; KeyError for an unknown name."""
    BREAKAGES[name].apply()


_patch = patch


def _empty_snapshot(local_site: str, key: str) -> Snapshot:
    return Snapshot(Overlay(format="envelope", local_site=local_site, candidates=()), key)


# --------------------------------------------------------------------------------- overlay validation


@breakage("malformed-envelope-as-legacy", "a payload that fails envelope parsing is retried as a legacy payload")
def _malformed_envelope_as_legacy() -> None:
    original = snapshot_store.parse_overlay

    def parse(data: bytes, expected_scope: Mapping[str, str] | None = None,
              allowed_clusters: Iterable[str] | None = None) -> Overlay:
        try:
            return original(data, expected_scope, allowed_clusters)
        except OverlayRejected:
            if expected_scope:
                raise
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise
            legacy = {key: value for key, value in doc.items() if key in ("local_site", "network", "candidates")}
            return original(json.dumps(legacy).encode(), expected_scope, allowed_clusters)

    _patch(snapshot_store, "parse_overlay", parse)


def _route_config_as(fix: Callable[[dict[str, Any], Any], Any]) -> None:
    """Use `fix(raw, parsed)` instead of each parsed intelligent_route config block."""
    original = gateway_config.PARSERS[intelligent_route_config.TYPE]
    gateway_config.PARSERS[intelligent_route_config.TYPE] = lambda raw, path: fix(raw, original(raw, path))


@breakage("reload-off-by-default", "overlay mode hot-reloads only when reload.enabled is set explicitly")
def _reload_off_by_default() -> None:
    _route_config_as(lambda raw, parsed: parsed if "reload" in raw else dataclasses.replace(parsed,
                                                                                            reload_enabled=False))


@breakage("static-clusters-unchecked", "static candidates' clusters are not reported to pipeline validation")
def _static_clusters_unchecked() -> None:
    def fix(raw: dict[str, Any], parsed: Any) -> Any:
        if parsed.static is None or parsed.clusters is not None:
            return parsed
        return dataclasses.replace(parsed, reported=tuple(r for r in parsed.reported if ".candidates[" not in r[0]))

    _route_config_as(fix)


@breakage("accept-any-cold-start", "a cold-start overlay that fails validation serves an empty snapshot")
def _accept_any_cold_start() -> None:
    original = build.load_cold_start

    def load(path: Any, expected_scope: Mapping[str, str] | None, allowed_clusters: Iterable[str] | None) -> Snapshot:
        try:
            return original(path, expected_scope, allowed_clusters)
        except OverlayRejected:
            return _empty_snapshot((expected_scope or {}).get("local_site", "unknown"), "rejected-at-cold-start")

    _patch(build, "load_cold_start", load)


def _wrap_parse(check: Callable[[Overlay], None] | None = None,
                retry: Callable[[bytes, OverlayRejected], bytes | None] | None = None) -> None:
    """Wrap the parser the gateway's snapshot builder uses (cold start and reload alike)."""
    original = snapshot_store.parse_overlay

    def parse(data: bytes, expected_scope: Mapping[str, str] | None = None,
              allowed_clusters: Iterable[str] | None = None) -> Overlay:
        try:
            overlay = original(data, expected_scope, allowed_clusters)
        except OverlayRejected as exc:
            fixed = retry(data, exc) if retry is not None else None
            if fixed is None:
                raise
            overlay = original(fixed, expected_scope, allowed_clusters)
        if check is not None:
            check(overlay)
        return overlay

    _patch(snapshot_store, "parse_overlay", parse)


@breakage("accept-wrong-digest", "the content digest is re-derived from the payload instead of compared")
def _accept_wrong_digest() -> None:
    def re_derive(data: bytes, exc: OverlayRejected) -> bytes | None:
        if exc.reason != "digest_mismatch":
            return None
        doc = json.loads(data)
        computed = canonical_digest(doc["overlay"])
        declared = doc["content_digest"]["value"]
        doc["content_digest"]["value"] = computed
        if doc["revision"].get("value") == declared:
            doc["revision"]["value"] = computed
        return json.dumps(doc).encode()

    _wrap_parse(retry=re_derive)


@breakage("refuse-legacy", "legacy flat payloads are refused even when no scope is expected")
def _refuse_legacy() -> None:
    def check(overlay: Overlay) -> None:
        if overlay.format == "legacy":
            raise OverlayRejected("legacy_not_allowed", "legacy payloads are not supported")

    _wrap_parse(check=check)


@breakage("empty-is-invalid", "an envelope without candidates is rejected instead of served as no-route")
def _empty_is_invalid() -> None:
    def check(overlay: Overlay) -> None:
        if overlay.format == "envelope" and not overlay.candidates:
            raise OverlayRejected("empty_candidates", "envelope has no candidates")

    _wrap_parse(check=check)


@breakage("wrong-revision-header", "the hop revision is the SHA-256 of the file bytes, not the semantic revision")
def _wrong_revision_header() -> None:
    original = reload.build_snapshot

    def build_snapshot(data: bytes, expected_scope: Mapping[str, str] | None,
                       allowed_clusters: Iterable[str] | None) -> Snapshot:
        built = original(data, expected_scope, allowed_clusters)
        if built.revision is not None:
            built.revision = hashlib.sha256(data).hexdigest()
        return built

    _patch(reload, "build_snapshot", build_snapshot)


# ------------------------------------------------------------------------------------------ hot reload


def _wrap_reload(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace `OverlayReloader.reload` by `make(original)`; the wrapper passes on whatever the reloader
    gives a reload (such as a validation prepared during the debounce window)."""
    _patch(OverlayReloader, "reload", make(OverlayReloader.reload))


@breakage("drop-lkg-on-reject", "a rejected or unreadable reload swaps in an empty snapshot")
def _drop_lkg_on_reject() -> None:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        async def reload_(self: OverlayReloader, *args: Any) -> str:
            result: str = await original(self, *args)
            if result in ("rejected", "read_error"):
                store = self.route.store
                store.current = _empty_snapshot(store.current.local_site, "dropped")
            return result

        return reload_

    _wrap_reload(make)


@breakage("slow-reload", "every reload is applied six seconds after the change")
def _slow_reload() -> None:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        async def reload_(self: OverlayReloader, *args: Any) -> str:
            await asyncio.sleep(6.0)
            result: str = await original(self, *args)
            return result

        return reload_

    _wrap_reload(make)


@breakage("reload-once", "only the first reload after startup is applied; later changes are ignored")
def _reload_once() -> None:
    done: weakref.WeakSet[OverlayReloader] = weakref.WeakSet()

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        async def reload_(self: OverlayReloader, *args: Any) -> str:
            if self in done:
                return "ignored"
            done.add(self)
            result: str = await original(self, *args)
            return result

        return reload_

    _wrap_reload(make)


@breakage("stuck-after-reject", "after a rejected reload, later changes are ignored")
def _stuck_after_reject() -> None:
    stuck: weakref.WeakSet[OverlayReloader] = weakref.WeakSet()

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        async def reload_(self: OverlayReloader, *args: Any) -> str:
            if self in stuck:
                return "ignored"
            result: str = await original(self, *args)
            if result in ("rejected", "read_error"):
                stuck.add(self)
            return result

        return reload_

    _wrap_reload(make)


@breakage("ignore-allowlist", "the clusters allowlist is not applied on reload")
def _ignore_allowlist() -> None:
    original = OverlayReloader.__init__

    def init(self: OverlayReloader, route: IntelligentRouteFilter, metrics: GatewayMetrics) -> None:
        original(self, route, metrics)
        self._clusters = None

    _patch(OverlayReloader, "__init__", init)


@breakage("unchanged-swaps", "a reload with an unchanged revision still replaces the snapshot")
def _unchanged_swaps() -> None:
    original = SnapshotStore.replace

    def replace(self: SnapshotStore, candidate: Snapshot) -> ReplaceResult:
        result = original(self, candidate)
        if result.result == "unchanged":
            self.current = candidate
        return result

    _patch(SnapshotStore, "replace", replace)


@breakage("stale-revision", "for one second after a swap the hop revision names the previous snapshot")
def _stale_revision() -> None:
    stale: weakref.WeakKeyDictionary[SnapshotStore, tuple[float, str | None]] = weakref.WeakKeyDictionary()
    original_replace = SnapshotStore.replace
    original_route = IntelligentRouteFilter._route

    def replace(self: SnapshotStore, candidate: Snapshot) -> ReplaceResult:
        previous = self.current
        result = original_replace(self, candidate)
        if self.current is not previous:
            stale[self] = (time.monotonic() + 1.0, previous.revision)
        return result

    def route(self: IntelligentRouteFilter, ctx: RequestContext, snap: Snapshot, plan: CapabilityPlan,
              candidate: Candidate, outcome: str) -> None:
        original_route(self, ctx, snap, plan, candidate, outcome)
        until, previous = stale.get(self.store, (0.0, None))
        if previous is not None and time.monotonic() < until and hop_headers.REVISION in ctx.headers:
            ctx.headers[hop_headers.REVISION] = previous

    _patch(SnapshotStore, "replace", replace)
    _patch(IntelligentRouteFilter, "_route", route)


# ------------------------------------------------------------------------------- groups and selection


def _first_viable_group(eligible: frozenset[str], one_group: bool, last_first: bool = False) -> None:
    """Replace the snapshot's choice of the group fresh picks come from."""

    def first_viable(candidates: tuple[Candidate, ...], grouped: bool, mode: str) -> ActiveGroup | None:
        pool = [c for c in candidates if c.admission_state in eligible]
        if not grouped:
            return ActiveGroup(None, tuple(pool[:1])) if pool else None
        if mode == "weightedRandom":
            pool = [c for c in pool if (c.traffic_weight or 0) > 0]
        if one_group:
            return ActiveGroup(0, tuple(pool)) if pool else None
        numbers = sorted({c.selection_group for c in pool if c.selection_group is not None}, reverse=last_first)
        for number in numbers:
            return ActiveGroup(number, tuple(c for c in pool if c.selection_group == number))
        return None

    _patch(snapshot, "_first_viable_group", first_viable)


@breakage("ignore-groups", "selection treats all candidates of a capability as one group")
def _ignore_groups() -> None:
    _first_viable_group(frozenset({NEW}), one_group=True)


@breakage("last-group-first", "fresh picks come from the last viable selection group instead of the first")
def _last_group_first() -> None:
    _first_viable_group(frozenset({NEW}), one_group=False, last_first=True)


@breakage("existing-only-eligible", "existing_only candidates take new requests")
def _existing_only_eligible() -> None:
    _first_viable_group(frozenset({NEW, EXISTING_ONLY}), one_group=False)


@breakage("none-eligible", "admission_state none candidates take new requests")
def _none_eligible() -> None:
    _first_viable_group(frozenset({NEW, EXISTING_ONLY, NONE}), one_group=False)


Pick = Callable[[CapabilityPlan, Any], Candidate | None]


def _wrap_pick(mode: str, replacement: Callable[[CapabilityPlan, ActiveGroup, Any], Candidate]) -> None:
    """Replace fresh selection for one mode; other modes keep the gateway's own pick."""
    original: Pick = intelligent_route.pick

    def pick(plan: CapabilityPlan, rng: Any) -> Candidate | None:
        if plan.mode != mode or plan.group is None:
            return original(plan, rng)
        return replacement(plan, plan.group, rng)

    _patch(intelligent_route, "pick", pick)


@breakage("rr-all-groups", "round robin rotates over every new_and_existing candidate of every group")
def _rr_all_groups() -> None:
    def rotate(plan: CapabilityPlan, group: ActiveGroup, rng: Any) -> Candidate:
        pool = [c for c in plan.candidates if c.admission_state == NEW]
        index = group.cursor % len(pool)
        group.cursor = index + 1
        return pool[index]

    _wrap_pick("roundRobin", rotate)


@breakage("weights-off", "weightedRandom gives the first member ten points more than its share")
def _weights_off() -> None:
    def weighted(plan: CapabilityPlan, group: ActiveGroup, rng: Any) -> Candidate:
        members = group.members
        if len(members) == 1:
            return members[0]
        first_share = (members[0].traffic_weight or 0) / group.total
        if rng.random() < first_share + 0.10:
            return members[0]
        rest = members[1:]
        chosen: Candidate = rng.choices(rest, weights=[c.traffic_weight or 0 for c in rest])[0]
        return chosen

    _wrap_pick("weightedRandom", weighted)


@breakage("random-biased", "random picks the first member of the group half of the time")
def _random_biased() -> None:
    def biased(plan: CapabilityPlan, group: ActiveGroup, rng: Any) -> Candidate:
        members = group.members
        if len(members) == 1 or rng.random() < 0.5:
            return members[0]
        return members[1 + rng.randrange(len(members) - 1)]

    _wrap_pick("random", biased)


@breakage("deterministic-picks-last", "deterministic mode picks the last member of the group")
def _deterministic_picks_last() -> None:
    _wrap_pick("deterministic", lambda plan, group, rng: group.members[-1])


def _wrap_plan_init(after: Callable[[CapabilityPlan, tuple[Candidate, ...], str], None]) -> None:
    original = CapabilityPlan.__init__

    def init(self: CapabilityPlan, kind: str, name: str, candidates: tuple[Candidate, ...], overlay_mode: str) -> None:
        original(self, kind, name, candidates, overlay_mode)
        after(self, candidates, overlay_mode)

    _patch(CapabilityPlan, "__init__", init)


@breakage("policy-without-groups-applies", "a selection policy applies even when candidates carry no groups")
def _policy_without_groups_applies() -> None:
    def after(plan: CapabilityPlan, candidates: tuple[Candidate, ...], overlay_mode: str) -> None:
        if not candidates or candidates[0].selection_group is not None or overlay_mode == "deterministic":
            return
        plan.mode = overlay_mode
        plan.mode_label = snapshot.MODE_LABELS[overlay_mode]
        eligible = tuple(c for c in candidates if c.admission_state == NEW)
        plan.group = ActiveGroup(None, eligible) if eligible else None

    _wrap_plan_init(after)


@breakage("affinity-overrides-admission", "a session binding is reused even when its candidate is admission none")
def _affinity_overrides_admission() -> None:
    def after(plan: CapabilityPlan, candidates: tuple[Candidate, ...], overlay_mode: str) -> None:
        plan.reusable = {c.hop_id: c for c in candidates}

    _wrap_plan_init(after)


@breakage("stale-excluded", "fresh: false candidates are never selected")
def _stale_excluded() -> None:
    def after(plan: CapabilityPlan, candidates: tuple[Candidate, ...], overlay_mode: str) -> None:
        if plan.group is not None and candidates and candidates[0].selection_group is None:
            eligible = tuple(c for c in candidates if c.admission_state == NEW and c.fresh)
            plan.group = ActiveGroup(None, eligible[:1]) if eligible else None

    _wrap_plan_init(after)


@breakage("fresh-first", "the consumer re-orders fresh candidates before stale ones")
def _fresh_first() -> None:
    def after(plan: CapabilityPlan, candidates: tuple[Candidate, ...], overlay_mode: str) -> None:
        if plan.group is not None and candidates and candidates[0].selection_group is None:
            eligible = sorted((c for c in candidates if c.admission_state == NEW), key=lambda c: not c.fresh)
            plan.group = ActiveGroup(None, tuple(eligible[:1]))

    _wrap_plan_init(after)


@breakage("draws-ignore-admission", "random and weightedRandom draw from the first group with any member")
def _draws_ignore_admission() -> None:
    original = snapshot._first_viable_group

    def first_viable(candidates: tuple[Candidate, ...], grouped: bool, mode: str) -> ActiveGroup | None:
        if not grouped or mode not in ("random", "weightedRandom"):
            return original(candidates, grouped, mode)
        first = min(c.selection_group for c in candidates if c.selection_group is not None)
        return ActiveGroup(first, tuple(c for c in candidates if c.selection_group == first))

    _patch(snapshot, "_first_viable_group", first_viable)


@breakage("local-site-preferred", "inside the active group the gateway draws only among its own site's members")
def _local_site_preferred() -> None:
    original = Snapshot.__init__

    def init(self: Snapshot, overlay: Overlay, semantic_key: str) -> None:
        original(self, overlay, semantic_key)
        for plan in self.plans.values():
            group = plan.group
            local = tuple(c for c in group.members if c.site == overlay.local_site) if group else ()
            if group is not None and local and len(local) < len(group.members):
                plan.group = ActiveGroup(group.number, local)

    _patch(Snapshot, "__init__", init)


@breakage("rr-least-request", "roundRobin sends each request to the member with the fewest requests in flight")
def _rr_least_request() -> None:
    in_flight: dict[str, int] = {}
    original_pick = intelligent_route.pick
    original_forward = proxy.Forwarder.forward

    def pick(plan: CapabilityPlan, rng: Any) -> Candidate | None:
        chosen = original_pick(plan, rng)
        if plan.mode != "roundRobin" or plan.group is None or chosen is None:
            return chosen
        members = plan.group.members
        start = members.index(chosen)
        rotated = members[start:] + members[:start]  # ties keep the rotation's own choice
        return min(rotated, key=lambda c: in_flight.get(c.cluster, 0))

    async def forward(self: proxy.Forwarder, request: Any, ctx: RequestContext) -> Any:
        cluster = ctx.cluster or ""
        in_flight[cluster] = in_flight.get(cluster, 0) + 1
        try:
            return await original_forward(self, request, ctx)
        finally:
            in_flight[cluster] -= 1

    _patch(intelligent_route, "pick", pick)
    _patch(proxy.Forwarder, "forward", forward)


@breakage("overlay-clusters-validated-at-start", "cold start checks overlay candidates' clusters like static ones")
def _overlay_clusters_validated_at_start() -> None:
    declared: set[str] = set()
    original_build, original_initial = build.build, build.initial_snapshot

    def build_all(config: Any, *args: Any, **kwargs: Any) -> Any:
        declared.update(cluster.name for chain in config.chains.values() for spec in chain.filters
                        if spec.type == "load_balancer" for cluster in spec.options.clusters)
        return original_build(config, *args, **kwargs)

    def initial(config: Any, path: str) -> Snapshot:
        built = original_initial(config, path)
        unknown = sorted({c.cluster for c in built.overlay.candidates} - declared)
        if config.static is None and config.clusters is None and unknown:
            raise gateway_config.ConfigError(path, f"overlay candidate cluster {unknown[0]!r} is not declared")
        return built

    _patch(build, "build", build_all)
    _patch(build, "initial_snapshot", initial)


@breakage("static-reversed", "static candidates are served from the last one")
def _static_reversed() -> None:
    original = build.initial_snapshot

    def initial(config: Any, path: str) -> Snapshot:
        built = original(config, path)
        if config.static is None:
            return built
        overlay = built.overlay
        reversed_overlay = dataclasses.replace(
            overlay,
            candidates=tuple(reversed(overlay.candidates)),
            by_capability={cap: tuple(reversed(members)) for cap, members in overlay.by_capability.items()},
        )
        return Snapshot(reversed_overlay, built.semantic_key)

    _patch(build, "initial_snapshot", initial)


_STATIC_WEIGHT_KEYS = ("selection_group", "traffic_weight")


def _static_parse(fix: Callable[[Any, Callable[[Any], Overlay]], Overlay]) -> None:
    """Wrap the static candidate parser the filter config calls; `fix(raw, parse)` decides what it returns."""
    original = intelligent_route_config.parse_static_candidates

    def parse(raw: Any, local_site: str, allowed_clusters: Iterable[str] | None = None) -> Overlay:
        return fix(raw, lambda items: original(items, local_site, allowed_clusters))

    _patch(intelligent_route_config, "parse_static_candidates", parse)


def _without(raw: Any, keys: Callable[[str], bool]) -> Any:
    if not isinstance(raw, list):
        return raw
    return [{k: v for k, v in item.items() if not keys(k)} if isinstance(item, dict) else item for item in raw]


@breakage("static-empty-accepted", "an empty inline candidate list starts and answers 404, like an empty overlay")
def _static_empty_accepted() -> None:
    original = intelligent_route_config.parse_static_candidates

    def parse(raw: Any, local_site: str, allowed_clusters: Iterable[str] | None = None) -> Overlay:
        if raw == []:
            return Overlay(format="static", local_site=local_site, candidates=())
        return original(raw, local_site, allowed_clusters)

    _patch(intelligent_route_config, "parse_static_candidates", parse)


@breakage("static-unknown-fields-ignored", "inline static candidates drop fields they do not know instead of failing")
def _static_unknown_fields_ignored() -> None:
    known = ("kind", "name", "site", "cluster", "fresh", "credential")
    _static_parse(lambda raw, parse: parse(_without(raw, lambda key: key not in known)))


@breakage("static-weights-honoured", "inline static candidates with groups and traffic weights select weighted")
def _static_weights_honoured() -> None:
    def fix(raw: Any, parse: Callable[[Any], Overlay]) -> Overlay:
        overlay = parse(_without(raw, lambda key: key in _STATIC_WEIGHT_KEYS))
        if not isinstance(raw, list) or not any(isinstance(i, dict) and "traffic_weight" in i for i in raw):
            return overlay
        weighted = tuple(dataclasses.replace(c, **{k: raw[n][k] for k in _STATIC_WEIGHT_KEYS if k in raw[n]})
                         for n, c in enumerate(overlay.candidates))
        by_capability: dict[tuple[str, str], tuple[Candidate, ...]] = {}
        for c in weighted:
            by_capability[(c.kind, c.name)] = (*by_capability.get((c.kind, c.name), ()), c)
        return dataclasses.replace(overlay, candidates=weighted, selection_mode="weightedRandom",
                                   by_capability=by_capability)

    _static_parse(fix)


# ------------------------------------------------------------------------------------ session affinity

SessionKey = Callable[[Mapping[str, str], str | None, str | None], str | None]


def _wrap_session_key(make: Callable[[SessionKey], SessionKey]) -> None:
    _patch(intelligent_route, "session_key", make(intelligent_route.session_key))


@breakage("no-affinity", "session keys are ignored")
def _no_affinity() -> None:
    _wrap_session_key(lambda original: lambda headers, header, cookie: None)


@breakage("cookie-first-of-header", "the session cookie is the first cookie of the Cookie header, whatever its name")
def _cookie_first_of_header() -> None:
    def make(original: SessionKey) -> SessionKey:
        def key(headers: Mapping[str, str], header: str | None, cookie: str | None) -> str | None:
            raw = headers.get("Cookie") or headers.get("cookie")
            if cookie is not None and raw and "=" in raw:
                first = raw.split(";")[0].strip().partition("=")[2].strip()
                return "c:" + first if first else None
            return original(headers, header, cookie)

        return key

    _wrap_session_key(make)


@breakage("binding-crosses-capabilities",
          "one binding per session key, reused for any model or tool, even one its provider is no candidate of")
def _binding_crosses_capabilities() -> None:
    one_binding_per_key()
    original = IntelligentRouteFilter._select

    def select(self: IntelligentRouteFilter, ctx: RequestContext, current: Snapshot, plan: CapabilityPlan
               ) -> Reject | None:
        elsewhere = bound_elsewhere(self, ctx, current, plan)
        if elsewhere is not None:
            self._route(ctx, current, plan, elsewhere, "reused")
            return None
        return original(self, ctx, current, plan)

    _patch(IntelligentRouteFilter, "_select", select)


@breakage("session-gauge-counts-providers", "the session table gauge counts bound providers, not bindings")
def _session_gauge_counts_providers() -> None:
    def table_size(self: IntelligentRouteFilter) -> int:
        table = self.table
        return len({hop_id for hop_id, _ in table._entries.values()}) if table is not None else 0

    _patch(IntelligentRouteFilter, "_table_size", table_size)


@breakage("reload-aborts-in-flight", "an accepted reload closes the upstream connections of requests in flight")
def _reload_aborts_in_flight() -> None:
    forwarders: weakref.WeakSet[proxy.Forwarder] = weakref.WeakSet()
    original_init = proxy.Forwarder.__init__
    original_replace = snapshot_store.SnapshotStore.replace

    def init(self: proxy.Forwarder, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        forwarders.add(self)

    def replace(self: snapshot_store.SnapshotStore, candidate: Snapshot) -> snapshot_store.ReplaceResult:
        result = original_replace(self, candidate)
        if result.result == "accepted":
            loop = asyncio.get_running_loop()
            for forwarder in list(forwarders):
                loop.create_task(forwarder.aclose())
        return result

    _patch(proxy.Forwarder, "__init__", init)
    _patch(snapshot_store.SnapshotStore, "replace", replace)


@breakage("declared-clusters-as-allowlist",
          "without a clusters list, overlays naming a cluster the load_balancer lacks are rejected anyway")
def _declared_clusters_as_allowlist() -> None:
    original = build._build_chain

    def build_chain(chain: Any, metrics: GatewayMetrics, rng: Any, built: build.Built) -> Any:
        declared = tuple(sorted(name for spec in chain.filters if spec.type == "load_balancer"
                                for name in spec.options.names))
        filters = tuple(
            dataclasses.replace(spec, options=dataclasses.replace(spec.options, clusters=declared))
            if spec.type == "intelligent_route" and spec.options.clusters is None and spec.options.static is None
            else spec
            for spec in chain.filters)
        return original(dataclasses.replace(chain, filters=filters), metrics, rng, built)

    _patch(build, "_build_chain", build_chain)


@breakage("clusters-not-checked-at-startup", "cluster names are not checked against the load_balancer at startup")
def _clusters_not_checked_at_startup() -> None:
    _patch(gateway_config, "_check_clusters", lambda parsed: None)


@breakage("random-modes-skip-affinity", "random and weighted random draw every request, bound sessions too")
def _random_modes_skip_affinity() -> None:
    original = IntelligentRouteFilter._select

    def select(self: IntelligentRouteFilter, ctx: RequestContext, current: Snapshot,
               plan: CapabilityPlan) -> Reject | None:
        table = self.table
        if plan.mode not in ("random", "weightedRandom") or table is None:
            return original(self, ctx, current, plan)
        self.table = None  # _select does not await, so no other request sees the table missing
        try:
            return original(self, ctx, current, plan)
        finally:
            self.table = table

    _patch(IntelligentRouteFilter, "_select", select)


@breakage("retry-on-5xx", "an upstream 5xx answer is retried once before it reaches the client")
def _retry_on_5xx() -> None:
    original = proxy.Forwarder.forward

    async def forward(self: proxy.Forwarder, request: Any, ctx: RequestContext) -> Any:
        response = await original(self, request, ctx)
        if response.status >= 500 and not response.prepared:
            return await original(self, request, ctx)
        return response

    _patch(proxy.Forwarder, "forward", forward)


@breakage("no-cookie", "cookie session keys are ignored")
def _no_cookie() -> None:
    _wrap_session_key(lambda original: lambda headers, header, cookie: original(headers, header, None))


@breakage("bind-unkeyed", "requests without a session key all share one binding")
def _bind_unkeyed() -> None:
    _wrap_session_key(lambda original: lambda headers, header, cookie: original(headers, header, cookie) or "h:-")


@breakage("no-ttl", "session bindings never expire")
def _no_ttl() -> None:
    def lookup(self: SessionTable, key: str) -> str | None:
        entry: tuple[str, float] | None = self._entries.get(key)
        return entry[0] if entry is not None else None

    _patch(SessionTable, "lookup", lookup)


@breakage("failover-no-rebind", "after a failover the session keeps its old binding")
def _failover_no_rebind() -> None:
    original = SessionTable.bind

    def bind(self: SessionTable, key: str, stable_id: str) -> bool:
        if key in self._entries:  # a live binding whose candidate could not be reused
            return True
        return original(self, key, stable_id)

    _patch(SessionTable, "bind", bind)


@breakage("vanished-binding-refused", "a session bound to a candidate that left the overlay is refused with 503 "
                                      "instead of being placed again")
def _vanished_binding_refused() -> None:
    original = IntelligentRouteFilter._select

    def select(self: IntelligentRouteFilter, ctx: RequestContext, snapshot: Snapshot,
               plan: CapabilityPlan) -> Reject | None:
        table = self.table
        skey = (intelligent_route.session_key(ctx.headers, self._session_header, self._session_cookie)
                if table is not None else None)
        if table is not None and skey is not None:
            bound = table.lookup(intelligent_route.binding_key(plan.kind, plan.name, skey))
            if bound is not None and bound not in plan.reusable:
                return Reject(503, "session's candidate is gone\n")
        return original(self, ctx, snapshot, plan)

    _patch(IntelligentRouteFilter, "_select", select)


# --------------------------------------------------------------------------------------- hop headers


@breakage("no-strip-hop", "client x-ai-routing-* headers survive and hop headers are only set when absent")
def _no_strip_hop() -> None:
    def strip(headers: CIMultiDict[str]) -> None:
        return None

    def set_hop(headers: CIMultiDict[str], candidate_id: str, request_id: str, revision: str | None) -> None:
        headers.setdefault(hop_headers.CANDIDATE, candidate_id)
        headers.setdefault(hop_headers.REQUEST_ID, request_id)
        if revision is not None:
            headers.setdefault(hop_headers.REVISION, revision)

    _patch(hop_headers, "strip", strip)
    _patch(hop_headers, "set_hop", set_hop)


@breakage("fixed-request-id", "the provider-hop request id is a constant")
def _fixed_request_id() -> None:
    _patch(hop_headers.RequestIdGenerator, "__call__", lambda self: "0" * 32)


Route = Callable[[IntelligentRouteFilter, RequestContext, Snapshot, CapabilityPlan, Candidate, str], None]


def _wrap_route(make: Callable[[Route], Route]) -> None:
    _patch(IntelligentRouteFilter, "_route", make(IntelligentRouteFilter._route))


@breakage("wrong-default-stable-id", "a candidate without stable_id is named by its model name on the hop")
def _wrong_default_stable_id() -> None:
    def make(original: Route) -> Route:
        def route(self: IntelligentRouteFilter, ctx: RequestContext, snap: Snapshot, plan: CapabilityPlan,
                  candidate: Candidate, outcome: str) -> None:
            if candidate.stable_id == default_stable_id(*candidate.identity):
                candidate = dataclasses.replace(candidate, stable_id=candidate.name)
            original(self, ctx, snap, plan, candidate, outcome)

        return route

    _wrap_route(make)


@breakage("forward-credential", "the credential reference is sent upstream in a header")
def _forward_credential() -> None:
    def make(original: Route) -> Route:
        def route(self: IntelligentRouteFilter, ctx: RequestContext, snap: Snapshot, plan: CapabilityPlan,
                  candidate: Candidate, outcome: str) -> None:
            original(self, ctx, snap, plan, candidate, outcome)
            credential = candidate.credential
            if credential is not None:
                ctx.headers["x-upstream-credential-ref"] = (
                    f"{credential.namespace}/{credential.name}#{credential.key}"
                )

        return route

    _wrap_route(make)


# ------------------------------------------------------------------------------------ request handling


@breakage("no-model-validation", "blank, oversized and non-ASCII model values are looked up as names")
def _no_model_validation() -> None:
    _patch(routing_input, "valid_name", lambda value: value)


@breakage("short-model-limit", "model values longer than 200 bytes are rejected")
def _short_model_limit() -> None:
    _patch(routing_input, "MAX_NAME_BYTES", 200)


PlanLookup = Callable[[Snapshot, str, str], CapabilityPlan | None]


def _wrap_lookup(fallback: Callable[[Snapshot, str, str, PlanLookup], CapabilityPlan | None]) -> None:
    original: PlanLookup = Snapshot.plan

    def plan(self: Snapshot, kind: str, name: str) -> CapabilityPlan | None:
        return original(self, kind, name) or fallback(self, kind, name, original)

    _patch(Snapshot, "plan", plan)


@breakage("unknown-model-fallback", "an unknown model routes to the snapshot's first candidate")
def _unknown_model_fallback() -> None:
    def fallback(snap: Snapshot, kind: str, name: str, original: PlanLookup) -> CapabilityPlan | None:
        if kind != routing_input.INFERENCE_MODEL or not snap.overlay.candidates:
            return None
        first = snap.overlay.candidates[0]
        return original(snap, first.kind, first.name)

    _wrap_lookup(fallback)


@breakage("kind-agnostic", "capability lookup ignores the candidate kind")
def _kind_agnostic() -> None:
    def fallback(snap: Snapshot, kind: str, name: str, original: PlanLookup) -> CapabilityPlan | None:
        for other in sorted(CANDIDATE_KINDS - {kind}):
            found = original(snap, other, name)
            if found is not None:
                return found
        return None

    _wrap_lookup(fallback)


OnRequest = Callable[[IntelligentRouteFilter, RequestContext], Reject | None]


@breakage("missing-model-default", "a request without a model routes to the snapshot's first candidate")
def _missing_model_default() -> None:
    original: OnRequest = IntelligentRouteFilter.on_request

    def on_request(self: IntelligentRouteFilter, ctx: RequestContext) -> Reject | None:
        header = self.config.model_header
        candidates = self.store.current.overlay.candidates
        if header not in ctx.headers and METHOD_KEY not in ctx.metadata and candidates:
            ctx.headers[header] = candidates[0].name
        return original(self, ctx)

    _patch(IntelligentRouteFilter, "on_request", on_request)


@breakage("ignore-skip-paths", "skip_paths are ignored: every path is routed by model")
def _ignore_skip_paths() -> None:
    _patch(IntelligentRouteFilter, "_skipped", lambda self, path: False)


@breakage("boundary-less-skip", "skip_paths match as raw prefixes, without the path segment boundary")
def _boundary_less_skip() -> None:
    def skipped(self: IntelligentRouteFilter, path: str) -> bool:
        return any(path.startswith(prefix) for prefix in self.config.skip_paths)

    _patch(IntelligentRouteFilter, "_skipped", skipped)


@breakage("no-management-cluster", "management_cluster is ignored: skipped paths are not routed")
def _no_management_cluster() -> None:
    original = IntelligentRouteFilter.__init__

    def init(self: IntelligentRouteFilter, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._management = None

    _patch(IntelligentRouteFilter, "__init__", init)


@breakage("ignore-mcp", "MCP tools/call metadata is ignored")
def _ignore_mcp() -> None:
    _patch(McpFilter, "on_request", lambda self, ctx: None)


# -------------------------------------------------------------------------------------------- metrics


@breakage("metrics-miscount", "session reuses are counted as routed decisions")
def _metrics_miscount() -> None:
    original = GatewayMetrics.decision

    def decision(self: GatewayMetrics, outcome: str, kind: str) -> None:
        original(self, "routed" if outcome == "reused" else outcome, kind)

    _patch(GatewayMetrics, "decision", decision)


@breakage("metrics-no-reload-count", "reload results are not counted")
def _metrics_no_reload_count() -> None:
    _patch(GatewayMetrics, "reload", lambda self, result: None)


@breakage("metrics-label-leak", "selected_total is labelled with the candidate's stable_id")
def _metrics_label_leak() -> None:
    original_selected = GatewayMetrics.selected
    _patch(GatewayMetrics, "selected", lambda self, cluster, site, mode: None)

    def make(original: Route) -> Route:
        def route(self: IntelligentRouteFilter, ctx: RequestContext, snap: Snapshot, plan: CapabilityPlan,
                  candidate: Candidate, outcome: str) -> None:
            original(self, ctx, snap, plan, candidate, outcome)
            if outcome == "routed":
                original_selected(self.metrics, candidate.hop_id, candidate.site, plan.mode_label)

        return route

    _wrap_route(make)


# ------------------------------------------------------------------------------------- hop cluster TLS


@breakage("hop-without-client-cert", "upstream TLS to hop clusters presents no client certificate")
def _hop_without_client_cert() -> None:
    original = tls.client_context

    def context(ca_path: str | None, cert_path: str | None, key_path: str | None, verify: bool,
                path: str) -> ssl.SSLContext:
        return original(ca_path, None, None, verify, path)

    _patch(tls, "client_context", context)


# ---- hop headers, skip paths, MCP and metrics strength


@breakage("hop-strip-case-sensitive", "client x-ai-routing-* headers are stripped only when their names are lowercase")
def _hop_strip_case_sensitive() -> None:
    def strip(headers: CIMultiDict[str]) -> None:
        for name in [name for name in headers if name.startswith(hop_headers.PREFIX)]:
            headers.popall(name, None)

    _patch(hop_headers, "strip", strip)


@breakage("bound-request-id", "a reused session binding sends the provider-hop request id it was bound with")
def _bound_request_id() -> None:
    bound_ids: weakref.WeakKeyDictionary[IntelligentRouteFilter, dict[str, str]] = weakref.WeakKeyDictionary()

    def make(original: Route) -> Route:
        def route(self: IntelligentRouteFilter, ctx: RequestContext, snap: Snapshot, plan: CapabilityPlan,
                  candidate: Candidate, outcome: str) -> None:
            original(self, ctx, snap, plan, candidate, outcome)
            key = intelligent_route.session_key(ctx.headers, self._session_header, self._session_cookie)
            request_id = ctx.headers.get(hop_headers.REQUEST_ID)
            if key is None or request_id is None:
                return
            ids = bound_ids.setdefault(self, {})
            if outcome == "reused" and key in ids:
                ctx.headers[hop_headers.REQUEST_ID] = ids[key]
            else:
                ids[key] = request_id

        return route

    _wrap_route(make)


@breakage("validate-before-skip", "the model value is validated before the skip_paths check")
def _validate_before_skip() -> None:
    original: OnRequest = IntelligentRouteFilter.on_request

    def on_request(self: IntelligentRouteFilter, ctx: RequestContext) -> Reject | None:
        lookup = routing_input.extract(ctx.metadata, ctx.headers, self.config.model_header)
        if isinstance(lookup, routing_input.Invalid):
            hop_headers.strip(ctx.headers)
            self._done(ctx.metadata, "invalid")
            return Reject(400, "invalid model name\n")
        return original(self, ctx)

    _patch(IntelligentRouteFilter, "on_request", on_request)


Extract = Callable[[Mapping[str, Any], Mapping[str, str], str], tuple[str, str] | routing_input.Invalid | None]


@breakage("blank-tool-looked-up", "a blank MCP tool name is looked up as a name (404) instead of rejected (400)")
def _blank_tool_looked_up() -> None:
    original: Extract = routing_input.extract

    def extract(metadata: Mapping[str, Any], headers: Mapping[str, str],
                model_header: str) -> tuple[str, str] | routing_input.Invalid | None:
        found = original(metadata, headers, model_header)
        raw = metadata.get(routing_input.NAME_KEY)
        if isinstance(found, routing_input.Invalid) and found.kind == routing_input.MCP_TOOL \
                and isinstance(raw, str) and not raw.strip():
            return routing_input.MCP_TOOL, raw
        return found

    _patch(routing_input, "extract", extract)


@breakage("model-over-mcp", "the model header wins over MCP tools/call metadata")
def _model_over_mcp() -> None:
    original: Extract = routing_input.extract

    def extract(metadata: Mapping[str, Any], headers: Mapping[str, str],
                model_header: str) -> tuple[str, str] | routing_input.Invalid | None:
        if model_header in headers:
            return original({}, headers, model_header)
        return original(metadata, headers, model_header)

    _patch(routing_input, "extract", extract)


@breakage("failover-counted-as-reuse", "a session failover is counted as a reuse (session event and decision)")
def _failover_counted_as_reuse() -> None:
    original_event = GatewayMetrics.session_event

    def session_event(self: GatewayMetrics, event: str) -> None:
        original_event(self, "reused" if event == "failover" else event)

    def make(original: Route) -> Route:
        def route(self: IntelligentRouteFilter, ctx: RequestContext, snap: Snapshot, plan: CapabilityPlan,
                  candidate: Candidate, outcome: str) -> None:
            if outcome == "routed" and ctx.metadata.get(intelligent_route.NS + "session.failover"):
                outcome = "reused"
            original(self, ctx, snap, plan, candidate, outcome)

        return route

    _patch(GatewayMetrics, "session_event", session_event)
    _wrap_route(make)


@breakage("snapshot-gauge-admitted-only", "snapshot_candidates counts only new_and_existing candidates")
def _snapshot_gauge_admitted_only() -> None:
    def size(self: IntelligentRouteFilter) -> int:
        return sum(1 for c in self.store.current.overlay.candidates if c.admission_state == NEW)

    _patch(IntelligentRouteFilter, "_snapshot_size", size)


# ---- selection and reload strength


@breakage("rr-shared-cursor", "one round-robin cursor takes turns for every capability instead of one per capability")
def _rr_shared_cursor() -> None:
    turns = [0]

    def rotate(plan: CapabilityPlan, group: ActiveGroup, rng: Any) -> Candidate:
        index = turns[0] % len(group.members)
        turns[0] = index + 1
        return group.members[index]

    _wrap_pick("roundRobin", rotate)


@breakage("rr-grid-cursor", "every gateway started from one work directory shares a round-robin cursor per capability")
def _rr_grid_cursor() -> None:
    shared = Path.cwd().parent  # the backend's work directory, which holds every gateway's own

    def rotate(plan: CapabilityPlan, group: ActiveGroup, rng: Any) -> Candidate:
        name = hashlib.sha256(f"{group.members[0].kind}/{group.members[0].name}".encode()).hexdigest()[:16]
        with open(shared / f"broken-rr-cursor-{name}", "a+") as cursor:
            fcntl.flock(cursor, fcntl.LOCK_EX)
            cursor.seek(0)
            turn = int(cursor.read() or 0)
            cursor.truncate(0)
            cursor.write(str(turn + 1))
        return group.members[turn % len(group.members)]

    _wrap_pick("roundRobin", rotate)


@breakage("epp-queried-per-request", "before forwarding, the gateway reads the selected backend's EPP /metrics")
def _epp_queried_per_request() -> None:
    original = proxy.Forwarder.forward

    async def forward(self: proxy.Forwarder, request: Any, ctx: RequestContext) -> Any:
        cluster = ctx.upstream
        endpoint, tls = cluster.next_endpoint(), getattr(cluster, "ssl", None)
        if endpoint is not None:
            scheme, extra = ("http", {}) if tls is None else ("https", {"ssl": tls, "server_hostname": cluster.sni})
            with contextlib.suppress(Exception):
                async with self._client(cluster.idle_timeout).get(f"{scheme}://{endpoint[0]}:{endpoint[1]}/metrics",
                                                                   **extra) as got:
                    await got.read()
        return await original(self, request, ctx)

    _patch(proxy.Forwarder, "forward", forward)


@breakage("inject-first-reference", "credential_inject keeps the token it injected first and injects it for every "
          "request that carries a credential reference")
def _inject_first_reference() -> None:
    first: list[str] = []

    def inject(original: Callable[[Any, RequestContext], Reject | None], self: Any,
               ctx: RequestContext) -> Reject | None:
        outcome = original(self, ctx)
        if outcome is None and "Authorization" in ctx.headers and ctx.metadata.get(CREDENTIAL_NS + "name"):
            if not first:
                first.append(ctx.headers["Authorization"])
            ctx.headers["Authorization"] = first[0]
        return outcome

    wrap(CredentialInjectFilter, "on_request", inject)


@breakage("inject-token-per-cluster", "credential_inject keeps the token it first injected for an upstream cluster, "
          "so a reload that names another credential for that cluster changes nothing")
def _inject_token_per_cluster() -> None:
    first: dict[str, str] = {}

    def inject(original: Callable[[Any, RequestContext], Reject | None], self: Any,
               ctx: RequestContext) -> Reject | None:
        outcome = original(self, ctx)
        if outcome is None and "Authorization" in ctx.headers and ctx.cluster:
            ctx.headers["Authorization"] = first.setdefault(ctx.cluster, ctx.headers["Authorization"])
        return outcome

    wrap(CredentialInjectFilter, "on_request", inject)


@breakage("credential-file-per-request", "credential_inject reads a file token source again on every request "
          "and fails closed when the file is gone")
def _credential_file_per_request() -> None:
    files: dict[str, str] = {}
    read_file = credential_inject._read_file

    def remember(file_path: str, path: str) -> str:
        token = read_file(file_path, path)
        files["Bearer " + token] = file_path
        return token

    def inject(original: Callable[[Any, RequestContext], Reject | None], self: Any,
               ctx: RequestContext) -> Reject | None:
        outcome = original(self, ctx)
        source = files.get(ctx.headers.get("Authorization", "")) if outcome is None else None
        if source is not None:
            try:
                ctx.headers["Authorization"] = "Bearer " + Path(source).read_text().strip()
            except OSError:
                return credential_inject.UNAVAILABLE
        return outcome

    _patch(credential_inject, "_read_file", remember)
    wrap(CredentialInjectFilter, "on_request", inject)


@breakage("projected-startup-only", "the projected credential resolver knows only the Secrets mounted when the "
          "filter was built")
def _projected_startup_only() -> None:
    read_projected = credential_inject.read_projected
    mounted: dict[str, frozenset[Path]] = {}

    def startup_only(base: str, name: str, namespace: str, ref_key: str) -> str | None:
        known = mounted.setdefault(base, frozenset(p for p in Path(base).rglob("*") if p.is_file()))
        if Path(base, namespace, name, ref_key) not in known:
            return None
        return read_projected(base, name, namespace, ref_key)

    def init(original: Callable[..., None], self: Any, config: Any) -> None:
        original(self, config)
        if config.mount_base is not None:
            mounted[config.mount_base] = frozenset(p for p in Path(config.mount_base).rglob("*") if p.is_file())

    _patch(credential_inject, "read_projected", startup_only)
    wrap(CredentialInjectFilter, "__init__", init)


@breakage("inject-provider-route-only", "credential_inject injects only behind provider_route, so a final-hop "
          "consumer forwards an API provider's request without its token")
def _inject_provider_route_only() -> None:
    def inject(original: Callable[[Any, RequestContext], Reject | None], self: Any,
               ctx: RequestContext) -> Reject | None:
        return original(self, ctx) if "provider_route.candidate_id" in ctx.metadata else None

    wrap(CredentialInjectFilter, "on_request", inject)


@breakage("local-site-fixed", "the local site is fixed when the filter is built: a reload that moves it is ignored")
def _local_site_fixed() -> None:
    def replace(original: Callable[[SnapshotStore, Snapshot], ReplaceResult], self: SnapshotStore,
                candidate: Snapshot) -> ReplaceResult:
        if candidate.local_site != self.current.local_site:
            return ReplaceResult("unchanged", self.current.revision, self.current.revision)
        return original(self, candidate)

    wrap(SnapshotStore, "replace", replace)


@breakage("filter-duration-always", "the per-filter duration histogram is recorded whether or not "
          "metrics.filter_duration is set")
def _filter_duration_always() -> None:
    original = gateway_config.parse_config

    def parse_config(raw: Any) -> gateway_config.GatewayConfig:
        return dataclasses.replace(original(raw), filter_duration=True)

    _patch(gateway_config, "parse_config", parse_config)


@breakage("preset-cluster-overridden", "intelligent_route looks the model up even when an earlier filter already "
          "chose the cluster")
def _preset_cluster_overridden() -> None:
    def on_request(original: OnRequest, self: IntelligentRouteFilter, ctx: RequestContext) -> Reject | None:
        ctx.cluster = None
        return original(self, ctx)

    wrap(IntelligentRouteFilter, "on_request", on_request)


@breakage("two-groups-searched", "the search for the first viable group looks at the first two groups only")
def _two_groups_searched() -> None:
    original = snapshot._first_viable_group

    def first_viable(candidates: tuple[Candidate, ...], grouped: bool, mode: str) -> ActiveGroup | None:
        if grouped:
            searched = sorted({c.selection_group for c in candidates if c.selection_group is not None})[:2]
            candidates = tuple(c for c in candidates if c.selection_group in searched)
        return original(candidates, grouped, mode)

    _patch(snapshot, "_first_viable_group", first_viable)


@breakage("omitted-policy-round-robin", "grouped candidates without a selection_policy rotate (roundRobin default)")
def _omitted_policy_round_robin() -> None:
    _patch(Overlay, "effective_mode", property(lambda self: self.selection_mode or "roundRobin"))


@breakage("weights-as-percentages", "traffic weights above 100 are clamped to 100, as if they were percentages")
def _weights_as_percentages() -> None:
    original = ActiveGroup.__init__

    def init(self: ActiveGroup, number: int | None, members: tuple[Candidate, ...]) -> None:
        original(self, number, members)
        running, cumulative = 0, []
        for c in members:
            running += min(c.traffic_weight or 0, 100)
            cumulative.append(running)
        self.cumulative = tuple(cumulative)
        self.total = running

    _patch(ActiveGroup, "__init__", init)


@breakage("empty-with-mode-503", "an empty snapshot that carries a selection mode answers 503 instead of 404")
def _empty_with_mode_503() -> None:
    original: OnRequest = IntelligentRouteFilter.on_request

    def on_request(self: IntelligentRouteFilter, ctx: RequestContext) -> Reject | None:
        serving = self.store.current
        rejected = original(self, ctx)
        if (rejected is not None and rejected.status == 404 and not serving.candidate_count
                and serving.overlay.selection_mode is not None):
            return Reject(503, "no candidates to select from\n")
        return rejected

    _patch(IntelligentRouteFilter, "on_request", on_request)


@breakage("unchanged-vs-last-read", "an unchanged revision is compared with the last overlay file read, a rejected one "
          "included, instead of the serving snapshot")
def _unchanged_vs_last_read() -> None:
    last_read: weakref.WeakKeyDictionary[SnapshotStore, str] = weakref.WeakKeyDictionary()

    def replace(self: SnapshotStore, candidate: Snapshot) -> ReplaceResult:
        previous = self.current
        compared = last_read.get(self, previous.semantic_key)
        last_read[self] = candidate.semantic_key
        if candidate.semantic_key == compared and candidate.format == previous.format:
            return ReplaceResult("unchanged", previous.revision, previous.revision)
        self.current = candidate
        return ReplaceResult("accepted", previous.revision, candidate.revision)

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        async def reload_(self: OverlayReloader, *args: Any) -> str:
            result: str = await original(self, *args)
            if result == "rejected":  # the file read last is the rejected one: remember its bytes' key
                try:
                    data = snapshot_store.read_bounded(self.path)
                except OSError:
                    return result
                last_read[self.route.store] = "sha256:" + hashlib.sha256(data).hexdigest()
            return result

        return reload_

    _patch(SnapshotStore, "replace", replace)
    _wrap_reload(make)
