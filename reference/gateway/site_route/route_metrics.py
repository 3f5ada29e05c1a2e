"""The grid_site_route series, registered once per gateway registry.

Labels come from the serving config (site, cluster, model names) or from closed vocabularies (path,
reason, outcome, poll result); never from a request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from reference.gateway.site_route.pick import PATHS
from reference.gateway.site_route.prefix import OUTCOMES

ROUTED = "routed"
BAD_REQUEST = "bad_request"  # no model (400) or a model no candidate names (404)
NOT_READY = "not_ready"  # no ready site (503)
SHED = "shed"  # 429
REASONS = (ROUTED, BAD_REQUEST, NOT_READY, SHED)
POLL_RESULTS = ("ok", "connect_error", "timeout", "tls_error", "http_error", "parse_error")


class SiteRouteMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        site = ("site", "cluster")
        self.ceiling = Gauge("grid_route_site_ceiling", "Learned ceiling per site: the most in-flight held "
                             "with nothing waiting, decayed and floored (NaN while unmeasured).", site,
                             registry=registry)
        self.rho = Gauge("grid_route_site_rho", "Smoothed saturation per site: in-flight over its ceiling "
                         "(NaN while unmeasured).", site, registry=registry)
        self.weight = Gauge("grid_route_site_weight", "Weight the pick gives a site: its ceiling lifted to "
                            "explore_floor of the largest (NaN while unmeasured).", site, registry=registry)
        self.selections = Counter("grid_route_selections", "Site picks by the arm that made them.", ("path",),
                                  registry=registry)
        self.shedding = Gauge("grid_route_shedding", "1 while a model sheds (answers 429), 0 otherwise.",
                              ("model",), registry=registry)
        self.decisions = Counter("grid_route_decisions", "Requests grid_site_route decided: routed to a site "
                                 "and cluster, or refused (empty site and cluster) by reason.",
                                 ("site", "cluster", "reason"), registry=registry)
        self.polls = Counter("grid_signals_poll", "Polls of the peers' signals endpoints by result.",
                             ("site", "result"), registry=registry)
        self.prefix = Counter("grid_route_prefix_affinity", "Prefix-affinity outcomes.", ("outcome",),
                              registry=registry)
        self._children: dict[Any, Any] = {}
        for path in PATHS:
            self.selections.labels(path=path)
        for outcome in OUTCOMES:
            self.prefix.labels(outcome=outcome)
        for reason in REASONS[1:]:
            self.decisions.labels(site="", cluster="", reason=reason)

    def _child(self, metric: Any, *labels: str) -> Any:
        child = self._children.get((id(metric), labels))
        if child is None:
            child = self._children[(id(metric), labels)] = metric.labels(*labels)
        return child

    def selected(self, path: str) -> None:
        self._child(self.selections, path).inc()

    def decided(self, site: str, cluster: str, reason: str) -> None:
        self._child(self.decisions, site, cluster, reason).inc()

    def refused(self, reason: str) -> None:
        self._child(self.decisions, "", "", reason).inc()

    def prefix_outcome(self, outcome: str) -> None:
        self._child(self.prefix, outcome).inc()

    def polled(self, site: str, result: str) -> None:
        self._child(self.polls, site, result).inc()

    def site_gauges(self, site: str, cluster: str, values: dict[str, float]) -> None:
        for name, gauge in (("ceiling", self.ceiling), ("rho", self.rho), ("weight", self.weight)):
            self._child(gauge, site, cluster).set(values[name])

    def forget_sites(self, pairs: Iterable[tuple[str, str]]) -> None:
        for site, cluster in pairs:
            for gauge in (self.ceiling, self.rho, self.weight):
                self._children.pop((id(gauge), (site, cluster)), None)
                with contextlib.suppress(KeyError):
                    gauge.remove(site, cluster)

    def set_shedding(self, model: str, shed: bool) -> None:
        self._child(self.shedding, model).set(1.0 if shed else 0.0)

    def forget_models(self, models: Iterable[str]) -> None:
        for model in models:
            self._children.pop((id(self.shedding), (model,)), None)
            with contextlib.suppress(KeyError):
                self.shedding.remove(model)
