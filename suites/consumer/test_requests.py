"""Bad and unmatched requests: 400 for invalid model values, 404 when nothing matches."""

from __future__ import annotations

from typing import Any

import pytest

from harness import contract
from harness.backends.local import GatewayStartFailed
from harness.grid import Gateway, Site
from harness.suite_support import EMPTY_ACCEPTED
from harness.waiting import WaitTimeout

SPEC = "intelligent-route-filter: Behavior"


@pytest.fixture
def served(gw: Gateway, site: Site, model: str) -> str:
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    return model


BEHAVIOR = ("intelligent-route-filter, Behavior: \"If the model header or MCP tool name is blank, oversized, or "
            "invalid, the filter rejects with 400.\"")
#: Far beyond any bound a gateway could reasonably set (the public code's is 256 bytes).
GROSS_MODEL = "m" * (64 * 1024)


def _refused(gw: Gateway, value: str, status: int, twin: str) -> None:
    """`value` is answered `status` without reaching a backend, while `twin` is routed by the same gateway."""
    reply = gw.request(value)
    hint = ""
    if status == 400 and reply.status >= 500:
        hint = f" (the spec makes an invalid value the client's error: {BEHAVIOR}; a server error is not that answer)"
    assert reply.status == status, \
        f"model {value[:24]!r} ({len(value.encode())} bytes): expected {status}, {reply.describe()}{hint}"
    assert reply.backend is None, f"a rejected request must not reach a backend: {reply.describe()}"
    routed = gw.request(twin)
    assert routed.status == 200 and routed.backend is not None, (
        f"the twin model {twin[:24]!r} ({len(twin.encode())} bytes) must be routed: {routed.describe()}")


def _static_refused(fresh_gateway: Any, bad: list[dict[str, Any]], twin: list[dict[str, Any]], model: str,
                    backend: str = "provider-d") -> None:
    """A static gateway on `bad` candidates must not start; on `twin` (the nearest valid list) it serves
    `model` from `backend`, so the refusal was for bad's fault."""
    with pytest.raises(GatewayStartFailed) as failure:
        fresh_gateway("static", None, static_candidates=bad)
    assert failure.value.exit_code not in (None, 0), f"the gateway must exit non-zero; it {failure.value}"
    reply = fresh_gateway("static", None, static_candidates=twin).request(model)
    assert reply.status == 200 and reply.backend == backend, f"the twin serves: {reply.describe()}"


@pytest.mark.conformance(id="CONS-400-INVALID-MODEL", profile="consumer", level="core", feature="requestErrors",
                         spec=BEHAVIOR,
                         statements=["IR-BEHAVIOR-INVALID-NAME-400"])
@pytest.mark.parametrize("value", ["   ", GROSS_MODEL], ids=["blank", "oversized"])
def test_invalid_model_values_get_400(gw: Gateway, served: str, value: str) -> None:
    _refused(gw, value, 400, served)


@pytest.mark.conformance(id="CONS-400-MODEL-LIMITS", profile="consumer", level="extended", feature="exactValueLimits",
                         spec=BEHAVIOR + "; the public Praxis AI code (praxis-proxy/ai intelligent_route.rs): model "
                         "values are 1-256 bytes of visible ASCII",
                         statements=["IR-BEHAVIOR-INVALID-NAME-400"])
@pytest.mark.parametrize(("value", "twin"), [("m" * 257, "m" * 256), ("caf\u00e9-\u6a21\u578b", "cafe-model")],
                         ids=["257-bytes", "non-ascii"])
def test_model_values_beyond_public_limits_get_400(gw: Gateway, site: Site, value: str, twin: str) -> None:
    candidates = [site.candidate("provider-b", twin)]
    if len(value.encode()) <= 256:  # a candidate of that very name exists: the refusal is about the value
        candidates.append(site.candidate("provider-a", value))
    gw.publish(site.envelope(candidates), twin)
    _refused(gw, value, 400, twin)


@pytest.mark.conformance(id="CONS-404-UNKNOWN-MODEL", profile="consumer", level="core", feature="requestErrors",
                         spec="intelligent-route-filter, Behavior: \"If no matching candidate is found, the filter "
                         "rejects with 404.\"",
                         statements=["IR-BEHAVIOR-NO-MATCH-404", "OC-CONSUMER-NO-MATCH-FAILS-CLEANLY"])
def test_unknown_model_gets_404(gw: Gateway, served: str) -> None:
    _refused(gw, served + "-unknown", 404, served)


@pytest.mark.conformance(id="CONS-404-EMPTY-AUTHORITATIVE", profile="consumer", level="core", feature="requestErrors",
                         spec=SPEC + ": an authoritative empty versioned overlay rejects with 404",
                         statements=["IR-SELECTION-EMPTY-OVERLAY-404", "IR-ENVELOPE-LIFECYCLE-SERVING"])
def test_empty_versioned_overlay_is_authoritative(gw: Gateway, site: Site, served: str) -> None:
    gw.write_overlay(site.envelope([]))
    try:
        reply = gw.wait_status(served, 404)
    except WaitTimeout as exc:
        raise WaitTimeout(f"{EMPTY_ACCEPTED}\n{exc}") from None
    assert reply.backend is None


@pytest.mark.conformance(id="CONS-404-OTHER-KIND", profile="consumer", level="core", feature="requestErrors",
                         spec=SPEC + ": a model request never matches mcp_tool candidates",
                         statements=["IR-OVERVIEW-SELECTS-CLUSTER", "OC-CONSUMER-INFERENCE-MODEL-SCAN",
                                     "IR-BEHAVIOR-NO-MATCH-404", "OC-MULTI-EXAMPLE-CLUSTER"])
def test_model_request_does_not_match_tool_candidates(gw: Gateway, site: Site, model: str) -> None:
    other = model + "-real"
    gw.publish(site.envelope([site.candidate("provider-a", model, kind="mcp_tool"),
                              site.candidate("provider-b", other)]), other)
    reply = gw.request(model)
    assert reply.status == 404 and reply.backend is None, reply.describe()
    assert gw.request(other).backend == "provider-b", "the inference_model candidate of the twin model is routed"


@pytest.mark.conformance(id="CONS-MISSING-MODEL-NOT-ROUTED", profile="consumer", level="core", feature="requestErrors",
                         spec=SPEC + ": with no routing source the request is not routed",
                         statements=["IR-BEHAVIOR-NO-ROUTING-SOURCE", "OC-CONSUMER-EXTRACTS-MODEL",
                                     "OC-EDGE-PARSES-MODEL"])
def test_request_without_model_reaches_no_backend(gw: Gateway, served: str) -> None:
    reply = gw.request(None, body={"messages": []})
    assert reply.backend is None and reply.status >= 400, reply.describe()
    assert gw.request(served).backend == "provider-a", "the same request naming the served model is routed"


@pytest.mark.conformance(id="CONS-STATIC-DETERMINISTIC", profile="consumer", level="core", feature="staticMode",
                         spec=SPEC + "; Static mode: inline candidates in configured order",
                         statements=["IR-MODES-STATIC", "IR-MODES-STATIC-INLINE",
                                     "IR-SELECTION-MISSING-METADATA-DETERMINISTIC", "IR-BEHAVIOR-MATCH-SETS-CLUSTER"])
def test_static_candidates_route_in_configured_order(site: Site, fresh_gateway: object, model: str) -> None:
    candidates = [site.candidate("provider-d", model), site.candidate("provider-a", model)]
    gateway = fresh_gateway("static", None, static_candidates=candidates)  # type: ignore[operator]
    replies = [gateway.request(model) for _ in range(5)]
    assert {r.backend for r in replies} == {"provider-d"}, [r.describe() for r in replies]
    assert "x-ai-routing-revision" not in replies[0].forwarded_headers, "static mode has no revision"


@pytest.mark.conformance(id="CONS-STATIC-UNKNOWN-FIELD", profile="consumer", level="core", feature="staticMode",
                         spec="overlay contract, Candidate fields: \"The generated Praxis static intelligent_route "
                              "configuration intentionally strips stable_id, admission_state, selection_tier, rank, "
                              "and generated_at because current static intelligent_route candidate config rejects "
                              "unknown fields.\"",
                         statements=["OC-FIELDS-STATIC-REJECTS-UNKNOWN"])
def test_static_candidate_with_an_overlay_only_field_fails_startup(site: Site, fresh_gateway: Any,
                                                                   model: str) -> None:
    """An inline candidate carrying `rank` (an overlay field the static config does not know): no start.

    The same candidates without it (the twin) start and serve. Fails if static config ignores unknown fields.
    """
    candidates = [site.candidate("provider-d", model), site.candidate("provider-a", model)]
    _static_refused(fresh_gateway, [{**candidates[0], "rank": 0}, candidates[1]], candidates, model)


@pytest.mark.conformance(id="CONS-STATIC-NO-WEIGHTED", profile="consumer", level="core", feature="staticMode",
                         spec="intelligent-route-filter, Selection: \"weightedRandom is overlay-only\"; \"Inline "
                              "static candidates cannot enable weighted selection.\"",
                         statements=["IR-SELECTION-STATIC-NO-WEIGHTED"])
def test_static_candidates_cannot_select_by_weight(site: Site, fresh_gateway: Any, model: str) -> None:
    """Inline candidates with one group and traffic weights 1 and 1000: refused at start, or never weighted.

    The spec allows either outcome; what it rules out is weighted selection. When the gateway starts, 40
    requests must all go to the first candidate (deterministic, the only static order the spec gives): a
    weighted draw sends each to the weight-1000 candidate with probability 1000/1001, so a weighted gateway
    passes with probability (1/1001)^40, effectively never. Fails if static weights are honoured.
    """
    light, heavy = (site.candidate("provider-d", model, selection_group=0, traffic_weight=1),
                    site.candidate("provider-a", model, selection_group=0, traffic_weight=1000))
    try:
        gateway = fresh_gateway("static", None, static_candidates=[light, heavy])
    except GatewayStartFailed as failure:
        assert failure.exit_code not in (None, 0), f"a refused gateway must exit non-zero; it {failure}"
        # the twin of the refusal: the same candidates without groups and weights start and serve
        plain = [{k: v for k, v in c.items() if k not in ("selection_group", "traffic_weight")} for c in (light, heavy)]
        reply = fresh_gateway("static", None, static_candidates=plain).request(model)
        assert reply.status == 200 and reply.backend == "provider-d", f"the twin serves: {reply.describe()}"
        return
    replies = [gateway.request(model) for _ in range(40)]
    backends = sorted({str(r.backend) for r in replies})
    assert backends == ["provider-d"], f"static candidates must be served in order, first first: {backends}"


@pytest.mark.conformance(id="CONS-STATIC-UNDECLARED-CLUSTER", profile="consumer", level="core", feature="staticMode",
                         spec="intelligent-route-filter, Scope: \"Pipeline validation checks the clusters this filter "
                              "reports: the clusters list when configured, otherwise static candidates (they live in "
                              "the same configuration), always plus management_cluster.\"",
                         statements=["IR-SCOPE-PIPELINE-VALIDATION-CLUSTERS"])
def test_static_candidate_on_an_undeclared_cluster_fails_startup(site: Site, fresh_gateway: Any,
                                                                 model: str) -> None:
    """Without a clusters list, a static candidate naming a cluster the load_balancer lacks: no start.

    The same candidates on declared clusters (the twin) start and serve. Fails if static candidates are not
    checked at startup (the gateway would start and fail only the requests that need that cluster).
    """
    declared = site.candidate("provider-d", model)
    undeclared = contract.candidate(model + "-elsewhere", site.scope.local_site, "cluster-not-declared")
    _static_refused(fresh_gateway, [declared, undeclared],
                    [declared, site.candidate("provider-a", model + "-elsewhere")], model)


@pytest.mark.conformance(id="CONS-STATIC-EMPTY", profile="consumer", level="core", feature="staticMode",
                         spec="intelligent-route-filter, Selection: \"Static candidate lists and legacy flat overlays "
                              "remain non-empty.\"",
                         statements=["IR-SELECTION-STATIC-LEGACY-NON-EMPTY"])
def test_empty_static_candidate_list_fails_startup(site: Site, fresh_gateway: Any, model: str) -> None:
    """An intelligent_route with `candidates: []`: no start. One candidate (the twin) starts and serves.

    Fails if an empty static list is taken like an empty versioned overlay (start, answer 404).
    """
    _static_refused(fresh_gateway, [], [site.candidate("provider-d", model)], model)
