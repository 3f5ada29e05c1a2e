"""A test's evidence in the page: the charts its timeline gives (served shares, the metrics it recorded,
revisions and route-change latency, mesh members, each distribution judgement), with the numbers behind them.

Which charts a test gets follows from what was recorded, not from the test's profile: a consumer reload test
records revisions because the harness wrote an overlay and waited for it to serve, a selection test records
its distribution because it called ``harness.stats.assert_distribution``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import count
from typing import Any

from harness.report.distribution_plot import distribution_figure, distribution_rows
from harness.report.member_plot import member_figure
from harness.report.metric_plot import metric_figure, metric_series
from harness.report.plotting import figure_html
from harness.report.revision_plot import latency_figure, revision_figure, route_changes
from harness.report.text import escape_html as _e
from harness.report.timeline_plot import timeline_figure

__all__ = ["ChartIds", "evidence_html", "evidence_kinds"]


class ChartIds:
    """Unique element ids for the charts of one page."""

    def __init__(self) -> None:
        self._next: Iterator[int] = count()
        self.used = 0

    def new(self) -> str:
        self.used += 1
        return f"chart-{next(self._next)}"


def evidence_kinds(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """What a test's timeline can show, in the order the page draws it (empty: nothing to draw)."""
    kinds = {e.get("kind") for e in events}
    shown = []
    if "distribution" in kinds:
        judged = sum(1 for e in events if e.get("kind") == "distribution")
        shown.append("distribution" if judged == 1 else f"{judged} distributions")
    if "request" in kinds:
        shown.append("served shares")
    if metric_series(events):
        shown.append("metrics")
    if "revision" in kinds:
        shown.append("revisions")
    if "member" in kinds:
        shown.append("mesh members")
    return shown


def evidence_html(events: Sequence[Mapping[str, Any]], ids: ChartIds, *, lazy: bool) -> str:
    """The charts and tables of one test; `lazy` when they sit in a collapsed section."""
    parts: list[str] = []
    for event in (e for e in events if e.get("kind") == "distribution"):
        parts.append(figure_html(distribution_figure(event), ids.new(), lazy=lazy))
        parts.append(_distribution_table(event))
    if any(e.get("kind") == "request" for e in events):
        parts.append(figure_html(timeline_figure(events), ids.new(), lazy=lazy))
    if metric_series(events):
        parts.append(figure_html(metric_figure(events), ids.new(), lazy=lazy))
    if any(e.get("kind") == "revision" for e in events):
        parts.append(figure_html(revision_figure(events), ids.new(), lazy=lazy))
        changes = route_changes(events)
        if changes:
            parts.append(figure_html(latency_figure(changes), ids.new(), lazy=lazy))
            parts.append(_latency_table(changes))
    if any(e.get("kind") == "member" for e in events):
        parts.append(figure_html(member_figure(events), ids.new(), lazy=lazy))
    if not parts:
        return ""
    return '<div class="evidence">' + "\n".join(parts) + "</div>"


def _distribution_table(event: Mapping[str, Any]) -> str:
    """The judged numbers as a table: the chart's hover texts are not something a reader can copy."""
    rows = ["<table class=\"numbers\"><tr><th>Candidate</th><th>Observed</th><th>Share</th><th>Expected</th>"
            "<th>Accepted share</th><th></th></tr>"]
    for row in distribution_rows(event):
        expected = "—" if row["expected"] is None else f"{row['expected']:.2%}"
        accepted = "—" if row["low"] is None else f"{row['low']:.2%} to {row['high']:.2%}"
        verdict = "ok" if row["inside"] else "outside"
        rows.append(f'<tr class="{"inside" if row["inside"] else "outside"}"><td>{_e(row["name"])}</td>'
                    f'<td class="num">{row["count"]}</td><td class="num">{row["observed"]:.2%}</td>'
                    f'<td class="num">{expected}</td><td class="num">{accepted}</td><td>{verdict}</td></tr>')
    rows.append("</table>")
    return "".join(rows)


def _latency_table(changes: Sequence[Mapping[str, Any]]) -> str:
    rows = ['<table class="numbers"><tr><th>Revision</th><th>Site</th><th>From</th><th>Latency to serving (s)</th>'
            "</tr>"]
    for change in changes:
        rows.append(f'<tr><td><code>{_e(str(change["revision"])[:19])}</code></td><td>{_e(change["site"])}</td>'
                    f'<td>{_e(change["from"])}</td><td class="num">{float(change["latency"]):.3f}</td></tr>')
    rows.append("</table>")
    return "".join(rows)


