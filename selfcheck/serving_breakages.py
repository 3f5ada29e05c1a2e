"""Named breakages of the reference gateway's grid_site_route, each a monkeypatch of one behaviour the
serving suite judges.

A breakage is applied in the gateway process before it starts (see ``selfcheck.serving_launch``). Each
reproduces a mistake a real gateway could make in measuring site availability or in picking a site (a
ceiling taught from a backlog, a pick that ignores saturation, shedding at once) while the gateway still
starts, polls its peers and routes, so a serving test that fails against it fails because of the broken
behaviour and not because the gateway is down.

Patches replace module attributes that the gateway looks up at call time; they never edit files.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Sequence
from typing import Any

from reference.gateway import config as gateway_config
from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters import grid_site_route
from reference.gateway.schema import ConfigError
from reference.gateway.site_route import (
    answers,
    availability,
    pick,
    prefix,
    route_metrics,
    settings,
    shedding,
    signals,
)
from reference.gateway.site_route.availability import SiteView
from selfcheck.registry import Breakage, patch, registrar

__all__ = ["BREAKAGES", "apply"]

BREAKAGES: dict[str, Breakage] = {}
_breakage = registrar(BREAKAGES)


def apply(name: str) -> None:
    """Apply the named breakage to the imported gateway modules; KeyError for an unknown name."""
    BREAKAGES[name].apply()


# ----------------------------------------------------------------------------------- measuring a site


@_breakage("ceiling-taught-while-waiting", "every sample teaches the ceiling, also one with requests waiting")
def _ceiling_taught_while_waiting() -> None:
    patch(availability, "teaches", lambda _sample: True)


@_breakage("ceiling-never-taught", "the ceiling stays at its floor whatever the site has held")
def _ceiling_never_taught() -> None:
    patch(availability, "teaches", lambda _sample: False)


@_breakage("no-ceiling-floor", "a quiet site's ceiling is what it holds, with no floor under it")
def _no_ceiling_floor() -> None:
    original = availability.next_ceiling

    def next_ceiling(prev: Any, sample: Any, at: float, settings: Any) -> float:
        floorless = dataclasses.replace(settings, ceiling_floor=1.0)
        return original(prev, sample, at, floorless)

    patch(availability, "next_ceiling", next_ceiling)


@_breakage("saturation-capped", "saturation never reads above 0.9, so a site at its ceiling still has room")
def _saturation_capped() -> None:
    patch(availability, "saturation", lambda flight, ceiling: min(0.9, max(0.0, flight / ceiling)))


@_breakage("no-explore-floor", "a site is weighed by its own ceiling only, however small beside the largest")
def _no_explore_floor() -> None:
    original = availability.with_weights
    patch(availability, "with_weights", lambda views, _floor: original(views, 0.0))


@_breakage("provider-conclusions-read", "an operator's grid_provider_* series are read as the site's running and ready")
def _provider_conclusions_read() -> None:
    signals._BY_NAME["grid_provider_average_running_requests"] = ("running", -1)
    signals._BY_NAME["grid_provider_ready_endpoints"] = ("ready", -1)

@_breakage("ceiling-never-decays", "a learned ceiling is kept for ever once load falls away")
def _ceiling_never_decays() -> None:
    patch(availability, "decayed", lambda ceiling, _elapsed, _half_life: ceiling)


@_breakage("unsmoothed", "saturation jumps to each new reading instead of moving part of the way")
def _unsmoothed() -> None:
    patch(availability, "smoothed", lambda _prev, raw, _smoothing: raw)


@_breakage("held-ignored", "what flow control holds is left out of in-flight")
def _held_ignored() -> None:
    original = availability.in_flight
    patch(availability, "in_flight", lambda sample: original(dataclasses.replace(sample, held=None)))


@_breakage("queue-full-ignored", "a site at its ceiling counts as full with any work waiting, below queue_full too")
def _queue_full_ignored() -> None:
    original = availability.at_ceiling_with_work_waiting
    patch(availability, "at_ceiling_with_work_waiting",
          lambda sample, flight, ceiling, _queue_full: original(sample, flight, ceiling, 1e-9))


#: How long a request the broken gateway routed counts as in flight at its site.
OWN_COUNT_S = 5.0


@_breakage("own-requests-counted", "requests the gateway itself sent a site recently count toward its in-flight")
def _own_requests_counted() -> None:
    sent: dict[str, list[float]] = {}
    on_request = grid_site_route.GridSiteRouteFilter.on_request

    def counting(self: Any, ctx: RequestContext) -> Reject | None:
        answer = on_request(self, ctx)
        if answer is None and ctx.cluster is not None:
            sent.setdefault(ctx.cluster, []).append(time.monotonic())
        return answer

    assess = availability.assess

    def assess_with_own(site: str, cluster: str, learned: Any, history: Any, now: float, *args: Any) -> Any:
        view, state = assess(site, cluster, learned, history, now, *args)
        recent = [t for t in sent.get(cluster, []) if time.monotonic() - t < OWN_COUNT_S]
        sent[cluster] = recent
        if view.measured and view.ceiling and recent:
            rho = min(1.0, (view.rho or 0.0) + len(recent) / view.ceiling)
            view = dataclasses.replace(view, rho=rho)
        return view, state

    patch(grid_site_route.GridSiteRouteFilter, "on_request", counting)
    patch(availability, "assess", assess_with_own)


@_breakage("availability-block-ignored", "the availability block is read but its fields are never used")
def _availability_block_ignored() -> None:
    original = settings.parse_availability

    def defaults(raw: Any, path: str) -> Any:
        original(raw, path)  # still refuses what it refused
        return settings.AvailabilitySettings()

    patch(settings, "parse_availability", defaults)


@_breakage("availability-block-required", "a grid_site_route block without availability is a config error")
def _availability_block_required() -> None:
    original = gateway_config.PARSERS[settings.TYPE]

    def required(raw: dict[str, Any], path: str) -> Any:
        if raw.get("availability") is None:
            raise ConfigError(f"{path}.availability", "is required")
        return original(raw, path)

    gateway_config.PARSERS[settings.TYPE] = required


@_breakage("site-gauges-unlabelled", "the per-site gauges name the site in both labels, not its cluster")
def _site_gauges_unlabelled() -> None:
    original = route_metrics.SiteRouteMetrics.site_gauges

    def by_site(self: Any, site: str, cluster: str, values: dict[str, float]) -> None:
        original(self, site, site, values)

    patch(route_metrics.SiteRouteMetrics, "site_gauges", by_site)


# ----------------------------------------------------------------------------------------- the pick


@_breakage("first-draw-wins", "two choices keeps the first draw whatever the second's saturation")
def _first_draw_wins() -> None:
    def two_choices(room: Sequence[SiteView], rng: random.Random) -> SiteView:
        weights = [pick.weight_of(s) for s in room]
        return room[pick.weighted_draw(room, weights, rng)]

    patch(pick, "two_choices", two_choices)


@_breakage("repeated-draws", "the two choices may be the same site twice (draws with replacement)")
def _repeated_draws() -> None:
    def two_choices(room: Sequence[SiteView], rng: random.Random) -> SiteView:
        weights = [pick.weight_of(s) for s in room]
        a, b = (room[pick.weighted_draw(room, weights, rng)] for _ in range(2))
        return b if (b.rho or 0.0) < (a.rho or 0.0) else a

    patch(pick, "two_choices", two_choices)

@_breakage("two-choices-between-two", "between two sites with room the less saturated always wins")
def _two_choices_between_two() -> None:
    patch(pick, "between_two", lambda a, b, _rng: b if (b.rho or 0.0) < (a.rho or 0.0) else a)


@_breakage("even-between-two", "between two sites with room each takes half, whatever their load")
def _even_between_two() -> None:
    patch(pick, "share_of_first", lambda _a, _b: 0.5)


@_breakage("room-ignored", "every ready site counts as having room, a saturated one too")
def _room_ignored() -> None:
    patch(availability, "has_room", lambda view: view.measured)


@_breakage("least-saturated-always", "every request goes to the least saturated site (no draw at all)")
def _least_saturated_always() -> None:
    def choose(sites: Sequence[SiteView], _rng: random.Random) -> tuple[SiteView, str]:
        room = [s for s in sites if availability.has_room(s)]
        best = min(room or sites, key=lambda s: s.rho if s.rho is not None else 1.0)
        return best, pick.TWO_CHOICES if room else pick.BY_CAPACITY

    patch(pick, "choose", choose)


@_breakage("path-unlabelled", "every decision is counted under one path label, whichever arm chose")
def _path_unlabelled() -> None:
    original = pick.choose

    def choose(sites: Sequence[SiteView], rng: random.Random) -> tuple[SiteView, str]:
        chosen, _path = original(sites, rng)
        return chosen, "cross_site"

    patch(pick, "choose", choose)


# ------------------------------------------------------------------------------------------ shedding


@_breakage("sheds-at-once", "a site counts as full the moment it is at its ceiling with work waiting")
def _sheds_at_once() -> None:
    patch(availability, "full_for", lambda since, _now, _after: since is not None)


@_breakage("default-full-after-halved", "without full_after_ms in the block a site counts as full after 2.5 s")
def _default_full_after_halved() -> None:
    made = settings.AvailabilitySettings
    patch(settings, "AvailabilitySettings", lambda **fields: made(**{"full_after_ms": 2_500, **fields}))

@_breakage("never-releases", "a shed model stays shed after its sites have room again")
def _never_releases() -> None:
    original = shedding.sheds
    patch(shedding, "sheds", lambda was, sites, settings: was or original(was, sites, settings))


@_breakage("sheds-when-off", "a model sheds although the block does not turn shedding on")
def _sheds_when_off() -> None:
    original = shedding.sheds
    patch(shedding, "sheds",
          lambda was, sites, settings: original(was, sites, dataclasses.replace(settings, shedding=True)))


@_breakage("shed-as-503", "a shed model is answered 503 instead of 429")
def _shed_as_503() -> None:
    patch(answers, "shed", lambda model, retry_after: answers.error(
        503, f"{model!r} is at capacity", "server_error", "capacity_exhausted", retry_after))


@_breakage("shed-without-retry-after", "a shed model is answered 429 without Retry-After")
def _shed_without_retry_after() -> None:
    patch(answers, "shed", lambda model, _retry_after: answers.error(
        429, f"{model!r} is at capacity", "rate_limit_error", "capacity_exhausted"))


@_breakage("shedding-gauge-stuck", "grid_route_shedding stays 0 while a model sheds")
def _shedding_gauge_stuck() -> None:
    original = route_metrics.SiteRouteMetrics.set_shedding

    def stuck(self: Any, model: str, _shed: bool) -> None:
        original(self, model, False)

    patch(route_metrics.SiteRouteMetrics, "set_shedding", stuck)


# ---------------------------------------------------------------------------------- answers, headers


@_breakage("unknown-model-503", "a model no site serves is answered 503, as if it were not ready")
def _unknown_model_503() -> None:
    patch(answers, "unknown_model", lambda model: answers.not_ready(model, 5))


@_breakage("no-model-404", "a request naming no model is answered 404")
def _no_model_404() -> None:
    patch(answers, "no_model", lambda _header: answers.unknown_model(""))


@_breakage("not-ready-without-retry-after", "no ready site is answered 503 without Retry-After")
def _not_ready_without_retry_after() -> None:
    patch(answers, "not_ready", lambda model, _retry_after: Reject(
        503, f"no site serving {model!r} is ready\n"))


@_breakage("site-header-names-cluster", "x-grid-site names the cluster rather than the site")
def _site_header_names_cluster() -> None:
    patch(grid_site_route, "SITE_HEADER", "x-grid-site-unused")
    patch(grid_site_route, "BACKEND_HEADER", "x-grid-site")


# ------------------------------------------------------------------------------------ prefix affinity


@_breakage("no-prefix-affinity", "a prompt's prefix never keeps it on the site that holds it")
def _no_prefix_affinity() -> None:
    patch(prefix, "prefer", lambda _index, _keys, _sites, _settings, _rng: (None, "miss"))
