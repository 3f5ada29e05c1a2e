"""A distribution judgement drawn: the share each candidate served against its expected share and the interval
the planned test accepts.

The failure message prints the same numbers as a table; the chart shows at a glance which candidate was off
and by how much compared with the interval the stated error rates allow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from harness.report.plotting import label
from harness.report.text import as_mapping as _mapping

__all__ = ["distribution_figure", "distribution_rows"]

_INSIDE = "#3a9d5d"
_OUTSIDE = "#b8433e"


def distribution_rows(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per candidate: count, observed share, expected share and accepted share interval (None for a
    candidate the plan did not expect) and whether the count was inside its interval."""
    counts = {str(k): int(v) for k, v in _mapping(event.get("counts")).items()}
    expected = {str(k): float(v) for k, v in _mapping(event.get("expected")).items()}
    intervals = {str(k): v for k, v in _mapping(event.get("intervals")).items()}
    n = int(event.get("n") or sum(counts.values()) or 1)
    rows = []
    for name in list(expected) + sorted(set(counts) - set(expected)):
        count = counts.get(name, 0)
        bounds = intervals.get(name)
        lo, hi = (int(bounds[0]), int(bounds[1])) if isinstance(bounds, list | tuple) and len(bounds) == 2 else (0, -1)
        inside = name in expected and lo <= count <= hi
        rows.append({"name": name, "count": count, "observed": count / n, "expected": expected.get(name),
                     "low": lo / n if name in expected else None, "high": hi / n if name in expected else None,
                     "inside": inside})
    return rows


def distribution_figure(event: Mapping[str, Any]) -> go.Figure:
    """Bars: observed share per candidate (green inside its interval, red outside); diamonds with error bars:
    the expected share and the interval of shares the test accepts."""
    rows = distribution_rows(event)
    names = [label(row["name"]) for row in rows]
    planned = [row for row in rows if row["expected"] is not None]
    figure = go.Figure()
    figure.add_trace(go.Bar(
        x=names, y=[row["observed"] for row in rows], name="observed share",
        marker_color=[_INSIDE if row["inside"] else _OUTSIDE for row in rows],
        customdata=[[row["count"]] for row in rows],
        hovertemplate="%{x}: observed %{y:.2%} (%{customdata[0]} requests)<extra></extra>"))
    figure.add_trace(go.Scatter(
        x=[label(row["name"]) for row in planned], y=[row["expected"] for row in planned],
        name="expected share (accepted interval)", mode="markers",
        marker={"symbol": "diamond", "size": 11, "color": "#1d2330"},
        error_y={"type": "data", "symmetric": False, "thickness": 2, "width": 10,
                 "array": [row["high"] - row["expected"] for row in planned],
                 "arrayminus": [row["expected"] - row["low"] for row in planned]},
        customdata=[[row["low"], row["high"]] for row in planned],
        hovertemplate="%{x}: expected %{y:.2%}, accepted %{customdata[0]:.2%} to %{customdata[1]:.2%}"
                      "<extra></extra>"))
    verdict = "within the accepted intervals" if event.get("passed") else "OUTSIDE the accepted intervals"
    what = f"{label(event['what'])}: " if event.get("what") else ""
    top = max([row["observed"] for row in rows] + [row["high"] or 0.0 for row in planned] + [0.1])
    figure.update_layout(
        title={"text": f"{what}observed vs expected share: {verdict}<br>"
                       f"<sup>n = {int(event.get('n') or 0)} requests, false-failure probability "
                       f"alpha = {float(event.get('alpha') or 0.0):g}</sup>"},
        xaxis={"title": "candidate", "type": "category"},
        yaxis={"title": "share of requests", "tickformat": ".0%", "range": [0, min(1.05, top * 1.15)]},
        height=360, margin={"l": 60, "r": 20, "t": 90, "b": 50},
        bargap=0.45)
    return figure


