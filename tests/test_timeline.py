"""Test timelines: what they record, the served shares drawn from them, and the charts in the HTML page."""

from __future__ import annotations

import json
import re

import pytest

from harness import timeline as timeline_module
from harness.report.timeline_plot import share_window, timelines_html
from harness.timeline import Timeline, served_shares


def test_events_are_stamped_in_order_with_their_fields() -> None:
    recorded = Timeline()
    recorded.action("withdraw west's provider", site="west")
    recorded.revision("rendered", "abc", site="west")
    recorded.request("inference-west", 200, site="west", session=None)
    recorded.metric("queueDepth", 6, provider="pool-a")
    events = recorded.records()
    assert [e["kind"] for e in events] == ["action", "revision", "request", "metric"]
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    assert events[2] == {"t": events[2]["t"], "kind": "request", "servedBy": "inference-west", "status": 200,
                         "site": "west"}, "a field given as None is left out"
    json.dumps(events)  # the report carries them as they are


def test_an_unknown_revision_stage_is_refused_and_a_known_one_recorded() -> None:
    recorded = Timeline()
    with pytest.raises(ValueError, match="unknown revision stage 'delivered'"):
        recorded.revision("delivered", "abc")
    recorded.revision("distributed", "abc")
    assert recorded.records()[0]["stage"] == "distributed"


def test_events_past_the_limit_are_counted_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline_module, "MAX_EVENTS", 3)
    recorded = Timeline()
    for _ in range(5):
        recorded.request("a", 200)
    events = recorded.records()
    assert len(events) == 4 and events[-1]["what"] == "2 further events not kept (limit 3)"


def test_served_shares_per_window_count_unserved_requests_as_none() -> None:
    events = [{"t": 0.1, "kind": "request", "servedBy": "a"}, {"t": 0.2, "kind": "request", "servedBy": "a"},
              {"t": 0.3, "kind": "request", "servedBy": "b"}, {"t": 0.4, "kind": "request", "servedBy": None},
              {"t": 0.45, "kind": "action", "what": "not a request"},
              {"t": 1.2, "kind": "request", "servedBy": "b"}]
    assert served_shares(events, 1.0) == [(0.0, {"a": 0.5, "b": 0.25, "none": 0.25}), (1.0, {"b": 1.0})]


def test_share_window_is_about_forty_buckets_and_never_below_a_quarter_second() -> None:
    assert share_window([{"t": 0.0, "kind": "request"}, {"t": 80.0, "kind": "request"}]) == 2.0
    assert share_window([{"t": 0.0, "kind": "request"}, {"t": 1.0, "kind": "request"}]) == 0.25
    assert share_window([]) == 0.25


def test_timeline_charts_inline_the_library_once_and_escape_what_tests_wrote() -> None:
    hostile = "</script><script>alert(1)</script>"
    page = timelines_html({
        "DEMO-A": [{"t": 0.1, "kind": "request", "servedBy": "west"}, {"t": 0.2, "kind": "action", "what": hostile},
                   {"t": 0.3, "kind": "revision", "stage": "serving", "revision": "r1", "site": "west"}],
        "DEMO-B": [{"t": 0.1, "kind": "request", "servedBy": hostile}],
    })
    assert page.count('id="timeline-') == 2
    assert len(re.findall(r"\* plotly\.js v\d+\.\d+\.\d+", page)) == 1, "the library's script is inlined once"
    assert not re.search(r"<script[^>]*\ssrc=", page), "no script is loaded from elsewhere: the page needs no network"
    assert hostile not in page and "alert(1)</script>" not in page
    assert timelines_html({}) == ""
