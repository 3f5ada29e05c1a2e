"""Session affinity: binding table TTL and bound, reuse, admission-driven failover, per-capability keys."""

from __future__ import annotations

from typing import Any

from gateway_support import candidate, envelope, metric_value, route_filter, run_request
from multidict import CIMultiDict

from reference.gateway.affinity import SessionTable, session_key
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.snapshot_store import build_snapshot

MODEL = "granite"
A = "inference_model/granite/site-a/a"
B = "inference_model/granite/site-b/b"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_binding_expires_ttl_after_binding_and_reuse_does_not_extend_it() -> None:
    clock = FakeClock()
    table = SessionTable(ttl_secs=10, max_entries=100, clock=clock)
    assert table.bind("s", A)
    clock.now += 9.9
    assert table.lookup("s") == A
    clock.now += 0.2
    assert table.lookup("s") is None
    assert len(table) == 0


def test_expired_entries_count_until_evicted() -> None:
    clock = FakeClock()
    table = SessionTable(ttl_secs=5, max_entries=100, clock=clock)
    for i in range(3):
        table.bind(f"s{i}", A)
    clock.now += 6
    assert len(table) == 3
    assert table.sweep() == 3 and len(table) == 0


def test_full_table_sweeps_expired_then_refuses_new_keys() -> None:
    clock = FakeClock()
    table = SessionTable(ttl_secs=100, max_entries=3, clock=clock)
    for name in ("s1", "s2", "s3"):
        assert table.bind(name, A)
        clock.now += 10
    assert not table.bind("s4", B), "full of live bindings: no new binding"
    assert table.bind("s2", B), "rebinding an existing key needs no room"
    assert table.lookup("s2") == B
    clock.now += 75  # s1 (bound at t+0) has expired; s3 (t+20) and s2 (rebound at t+30) have not
    assert table.bind("s4", B)
    assert len(table) == 3
    assert table.lookup("s1") is None and table.lookup("s4") == B


def test_session_key_sources() -> None:
    headers = CIMultiDict({"X-Session-Id": " abc ", "Cookie": "a=1; agn-session=xyz; b=2"})
    assert session_key(headers, "x-session-id", "agn-session") == "h:abc"
    assert session_key(headers, None, "agn-session") == "c:xyz"
    assert session_key(headers, "x-other", "agn-session") == "c:xyz"
    assert session_key(CIMultiDict({"X-Session-Id": "  "}), "x-session-id", None) is None
    assert session_key(CIMultiDict({"X-Session-Id": "k" * 257}), "x-session-id", None) is None
    assert session_key(CIMultiDict({"Cookie": "agn-session="}), None, "agn-session") is None
    assert session_key(CIMultiDict({"Cookie": "agn-sessionx=1"}), None, "agn-session") is None


def affinity_route(mode: str = "roundRobin", **extra: Any) -> tuple[Any, FakeClock, GatewayMetrics]:
    clock = FakeClock()
    metrics = GatewayMetrics()
    cands = [
        candidate(MODEL, "site-a", "a", selection_group=0),
        candidate(MODEL, "site-b", "b", selection_group=0),
    ]
    route = route_filter(
        {
            "overlay_file": "/x/o.json",
            "session_affinity": {"enabled": True, "header": "x-session-id", "ttl_secs": 60},
        },
        envelope(cands, mode=mode),
        clock=clock,
        metrics=metrics,
        **extra,
    )
    return route, clock, metrics


def session(route: Any, key: str | None, model: str = MODEL) -> Any:
    ctx, rejection = run_request(route, model, headers={"x-session-id": key} if key else None)
    assert rejection is None, rejection
    return ctx


def swap(route: Any, cands: list[dict[str, Any]], mode: str | None = "roundRobin") -> None:
    result = route.store.replace(build_snapshot(envelope(cands, mode=mode), None, None))
    assert result.result == "accepted"


def test_bound_then_reused_despite_round_robin() -> None:
    route, _, metrics = affinity_route()
    first = session(route, "s1")
    assert first.metadata["intelligent_route.outcome"] == "routed"
    assert (
        first.metadata["intelligent_route.session.bound"],
        first.metadata["intelligent_route.session.reused"],
    ) == (
        True,
        False,
    )
    for _ in range(5):
        again = session(route, "s1")
        assert again.cluster == first.cluster
        assert again.metadata["intelligent_route.outcome"] == "reused"
        assert again.metadata["intelligent_route.session.reused"] is True
        assert again.metadata["intelligent_route.session.failover"] is False
    assert session(route, "s2").cluster != first.cluster, "a new session takes the next round-robin turn"
    text = metrics.render().decode()
    assert metric_value(text, "praxis_ai_intelligent_route_session_total", event="bound") == 2
    assert metric_value(text, "praxis_ai_intelligent_route_session_total", event="reused") == 5
    assert (
        metric_value(
            text, "praxis_ai_intelligent_route_decisions_total", outcome="reused", kind="inference_model"
        )
        == 5
    )
    selected = sum(
        metric_value(
            text,
            "praxis_ai_intelligent_route_selected_total",
            cluster=c,
            site=s,
            selection_mode="round_robin",
        )
        or 0
        for c, s in (("a", "site-a"), ("b", "site-b"))
    )
    assert selected == 2, "reuse is not a selection"
    assert metric_value(text, "praxis_ai_intelligent_route_session_table_entries") == 2


def test_without_a_session_key_nothing_is_bound() -> None:
    route, _, _ = affinity_route()
    ctx = session(route, None)
    assert ctx.metadata["intelligent_route.session.bound"] is False
    assert len(route.table) == 0


def test_existing_only_keeps_bound_sessions_but_takes_no_new_ones() -> None:
    route, _, _ = affinity_route(mode="deterministic")
    assert session(route, "s1").cluster == "a"
    swap(
        route,
        [
            candidate(MODEL, "site-a", "a", selection_group=0, admission_state="existing_only"),
            candidate(MODEL, "site-b", "b", selection_group=1),
        ],
        mode="deterministic",
    )
    reused = session(route, "s1")
    assert reused.cluster == "a" and reused.metadata["intelligent_route.outcome"] == "reused"
    assert reused.metadata["intelligent_route.admission_state"] == "existing_only"
    assert session(route, "s2").cluster == "b"


def test_excluded_or_removed_candidates_fail_over_and_rebind() -> None:
    route, _, metrics = affinity_route(mode="deterministic")
    assert session(route, "s1").cluster == "a"
    swap(
        route,
        [
            candidate(MODEL, "site-a", "a", selection_group=0, admission_state="none"),
            candidate(MODEL, "site-b", "b", selection_group=1),
        ],
        mode="deterministic",
    )
    moved = session(route, "s1")
    assert moved.cluster == "b" and moved.metadata["intelligent_route.outcome"] == "routed"
    assert moved.metadata["intelligent_route.session.failover"] is True
    assert session(route, "s1").metadata["intelligent_route.outcome"] == "reused"
    swap(route, [candidate(MODEL, "site-c", "c")], mode=None)
    gone = session(route, "s1")
    assert gone.cluster == "c" and gone.metadata["intelligent_route.session.failover"] is True
    text = metrics.render().decode()
    assert metric_value(text, "praxis_ai_intelligent_route_session_total", event="failover") == 2


def test_expired_binding_counts_as_a_new_binding() -> None:
    route, clock, metrics = affinity_route(mode="roundRobin")
    first = session(route, "s1").cluster
    clock.now += 59
    assert session(route, "s1").metadata["intelligent_route.outcome"] == "reused"
    clock.now += 2  # 61 s after binding: reuse did not extend the binding
    second = session(route, "s1")
    assert second.metadata["intelligent_route.session.failover"] is False
    assert second.metadata["intelligent_route.outcome"] == "routed"
    assert second.cluster != first, "a fresh selection took the next turn"
    text = metrics.render().decode()
    assert metric_value(text, "praxis_ai_intelligent_route_session_total", event="bound") == 2
    assert metric_value(text, "praxis_ai_intelligent_route_session_total", event="failover") == 0


def test_each_capability_has_its_own_binding_for_a_session_key() -> None:
    clock = FakeClock()
    metrics = GatewayMetrics()
    cands = [candidate(MODEL, "site-a", "a"), candidate("other", "site-b", "b")]
    route = route_filter(
        {"overlay_file": "/x/o.json", "session_affinity": {"enabled": True, "header": "x-session-id"}},
        envelope(cands),
        clock=clock,
        metrics=metrics,
    )
    assert session(route, "s1").cluster == "a"
    other = session(route, "s1", model="other")
    assert other.cluster == "b" and other.metadata["intelligent_route.session.failover"] is False
    back = session(route, "s1")
    assert back.metadata["intelligent_route.outcome"] == "reused"
    assert len(route.table) == 2
    text = metrics.render().decode()
    assert metric_value(text, "praxis_ai_intelligent_route_session_total", event="bound") == 2
    assert metric_value(text, "praxis_ai_intelligent_route_session_total", event="failover") == 0


def test_a_full_table_routes_without_binding() -> None:
    clock = FakeClock()
    route = route_filter(
        {
            "overlay_file": "/x/o.json",
            "session_affinity": {"enabled": True, "header": "x-session-id", "ttl_secs": 60, "max_entries": 2},
        },
        envelope([candidate(MODEL, "site-a", "a")]),
        clock=clock,
    )
    session(route, "s1")
    session(route, "s2")
    third = session(route, "s3")
    assert third.cluster == "a" and third.metadata["intelligent_route.session.bound"] is False
    assert len(route.table) == 2
    assert session(route, "s1").metadata["intelligent_route.outcome"] == "reused"


def test_no_candidate_after_failover_keeps_the_binding_for_a_return() -> None:
    route, _, _ = affinity_route(mode="deterministic")
    session(route, "s1")
    swap(route, [candidate(MODEL, "site-a", "a", admission_state="none")], mode=None)
    ctx, rejection = run_request(route, MODEL, headers={"x-session-id": "s1"})
    assert rejection is not None and rejection.status == 404
    assert ctx.metadata["intelligent_route.session.failover"] is True
    assert ctx.metadata["intelligent_route.session.bound"] is False
    swap(route, [candidate(MODEL, "site-b", "b"), candidate(MODEL, "site-a", "a")], mode=None)
    back = session(route, "s1")
    assert back.cluster == "a" and back.metadata["intelligent_route.outcome"] == "reused"


def test_cookie_sessions() -> None:
    route = route_filter(
        {"overlay_file": "/x/o.json", "session_affinity": {"enabled": True, "cookie": "agn-session"}},
        envelope(
            [
                candidate(MODEL, "site-a", "a", selection_group=0),
                candidate(MODEL, "site-b", "b", selection_group=0),
            ],
            mode="roundRobin",
        ),
    )
    cookie = {"Cookie": "agn-session=abc"}
    first, _ = run_request(route, MODEL, headers=cookie)
    for _ in range(3):
        again, _ = run_request(route, MODEL, headers=cookie)
        assert again.cluster == first.cluster and again.metadata["intelligent_route.outcome"] == "reused"
