"""Test timelines: what they record, the current test's timeline the harness records into, the served shares
drawn from them, and what the harness's own waits and judgements put on them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from harness import timeline as timeline_module
from harness.report.timeline_plot import share_window
from harness.stats import assert_distribution, plan_distribution
from harness.timeline import (
    Timeline,
    current,
    record_action,
    record_distribution,
    record_member,
    record_revision,
    recording,
    served_shares,
)


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


def test_events_past_the_limit_are_counted_not_kept_per_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline_module, "MAX_EVENTS", 3)
    recorded = Timeline()
    for _ in range(5):
        recorded.request("a", 200)
    recorded.action("withdraw a")  # requests past their limit do not crowd out the rest
    events = recorded.records()
    assert [e["kind"] for e in events] == ["request"] * 3 + ["action", "action"]
    assert events[-1]["what"] == "2 further events not kept (2 request; limit 3 per kind)"


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


# ------------------------------------------------------------------------------ the current timeline


def test_recording_makes_a_timeline_current_and_restores_the_previous_one() -> None:
    outer, inner = Timeline(), Timeline()
    assert current() is None
    record_action("outside any test")  # nothing to record into: nothing happens
    with recording(outer):
        with recording(inner):
            assert current() is inner
            record_action("inner")
        assert current() is outer
        with pytest.raises(RuntimeError), recording(inner):
            raise RuntimeError("a test that fails still leaves its timeline")
        assert current() is outer
    assert current() is None
    assert [e["what"] for e in inner.events] == ["inner"] and outer.events == []


def test_observed_revisions_are_recorded_when_they_change() -> None:
    recorded = Timeline()
    with recording(recorded):
        for revision in ("r1", "r1", "r1", "r2", "r2", None, "r1"):
            record_revision("rendered", revision, site="west", network="n")
        record_revision("rendered", "r2", site="east", network="n")  # another place has its own last value
    rows = [(e["revision"], e["site"]) for e in recorded.events]
    assert rows == [("r1", "west"), ("r2", "west"), ("r1", "west"), ("r2", "east")]


def test_a_repeated_stage_is_left_out_unless_written_again_on_purpose() -> None:
    recorded = Timeline()
    with recording(recorded):
        record_revision("accepted", "r1", site="west", network="n")
    recorded.revision("accepted", "r1", site="west")  # a demo recording what the harness just recorded
    assert len(recorded.events) == 1
    with recording(recorded):  # the harness writing the same revision twice (a re-render) records both
        record_revision("distributed", "r1", observed=False, site="west", gateway="gw")
        record_revision("distributed", "r1", observed=False, site="west", gateway="gw")
    assert [e["stage"] for e in recorded.events] == ["accepted", "distributed", "distributed"]


def test_member_states_are_recorded_when_they_change_per_observer_member_and_source() -> None:
    recorded = Timeline()
    with recording(recorded):
        for state in ("alive", "alive", "suspect", "suspect", "dead"):
            record_member("site-a", "site-c", state, source="membership")
        record_member("site-b", "site-c", "alive", source="membership")
        record_member("site-a", "site-c", None, source="GridSite", network="n")
        record_member("site-a", "site-c", "Left", source="GridSite", network="n", reason="dead")
    rows = [(e["observer"], e["state"], e["source"], e.get("reason")) for e in recorded.events]
    assert rows == [("site-a", "alive", "membership", None), ("site-a", "suspect", "membership", None),
                    ("site-a", "dead", "membership", None), ("site-b", "alive", "membership", None),
                    ("site-a", "absent", "GridSite", None), ("site-a", "Left", "GridSite", "dead")]


def test_diagnostics_are_kept_head_and_tail() -> None:
    recorded = Timeline()
    recorded.diagnostics("grid", "HEAD" + "x" * 50_000 + "TAIL")
    text = recorded.events[0]["text"]
    assert text.startswith("HEAD") and text.endswith("TAIL") and "characters omitted" in text
    assert len(text) < timeline_module.MAX_DIAGNOSTICS_CHARS + 100


# ------------------------------------------------------------------------- what the harness records


def test_assert_distribution_records_what_it_judged_pass_or_fail() -> None:
    plan = plan_distribution({"a": 0.5, "b": 0.5})
    n = plan.sample_size
    recorded = Timeline()
    with recording(recorded):
        assert_distribution({"a": n // 2, "b": n - n // 2}, plan)
        with pytest.raises(AssertionError, match="does not match"):
            assert_distribution({"a": n, "stranger": 0}, plan, what="west")
    judged = [e for e in recorded.events if e["kind"] == "distribution"]
    assert [e["passed"] for e in judged] == [True, False]
    first, second = judged
    assert first["counts"] == {"a": n // 2, "b": n - n // 2} and first["expected"] == {"a": 0.5, "b": 0.5}
    assert first["intervals"] == {name: list(bounds) for name, bounds in plan.intervals.items()}
    assert first["alpha"] == plan.alpha and first["n"] == n and "what" not in first
    assert second["what"] == "west" and second["counts"] == {"a": n, "b": 0, "stranger": 0}
    json.dumps(judged)


def test_assert_distribution_outside_a_test_records_nothing() -> None:
    plan = plan_distribution({"a": 0.5, "b": 0.5})
    assert_distribution({"a": plan.sample_size // 2, "b": plan.sample_size - plan.sample_size // 2}, plan)
    record_distribution(counts={}, expected={}, intervals={}, alpha=0.1, n=0, passed=True)
    assert current() is None


def _site(name: str) -> Any:
    return SimpleNamespace(spec=SimpleNamespace(name=name))


def test_the_control_plane_records_the_revisions_it_reads(tmp_path: Path) -> None:
    from harness.control import ControlPlane
    from harness.producer_oracle import configmap_name

    out = tmp_path / "out"
    out.mkdir()
    plane = ControlPlane(_site("west"), None, tmp_path, out)  # type: ignore[arg-type]

    def render(revision: str) -> None:
        envelope = json.dumps({"revision": {"value": revision}})
        (out / f"{configmap_name('n', 'default')}.configmap.yaml").write_text(
            yaml.safe_dump({"data": {"routing-overlay.json": envelope}}))

    render("r1")
    assert plane.envelope("n", "default") is not None  # no test running: read, not recorded
    recorded = Timeline()
    with recording(recorded):
        plane.envelope("n", "default")
        plane.envelope("n", "default")
        render("r2")
        plane.envelope("n", "default")
        (out / "n.status.yaml").write_text(yaml.safe_dump({"status": {"overlayStatus": [
            {"gatewayName": "default", "gatewayNamespace": "default", "renderedRevision": "r2",
             "distributedRevision": "r2"}]}}))
        plane.status_entry("n", "default", "default")
    rows = [(e["stage"], e["revision"], e["site"], e["network"]) for e in recorded.events]
    assert rows == [("rendered", "r1", "west", "n"), ("rendered", "r2", "west", "n"),
                    ("distributed", "r2", "west", "n")]


def test_a_gateway_records_the_overlays_the_harness_writes(tmp_path: Path) -> None:
    from harness.grid import Gateway

    proc = SimpleNamespace(url="http://127.0.0.1:9", overlay_dir=tmp_path, name="gw-core")
    gateway = Gateway(_site("west"), "core", proc)  # type: ignore[arg-type]
    recorded = Timeline()
    try:
        with recording(recorded):
            envelope = {"schema_version": "1.0.0", "revision": {"value": "r1"}}
            gateway.write_overlay(envelope)
            gateway.write_overlay(envelope)  # a re-render of the same revision is a write of its own
            gateway.write_overlay(b'{"schema_version": ')
    finally:
        gateway.close()
    assert [(e["kind"], e.get("stage"), e.get("revision")) for e in recorded.events] == [
        ("revision", "distributed", "r1"), ("revision", "distributed", "r1"), ("action", None, None)]
    assert recorded.events[0]["gateway"] == "gw-core" and recorded.events[0]["site"] == "west"


def test_a_mesh_site_records_member_states_and_gridsite_phases_as_read() -> None:
    from harness.mesh import MeshSite

    state: dict[str, Any] = {"members": [{"name": "site-a", "status": "alive"}, {"name": "site-c", "status": "Alive"}]}
    gridsites: dict[str, Any] = {}
    control = SimpleNamespace(check_running=lambda: None, mesh_state=lambda: state,
                              gridsite=lambda name: gridsites.get(name))
    site = MeshSite(SimpleNamespace(spec=SimpleNamespace(name="site-a")), control, None, "", "")  # type: ignore[arg-type]
    recorded = Timeline()
    with recording(recorded):
        site.mesh_status()
        state["members"][1]["status"] = "suspect"
        site.mesh_status()
        site.mesh_status()
        site.gridsite("n", "site-c")
        gridsites["n-site-c"] = {"status": {"phase": "Active"}}
        site.gridsite("n", "site-c")
    rows = [(e["observer"], e["member"], e["state"], e["source"]) for e in recorded.events]
    assert rows == [("site-a", "site-c", "alive", "membership"), ("site-a", "site-c", "suspect", "membership"),
                    ("site-a", "site-c", "absent", "GridSite"), ("site-a", "site-c", "Active", "GridSite")]
