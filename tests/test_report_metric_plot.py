"""The metrics chart of the HTML report: numeric metric events drawn per name and subject, text ones left out."""

from __future__ import annotations

from harness.report.evidence import ChartIds, evidence_html, evidence_kinds
from harness.report.metric_plot import MAX_PANELS, metric_figure, metric_series

EVENTS = (
    {"t": 0.0, "kind": "action", "what": "load starts"},
    {"t": 0.1, "kind": "metric", "name": "rho", "value": 0.2, "site": "site-a", "provider": "site-a"},
    {"t": 0.2, "kind": "metric", "name": "rho", "value": 1.0, "site": "site-a", "provider": "site-a"},
    {"t": 0.2, "kind": "metric", "name": "rho", "value": 0.1, "site": "site-b"},
    {"t": 0.3, "kind": "metric", "name": "queueDepth", "value": 4, "pool": "pool-a"},
    {"t": 0.4, "kind": "metric", "name": "phase", "value": "Active", "site": "site-a"},
    {"t": 0.5, "kind": "request", "servedBy": "site-b", "status": 200},
)


def test_numeric_metrics_are_grouped_by_name_and_subject() -> None:
    assert metric_series(EVENTS) == {"rho": {"site-a": [(0.1, 0.2), (0.2, 1.0)], "site-b": [(0.2, 0.1)]},
                                     "queueDepth": {"pool-a": [(0.3, 4.0)]}}
    assert metric_series([e for e in EVENTS if e.get("name") == "phase"]) == {}


def test_the_chart_has_a_panel_per_metric_and_a_line_per_subject_held_to_the_end() -> None:
    figure = metric_figure(EVENTS)
    names = [trace.name for trace in figure.data]
    assert names == ["rho: site-a", "rho: site-b", "queueDepth: pool-a"]
    assert list(figure.data[0].x) == [0.1, 0.2, 0.5] and list(figure.data[0].y) == [0.2, 1.0, 1.0]
    many = [{"t": 0.0, "kind": "metric", "name": f"m{i}", "value": i} for i in range(MAX_PANELS + 2)]
    assert len(metric_figure(many).data) == MAX_PANELS


def test_the_evidence_lists_and_draws_the_metrics() -> None:
    assert evidence_kinds(EVENTS) == ["served shares", "metrics"]
    ids = ChartIds()
    assert "plotly-lazy" in evidence_html(EVENTS, ids, lazy=True) and ids.used == 2
    text_only = [e for e in EVENTS if e.get("name") == "phase"]
    assert evidence_kinds(text_only) == [] and evidence_html(text_only, ChartIds(), lazy=True) == ""
