"""Bad and unmatched requests: 400 for invalid model values, 404 when nothing matches."""

from __future__ import annotations

import pytest

from harness.grid import Gateway, Site

SPEC = "intelligent-route-filter: Behavior"


@pytest.fixture
def served(gw: Gateway, site: Site, model: str) -> str:
    gw.publish(site.envelope([site.candidate("provider-a", model)]), model)
    return model


def _short_body(body: bytes) -> bool:
    return 0 < len(body) <= 512


@pytest.mark.conformance(id="CONS-400-INVALID-MODEL", profile="consumer", level="core", feature="requestErrors",
                         spec=SPEC + ": blank, oversized or invalid model gives 400")
@pytest.mark.parametrize("value", ["   ", "m" * 257, "caf\u00e9-\u6a21\u578b"],
                         ids=["blank", "oversized", "non-ascii"])
def test_invalid_model_values_get_400(gw: Gateway, served: str, value: str) -> None:
    reply = gw.request(value)
    assert reply.status == 400, f"model {value[:20]!r}: {reply.describe()}"
    assert reply.backend is None, "a rejected request must not reach a backend"
    assert _short_body(reply.body), f"400 needs a short body; got {len(reply.body)} bytes"


@pytest.mark.conformance(id="CONS-400-LIMIT-ACCEPTED", profile="consumer", level="core", feature="requestErrors",
                         spec=SPEC + ": a 256-byte model value is valid")
def test_model_at_length_limit_is_routed(gw: Gateway, site: Site) -> None:
    long_model = "m" * 256
    gw.publish(site.envelope([site.candidate("provider-b", long_model)]), long_model)
    assert gw.request(long_model).backend == "provider-b"


@pytest.mark.conformance(id="CONS-404-UNKNOWN-MODEL", profile="consumer", level="core", feature="requestErrors",
                         spec=SPEC + ": no matching candidate gives 404")
def test_unknown_model_gets_404(gw: Gateway, served: str) -> None:
    reply = gw.request(served + "-unknown")
    assert reply.status == 404 and reply.backend is None, reply.describe()
    assert _short_body(reply.body)


@pytest.mark.conformance(id="CONS-404-EMPTY-AUTHORITATIVE", profile="consumer", level="core", feature="requestErrors",
                         spec=SPEC + ": an authoritative empty versioned overlay rejects with 404")
def test_empty_versioned_overlay_is_authoritative(gw: Gateway, site: Site, served: str) -> None:
    gw.write_overlay(site.envelope([]))
    reply = gw.wait_status(served, 404)
    assert reply.backend is None


@pytest.mark.conformance(id="CONS-404-OTHER-KIND", profile="consumer", level="core", feature="requestErrors",
                         spec=SPEC + ": a model request never matches mcp_tool candidates")
def test_model_request_does_not_match_tool_candidates(gw: Gateway, site: Site, model: str) -> None:
    other = model + "-real"
    gw.publish(site.envelope([site.candidate("provider-a", model, kind="mcp_tool"),
                              site.candidate("provider-b", other)]), other)
    assert gw.request(model).status == 404


@pytest.mark.conformance(id="CONS-MISSING-MODEL-NOT-ROUTED", profile="consumer", level="core", feature="requestErrors",
                         spec=SPEC + ": with no routing source the request is not routed")
def test_request_without_model_reaches_no_backend(gw: Gateway, served: str) -> None:
    reply = gw.request(None, body={"messages": []})
    assert reply.backend is None and reply.status >= 400, reply.describe()


@pytest.mark.conformance(id="CONS-STATIC-DETERMINISTIC", profile="consumer", level="core", feature="staticMode",
                         spec=SPEC + "; Static mode: inline candidates in configured order")
def test_static_candidates_route_in_configured_order(site: Site, fresh_gateway: object, model: str) -> None:
    candidates = [site.candidate("provider-d", model), site.candidate("provider-a", model)]
    gateway = fresh_gateway("static", None, static_candidates=candidates)  # type: ignore[operator]
    replies = [gateway.request(model) for _ in range(5)]
    assert {r.backend for r in replies} == {"provider-d"}, [r.describe() for r in replies]
    assert "x-ai-routing-revision" not in replies[0].forwarded_headers, "static mode has no revision"
