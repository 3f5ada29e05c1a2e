"""intelligent_route per request: routing inputs, outcomes, metadata, hop headers and metrics."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from gateway_support import candidate, envelope, metric_value, revision_of, route_filter, run_request

from reference.gateway.context import RequestContext
from reference.gateway.filters.json_body_field import JsonBodyFieldConfig, JsonBodyFieldFilter
from reference.gateway.filters.mcp import McpConfig, McpFilter
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.snapshot_store import build_snapshot
from reference.overlay import canonical_digest

MODEL = "granite"
CREDENTIAL = {"strategy": "bearer_token", "secretRef": {"name": "tok", "namespace": "grid", "key": "token"}}
SPOOFED = {
    "x-ai-routing-candidate": "spoofed",
    "X-AI-Routing-Request-Id": "spoofed-id",
    "x-ai-routing-revision": "0" * 64,
    "x-ai-routing-extra": "spoofed",
}


def overlay_route(cands: list[dict[str, Any]] | None = None, mode: str | None = None, **options: Any) -> Any:
    cands = (
        cands
        if cands is not None
        else [candidate(MODEL, "site-b", "hop"), candidate(MODEL, "site-a", "local")]
    )
    return route_filter({"overlay_file": "/x/routing-overlay.json", **options}, envelope(cands, mode=mode))


def routing_headers(ctx: RequestContext) -> dict[str, str]:
    return {k.lower(): v for k, v in ctx.headers.items() if k.lower().startswith("x-ai-routing-")}


def test_routes_by_model_header_with_full_metadata() -> None:
    data = envelope([candidate(MODEL, "site-b", "hop", stable_id="cand-1", credential=CREDENTIAL, rank=0)])
    route = route_filter({"overlay_file": "/x/routing-overlay.json"}, data)
    ctx, rejection = run_request(route, MODEL)
    assert rejection is None and ctx.cluster == "hop"
    md = ctx.metadata
    assert md["intelligent_route.outcome"] == "routed"
    assert md["intelligent_route.kind"] == "inference_model"
    assert md["intelligent_route.name"] == MODEL
    assert md["intelligent_route.site"] == "site-b"
    assert md["intelligent_route.local_site"] == "site-a"
    assert md["intelligent_route.stable_id"] == "cand-1"
    assert md["intelligent_route.admission_state"] == "new_and_existing"
    assert md["intelligent_route.candidate_count"] == 1
    assert md["intelligent_route.revision"] == revision_of(data)
    assert {k: v for k, v in md.items() if ".credential." in k} == {
        "intelligent_route.credential.strategy": "bearer_token",
        "intelligent_route.credential.name": "tok",
        "intelligent_route.credential.namespace": "grid",
        "intelligent_route.credential.key": "token",
    }
    assert "intelligent_route.session.bound" not in md  # affinity is off


@pytest.mark.parametrize("value", ["", "   ", "m" * 257, "caf\u00e9", "two words", "tab\there"])
def test_invalid_model_values_are_400(value: str) -> None:
    route = overlay_route()
    ctx, rejection = run_request(route, value)
    assert rejection is not None and rejection.status == 400 and 0 < len(rejection.body) <= 64
    assert ctx.cluster is None and ctx.metadata["intelligent_route.outcome"] == "invalid"


def test_model_of_exactly_256_bytes_is_looked_up() -> None:
    long_model = "m" * 256
    route = overlay_route([candidate(long_model, "site-a", "local")])
    ctx, rejection = run_request(route, long_model)
    assert rejection is None and ctx.cluster == "local"


def test_missing_model_header_is_not_routed() -> None:
    route = overlay_route()
    ctx, rejection = run_request(route, None)
    assert rejection is None and ctx.cluster is None
    assert ctx.metadata == {"intelligent_route.outcome": "skipped"}


def test_unknown_model_and_other_kind_are_404() -> None:
    route = overlay_route([candidate(MODEL, "site-a", "local", kind="mcp_tool")])
    ctx, rejection = run_request(route, MODEL)
    assert rejection is not None and rejection.status == 404
    assert ctx.metadata["intelligent_route.outcome"] == "no_candidate"
    assert ctx.metadata["intelligent_route.candidate_count"] == 0


def test_authoritative_empty_envelope_is_404() -> None:
    route = overlay_route([])
    _, rejection = run_request(route, MODEL)
    assert rejection is not None and rejection.status == 404


def test_skip_paths_match_on_segment_boundaries() -> None:
    route = overlay_route()
    for path in ("/v1/models", "/v1/models/granite", "/health"):
        ctx, rejection = run_request(route, MODEL, path=path)
        assert rejection is None and ctx.cluster is None, path
        assert ctx.metadata["intelligent_route.outcome"] == "skipped"
    ctx, _ = run_request(route, MODEL, path="/v1/models-beta")
    assert ctx.cluster == "hop"


def test_management_cluster_takes_skipped_paths() -> None:
    route = overlay_route(skip_paths=["/internal"], management_cluster="mgmt")
    ctx, rejection = run_request(route, MODEL, path="/internal/status")
    assert rejection is None and ctx.cluster == "mgmt"
    assert ctx.metadata == {"intelligent_route.outcome": "management"}
    ctx, _ = run_request(route, MODEL, path="/v1/models")
    assert ctx.cluster == "hop", "an empty-list override replaces the default skip paths"


def test_a_cluster_chosen_earlier_is_preserved() -> None:
    route = overlay_route()
    ctx, rejection = run_request(route, MODEL, cluster="chosen-before", headers=SPOOFED)
    assert rejection is None and ctx.cluster == "chosen-before"
    assert ctx.metadata == {"intelligent_route.outcome": "preserved"}
    assert routing_headers(ctx) == {}


def test_mcp_tool_metadata_wins_over_the_model_header() -> None:
    route = overlay_route(
        [candidate("search", "site-b", "tools", kind="mcp_tool"), candidate(MODEL, "site-a", "local")]
    )
    meta = {"mcp.method": "tools/call", "mcp.name": "search"}
    ctx, rejection = run_request(route, MODEL, metadata=meta)
    assert rejection is None and ctx.cluster == "tools"
    assert ctx.metadata["intelligent_route.kind"] == "mcp_tool"


def test_other_mcp_methods_do_not_route_and_nameless_tool_calls_are_invalid() -> None:
    route = overlay_route()
    ctx, rejection = run_request(route, MODEL, metadata={"mcp.method": "initialize"})
    assert rejection is None and ctx.cluster is None
    assert ctx.metadata["intelligent_route.outcome"] == "skipped"
    ctx, rejection = run_request(route, MODEL, metadata={"mcp.method": "tools/call"})
    assert rejection is not None and rejection.status == 400
    ctx, rejection = run_request(route, MODEL, metadata={"mcp.method": "tools/call", "mcp.name": " "})
    assert rejection is not None and rejection.status == 400


def test_client_routing_headers_are_always_stripped() -> None:
    route = overlay_route(provider_hop_clusters=["hop"])
    for model, path in ((MODEL, "/v1/models"), (None, "/v1/chat"), ("  ", "/v1/chat"), ("nope", "/v1/chat")):
        ctx, _ = run_request(route, model, path=path, headers=SPOOFED)
        assert routing_headers(ctx) == {}, (model, path)
    local = overlay_route([candidate(MODEL, "site-a", "local")], provider_hop_clusters=["hop"])
    ctx, _ = run_request(local, MODEL, headers=SPOOFED)
    assert ctx.cluster == "local" and routing_headers(ctx) == {}


def test_provider_hop_headers_come_from_the_serving_snapshot() -> None:
    first = envelope([candidate(MODEL, "site-b", "hop", stable_id="cand-b")])
    route = route_filter({"overlay_file": "/x/o.json", "provider_hop_clusters": ["hop"]}, first)
    ctx, _ = run_request(route, MODEL, headers=SPOOFED)
    seen = routing_headers(ctx)
    assert seen["x-ai-routing-candidate"] == "cand-b"
    assert seen["x-ai-routing-revision"] == revision_of(first)
    assert re.fullmatch(r"[0-9a-f]{32}", seen["x-ai-routing-request-id"])
    assert set(seen) == {"x-ai-routing-candidate", "x-ai-routing-request-id", "x-ai-routing-revision"}
    second = envelope([candidate(MODEL, "site-b", "hop")], mode="deterministic")
    assert route.store.replace(build_snapshot(second, None, None)).result == "accepted"
    ctx2, _ = run_request(route, MODEL)
    assert routing_headers(ctx2)["x-ai-routing-revision"] == revision_of(second)
    assert routing_headers(ctx2)["x-ai-routing-candidate"] == "inference_model/granite/site-b/hop"
    assert routing_headers(ctx2)["x-ai-routing-request-id"] != seen["x-ai-routing-request-id"]


def test_legacy_and_static_snapshots_send_no_revision() -> None:
    legacy = json.dumps({"local_site": "site-a", "candidates": [candidate(MODEL, "site-b", "hop")]}).encode()
    route = route_filter({"overlay_file": "/x/o.json", "provider_hop_clusters": ["hop"]}, legacy)
    ctx, _ = run_request(route, MODEL)
    assert "x-ai-routing-revision" not in routing_headers(ctx)
    assert routing_headers(ctx)["x-ai-routing-candidate"] == "inference_model/granite/site-b/hop"
    static = route_filter(
        {
            "local_site": "site-a",
            "provider_hop_clusters": ["hop"],
            "candidates": [{"kind": "inference_model", "name": MODEL, "site": "site-b", "cluster": "hop"}],
        }
    )
    ctx, _ = run_request(static, MODEL)
    assert set(routing_headers(ctx)) == {"x-ai-routing-candidate", "x-ai-routing-request-id"}


def test_hop_request_ids_are_unique_and_time_ordered() -> None:
    from reference.gateway.hop_headers import RequestIdGenerator

    generate = RequestIdGenerator(seed=0xBEEF)
    ids = [generate() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{16}beef[0-9a-f]{12}", i) for i in ids)
    assert [int(i[20:], 16) for i in ids[:3]] == [1, 2, 3]
    assert ids == sorted(ids)


def test_metrics_count_decisions_and_selections_with_closed_labels() -> None:
    metrics = GatewayMetrics()
    data = envelope([candidate(MODEL, "site-b", "hop", stable_id="secret-stable-id")])
    route = route_filter({"overlay_file": "/x/o.json"}, data, metrics=metrics)
    run_request(route, MODEL)
    run_request(route, "client-supplied-name")
    run_request(route, " ")
    run_request(route, MODEL, path="/health")
    text = metrics.render().decode()
    name = "praxis_ai_intelligent_route_decisions_total"
    assert metric_value(text, name, outcome="routed", kind="inference_model") == 1
    assert metric_value(text, name, outcome="no_candidate", kind="inference_model") == 1
    assert metric_value(text, name, outcome="invalid", kind="none") == 1
    assert metric_value(text, name, outcome="skipped", kind="none") == 1
    selected = "praxis_ai_intelligent_route_selected_total"
    assert metric_value(text, selected, cluster="hop", site="site-b", selection_mode="deterministic") == 1
    assert metric_value(text, "praxis_ai_intelligent_route_snapshot_candidates") == 1
    assert "client-supplied-name" not in text and "secret-stable-id" not in text and MODEL not in text
    route.close()
    assert metric_value(metrics.render().decode(), "praxis_ai_intelligent_route_snapshot_candidates") == 0


def test_gauges_add_up_across_instances() -> None:
    metrics = GatewayMetrics()
    a = route_filter({"overlay_file": "/x/o.json"}, envelope([candidate(MODEL, "s", "c")]), metrics=metrics)
    b = route_filter(
        {"overlay_file": "/x/o.json"},
        envelope([candidate(MODEL, "s", "c"), candidate(MODEL, "t", "d")]),
        metrics=metrics,
    )
    assert metric_value(metrics.render().decode(), "praxis_ai_intelligent_route_snapshot_candidates") == 3
    b.close()
    assert metric_value(metrics.render().decode(), "praxis_ai_intelligent_route_snapshot_candidates") == 1
    a.close()


def test_revision_metadata_matches_the_digest() -> None:
    cands = [candidate(MODEL, "site-b", "hop")]
    route = overlay_route(cands)
    ctx, _ = run_request(route, MODEL)
    expected = canonical_digest({"network": "net-1", "local_site": "site-a", "candidates": cands})
    assert ctx.metadata["intelligent_route.revision"] == expected


# --- json_body_field and mcp --------------------------------------------------------------------


def body_ctx(body: bytes, headers: dict[str, str] | None = None) -> RequestContext:
    from multidict import CIMultiDict

    return RequestContext("POST", "/v1/chat", "/v1/chat", CIMultiDict(headers or {}), body)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"model": "granite"}', "granite"),
        (b'{"model": 42}', "42"),
        (b'{"model": true}', "true"),
        (b'{"model": {"a": 1}}', '{"a":1}'),
        (b'{"model": null}', None),
        (b'{"other": "x"}', None),
        (b"not json at all", None),
        (b"", None),
        (b'["model"]', None),
        (b'{"model": "line\\nbreak"}', None),
    ],
)
def test_json_body_field_promotes_and_replaces(body: bytes, expected: str | None) -> None:
    ctx = body_ctx(body, {"X-Model": "client-choice"})
    assert JsonBodyFieldFilter(JsonBodyFieldConfig("model", "X-Model")).on_request(ctx) is None
    assert ctx.headers.getall("X-Model", []) == ([expected] if expected is not None else [])


@pytest.mark.parametrize(
    ("doc", "method", "name", "invalid"),
    [
        (
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search"}},
            "tools/call",
            "search",
            0,
        ),
        ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, "initialize", None, 0),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, "notifications/initialized", None, 0),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}, None, None, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 7}}, None, None, 1),
        ({"jsonrpc": "2.0", "id": 1}, None, None, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}, None, None, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "file:///a"}}, "resources/read",
         "file:///a", 0),
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, None, None, 1),
        ({"jsonrpc": "2.0", "id": [1], "method": "ping"}, None, None, 1),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, None, None, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a\nb"}}, "tools/call", None, 0),
        ({"model": "granite"}, None, None, 1),  # an ordinary chat body is not JSON-RPC: invalid for the mcp filter
        ("not json", None, None, 1),
        ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], None, None, 2),  # a batch: refused either way
    ],
)
def test_mcp_classification(doc: Any, method: str | None, name: str | None, invalid: int) -> None:
    for on_invalid in ("reject", "continue"):
        ctx = body_ctx(doc.encode() if isinstance(doc, str) else json.dumps(doc).encode())
        rejection = McpFilter(McpConfig(on_invalid)).on_request(ctx)
        if invalid == 2 or (invalid and on_invalid == "reject"):
            assert rejection is not None and rejection.status == 400
        else:
            assert rejection is None
        assert ctx.metadata.get("mcp.method") == method
        assert ctx.metadata.get("mcp.name") == name


def test_mcp_passes_a_request_without_body() -> None:
    ctx = body_ctx(b"")
    assert McpFilter(McpConfig("reject")).on_request(ctx) is None and "mcp.method" not in ctx.metadata
