"""A test's revisions drawn: when each revision was seen at each stage (rendered, distributed, accepted,
serving) and how long its route change took.

The revision lifecycle is the spine of the hot-reload, producer end-to-end and mesh tests: a slow or stuck
stage is what a failure of theirs usually means. The first chart puts every revision at every site on the
stage lanes over time, with the test's actions as dotted lines; the second splits each route change (from
the first stage seen of a revision at a site to the moment it served there) into the time spent between
stages, so the slow hop stands out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from harness.report.plotting import add_actions, label
from harness.timeline import REVISION_STAGES

__all__ = ["latency_figure", "revision_figure", "route_changes"]

_SYMBOLS = dict(zip(REVISION_STAGES, ("circle", "square", "diamond", "star"), strict=True))


def _place(event: Mapping[str, Any]) -> str:
    """Where a revision event happened, as the chart names it: the site, and the gateway when one is named."""
    site = str(event.get("site") or "?")
    return f"{site} / {event['gateway']}" if event.get("gateway") else site


def _short(revision: Any) -> str:
    return str(revision)[:12]


def route_changes(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per revision and site that reached serving: when each stage was first seen there and the latency from
    the first of them to serving (seconds). Ordered by when serving was reached."""
    first: dict[tuple[str, str], dict[str, float]] = {}
    for event in events:
        if event.get("kind") != "revision" or event.get("revision") is None:
            continue
        stages = first.setdefault((str(event["revision"]), str(event.get("site") or "?")), {})
        stages.setdefault(str(event.get("stage")), float(event.get("t", 0.0)))
    rows = []
    for (revision, site), stages in first.items():
        if "serving" not in stages:
            continue
        seen = {stage: stages[stage] for stage in REVISION_STAGES if stage in stages}
        start_stage = min(seen, key=lambda stage: (seen[stage], REVISION_STAGES.index(stage)))
        rows.append({"revision": revision, "site": site, "stages": seen, "from": start_stage,
                     "latency": round(seen["serving"] - seen[start_stage], 3)})
    return sorted(rows, key=lambda row: row["stages"]["serving"])


def revision_figure(events: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Stage lanes over time: one line per revision and site, a marker per stage it was seen at."""
    marks = [e for e in events if e.get("kind") == "revision"]
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for event in marks:
        groups.setdefault((_short(event.get("revision")), str(event.get("site") or "?")), []).append(event)
    figure = go.Figure()
    for (revision, site), group in groups.items():
        figure.add_trace(go.Scatter(
            x=[float(e.get("t", 0.0)) for e in group], y=[str(e.get("stage")) for e in group],
            name=label(f"{revision} at {site}"), mode="lines+markers",
            marker={"size": 10, "symbol": [_SYMBOLS.get(str(e.get("stage")), "circle") for e in group]},
            text=[label(f"revision {e.get('revision')} {e.get('stage')} at {_place(e)}") for e in group],
            hovertemplate="%{text} (%{x:.2f} s)<extra></extra>"))
    add_actions(figure, events)
    figure.update_layout(
        title={"text": "Revisions by stage over time"},
        xaxis={"title": "seconds since the test began", "rangemode": "tozero"},
        yaxis={"title": "", "type": "category", "categoryorder": "array", "categoryarray": list(REVISION_STAGES),
               "range": [-0.5, len(REVISION_STAGES) - 0.5]},
        height=340, showlegend=True, margin={"l": 90, "r": 20, "t": 90, "b": 50})
    return figure


def latency_figure(changes: Sequence[Mapping[str, Any]]) -> go.Figure:
    """One bar per route change on the time axis, split into the stretches between the stages it was seen at, in
    the order the harness saw them (a stage not seen, as a consumer test without an operator has none, joins its
    neighbours' stretch; a status read late shows its stage after the next one)."""
    stretches: dict[str, tuple[list[float], list[float], list[str]]] = {}
    for change in changes:
        seen = change["stages"]
        lane = label(f"{_short(change['revision'])} at {change['site']}")
        ordered = sorted(seen, key=lambda stage: (seen[stage], REVISION_STAGES.index(stage)))
        for before, after in zip(ordered, ordered[1:], strict=False):
            starts, widths, lanes = stretches.setdefault(f"{before} → {after}", ([], [], []))
            starts.append(seen[before])
            widths.append(max(seen[after] - seen[before], 0.0))
            lanes.append(lane)
    figure = go.Figure()
    order = {f"{a} → {b}": (REVISION_STAGES.index(a), REVISION_STAGES.index(b))
             for a in REVISION_STAGES for b in REVISION_STAGES}
    for name in sorted(stretches, key=lambda n: order.get(n, (9, 9))):
        starts, widths, lanes = stretches[name]
        figure.add_trace(go.Bar(
            orientation="h", base=starts, x=widths, y=lanes, name=name,
            hovertemplate=f"{name}: %{{x:.3f}} s from %{{base:.2f}} s<extra></extra>"))
    figure.update_layout(
        title={"text": "Route-change latency: from the first stage seen to serving"},
        xaxis={"title": "seconds since the test began", "rangemode": "tozero"},
        yaxis={"title": "", "type": "category", "autorange": "reversed"},
        barmode="overlay", height=160 + 40 * len(changes), margin={"l": 150, "r": 20, "t": 90, "b": 50})
    return figure
