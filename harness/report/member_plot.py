"""Mesh membership drawn: each site's view of every other site over time, as the harness read it.

The mesh tests judge detection and recovery bounds (a killed operator seen dead, a cut link suspected, a
healed one alive again, a GridSite leaving Active); a lane per observer and member shows when each view
changed, with the test's actions (kill, partition, heal) as dotted lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from harness.report.plotting import add_actions, label

__all__ = ["member_figure", "member_spans"]

#: Colours by state: healthy green, in doubt amber, gone red; anything else (absent, a phase not listed) grey.
_COLOURS = {"alive": "#3a9d5d", "active": "#3a9d5d", "suspect": "#d9822b", "probing": "#d9822b",
            "pending": "#d9822b", "degraded": "#d9822b", "dead": "#b8433e", "left": "#b8433e",
            "unreachable": "#b8433e", "notready": "#b8433e"}
_OTHER = "#9aa3b2"


def _lane(event: Mapping[str, Any]) -> str:
    source = event.get("source") or "membership"
    return f"{event.get('observer', '?')} sees {event.get('member', '?')} ({source})"


def member_spans(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each member state as a span: lane, state, reason, start and end (the next change in the lane, else the
    last moment the timeline knows of)."""
    end_of_test = max((float(e.get("t", 0.0)) for e in events), default=0.0)
    lanes: dict[str, list[Mapping[str, Any]]] = {}
    for event in events:
        if event.get("kind") == "member":
            lanes.setdefault(_lane(event), []).append(event)
    spans = []
    for lane, changes in lanes.items():
        for index, event in enumerate(changes):
            start = float(event.get("t", 0.0))
            end = float(changes[index + 1].get("t", start)) if index + 1 < len(changes) else end_of_test
            spans.append({"lane": lane, "state": str(event.get("state") or "absent"),
                          "reason": event.get("reason"), "start": start, "end": max(end, start)})
    return spans


def member_figure(events: Sequence[Mapping[str, Any]]) -> go.Figure:
    """A horizontal bar per state span, coloured by state, one lane per observer and member."""
    spans = member_spans(events)
    figure = go.Figure()
    for state in sorted({span["state"] for span in spans}):
        mine = [span for span in spans if span["state"] == state]
        figure.add_trace(go.Bar(
            orientation="h", base=[span["start"] for span in mine],
            x=[max(span["end"] - span["start"], 0.05) for span in mine],  # a last-moment change stays visible
            y=[label(span["lane"]) for span in mine], name=label(state),
            marker_color=_COLOURS.get(state.lower(), _OTHER),
            text=[label(f"{state}" + (f": {span['reason']}" if span.get("reason") else "")) for span in mine],
            textposition="inside", insidetextanchor="start",
            hovertemplate="%{y}: %{text} from %{base:.2f} s for %{x:.2f} s<extra></extra>"))
    add_actions(figure, events)
    lanes = {span["lane"] for span in spans}
    figure.update_layout(
        title={"text": "Mesh members as each site saw them"},
        xaxis={"title": "seconds since the test began", "rangemode": "tozero"},
        yaxis={"title": "", "type": "category", "autorange": "reversed"},
        barmode="overlay", height=160 + 34 * len(lanes), margin={"l": 230, "r": 20, "t": 90, "b": 50})
    return figure
