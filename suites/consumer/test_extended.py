"""Extended consumer features, each behind its feature name."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from harness import contract
from harness.backends.local import GatewayStartFailed
from harness.gateway_config import PINNED_PREFIX, SESSION_HEADER
from harness.grid import Gateway, Site
from harness.suite_support import ReloadProbe

SPEC = "intelligent-route-filter"
PREFIX = "praxis_ai_intelligent_route_"


@pytest.mark.conformance(id="CONS-SKIP-PATHS", profile="consumer", level="extended", feature="skipPaths",
                         spec=SPEC + ": skip_paths return Continue before any model lookup",
                         statements=["IR-BEHAVIOR-SKIP-PATHS"])
def test_skip_paths_bypass_model_routing(site: Site, model: str) -> None:
    gw = site.gateway("skip")
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    skipped = gw.request(model, path="/internal/status")
    assert skipped.backend is None, f"a skipped path must not be routed by model; {skipped.describe()}"
    boundary = gw.request(model, path="/internal-beta/chat")
    assert boundary.backend == "provider-a", "prefixes match on path segment boundaries only"


@pytest.mark.conformance(id="CONS-MANAGEMENT-CLUSTER", profile="consumer", level="extended",
                         feature="managementCluster", spec=SPEC + ": skipped paths go to management_cluster",
                         statements=["IR-BEHAVIOR-SKIP-PATHS"])
def test_management_paths_go_to_management_cluster(site: Site, model: str) -> None:
    gw = site.gateway("management")
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    listing = gw.request(None, path="/v1/models", method="GET")
    assert listing.status == 200 and listing.backend == "mgmt", listing.describe()
    assert gw.request(model).backend == "provider-a", "model requests still route by overlay"


@pytest.mark.conformance(id="CONS-CLUSTERS-ALLOWLIST", profile="consumer", level="extended",
                         feature="clustersAllowlist", spec=SPEC + ": a reload naming a cluster outside clusters "
                         "is rejected and the previous snapshot retained",
                         statements=["IR-SCOPE-CLUSTERS-LIST-RELOAD-REJECTED",
                                     "IR-CONFIG-CLUSTERS-AUTHORITATIVE-RELOAD", "RG-RELOAD-NO-NEW-CLUSTERS"])
def test_reload_outside_allowlist_is_rejected(site: Site, model: str) -> None:
    gw = site.gateway("allowlist")
    reloads = ReloadProbe(gw, "prometheusMetrics" in site.grid.features)
    revision = gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    before = reloads.snapshot()
    gw.write_overlay(site.envelope([site.candidate("mgmt", model)]))
    reloads.wait(before, "rejected")
    assert gw.serving_revision(model) == revision


@pytest.mark.conformance(id="CONS-CLUSTERS-ALLOWLIST-STARTUP", profile="consumer", level="extended",
                         feature="clustersAllowlist",
                         spec="intelligent-route-filter, configuration: clusters \"When present it is authoritative: "
                              "pipeline validation checks every entry against the load balancer\"",
                         statements=["IR-CONFIG-CLUSTERS-AUTHORITATIVE-STARTUP", "IR-CONFIG-CLUSTERS-DECLARED"])
def test_clusters_entry_the_load_balancer_lacks_fails_startup(site: Site, model: str) -> None:
    """A clusters list with one name the load_balancer does not declare: the gateway must not start. The
    same list without that name (the twin) starts and serves."""
    overlay = contract.encode(site.envelope([site.candidate("provider-a", model)]))
    with pytest.raises(GatewayStartFailed) as failure:
        refused = site.start_gateway("allowlist", overlay, allowlist=[*site.model_clusters, "cluster-not-declared"])
        site.stop_gateway(refused)
    assert failure.value.exit_code not in (None, 0), f"the gateway must exit non-zero; it {failure.value}"
    twin = site.start_gateway("allowlist", overlay, allowlist=list(site.model_clusters))
    try:
        reply = twin.request(model)
        assert reply.status == 200 and reply.backend == "provider-a", f"the twin serves: {reply.describe()}"
    finally:
        site.stop_gateway(twin)


@pytest.mark.conformance(id="CONS-METRICS-SERIES", profile="consumer", level="extended",
                         feature="prometheusMetrics", spec=SPEC + ": Metrics",
                         statements=["IR-METRICS-SHARED-RECORDER", "IR-METRICS-DECISIONS-TOTAL",
                                     "IR-METRICS-SELECTED-TOTAL", "IR-METRICS-SESSION-TOTAL",
                                     "IR-METRICS-SNAPSHOT-CANDIDATES"])
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


FILTER_DURATION = ("intelligent-route-filter, Metrics: \"Decision latency is covered by the core "
                   "praxis_filter_duration_seconds{filter=\"intelligent_route\"} histogram, which the proxy records "
                   "only when metrics.filter_duration: true is set.\"")
DURATION = "praxis_filter_duration_seconds"


PRESERVED = ("intelligent-route-filter, Behavior: \"If ctx.cluster is already set by an earlier filter, the selection "
             "is preserved and no metadata is written.\"")


@pytest.mark.conformance(id="CONS-PRESET-CLUSTER-PRESERVED", profile="consumer", level="extended",
                         feature="presetCluster", spec=PRESERVED, statements=["IR-BEHAVIOR-PRESERVE-EXISTING-CLUSTER"])
def test_cluster_set_by_an_earlier_filter_is_preserved(site: Site, model: str, fresh_gateway: Any) -> None:
    """A router ahead of intelligent_route sends /pinned/ paths to provider-c; the overlay routes the model to
    provider-a. Pinned requests reach provider-c, for the model and for one the overlay lacks (no lookup, so
    no 404); the same request on the ordinary path (the twin) reaches provider-a.
    Fails if intelligent_route looks the model up whatever an earlier filter chose.
    """
    gateway = fresh_gateway("pinned", contract.encode(site.envelope([site.candidate("provider-a", model)])))
    for name in (model, model + "-absent"):
        reply = gateway.request(name, path=PINNED_PREFIX + "v1/chat/completions")
        assert reply.status == 200 and reply.backend == "provider-c", (
            f"a {PINNED_PREFIX} request for {name} must keep the router's cluster provider-c; got {reply.describe()}")
    twin = gateway.request(model)
    assert twin.status == 200 and twin.backend == "provider-a", f"the ordinary path is routed: {twin.describe()}"


@pytest.mark.conformance(id="CONS-METRICS-FILTER-DURATION", profile="consumer", level="extended",
                         feature="prometheusMetrics", spec=FILTER_DURATION, statements=["IR-METRICS-FILTER-DURATION"])
def test_filter_duration_histogram_only_when_configured(gw: Gateway, site: Site, model: str,
                                                        fresh_gateway: Any) -> None:
    """A gateway with metrics.filter_duration: true counts at least five intelligent_route runs in the
    histogram (_bucket, _sum and _count) after five routed requests; the shared gateway, whose config has
    no metrics key, exports no such series. Fails if the histogram is missing, misnamed or mislabelled
    when configured, or recorded without the setting.
    """
    doc = site.envelope([site.candidate("provider-a", model)])
    timed = fresh_gateway("filter-duration", contract.encode(doc))
    for _ in range(5):
        reply = timed.request(model)
        assert reply.status == 200, reply.describe()
    samples = timed.metrics()
    route = frozenset({("filter", "intelligent_route")})
    count = samples.get((DURATION + "_count", route), 0.0)
    assert count >= 5, f"{DURATION}_count{{filter=intelligent_route}} is {count} after 5 requests"
    assert (DURATION + "_sum", route) in samples, f"no {DURATION}_sum for intelligent_route"
    assert any(name == DURATION + "_bucket" and ("filter", "intelligent_route") in labels
               for name, labels in samples), f"no {DURATION}_bucket for intelligent_route"
    gw.publish(doc, model)
    untimed = [name for name, labels in gw.metrics() if name.startswith(DURATION)]
    assert not untimed, f"without metrics.filter_duration the gateway still exports {sorted(set(untimed))}"


@pytest.mark.conformance(id="CONS-METRICS-RELOADS", profile="consumer", level="extended",
                         feature="prometheusMetrics", spec=SPEC + ": snapshot_reloads_total{result}",
                         statements=["IR-METRICS-SNAPSHOT-RELOADS-TOTAL"])
def test_reload_results_are_counted(gw: Gateway, site: Site, model: str) -> None:
    reloads = ReloadProbe(gw, True)
    before = reloads.snapshot()
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    reloads.wait(before, "accepted")
    before = reloads.snapshot()
    gw.write_overlay(b"[1, 2")
    reloads.wait(before, "rejected")


@pytest.mark.conformance(id="CONS-METRICS-CLOSED-LABELS", profile="consumer", level="extended",
                         feature="prometheusMetrics", spec=SPEC + ": label values never come from client input",
                         statements=["IR-METRICS-LABELS-NOT-CLIENT-INPUT", "IR-METRICS-NO-STABLE-ID-LABEL"])
def test_metric_labels_never_carry_client_input(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model, stable_id="stable-secret-id-42")]), model)
    probe = "client-" + uuid.uuid4().hex
    gw.request(probe)
    gw.request(model, headers={"x-session-id": probe})
    text = gw.metrics_text()
    assert probe not in text and "stable-secret-id-42" not in text and model not in text


@pytest.mark.conformance(id="CONS-MCP-TOOL-ROUTING", profile="consumer", level="extended", feature="mcpToolRouting",
                         spec=SPEC + ": MCP lookup for tools/call",
                         statements=["IR-OVERVIEW-SELECTS-CLUSTER", "IR-MCP-TOOLS-CALL-MATCH",
                                     "IR-MCP-OTHER-METHODS-SKIP"])
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


BEHAVIOR = "intelligent-route-filter, Behavior: "
SKIP_FIRST = (BEHAVIOR + "\"If the request path matches a configured skip_paths prefix (management and discovery "
              "endpoints), the filter returns Continue before any model lookup, setting ctx.cluster to "
              "management_cluster when one is configured.\"")
INVALID_400 = BEHAVIOR + "\"If the model header or MCP tool name is blank, oversized, or invalid, the filter rejects " \
    "with 400.\""
MCP_LOOKUP = ("intelligent-route-filter, MCP lookup: \"if mcp.method filter metadata is set to tools/call and "
              "mcp.name is present, mcp_tool candidates are matched.\"")
METRICS = "intelligent-route-filter, Metrics: "
#: Far beyond any bound a gateway could reasonably set (as in the core model-value tests).
GROSS_MODEL = "m" * (64 * 1024)


def _tools_call(name: str, **extra: object) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": {}}, **extra}


@pytest.mark.conformance(id="CONS-SKIP-PATHS-BEFORE-LOOKUP", profile="consumer", level="extended",
                         feature="skipPaths", spec=SKIP_FIRST,
                         statements=["IR-BEHAVIOR-SKIP-PATHS"])
def test_skip_paths_come_before_model_validation(site: Site, model: str) -> None:
    gw = site.gateway("skip")
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    for label, value in (("blank", "   "), ("oversized", GROSS_MODEL)):
        skipped = gw.request(value, path="/internal/status")
        assert skipped.status != 400 and skipped.backend is None, (
            f"a skipped path with a {label} model is neither validated nor routed by model: {skipped.describe()}")
        routed = gw.request(value)
        assert routed.status == 400, f"the same {label} model on a path that is not skipped: {routed.describe()}"


@pytest.mark.conformance(id="CONS-MCP-BLANK-TOOL", profile="consumer", level="extended", feature="mcpToolRouting",
                         spec=INVALID_400,
                         statements=["IR-BEHAVIOR-INVALID-NAME-400"])
def test_blank_mcp_tool_name_gets_400(site: Site, model: str) -> None:
    gw = site.gateway("mcp")
    tool = model + "-tool"
    gw.publish(site.envelope([site.candidate("provider-c", tool, kind="mcp_tool"),
                              site.candidate("provider-a", model)]), model)
    blank = gw.request(None, path="/mcp", body=_tools_call("   "))
    assert blank.status == 400 and blank.backend is None, f"a blank tool name: {blank.describe()}"
    named = gw.request(None, path="/mcp", body=_tools_call(tool))
    assert named.status == 200 and named.backend == "provider-c", f"the twin naming the tool: {named.describe()}"


@pytest.mark.conformance(id="CONS-MCP-TOOL-OVER-MODEL", profile="consumer", level="extended", feature="mcpToolRouting",
                         spec=MCP_LOOKUP,
                         statements=["IR-MCP-TOOLS-CALL-MATCH"])
def test_mcp_tool_wins_over_a_model_in_the_body(site: Site, model: str) -> None:
    gw = site.gateway("mcp")
    tool = model + "-tool"
    gw.publish(site.envelope([site.candidate("provider-c", tool, kind="mcp_tool"),
                              site.candidate("provider-a", model)]), model)
    call = gw.request(None, path="/mcp", body=_tools_call(tool, model=model))
    assert call.status == 200 and call.backend == "provider-c", (
        f"tools/call naming {tool} with model {model} (served by provider-a) must match the tool: {call.describe()}")


@pytest.mark.conformance(id="CONS-METRICS-SESSION-FAILOVER", profile="consumer", level="extended",
                         feature="prometheusMetrics",
                         spec=METRICS + "\"praxis_ai_intelligent_route_session_total{event} — bound, reused, or "
                         "failover, when session affinity is enabled.\"; \"praxis_ai_intelligent_route_decisions_total"
                         "{outcome, kind} — one per request; outcome uses the metadata vocabulary above\"",
                         statements=["IR-METRICS-SESSION-TOTAL", "IR-METRICS-DECISIONS-TOTAL"])
def test_session_failover_is_counted(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model)]), model)
    session = {SESSION_HEADER: uuid.uuid4().hex}
    bound = gw.request(model, headers=session)
    assert bound.status == 200 and bound.backend == "provider-a", f"the session binds provider-a: {bound.describe()}"
    gw.publish(site.envelope([site.candidate("provider-b", model)]), model)
    before = gw.metrics()
    moved = gw.request(model, headers=session)
    after = gw.metrics()
    assert moved.status == 200 and moved.backend == "provider-b", moved.describe()

    def delta(name: str, **labels: str) -> float:
        key = (PREFIX + name, frozenset(labels.items()))
        return after.get(key, 0.0) - before.get(key, 0.0)

    counted = {event: delta("session_total", event=event) for event in ("bound", "reused", "failover")}
    assert counted == {"bound": 0, "reused": 0, "failover": 1}, f"a failover is counted as one: {counted}"
    outcomes = {o: delta("decisions_total", outcome=o, kind="inference_model") for o in ("routed", "reused")}
    assert outcomes == {"routed": 1, "reused": 0}, f"a failover is a fresh decision, not a reuse: {outcomes}"


@pytest.mark.conformance(id="CONS-METRICS-SNAPSHOT-CANDIDATES", profile="consumer", level="extended",
                         feature="prometheusMetrics",
                         spec=METRICS + "\"praxis_ai_intelligent_route_snapshot_candidates — candidates in the "
                         "serving snapshot, published by the instance serving requests\"",
                         statements=["IR-METRICS-SNAPSHOT-CANDIDATES"])
def test_snapshot_gauge_counts_every_candidate(gw: Gateway, site: Site, model: str) -> None:
    candidates = [site.candidate("provider-a", model),
                  site.candidate("provider-b", model, admission_state="existing_only"),
                  site.candidate("provider-c", model, admission_state="none"),
                  site.candidate("provider-d", model + "-other")]
    gw.publish(site.envelope(candidates), model)
    gauge = gw.metrics().get((PREFIX + "snapshot_candidates", frozenset()))
    assert gauge == len(candidates), (
        f"the serving snapshot has {len(candidates)} candidates (admission none and existing_only included); "
        f"the gauge says {gauge}")


@pytest.mark.conformance(id="CONS-METRICS-SESSION-TABLE-ENTRIES", profile="consumer", level="extended",
                         feature="prometheusMetrics",
                         spec=METRICS + "\"praxis_ai_intelligent_route_session_table_entries — entries in the session "
                         "tables of every instance in this process\"",
                         statements=["IR-METRICS-SESSION-TABLE-ENTRIES"])
def test_session_table_gauge_counts_bindings(gw: Gateway, site: Site, model: str) -> None:
    """Two new session keys bound to the same provider are two entries; reusing one adds none."""
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    gauge = PREFIX + "session_table_entries"
    before = gw.metric(gauge)
    sessions = [{SESSION_HEADER: uuid.uuid4().hex} for _ in range(2)]
    for headers in sessions:
        reply = gw.request(model, headers=headers)
        assert reply.status == 200 and reply.backend == "provider-a", reply.describe()
    bound = gw.metric(gauge)
    assert bound - before == 2, f"two sessions bound (both to provider-a): the gauge went from {before} to {bound}"
    assert gw.request(model, headers=sessions[0]).backend == "provider-a"
    reused = gw.metric(gauge)
    assert reused == bound, f"reusing a binding adds no entry: the gauge went from {bound} to {reused}"
