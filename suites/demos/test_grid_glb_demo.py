"""grid-glb-demo: session affinity, provider withdrawal/recovery, hot reload, and edge selection kept apart from
AGN provider selection.

Each test judges one claim of the demo README's "What It Proves" list (praxis-proxy/demos,
demos/grid-glb-demo/README.md) on its four sites: two edges (east-edge, west-edge) and two provider sites
(east-provider with a primary and a secondary provider, west-provider with one), with the grid's default
policies (noMetrics, geographyFirst). The demo's GTM emulator is played by the harness, which sends each
request to one edge or the other. Claims about the emulator itself are listed at the end as not applicable.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness import mesh_oracle as oracle
from harness.grid import ProviderGateway, Refused, Reply, is_refusal
from harness.pki import ClientFiles
from suites.demos.claims import not_applicable
from suites.demos.glb_sites import EDGES, PROVIDERS, README, GlbSites
from suites.demos.serving import revision_of

DEMO = "grid-glb-demo"
MAP = "routing guide 12: \"grid-glb-demo demos Session affinity, provider withdrawal/recovery, hot reload, and " \
      "separation of edge selection from AGN provider selection.\""
AFFINITY = "routing guide 8: \"Grid GLB Demo: separate edge and provider affinity, provider withdrawal, recovery, " \
           "and failback.\""
REQUESTS = 8
EAST = ("east-primary", "east-secondary")
WORKLOAD_AUTH = "Bearer workload-secret-3141"
#: The edge selector's own affinity key: a cookie keeping a client on one edge, which no AGN component reads.
EDGE_COOKIE = "glb-edge"


def _claim(words: str) -> str:
    return f"{README}, What It Proves: \"{words}\"; {MAP}"


def _own_region(glb: GlbSites, at: str) -> set[str]:
    """The providers in edge `at`'s region."""
    return {p.short for p in PROVIDERS if glb.region(p.site) == glb.region(at)}


def _east_candidates(glb: GlbSites, at: str = "east-edge") -> list[dict[str, Any]]:
    envelope = glb.wait_overlay(at, glb.holds_every_provider, what=f"{at}'s overlay with the three providers")
    return oracle.from_site(envelope, glb.model, "east-provider")


def _hop(glb: GlbSites, gateway: ProviderGateway, candidate: dict[str, Any], client: ClientFiles | None,
         **headers: str) -> Reply | Refused:
    """One hop into east's provider gateway for `candidate`, as an edge sends it; recorded on the timeline."""
    outcome = gateway.call(glb.model, client=client,
                           headers={**gateway.hop_headers(str(candidate["stable_id"])), **headers})
    if isinstance(outcome, Reply):
        glb.timeline.request(outcome.backend if outcome.status == 200 else None, outcome.status,
                             site="east-provider", candidate=candidate["stable_id"])
    else:
        glb.timeline.action(f"hop for {candidate['stable_id']} {outcome.describe()}", site="east-provider")
    return outcome


@pytest.mark.conformance(id="DEMO-GLB-DEMO-ACTIVE-ACTIVE", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Active/active global routing with independent Grid provider selection") +
                              "; routing architecture, External edge routing: \"AGN renders a per-gateway overlay "
                              "specific to each edge's site and region.\"",
                         statements=["OC-EDGE-PER-GATEWAY-OVERLAY", "RG-GEO-REMOTE-FALLBACK", "RG-DEMO-GLB"])
def test_both_edges_serve_each_selecting_from_its_own_overlay(glb_sites: GlbSites) -> None:
    """Requests spread over both edges at once are all served, each edge selecting from its own overlay
    (scoped to its site): east-edge's by east's providers, west-edge's by west's, while every provider is in
    both overlays."""
    for at in EDGES:
        glb_sites.consumer(at)
        envelope = glb_sites.world.envelope(at) or {}
        local = (envelope.get("scope") or {}).get("local_site")
        assert local == at, f"{at}'s gateway serves an overlay rendered for {local!r}, not for its own site"
    served: dict[str, list[tuple[int, str | None]]] = {at: [] for at in EDGES}
    for _ in range(REQUESTS):
        for at in EDGES:
            served[at] += glb_sites.served(at, 1)
    for at in EDGES:
        own = _own_region(glb_sites, at)
        assert all(status == 200 and provider in own for status, provider in served[at]), \
            f"{at}'s requests are served by its own region's providers {sorted(own)}: {served[at]}"


@pytest.mark.conformance(id="DEMO-GLB-DEMO-TWO-EAST-PROVIDERS", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Two independent providers at the east site with distinct stable IDs") +
                              "; routing architecture, Multi-cluster model routing: \"The operator renders one overlay "
                              "candidate per routable model/provider pair.\"",
                         statements=["OC-MULTI-ONE-CANDIDATE-PER-PAIR", "RG-DEMO-GLB"])
def test_east_site_hosts_two_independent_providers(glb_sites: GlbSites) -> None:
    """Each edge's overlay holds east's two providers as two candidates with distinct stable ids (each has
    its own upstream cluster name, as in the demo), and a hop for each id into east's provider gateway is
    served by that provider's own model server."""
    for at in EDGES:
        envelope = glb_sites.wait_overlay(
            at, lambda e: len(oracle.from_site(e, glb_sites.model, "east-provider")) == len(EAST),
            what=f"{at}'s overlay with a candidate for each of east's two providers")
        ids = [str(c.get("stable_id")) for c in oracle.from_site(envelope, glb_sites.model, "east-provider")]
        assert len(set(ids)) == len(EAST), f"{at}: east's two providers need distinct stable ids: {ids}"
    candidates = _east_candidates(glb_sites)
    gateway = glb_sites.provider_gateway("east-provider", candidates)
    client = glb_sites.world.mesh.grid.backend.pki.client(f"east-edge-{glb_sites.world.tag}")
    backends = []
    for candidate in candidates:
        reply = _hop(glb_sites, gateway, candidate, client)
        assert isinstance(reply, Reply) and reply.status == 200, f"{candidate}: {reply.describe()}"
        backends.append(glb_sites.provider_of(reply.backend))
    assert sorted(str(b) for b in backends) == sorted(EAST), \
        f"each of east's candidates is served by its own provider: {backends}"


@pytest.mark.conformance(id="DEMO-GLB-DEMO-BOUNDARY-PEERS", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Secure provider boundary: mTLS, peer authorization, credential replacement") +
                              " (mTLS and peer authorization)",
                         statements=["OC-TRUST-TERMINATE-MTLS", "OC-TRUST-CLIENT-CERT-REQUIRED",
                                     "OC-TRUST-UNTRUSTED-403"])
def test_east_provider_gateway_admits_only_grid_edges(glb_sites: GlbSites) -> None:
    """East's provider gateway serves the hop of either edge (each with its grid certificate) for each of
    its candidates, and refuses the same hop with no client certificate and with another organization's."""
    candidates = _east_candidates(glb_sites)
    gateway = glb_sites.provider_gateway("east-provider", candidates)
    pki = glb_sites.world.mesh.grid.backend.pki
    for at in EDGES:
        client = pki.client(f"{at}-{glb_sites.world.tag}")
        for candidate in candidates:
            admitted = _hop(glb_sites, gateway, candidate, client)
            assert isinstance(admitted, Reply) and admitted.status == 200, \
                f"{at}'s hop for {candidate['stable_id']} must be served: {admitted.describe()}"
    candidate = candidates[0]
    anonymous = _hop(glb_sites, gateway, candidate, None)
    assert is_refusal(anonymous) or (isinstance(anonymous, Reply) and anonymous.status in (401, 403)), \
        f"a hop without a client certificate must be refused: {anonymous.describe()}"
    stranger = _hop(glb_sites, gateway, candidate,
                    pki.client(f"stranger-{glb_sites.world.tag}", organization="not-the-grid"))
    assert is_refusal(stranger) or (isinstance(stranger, Reply) and stranger.status == 403), \
        f"a hop from a peer outside the grid's organization must be refused: {stranger.describe()}"


@pytest.mark.conformance(id="DEMO-GLB-DEMO-BOUNDARY-CREDENTIALS", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Secure provider boundary: mTLS, peer authorization, credential replacement") +
                              " (credential replacement, each of east's providers with its own credential)",
                         statements=["OC-NATIVE-INJECT-AUTHORIZATION", "OC-CREDENTIAL-FINAL-HOP-INJECTS"])
def test_each_east_provider_gets_its_own_credential(glb_sites: GlbSites) -> None:
    """A hop carrying the workload's Authorization reaches each east provider's model server with that
    provider's own token instead."""
    candidates = _east_candidates(glb_sites)
    gateway = glb_sites.provider_gateway("east-provider", candidates)
    client = glb_sites.world.mesh.grid.backend.pki.client(f"east-edge-{glb_sites.world.tag}")
    for candidate in candidates:
        route = gateway.route(str(candidate["stable_id"]))
        assert route.credential is not None
        expected = f"Bearer {gateway.tokens[route.credential]}"
        reply = _hop(glb_sites, gateway, candidate, client, authorization=WORKLOAD_AUTH)
        assert isinstance(reply, Reply) and reply.status == 200, reply.describe()
        seen = reply.forwarded_headers.get("authorization")
        assert seen == expected, \
            f"{route.cluster}'s model server must see its own provider token, not {seen!r}"


@pytest.mark.conformance(id="DEMO-GLB-DEMO-SEPARATE-AFFINITY", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Edge and provider session affinity under separate keys") + "; " + AFFINITY +
                              "; routing guide 8: \"Existing permitted binding: reuse the provider. No binding: run "
                              "normal group + selection-mode logic and record the successful binding.\"",
                         statements=["RG-AFFINITY-DEMO-GLB", "RG-AFFINITY-REUSE-BINDING",
                                     "RG-AFFINITY-NO-BINDING-RECORD", "RG-AFFINITY-BEFORE-SELECTION"])
def test_provider_affinity_follows_the_session_key_not_the_edge_key(glb_sites: GlbSites) -> None:
    """At east-edge, with east's providers withdrawn, a session (x-session-id) is placed on west's provider;
    requests carrying only the edge selector's cookie are served there too. Once east's providers are back,
    the session stays on west while requests with the same edge cookie and no session key follow the fresh
    selection to east."""
    glb_sites.consumer("east-edge")
    glb_sites.withdraw(*EAST)
    glb_sites.wait_overlay("east-edge", lambda e: glb_sites.sites_in(e) == ["west-provider"],
                           what="east-edge's overlay without east's withdrawn providers")
    edge = {EDGE_COOKIE: "east-edge"}
    glb_sites.wait_served_by("east-edge", ["west"], what="east-edge to be served by west", cookies=edge)
    session = f"{glb_sites.world.tag}-session"
    assert glb_sites.served("east-edge", 3, session=session, cookies=edge) == [(200, "west")] * 3
    assert glb_sites.served("east-edge", 3, cookies=edge) == [(200, "west")] * 3
    glb_sites.restore(*EAST)
    glb_sites.wait_overlay("east-edge", lambda e: glb_sites.own_region_first("east-edge", e),
                           what="east-edge's overlay with east's restored providers first")
    glb_sites.wait_served_by("east-edge", EAST, cookies=edge,
                             what="a request with only the edge cookie to follow the fresh selection to east")
    pinned = glb_sites.served("east-edge", 4, session=session, cookies=edge)
    assert pinned == [(200, "west")] * 4, f"the session key keeps its provider binding: {pinned}"
    unkeyed = glb_sites.served("east-edge", 4, cookies=edge)
    assert all(status == 200 and provider in EAST for status, provider in unkeyed), \
        f"the edge's cookie is not a provider affinity key: {unkeyed}"


@pytest.mark.conformance(id="DEMO-GLB-DEMO-PROVIDER-FAILBACK", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Provider withdrawal, recovery, and failback through the existing GLB scenario") +
                              "; " + AFFINITY + "; routing guide 1: \"Providers in lower-priority groups are fallback "
                              "capacity\"",
                         statements=["RG-AFFINITY-DEMO-GLB", "RG-GEO-REMOTE-FALLBACK", "RG-GROUPS-LOWER-FALLBACK",
                                     "RG-DEMO-GLB"])
def test_east_edge_fails_over_to_west_and_back(glb_sites: GlbSites) -> None:
    """east-edge is served by east's providers; with both withdrawn, by west's; once they are restored, by
    east's again."""
    glb_sites.consumer("east-edge")
    before = glb_sites.served("east-edge", REQUESTS)
    assert all(status == 200 and provider in EAST for status, provider in before), \
        f"east-edge is served by east's providers: {before}"
    glb_sites.withdraw(*EAST)
    glb_sites.wait_overlay("east-edge", lambda e: glb_sites.sites_in(e) == ["west-provider"],
                           what="east-edge's overlay without east's withdrawn providers")
    glb_sites.wait_served_by("east-edge", ["west"], what="east-edge to fail over to west")
    during = glb_sites.served("east-edge", REQUESTS)
    assert during == [(200, "west")] * REQUESTS, f"after the withdrawal west serves east-edge: {during}"
    glb_sites.restore(*EAST)
    glb_sites.wait_overlay("east-edge", lambda e: glb_sites.own_region_first("east-edge", e),
                           what="east-edge's overlay with east's restored providers first")
    glb_sites.wait_served_by("east-edge", EAST, what="east-edge to fail back to east")
    after = glb_sites.served("east-edge", REQUESTS)
    assert all(status == 200 and provider in EAST for status, provider in after), \
        f"after the recovery east's providers serve east-edge again: {after}"


@pytest.mark.conformance(id="DEMO-GLB-DEMO-HOT-RELOAD", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("Live overlay hot reload without pod restart") + "; routing architecture, "
                              "External edge routing: \"With overlay-file hot reload enabled, the edge validates a "
                              "replacement overlay and swaps its in-memory snapshot atomically without process "
                              "restart.\"",
                         statements=["OC-EDGE-ATOMIC-SWAP", "OC-REGEN-PRAXIS-INSTALLS-NO-RESTART", "RG-DEMO-GLB"])
def test_edge_serves_each_new_overlay_without_a_restart(glb_sites: GlbSites) -> None:
    """east-edge's gateway process serves each revision its operator renders as west's provider is withdrawn
    and restored (east's first group unchanged, so its traffic stays on east throughout)."""
    gateway = glb_sites.consumer("east-edge")
    pid = gateway.proc.process.pid
    chain = glb_sites.chain_of(gateway)
    seen = [gateway.serving_revision(glb_sites.model)]
    steps = ((glb_sites.withdraw, "without west's provider", lambda e: set(glb_sites.sites_in(e)) == {"east-provider"}),
             (glb_sites.restore, "with west's provider back", lambda e: glb_sites.own_region_first("east-edge", e)))
    for change, what, holds in steps:
        change("west")
        envelope = glb_sites.wait_overlay("east-edge", holds, what=f"east-edge's overlay {what}")
        revision = str(revision_of(envelope))
        chain.wait_accepted(revision)
        glb_sites.timeline.revision("accepted", revision, site="east-edge")
        gateway.wait_serving(revision, glb_sites.model)
        glb_sites.timeline.revision("serving", revision, site="east-edge")
        assert revision != seen[-1], f"the overlay {what} is a new revision: {seen[-1]} then {revision}"
        seen.append(revision)
        served = glb_sites.served("east-edge", 4)
        assert all(status == 200 and provider in EAST for status, provider in served), served
    assert gateway.running() and gateway.proc.process.pid == pid, \
        "the gateway serving every new revision is the process that served the first"


_NOT_APPLICABLE = {
    "GTM-EMULATOR": (
        "Local GTM emulator selects a healthy edge (not Route 53 or Internet-scale GSLB)",
        "the edge selector is a global traffic manager in front of AGN, another system (routing architecture, "
        "External edge routing: it \"selects a healthy edge before the request body or model is known\"); the "
        "harness plays it by sending each request to one edge or the other"),
    "EDGE-FAILBACK": (
        "Edge withdrawal, recovery, and failback behind one HTTPS name",
        "withdrawing an edge and answering behind one name are the traffic manager's health decisions, outside AGN; "
        "what AGN owes them, each edge serving on its own overlay alone or together, is "
        "DEMO-GLB-DEMO-ACTIVE-ACTIVE"),
}


@pytest.mark.conformance(id="DEMO-GLB-DEMO-NOT-APPLICABLE", profile="demos", level="demo", feature=DEMO,
                         spec=f"{README}, What It Proves")
@pytest.mark.parametrize("claim", sorted(_NOT_APPLICABLE))
def test_claims_outside_agn_routing(claim: str) -> None:
    """Listed in the report as not applicable, with the reason: never silently dropped."""
    not_applicable(_NOT_APPLICABLE, claim)
