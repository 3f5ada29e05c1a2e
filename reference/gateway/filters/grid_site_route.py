"""grid_site_route: send each request for a model to one of the sites serving it, by measured availability.

Per request: the model from the model header (400 without one), the model's candidates from the
serving config (404 when none names it), 429 while the model sheds, 503 when none of its sites is
ready; else prefix affinity may keep the prompt where its prefix went, and the pick chooses among the
ready sites (two_choices, between_two, lone, by_capacity). The chosen cluster is set for the
load_balancer after this filter, and the response names the site and cluster (x-grid-site,
x-grid-backend). Everything a decision reads comes from one immutable snapshot the pollers refresh.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping
from pathlib import Path

from reference.gateway import routing_input
from reference.gateway.config import FilterSpec
from reference.gateway.context import NOT_JSON, Reject, RequestContext
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.schema import ConfigError
from reference.gateway.site_route import answers, pick, prefix
from reference.gateway.site_route.runtime import SiteRouteRuntime
from reference.gateway.site_route.serving_config import (
    SERVING_ENV,
    describe_error,
    parse_serving_bytes,
    read_serving_bytes,
)
from reference.gateway.site_route.settings import GridSiteRouteConfig

log = logging.getLogger("agn.gateway.site_route")

TYPE = "grid_site_route"
NS = "grid_site_route."
SITE_HEADER = "x-grid-site"
BACKEND_HEADER = "x-grid-backend"


class GridSiteRouteFilter:
    def __init__(self, config: GridSiteRouteConfig, runtime: SiteRouteRuntime, rng: random.Random) -> None:
        self.config = config
        self.runtime = runtime
        self.metrics = runtime.metrics
        self.index = prefix.PrefixIndex() if config.prefix is not None else None
        self.needs_body = config.prefix is not None
        self._rng = rng
        self._header = config.model_header

    def on_request(self, ctx: RequestContext) -> Reject | None:
        if ctx.cluster is not None:  # an earlier filter chose already
            return None
        md = ctx.metadata
        raw = ctx.headers.get(self._header)
        model = routing_input.valid_name(raw) if raw is not None else None
        snap = self.runtime.snapshot
        if model is None:
            md[NS + "outcome"] = "no_model"
            self.metrics.refused("bad_request")
            return answers.no_model(self._header)
        route = snap.models.get(model)
        if route is None:
            md[NS + "outcome"] = "unknown_model"
            self.metrics.refused("bad_request")
            return answers.unknown_model(model)
        if model in snap.shedding:
            md[NS + "outcome"] = "shed"
            self.metrics.refused("shed")
            return answers.shed(model, self.runtime.shed_retry_after)
        sites = route.ready
        if not sites:
            md[NS + "outcome"] = "not_ready"
            self.metrics.refused("not_ready")
            return answers.not_ready(model, self.runtime.unready_retry_after)
        keys = self._keys(ctx, model)
        chosen = None
        if keys:
            assert self.index is not None and self.config.prefix is not None
            chosen, outcome = prefix.prefer(self.index, keys, sites, self.config.prefix, self._rng)
            self.metrics.prefix_outcome(outcome)
            md[NS + "prefix"] = outcome
        if chosen is None:
            chosen, path = pick.choose(sites, self._rng)
            self.metrics.selected(path)
            md[NS + "path"] = path
        if keys:
            assert self.index is not None
            self.index.record(keys, (chosen.site, chosen.cluster))
        ctx.cluster = chosen.cluster
        ctx.response_headers.append((SITE_HEADER, chosen.site))
        ctx.response_headers.append((BACKEND_HEADER, chosen.cluster))
        md[NS + "outcome"] = "routed"
        md[NS + "site"] = chosen.site
        md[NS + "cluster"] = chosen.cluster
        self.metrics.decided(chosen.site, chosen.cluster, "routed")
        return None

    def _keys(self, ctx: RequestContext, model: str) -> tuple[bytes, ...]:
        if self.index is None:
            return ()
        doc = ctx.json_body()
        if doc is NOT_JSON:
            return ()
        text = prefix.canonical_prompt(doc)
        return prefix.block_keys(model, text) if text else ()


def build_site_route(spec: FilterSpec, metrics: GatewayMetrics, rng: random.Random, declared: frozenset[str],
                     environ: Mapping[str, str] = os.environ) -> GridSiteRouteFilter:
    """The filter and its runtime, with the serving config GRID_SERVING_CONFIG names read now."""
    config: GridSiteRouteConfig = spec.options
    named = environ.get(SERVING_ENV, "").strip()
    if not named:
        raise ConfigError(spec.path, f"{SERVING_ENV} is not set: grid_site_route reads its serving config "
                                     "from the file it names")
    path = Path(named)
    try:
        data = read_serving_bytes(path)
        serving = parse_serving_bytes(data, path.parent)
    except (OSError, ConfigError) as exc:
        raise ConfigError(spec.path, describe_error(path, exc)) from None
    runtime = SiteRouteRuntime(config, path, data, serving, declared, metrics.site_route())
    return GridSiteRouteFilter(config, runtime, rng)
