"""Extended consumer features, each behind its feature name."""

from __future__ import annotations

import uuid

import pytest

from harness.grid import Gateway, Site
from harness.suite_support import ReloadProbe

SPEC = "intelligent-route-filter"
PREFIX = "praxis_ai_intelligent_route_"


@pytest.mark.conformance(id="CONS-SKIP-PATHS", profile="consumer", level="extended", feature="skipPaths",
                         spec=SPEC + ": skip_paths return Continue before any model lookup")
def test_skip_paths_bypass_model_routing(site: Site, model: str) -> None:
    gw = site.gateway("skip")
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    skipped = gw.request(model, path="/internal/status")
    assert skipped.backend is None, f"a skipped path must not be routed by model; {skipped.describe()}"
    boundary = gw.request(model, path="/internal-beta/chat")
    assert boundary.backend == "provider-a", "prefixes match on path segment boundaries only"


@pytest.mark.conformance(id="CONS-MANAGEMENT-CLUSTER", profile="consumer", level="extended",
                         feature="managementCluster", spec=SPEC + ": skipped paths go to management_cluster")
def test_management_paths_go_to_management_cluster(site: Site, model: str) -> None:
    gw = site.gateway("management")
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    listing = gw.request(None, path="/v1/models", method="GET")
    assert listing.status == 200 and listing.backend == "mgmt", listing.describe()
    assert gw.request(model).backend == "provider-a", "model requests still route by overlay"


@pytest.mark.conformance(id="CONS-CLUSTERS-ALLOWLIST", profile="consumer", level="extended",
                         feature="clustersAllowlist", spec=SPEC + ": a reload naming a cluster outside clusters "
                         "is rejected and the previous snapshot retained")
def test_reload_outside_allowlist_is_rejected(site: Site, model: str) -> None:
    gw = site.gateway("allowlist")
    reloads = ReloadProbe(gw, "prometheusMetrics" in site.grid.features)
    revision = gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    before = reloads.snapshot()
    gw.write_overlay(site.envelope([site.candidate("mgmt", model)]))
    reloads.wait(before, "rejected")
    assert gw.serving_revision(model) == revision


@pytest.mark.conformance(id="CONS-METRICS-SERIES", profile="consumer", level="extended",
                         feature="prometheusMetrics", spec=SPEC + ": Metrics")
def test_metrics_series_count_decisions(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model)]), model)
    before = gw.metrics()
    session = uuid.uuid4().hex
    for _ in range(3):
        assert gw.request(model, headers={"x-session-id": session}).status == 200
    assert gw.request(model + "-missing").status == 404
    assert gw.request("   ").status == 400
    after = gw.metrics()

    def delta(name: str, **labels: str) -> float:
        key = (PREFIX + name, frozenset(labels.items()))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("decisions_total", outcome="routed", kind="inference_model") == 1
    assert delta("decisions_total", outcome="reused", kind="inference_model") == 2
    assert delta("decisions_total", outcome="no_candidate", kind="inference_model") == 1
    assert delta("decisions_total", outcome="invalid", kind="inference_model") + \
        delta("decisions_total", outcome="invalid", kind="none") == 1
    assert delta("selected_total", cluster="provider-a", site="site-a", selection_mode="deterministic") == 1
    assert delta("session_total", event="bound") == 1
    assert delta("session_total", event="reused") == 2
    assert after[(PREFIX + "snapshot_candidates", frozenset())] == 2
    assert after.get((PREFIX + "session_table_entries", frozenset()), 0) >= 1


@pytest.mark.conformance(id="CONS-METRICS-RELOADS", profile="consumer", level="extended",
                         feature="prometheusMetrics", spec=SPEC + ": snapshot_reloads_total{result}")
def test_reload_results_are_counted(gw: Gateway, site: Site, model: str) -> None:
    reloads = ReloadProbe(gw, True)
    before = reloads.snapshot()
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    reloads.wait(before, "accepted")
    before = reloads.snapshot()
    gw.write_overlay(b"[1, 2")
    reloads.wait(before, "rejected")


@pytest.mark.conformance(id="CONS-METRICS-CLOSED-LABELS", profile="consumer", level="extended",
                         feature="prometheusMetrics", spec=SPEC + ": label values never come from client input")
def test_metric_labels_never_carry_client_input(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model, stable_id="stable-secret-id-42")]), model)
    probe = "client-" + uuid.uuid4().hex
    gw.request(probe)
    gw.request(model, headers={"x-session-id": probe})
    text = gw.metrics_text()
    assert probe not in text and "stable-secret-id-42" not in text and model not in text


@pytest.mark.conformance(id="CONS-MCP-TOOL-ROUTING", profile="consumer", level="extended", feature="mcpToolRouting",
                         spec=SPEC + ": MCP lookup for tools/call")
def test_mcp_tools_call_routes_to_tool_candidate(site: Site, model: str) -> None:
    gw = site.gateway("mcp")
    tool = model + "-tool"
    gw.publish(site.envelope([site.candidate("provider-c", tool, kind="mcp_tool"),
                              site.candidate("provider-a", model)]), model)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    reply = gw.request(None, path="/mcp", body=call)
    assert reply.backend == "provider-c", reply.describe()
    init = {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {}}
    assert gw.request(None, path="/mcp", body=init).backend is None, "other MCP methods skip routing"
