"""grid-route53-edge-entry: independent public-edge selection and private AGN provider selection.

Route 53 picks a healthy public edge; once a request is there, Grid and Praxis pick the provider. Only the
routing parts of the demo README's "What This Demo Shows" list (praxis-proxy/demos,
demos/grid-route53-edge-entry/README.md) are judged, on the grid-glb-demo's sites: its two edges stand for
the demo's regional edges (east-edge for the east region's, west-edge for the west's) and its provider sites
for the private providers. The harness plays Route 53, sending each request to one edge or the other. The
DNS, ingress and health-check claims are listed at the end as not applicable, with the reason.
"""

from __future__ import annotations

import secrets

import pytest

from harness import mesh_oracle as oracle
from harness.grid import CANDIDATE_HEADER, REQUEST_ID_HEADER, REVISION_HEADER
from harness.timeouts import timeouts
from suites.demos.claims import not_applicable
from suites.demos.glb_sites import EDGES, PROVIDERS, GlbSites

DEMO = "grid-route53-edge-entry"
README = "praxis-proxy/demos, demos/grid-route53-edge-entry/README.md"
MAP = "routing guide 12: \"grid-route53-edge-entry demos Independent public-edge selection and private AGN provider " \
      "selection; useful for understanding routing-layer composition.\""
REQUESTS = 6
EAST = ("east-primary", "east-secondary")
#: SHA-256 pins no certificate has: a GridSite pinned to them never verifies its peer.
UNMATCHED_PIN = "00" * 32


def _claim(words: str) -> str:
    return f"{README}, What This Demo Shows: \"{words}\"; {MAP}"


def _own_region(glb: GlbSites, at: str) -> set[str]:
    return {p.short for p in PROVIDERS if glb.region(p.site) == glb.region(at)}


@pytest.mark.conformance(id="DEMO-ROUTE53-EDGE-ENTRY-INDEPENDENT-SELECTION", profile="demos", level="demo",
                         feature=DEMO,
                         spec=_claim("DNS edge selection and Grid provider selection are independent decisions. Route "
                                     "53 selects a healthy public edge. After the request arrives, Grid and Praxis "
                                     "select an eligible private provider.") + "; intelligent_route, Metadata: "
                              "\"client-supplied x-ai-routing-candidate, x-ai-routing-request-id, and "
                              "x-ai-routing-revision values are removed and replaced with the selected stable ID, a "
                              "generated provider-hop request ID, and the serving overlay revision\"",
                         statements=["IR-METADATA-HOP-HEADERS-REPLACED", "OC-EDGE-PER-GATEWAY-OVERLAY",
                                     "RG-DEMO-ROUTE53-EDGE"])
def test_the_provider_is_selected_at_the_edge_after_arrival(glb_sites: GlbSites) -> None:
    """At each edge, requests are served by the provider that edge's own overlay selects (its region's),
    including requests that arrive naming the other region's candidate in x-ai-routing-* headers: what
    reaches the edge with the request does not choose the provider."""
    for at in EDGES:
        glb_sites.consumer(at)
    for at in EDGES:
        envelope = glb_sites.world.envelope(at)
        other = next(c for c in oracle.candidates_for(envelope, glb_sites.model)
                     if glb_sites.region(str(c.get("site"))) != glb_sites.region(at))
        steered = {CANDIDATE_HEADER: str(other["stable_id"]), REQUEST_ID_HEADER: secrets.token_hex(16),
                   REVISION_HEADER: secrets.token_hex(32)}
        own = _own_region(glb_sites, at)
        plain = glb_sites.served(at, REQUESTS)
        assert all(status == 200 and provider in own for status, provider in plain), \
            f"{at} serves from its own selection, its region's providers {sorted(own)}: {plain}"
        named = glb_sites.served(at, REQUESTS, headers=steered)
        assert all(status == 200 and provider in own for status, provider in named), \
            f"a request arriving at {at} naming {other['site']}'s candidate is still placed by {at}'s own " \
            f"selection on {sorted(own)}: {named}"


@pytest.mark.conformance(id="DEMO-ROUTE53-EDGE-ENTRY-RESIDENCY", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Regional DNS entry does not enforce provider residency alone. DNS edge "
                                     "membership restricts which edges answer, but Grid/Praxis request-time policy "
                                     "must also exclude out-of-region providers.") + "; routing architecture, Routing "
                              "eligibility: \"A remote provider record is included in the routing overlay only when "
                              "the corresponding GridSite.status.phase is Active\"; intelligent_route, Selection: "
                              "\"A validated versioned overlay may have no candidates in any selection mode; matching "
                              "requests are rejected with HTTP 404.\"",
                         statements=["OC-ELIGIBILITY-ACTIVE-ONLY", "OC-ELIGIBILITY-ACTIVE-AFTER-FINGERPRINT",
                                     "IR-SELECTION-EMPTY-OVERLAY-404", "RG-GEO-REMOTE-FALLBACK",
                                     "RG-DEMO-ROUTE53-EDGE"])
def test_the_east_entry_keeps_requests_east_only_under_grid_policy(glb_sites: GlbSites) -> None:
    """With east's providers withdrawn, requests entering at east-edge are served by west's provider: the
    east entry alone keeps nothing in the east. Once east-edge's grid policy stops trusting west's site
    (its GridSite's pins no longer match), east-edge's requests are refused with 404 rather than served out
    of region, while the same request entering at west-edge is still served by west."""
    for at in EDGES:
        glb_sites.consumer(at)
    glb_sites.withdraw(*EAST)
    glb_sites.wait_overlay("east-edge", lambda e: glb_sites.sites_in(e) == ["west-provider"],
                           what="east-edge's overlay without east's withdrawn providers")
    glb_sites.wait_served_by("east-edge", ["west"], what="east-edge's requests to be served by west")
    out_of_region = glb_sites.served("east-edge", REQUESTS)
    assert out_of_region == [(200, "west")] * REQUESTS, \
        f"without a grid policy the east entry serves from west: {out_of_region}"
    spec = glb_sites.world.mesh.site("west-provider").site.spec
    glb_sites.timeline.action("east-edge stops trusting west-provider (pins that match no certificate)",
                              site="east-edge")
    glb_sites.world.trust("east-edge", "west-provider", pins=[UNMATCHED_PIN], region=spec.region, zone=spec.zone)
    glb_sites.wait_overlay("east-edge", lambda e: not glb_sites.sites_in(e),
                           what="east-edge's overlay without west's provider once west's site is no longer trusted")
    refused = glb_sites.consumers["east-edge"].wait_status(glb_sites.model, 404, timeout=timeouts().remote_route)
    glb_sites.timeline.request(None, refused.status, site="east-edge")
    assert [status for status, _ in glb_sites.served("east-edge", REQUESTS)] == [404] * REQUESTS, \
        "with west excluded by east-edge's grid policy, east-edge has no provider to send the request to"
    west = glb_sites.served("west-edge", REQUESTS)
    assert west == [(200, "west")] * REQUESTS, f"the same request entering at west-edge is served by west: {west}"


_NOT_APPLICABLE = {
    "ROUTE53-DNS": (
        "Route 53 is the complete public DNS implementation.",
        "global and regional DNS records, weighted or latency routing among edges, health checks and the withdrawal "
        "and restoration of edges are Route 53's, another system in front of AGN; the harness plays it"),
    "PUBLIC-EDGES-ONLY": (
        "Only Praxis consumer/edge gateways are publicly reachable.",
        "what is exposed through DNS and OpenShift Routes is the deployment's network exposure, not routing "
        "behaviour"),
    "HEALTH-CHECK-LIMITS": (
        "Health checks have known limitations.",
        "a statement about Route 53's TCP 443 health checks, which no AGN component performs"),
}


@pytest.mark.conformance(id="DEMO-ROUTE53-EDGE-ENTRY-NOT-APPLICABLE", profile="demos", level="demo", feature=DEMO,
                         spec=f"{README}, What This Demo Shows")
@pytest.mark.parametrize("claim", sorted(_NOT_APPLICABLE))
def test_claims_outside_agn_routing(claim: str) -> None:
    """Listed in the report as not applicable, with the reason: never silently dropped."""
    not_applicable(_NOT_APPLICABLE, claim)
