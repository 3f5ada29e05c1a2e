"""Metrics a test recorded, drawn: one panel per metric name, a step line per site (or pool, or provider)
over the test's seconds, with its actions as dotted lines.

A serving test records each site's saturation (rho) and learned ceiling as the gateway showed them, and the
queue at each site's pool, while its load runs (harness.serving.record); beside the served shares this shows
why traffic moved. A demo records the pool metrics it set (queueDepth, ready pods). Only numeric values are
drawn; a metric recorded as text is left to the timeline's table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from harness.report.plotting import add_actions, label

__all__ = ["metric_figure", "metric_series"]

#: Panels drawn at most: past that the figure stops being readable; the first metrics recorded win.
MAX_PANELS = 4
_SUBJECT_KEYS = ("site", "pool", "provider", "gateway")


def _subject(event: Mapping[str, Any]) -> str:
    for key in _SUBJECT_KEYS:
        if event.get(key) is not None:
            return str(event[key])
    return "value"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def metric_series(events: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Numeric metric events as {metric name: {subject: [(t, value), ...]}}, names in the order first seen."""
    series: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for event in events:
        if event.get("kind") != "metric":
            continue
        value = _number(event.get("value"))
        if value is None:
            continue
        name = str(event.get("name", "metric"))
        series.setdefault(name, {}).setdefault(_subject(event), []).append((float(event.get("t", 0.0)), value))
    return series


def metric_figure(events: Sequence[Mapping[str, Any]]) -> go.Figure:
    """The recorded metrics, a panel per name (at most MAX_PANELS), a step line per subject."""
    series = metric_series(events)
    names = list(series)[:MAX_PANELS]
    figure = make_subplots(rows=max(1, len(names)), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                           subplot_titles=[label(name) for name in names])
    end = max((float(e.get("t", 0.0)) for e in events), default=0.0)
    for row, name in enumerate(names, start=1):
        for subject, points in sorted(series[name].items()):
            xs = [t for t, _ in points] + [end]
            ys = [v for _, v in points] + [points[-1][1]]
            figure.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines", line={"shape": "hv"}, name=label(f"{name}: {subject}"),
                hovertemplate=f"{label(subject)} {label(name)} %{{y:.4g}} at %{{x:.2f}} s<extra></extra>"),
                row=row, col=1)
    add_actions(figure, events)
    figure.update_xaxes(title_text="seconds since the test began", rangemode="tozero", row=len(names) or 1, col=1)
    figure.update_layout(title={"text": "Metrics the test recorded"}, height=160 + 170 * max(1, len(names)),
                         margin={"l": 60, "r": 20, "t": 90, "b": 50})
    return figure
