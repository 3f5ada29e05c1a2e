"""The grid gateway's routing metrics, read from its admin /metrics (Prometheus text, prometheus_client's
parser): per site its learned ceiling, saturation (rho) and weight, selections per path, and shedding per
model. The names are the routing guide's (7b, the tuning paragraph) and, for the weight, the public
gateway's (praxis-proxy/grid, gateway/ai-grid-filters)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["CEILING", "PATHS", "RHO", "RouteMetrics", "SELECTIONS", "SHEDDING", "WEIGHT", "parse_route_metrics"]

CEILING = "grid_route_site_ceiling"
RHO = "grid_route_site_rho"
WEIGHT = "grid_route_site_weight"
SELECTIONS = "grid_route_selections_total"
SHEDDING = "grid_route_shedding"
DECISIONS = "grid_route_decisions_total"
#: The selection paths: two choices (three or more sites with room), the weighted pick between two, the
#: only site with room, and the capacity-weighted pick when none has room.
PATHS = ("two_choices", "between_two", "lone", "by_capacity")
_SITE_GAUGES = (CEILING, RHO, WEIGHT)


@dataclass(frozen=True)
class RouteMetrics:
    """One scrape. Per-site gauges are keyed by site; a site the gateway has not measured reads NaN (or is
    absent). `labels` keeps each per-site series' full label set, for the label vocabulary tests."""

    ceiling: Mapping[str, float] = field(default_factory=dict)
    rho: Mapping[str, float] = field(default_factory=dict)
    weight: Mapping[str, float] = field(default_factory=dict)
    selections: Mapping[str, float] = field(default_factory=dict)
    shedding: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, tuple[dict[str, str], ...]] = field(default_factory=dict)
    text: str = ""

    def measured(self, site: str) -> bool:
        """Whether the gateway shows a ceiling and a saturation for `site` (numbers, not NaN)."""
        return _number(self.ceiling.get(site)) and _number(self.rho.get(site))

    def describe(self, sites: tuple[str, ...] | None = None) -> str:
        """A short line for wait messages: ceiling, rho and weight per site, selections and shedding."""
        names = sites or tuple(sorted(set(self.ceiling) | set(self.rho)))
        per_site = ", ".join(f"{s}: ceiling={_show(self.ceiling.get(s))} rho={_show(self.rho.get(s))} "
                             f"weight={_show(self.weight.get(s))}" for s in names)
        selections = {path: int(n) for path, n in sorted(self.selections.items())}
        shedding = dict(sorted(self.shedding.items()))
        return f"{per_site or 'no per-site series'}; selections={selections}; shedding={shedding}"


def _number(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def _show(value: float | None) -> str:
    if value is None:
        return "absent"
    return "NaN" if math.isnan(value) else f"{value:.4g}"


def parse_route_metrics(text: str) -> RouteMetrics:
    """The routing series of one admin /metrics exposition (other series are ignored)."""
    gauges: dict[str, dict[str, float]] = {name: {} for name in _SITE_GAUGES}
    labels: dict[str, list[dict[str, str]]] = {name: [] for name in (*_SITE_GAUGES, SELECTIONS, SHEDDING)}
    selections: dict[str, float] = {}
    shedding: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, sample_labels = sample.name, dict(sample.labels)
            if name in gauges:
                labels[name].append(sample_labels)
                if "site" in sample_labels:
                    gauges[name][sample_labels["site"]] = float(sample.value)
            elif name == SELECTIONS:
                labels[name].append(sample_labels)
                path = sample_labels.get("path", "")
                selections[path] = selections.get(path, 0.0) + float(sample.value)
            elif name == SHEDDING:
                labels[name].append(sample_labels)
                shedding[sample_labels.get("model", "")] = float(sample.value)
    return RouteMetrics(ceiling=gauges[CEILING], rho=gauges[RHO], weight=gauges[WEIGHT], selections=selections,
                        shedding=shedding, labels={k: tuple(v) for k, v in labels.items()}, text=text)


def selections_since(before: RouteMetrics, after: RouteMetrics) -> dict[str, int]:
    """How many selections each path counted between two scrapes."""
    paths = set(before.selections) | set(after.selections)
    return {path: int(round(after.selections.get(path, 0.0) - before.selections.get(path, 0.0))) for path in paths}


def as_record(metrics: RouteMetrics, sites: tuple[str, ...]) -> dict[str, Any]:
    """The per-site numbers of one scrape as plain data (for timeline events and messages)."""
    return {site: {"ceiling": metrics.ceiling.get(site), "rho": metrics.rho.get(site),
                   "weight": metrics.weight.get(site)} for site in sites}
