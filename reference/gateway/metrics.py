"""The gateway's Prometheus series, in a registry of its own.

Label values come only from closed vocabularies (outcome, kind, event, result, selection mode) or
from the snapshot contract (cluster, site); never from client input and never stable_id.
Counter children are cached so the request path does not rebuild label tuples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from reference.gateway.site_route.route_metrics import SiteRouteMetrics

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
OUTCOMES = ("routed", "reused", "no_candidate", "invalid", "skipped", "management", "preserved")
KINDS = ("inference_model", "mcp_tool", "none")
SESSION_EVENTS = ("bound", "reused", "failover")
RELOAD_RESULTS = ("accepted", "unchanged", "rejected", "read_error")


class GatewayMetrics:
    """All series of one gateway process; gauges sum over the live intelligent_route instances."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._decisions = Counter(
            "praxis_ai_intelligent_route_decisions",
            "Routing decisions, one per request through intelligent_route.",
            ("outcome", "kind"),
            registry=self.registry,
        )
        self._selected = Counter(
            "praxis_ai_intelligent_route_selected",
            "Fresh candidate selections (session reuse is not a selection).",
            ("cluster", "site", "selection_mode"),
            registry=self.registry,
        )
        self._session = Counter(
            "praxis_ai_intelligent_route_session",
            "Session affinity events.",
            ("event",),
            registry=self.registry,
        )
        self._reloads = Counter(
            "praxis_ai_intelligent_route_snapshot_reloads",
            "Overlay reload attempts by result.",
            ("result",),
            registry=self.registry,
        )
        self._table_sources: dict[int, Callable[[], int]] = {}
        self._snapshot_sources: dict[int, Callable[[], int]] = {}
        table = Gauge(
            "praxis_ai_intelligent_route_session_table_entries",
            "Session bindings held, including expired entries not yet evicted.",
            registry=self.registry,
        )
        table.set_function(lambda: float(sum(f() for f in list(self._table_sources.values()))))
        candidates = Gauge(
            "praxis_ai_intelligent_route_snapshot_candidates",
            "Candidates in the serving snapshot.",
            registry=self.registry,
        )
        candidates.set_function(lambda: float(sum(f() for f in list(self._snapshot_sources.values()))))
        self._children: dict[Any, Any] = {}
        self._site_route: SiteRouteMetrics | None = None
        for event in SESSION_EVENTS:
            self._session.labels(event=event)
        for result in RELOAD_RESULTS:
            self._reloads.labels(result=result)

    def enable_filter_duration(self) -> Callable[[str, float], None]:
        """Register the proxy's per-filter duration histogram; returns what records one filter run."""
        histogram = Histogram(
            "praxis_filter_duration_seconds",
            "Time each filter of a pipeline took per request.",
            ("filter",),
            registry=self.registry,
        )
        children: dict[str, Any] = {}

        def observe(kind: str, seconds: float) -> None:
            child = children.get(kind)
            if child is None:
                child = children[kind] = histogram.labels(filter=kind)
            child.observe(seconds)

        return observe

    def site_route(self) -> SiteRouteMetrics:
        """The grid_site_route series, registered on first use (one set per registry)."""
        if self._site_route is None:
            self._site_route = SiteRouteMetrics(self.registry)
        return self._site_route

    def decision(self, outcome: str, kind: str) -> None:
        child = self._children.get(("d", outcome, kind))
        if child is None:
            child = self._children[("d", outcome, kind)] = self._decisions.labels(outcome=outcome, kind=kind)
        child.inc()

    def selected(self, cluster: str, site: str, mode: str) -> None:
        child = self._children.get(("s", cluster, site, mode))
        if child is None:
            child = self._children[("s", cluster, site, mode)] = self._selected.labels(
                cluster=cluster, site=site, selection_mode=mode
            )
        child.inc()

    def session_event(self, event: str) -> None:
        self._session.labels(event=event).inc()

    def reload(self, result: str) -> None:
        self._reloads.labels(result=result).inc()

    def track(self, owner: object, table_size: Callable[[], int], snapshot_size: Callable[[], int]) -> None:
        """Publish an instance's table and snapshot sizes until `untrack`."""
        self._table_sources[id(owner)] = table_size
        self._snapshot_sources[id(owner)] = snapshot_size

    def untrack(self, owner: object) -> None:
        self._table_sources.pop(id(owner), None)
        self._snapshot_sources.pop(id(owner), None)

    def render(self) -> bytes:
        return generate_latest(self.registry)
