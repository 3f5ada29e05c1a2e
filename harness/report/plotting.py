"""What every chart of the HTML report shares: one compact look, text made safe for Plotly, actions drawn as
dotted lines, and one way to put a figure into the page.

The page is one file that needs no network, so Plotly's JavaScript is inlined once (``plotly_script``) and
each figure is written without it. A figure in a collapsed section is written as its JSON and drawn when the
section is opened (the page's script does that), so a report with hundreds of charts still opens at once.
Plotly renders a subset of HTML in labels; everything a test or an implementation wrote is escaped first so
it shows as written and never becomes markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

__all__ = ["PAGE_TEMPLATE", "add_actions", "figure_html", "label", "plotly_script"]

#: A small template of the page's look: Plotly's default one adds about 7 kB to every figure.
PAGE_TEMPLATE = go.layout.Template(layout={
    "font": {"family": "system-ui, -apple-system, 'Segoe UI', sans-serif", "size": 12, "color": "#1d2330"},
    "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
    "colorway": ["#2f6fbd", "#d9822b", "#3a9d5d", "#b8433e", "#7d5ba6", "#8c6d46", "#c75fa0", "#6b7280"],
    "xaxis": {"gridcolor": "#e5e8ee", "zeroline": False, "linecolor": "#9aa3b2", "ticks": "outside"},
    "yaxis": {"gridcolor": "#e5e8ee", "zeroline": False, "linecolor": "#9aa3b2", "ticks": "outside"},
    "hoverlabel": {"align": "left"},
    "title": {"x": 0.0, "xanchor": "left", "font": {"size": 14}},
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0.0, "xanchor": "left"},
    "margin": {"l": 70, "r": 20, "t": 90, "b": 50},
})
_CONFIG = {"displaylogo": False, "responsive": True}


def label(value: Any) -> str:
    """`value` as text Plotly shows literally: it reads <b>, <a href=...> and the like in labels as markup."""
    return escape(str(value), quote=False)


def plotly_script() -> str:
    """Plotly's JavaScript, inlined: the page includes it once, before its first figure."""
    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def figure_html(figure: go.Figure, div_id: str, *, lazy: bool = False) -> str:
    """The figure as a fragment of the page (without Plotly's script); `lazy` leaves it to be drawn when a
    collapsed section holding it is opened."""
    figure.update_layout(template=PAGE_TEMPLATE)
    if not lazy:
        return str(figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG))
    # Plotly's JSON writes "<" as \u003c, so no "</script>" inside a label can end the block early
    text = f'{{"figure":{figure.to_json()},"config":{json.dumps(_CONFIG)}}}'.replace("<", "\\u003c")
    return (f'<div id="{escape(div_id)}" class="plotly-lazy"></div>'
            f'<script type="application/json" data-figure-for="{escape(div_id)}">{text}</script>')


def add_actions(figure: go.Figure, events: Sequence[Mapping[str, Any]]) -> None:
    """The test's actions (and the harness's: a restart, a cut link) as dotted vertical lines, labelled."""
    for event in (e for e in events if e.get("kind") == "action"):
        figure.add_vline(x=float(event.get("t", 0.0)), line_dash="dot", line_color="#8e1c1c",
                         annotation_text=label(event.get("what", "")), annotation_textangle=-90,
                         annotation_position="top left", annotation_font_size=10)
