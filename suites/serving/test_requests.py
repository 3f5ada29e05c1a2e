"""What grid_site_route answers a request it cannot route, and what a routed response says about where it
went: behaviour of the public gateway (praxis-proxy/grid, gateway/ai-grid-filters/src/route.rs) that the
routing guide does not state, so each test is of an extended feature. Every refusal has its twin: the
nearest request the same gateway serves.
"""

from __future__ import annotations

import pytest

from harness.grid import Reply
from harness.serving.grid import EppSetting, ServingGrid
from harness.timeouts import timeouts
from harness.waiting import WaitTimeout, poll_until

ROUTE_RS = "praxis-proxy/grid gateway/ai-grid-filters/src/route.rs"


def _served(reply: Reply, sites: tuple[str, ...]) -> bool:
    return reply.status == 200 and reply.headers.get("x-agn-site") in sites


#: What the public route answers a request naming no model: 400 in the older public snapshot, 503 in the newest
#: release. Neither is in the routing guide, so either is accepted.
NO_MODEL_STATUSES = {400: "the older public route", 503: "the newest public release"}


@pytest.mark.conformance(id="SERV-EXT-NO-MODEL-REFUSED", profile="serving", level="extended",
                         feature="servingRequestErrors",
                         spec=f"{ROUTE_RS}: a request naming no model is refused (400 \"no model in the request\" in "
                              "the older public snapshot, 503 in the newest release; either is accepted)")
def test_a_request_without_a_model_is_refused(two: ServingGrid, model: str) -> None:
    """A chat request whose body has no model is refused, 400 or 503 as the two public versions answer; the
    same request naming the model is served."""
    gateway = two.start_gateway(model)
    gateway.wait_measured()
    refused = gateway.request(omit_model=True)
    assert refused.status in NO_MODEL_STATUSES, (
        f"a request naming no model: expected one of {', '.join(f'{s} ({v})' for s, v in NO_MODEL_STATUSES.items())}"
        f"; got {refused.describe()}")
    twin = gateway.request(model)
    assert _served(twin, two.names), f"the same request naming the model: {twin.describe()}"


@pytest.mark.conformance(id="SERV-EXT-UNKNOWN-MODEL-404", profile="serving", level="extended",
                         feature="servingRequestErrors",
                         spec=f"{ROUTE_RS}: \"A request for an unknown model gets 404\"")
def test_a_model_no_candidate_names_is_refused_with_404(two: ServingGrid, model: str) -> None:
    """A request for a model no candidate of the serving config names is answered 404; the same request for
    the configured model is served."""
    gateway = two.start_gateway(model)
    gateway.wait_measured()
    refused = gateway.request(f"{model}-unknown")
    assert refused.status == 404, refused.describe()
    twin = gateway.request(model)
    assert _served(twin, two.names), f"the same request for the configured model: {twin.describe()}"


@pytest.mark.conformance(id="SERV-EXT-NO-READY-SITE-503", profile="serving", level="extended",
                         feature="servingRequestErrors",
                         spec=f"{ROUTE_RS}, refuse: a model whose sites are not ready is answered 503 with "
                              "Retry-After (\"no healthy site serves this model now\")")
def test_a_model_without_a_ready_site_is_refused_with_503_and_retry_after(two: ServingGrid, model: str) -> None:
    """Every pool publishes 0 ready endpoints: requests for the model are answered 503 with a Retry-After of
    whole seconds. site-b then has a ready endpoint again: the same request is served, by site-b."""
    for site in two.names:
        two.configure(site, EppSetting(endpoints=0))
    gateway = two.start_gateway(model)
    try:  # until the gateway read the sites: before that it may route, and a pool with no endpoint answers 503
        refused = poll_until(lambda: gateway.request(model),
                             lambda r: r.status == 503 and r.headers.get("x-agn-site") is None,
                             what="the gateway's own 503 with no ready site", timeout=timeouts().serving_signal,
                             describe=Reply.describe)
    except WaitTimeout as exc:
        raise WaitTimeout(f"{exc}\n--- gateway log (tail) ---\n{gateway.log_tail()}") from None
    retry_after = refused.headers.get("retry-after", "")
    assert retry_after.isdigit() and int(retry_after) >= 1, f"Retry-After {retry_after!r}: {refused.describe()}"
    two.configure("site-b", EppSetting())
    twin = poll_until(lambda: gateway.request(model), lambda r: r.status == 200, what="site-b ready to serve",
                      timeout=timeouts().serving_signal, describe=Reply.describe)
    assert twin.headers.get("x-agn-site") == "site-b", f"only site-b is ready: {twin.describe()}"


#: Requests whose headers are compared.
HEADER_SAMPLE = 60


@pytest.mark.conformance(id="SERV-EXT-GRID-SITE-HEADERS", profile="serving", level="extended",
                         feature="gridSiteHeaders",
                         spec=f"{ROUTE_RS}: \"A routed response names the chosen site and cluster in x-grid-site and "
                              "x-grid-backend.\"")
def test_a_routed_response_names_the_site_and_cluster_that_served_it(three: ServingGrid, model: str) -> None:
    """For each of 60 requests over three idle sites, x-grid-site names the site whose pool answered and
    x-grid-backend that site's cluster; at least two sites serve (a third each, so fewer has probability
    below 1e-9)."""
    gateway = three.start_gateway(model)
    gateway.wait_measured()
    mismatched = []
    sites = set()
    for index in range(HEADER_SAMPLE):
        reply = gateway.request(model, prompt=f"{model} header check {index}")
        served = reply.headers.get("x-agn-site")
        assert reply.status == 200 and served in three.names, reply.describe()
        sites.add(served)
        named = (reply.headers.get("x-grid-site"), reply.headers.get("x-grid-backend"))
        if named != (served, three.cluster(str(served))):
            mismatched.append((served, named))
    assert not mismatched, f"(served by, (x-grid-site, x-grid-backend)) that disagree: {mismatched[:5]}"
    assert len(sites) >= 2, f"every request went to {sites}"
