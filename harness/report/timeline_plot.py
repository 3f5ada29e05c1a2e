"""Timelines drawn for the HTML report: the share each provider served over time, with revision markers.

A demo test's verdict says whether its claim held; its timeline shows how (traffic on the local provider,
the withdrawal, the revision that moved it, the fallback, the return). The chart is one of a test's
evidence charts in the page (harness.report.evidence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from harness.report.plotting import add_actions, label
from harness.timeline import REVISION_STAGES, served_shares

__all__ = ["share_window", "timeline_figure"]

#: Marker symbols per revision stage, so a revision's path (rendered -> serving) reads at a glance.
_STAGE_SYMBOLS = dict(zip(REVISION_STAGES, ("circle-open", "square-open", "diamond-open", "star"), strict=True))


def share_window(events: Sequence[Mapping[str, Any]]) -> float:
    """Seconds per share bucket: about forty buckets over the test, never under a quarter second."""
    times = [float(e.get("t", 0.0)) for e in events if e.get("kind") == "request"]
    span = (max(times) - min(times)) if times else 0.0
    return max(0.25, round(span / 40, 2))


def timeline_figure(events: Sequence[Mapping[str, Any]]) -> go.Figure:
    """The figure of one test: served share per provider (lines), revisions (markers), actions (lines)."""
    window = share_window(events)
    shares = served_shares(events, window)
    providers = sorted({name for _, row in shares for name in row})
    figure = go.Figure()
    for name in providers:
        figure.add_trace(go.Scatter(
            x=[start for start, _ in shares], y=[row.get(name, 0.0) for _, row in shares], name=label(name),
            mode="lines+markers", line={"shape": "hv"},
            hovertemplate=f"{label(name)}: %{{y:.0%}} of requests from %{{x:.2f}} s<extra></extra>"))
    for stage in REVISION_STAGES:
        marks = [e for e in events if e.get("kind") == "revision" and e.get("stage") == stage]
        if marks:
            figure.add_trace(go.Scatter(
                x=[float(e["t"]) for e in marks], y=[1.08] * len(marks), name=f"revision {stage}", mode="markers",
                marker={"symbol": _STAGE_SYMBOLS[stage], "size": 10},
                text=[label(f"{stage} {str(e.get('revision', ''))[:12]} at {e.get('site', e.get('gateway', ''))}")
                      for e in marks],
                hovertemplate="%{text} (%{x:.2f} s)<extra></extra>"))
    add_actions(figure, events)
    figure.update_layout(
        title={"text": f"Share of requests served per provider ({window:g} s windows)"},
        xaxis={"title": "seconds since the test began", "rangemode": "tozero"},
        yaxis={"title": "share of requests", "tickformat": ".0%", "range": [-0.02, 1.15]},
        height=360, margin={"l": 60, "r": 20, "t": 90, "b": 50})
    return figure
