"""Conformant variants of the reference gateway: each makes the other choice where the spec leaves one open.

The breakages (selfcheck/breakages.py) show that every test *can* fail. A variant shows the other direction:
a gateway built differently, in a way the spec allows, still passes every core test. Each variant is a
monkeypatch of the reference, applied before the gateway starts (``python -m selfcheck.variant_launch
--variant NAME``), and names the sentence, or the silence, that leaves its choice open. A failure a real
implementation once showed that turned out to be the harness's becomes a variant, so it cannot come back.

A variant also says which extended features its descriptor claims: most claim none, so every extended test
is unsupported and the run judges the core alone, as it would judge a gateway that has no extended feature.
"""

from __future__ import annotations

import json
import logging
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from reference.gateway import cli, proxy, server
from reference.gateway import config as gateway_config
from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters import grid_site_route
from reference.gateway.filters.intelligent_route import IntelligentRouteFilter
from reference.gateway.schema import ConfigError
from reference.gateway.site_route import pick
from reference.gateway.site_route.availability import SiteView
from reference.gateway.snapshot import CapabilityPlan, Snapshot
from reference.overlay import SELECTION_MODES, OverlayRejected, validate
from selfcheck.registry import Breakage, patch
from selfcheck.session_bindings import bound_elsewhere, one_binding_per_key

__all__ = ["VARIANTS", "Variant"]


@dataclass(frozen=True)
class Variant(Breakage):
    """A conformant way to build the gateway: what it does and why the spec allows it (`summary`), applied
    like a breakage, and the extended features its descriptor claims."""

    claims: tuple[str, ...] = ()
    #: The gateway profiles whose core tests the choice can touch (each is judged on all of their core tests).
    profiles: tuple[str, ...] = ("consumer",)


VARIANTS: dict[str, Variant] = {}


def variant(name: str, summary: str, *, claims: tuple[str, ...] = (), profiles: tuple[str, ...] = ("consumer",)
            ) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def register(func: Callable[[], None]) -> Callable[[], None]:
        if name in VARIANTS:
            raise ValueError(f"variant {name!r} is registered twice")
        VARIANTS[name] = Variant(name, summary, func, claims, profiles)
        return func

    return register


# ------------------------------------------------------------------------------ no extended feature

#: Config keys and filters of extended features, refused as a gateway without them refuses unknown keys.
_EXTENDED_ROUTE_KEYS = {"skip_paths": "skipPaths", "management_cluster": "managementCluster",
                        "clusters": "clustersAllowlist"}
_EXTENDED_FILTERS = {"mcp": "mcpToolRouting", "router": "presetCluster"}


def _declined(raw: Any) -> str | None:
    """Why a raw Praxis config asks for an extended feature (None: it does not)."""
    if not isinstance(raw, Mapping):
        return None
    if (raw.get("metrics") or {}).get("filter_duration"):
        return "metrics.filter_duration (prometheusMetrics)"
    for chain in raw.get("filter_chains") or ():
        for spec in (chain or {}).get("filters") or ():
            kind = spec.get("filter") if isinstance(spec, Mapping) else None
            if kind in _EXTENDED_FILTERS:
                return f"filter {kind} ({_EXTENDED_FILTERS[kind]})"
            if kind == "intelligent_route":
                for key, feature in _EXTENDED_ROUTE_KEYS.items():
                    if key in spec:
                        return f"intelligent_route.{key} ({feature})"
                if "cookie" in (spec.get("session_affinity") or {}):
                    return "intelligent_route.session_affinity.cookie (cookieAffinity)"
            if kind == "credential_inject":
                if "projected_credential_mount_base" in spec:
                    return "credential_inject.projected_credential_mount_base (projectedCredentials)"
                for entry in spec.get("credentials") or ():
                    source = next((k for k in ("value", "env_var") if k in (entry or {})), None)
                    if source is not None:
                        return f"credential_inject credentials[].{source} (a token source it declines)"
    return None


@variant("decline-extended",
         "has no extended feature: a weightedRandom overlay is an unknown selection mode, and the config keys and "
         "filters of the other extended features are unknown keys (the spec's core asks none of them)",
         profiles=("consumer", "provider"))
def _decline_extended() -> None:
    patch(validate, "SELECTION_MODES", SELECTION_MODES - {"weightedRandom"})
    original = gateway_config.parse_config

    def parse_config(raw: Any) -> gateway_config.GatewayConfig:
        declined = _declined(raw)
        if declined is not None:
            raise ConfigError("filter_chains", f"unknown key: {declined} is not supported by this gateway")
        return original(raw)

    patch(gateway_config, "parse_config", parse_config)


@variant("scope-and-candidates-first",
         "checks an envelope's expected scope and then its candidates before its digests, the reverse of the "
         "reference's order: the spec lists what is rejected, never in which order it is checked",
         profiles=("consumer",))
def _scope_and_candidates_first() -> None:
    original = validate._parse_envelope

    def parse_envelope(doc: dict[str, Any], expected_scope: Mapping[str, str] | None) -> Any:
        scope, payload = doc.get("scope"), doc.get("overlay")
        if expected_scope and isinstance(scope, dict):
            for key, want in expected_scope.items():
                if scope.get(key) != want:
                    raise OverlayRejected("scope_mismatch", f"scope.{key} {scope.get(key)!r} != expected {want!r}")
        if isinstance(payload, dict) and isinstance(payload.get("candidates"), list):
            validate._parse_candidates(payload["candidates"])
        return original(doc, expected_scope)

    patch(validate, "_parse_envelope", parse_envelope)


# ----------------------------------------------------------------------------------- session bindings


@variant("binding-per-key-rebind",
         "one session binding per key, not per capability: a binding whose candidate is not one of the requested "
         "capability is a failover and is replaced (routing guide 8 says to reuse an existing permitted binding "
         "and record a new one after normal selection, not how bindings are keyed)")
def _binding_per_key_rebind() -> None:
    one_binding_per_key()


@variant("binding-per-key-reuse",
         "one session binding per key, reused for another capability when the bound provider (site and cluster) "
         "is also an eligible candidate of it; otherwise a fresh selection replaces it (routing guide 8: "
         "\"Existing permitted binding: reuse the provider\")")
def _binding_per_key_reuse() -> None:
    one_binding_per_key()
    original = IntelligentRouteFilter._select

    def select(self: IntelligentRouteFilter, ctx: RequestContext, current: Snapshot, plan: CapabilityPlan
               ) -> Reject | None:
        held = bound_elsewhere(self, ctx, current, plan)
        if held is not None:
            same = next((c for c in plan.reusable.values() if (c.site, c.cluster) == (held.site, held.cluster)), None)
            if same is not None:
                self._route(ctx, current, plan, same, "reused")
                return None
        return original(self, ctx, current, plan)

    patch(IntelligentRouteFilter, "_select", select)


# ------------------------------------------------------------------------------------------ answers


@variant("empty-error-bodies",
         "every answer the gateway makes itself (400, 404, 413, 5xx) has an empty body: the spec gives the statuses, "
         "never a body", profiles=("consumer", "provider"))
def _empty_error_bodies() -> None:
    def reject_response(rejection: Reject) -> web.Response:
        return web.Response(status=rejection.status, body=b"", headers=rejection.headers or None)

    def text_response(status: int, body: str) -> web.Response:
        return web.Response(status=status, body=b"")

    patch(server, "reject_response", reject_response)
    patch(server, "text_response", text_response)
    patch(proxy, "text_response", text_response)


@variant("refuse-conflicting-selectors",
         "refuses, as the public Praxis pipeline check does, two cluster-selecting filters (router, intelligent_route) "
         "before one load_balancer unless insecure_options.skip_pipeline_checks.conflicting_cluster_selectors is "
         "set; the spec says nothing of such chains", claims=("presetCluster",))
def _refuse_conflicting_selectors() -> None:
    original = gateway_config.parse_config

    def parse_config(raw: Any) -> gateway_config.GatewayConfig:
        config = original(raw)
        if "skip_pipeline_checks.conflicting_cluster_selectors" in config.insecure_options:
            return config
        for chain in config.chains.values():
            selectors = [f.type for f in chain.filters if f.type in ("router", "intelligent_route")]
            if len(selectors) > 1 and any(f.type == "load_balancer" for f in chain.filters):
                raise ConfigError(chain.path, f"conflicting cluster selectors before load_balancer: {selectors}")
        return config

    patch(gateway_config, "parse_config", parse_config)


# --------------------------------------------------------------------------------------------- logs


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"timestamp": self.formatTime(record), "level": record.levelname,
                           "target": record.name, "fields": {"message": record.getMessage()}})


@variant("json-logs",
         "logs one JSON object per line (timestamp, level, target, fields), as tracing's JSON output does, instead "
         "of key=value text: the spec names no log format", profiles=("consumer", "provider"))
def _json_logs() -> None:
    def configure(level: str) -> None:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_JsonLines())
        for name in ("agn.gateway", "aiohttp"):
            logger = logging.getLogger(name)
            logger.handlers[:] = [handler]
            logger.setLevel(level.upper() if name == "agn.gateway" else logging.WARNING)
            logger.propagate = False

    patch(cli, "configure", configure)


# ------------------------------------------------------------------------------- grid_site_route


@variant("two-draws-with-replacement",
         "two choices at three or more sites with room are two weighted draws with replacement, the lower rho "
         "winning (routing guide 7b says \"two choices\", not that the draws differ)", profiles=("serving",))
def _two_draws_with_replacement() -> None:
    def two_choices(room: Sequence[SiteView], rng: random.Random) -> SiteView:
        weights = [pick.weight_of(s) for s in room]
        a = room[pick.weighted_draw(room, weights, rng)]
        b = room[pick.weighted_draw(room, weights, rng)]
        return b if (b.rho or 0.0) < (a.rho or 0.0) else a

    patch(pick, "two_choices", two_choices)


@variant("no-site-headers",
         "a routed response names no site or cluster (no x-grid-site or x-grid-backend): the routing guide names no "
         "response header", profiles=("serving",))
def _no_site_headers() -> None:
    original = grid_site_route.GridSiteRouteFilter.on_request
    named = {grid_site_route.SITE_HEADER, grid_site_route.BACKEND_HEADER}

    def on_request(self: grid_site_route.GridSiteRouteFilter, ctx: RequestContext) -> Reject | None:
        answer = original(self, ctx)
        ctx.response_headers[:] = [(k, v) for k, v in ctx.response_headers if k.lower() not in named]
        return answer

    patch(grid_site_route.GridSiteRouteFilter, "on_request", on_request)
