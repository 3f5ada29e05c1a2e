"""grid-distributed-token-rate-limit (experimental): the routing after quota admission.

Each test judges one routing claim of the demo README's "What this demonstrates" list (praxis-proxy/
experimental, demos/grid-distributed-token-rate-limit/README.md) on three provider sites (west, central,
east) in one roundRobin group, with west's consumer gateways as the demo's consumer tier. The quota claims
(authentication, the shared ledger, 429 on exhaustion, sliding-window recovery, fail-closed on a ledger
outage) are the quota filter's, not AGN routing's, and are listed at the end as not applicable.
"""

from __future__ import annotations

import pytest

from harness.stats import assert_round_robin
from suites.demos.claims import not_applicable
from suites.demos.combined_site import SITES
from suites.demos.quota_routing import README, QuotaRouting

DEMO = "grid-distributed-token-rate-limit"
MAP = "routing guide 12: \"grid-distributed-token-rate-limit experimental Round-robin provider selection after quota " \
      "admission; request-time routing remains local to Praxis.\""
#: Rotations each gateway is judged over.
ROTATIONS = 6
#: Sequential requests of the no-lookup test; a lookup per request would scrape at least once for each.
LOOKUP_REQUESTS = 30


def _claim(words: str) -> str:
    return f"{README}, What this demonstrates: \"{words}\"; {MAP}"


@pytest.mark.conformance(id="DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-ROTATION", profile="demos", level="demo", feature=DEMO,
                         spec=_claim("An admitted request is routed to the west, central, or east provider gateway.") +
                              "; routing guide, Round robin: \"Round robin takes equal turns among eligible providers "
                              "inside the first viable selection group.\"",
                         statements=["RG-DEMO-TOKEN-RATE-LIMIT", "RG-RR-EQUAL-TURNS", "RG-PROFILES-SCORE-FIRST"])
def test_admitted_requests_rotate_across_the_three_provider_gateways(quota_routing: QuotaRouting) -> None:
    """west's requests take turns across west's, central's and east's provider gateways, in a fixed cycle."""
    gateway = quota_routing.consumer("west")
    served = quota_routing.served_sites(gateway, ROTATIONS * len(SITES))
    assert_round_robin(served, set(SITES))


@pytest.mark.conformance(id="DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-LOCAL-TURNS", profile="demos", level="demo",
                         feature=DEMO,
                         spec=f"{README}, Topology: \"Their round-robin counters are intentionally local, so the demo "
                              "claims aggregate distribution across providers, not one globally synchronized sequence "
                              "shared by all consumers.\"; routing guide, Round robin: \"Each Praxis gateway maintains "
                              "its own local round-robin state; gateways do not coordinate a global cursor.\"",
                         statements=["RG-DEMO-TOKEN-RATE-LIMIT", "RG-RR-LOCAL-STATE", "RG-RR-NOT-GRID-WIDE"])
def test_each_consumer_gateway_rotates_on_its_own_turns(quota_routing: QuotaRouting) -> None:
    """Two consumer gateways on west's overlay, B sending two requests for each of A's: each gateway's own
    sequence is a full rotation across the three sites. A cursor shared between them would give A every
    third turn (one site only) and B the other two."""
    gateways = {"consumer gateway A": quota_routing.consumer("west"),
                "consumer gateway B": quota_routing.another_consumer("west")}
    share = {"consumer gateway A": 1, "consumer gateway B": 2}
    sequences: dict[str, list[str]] = {name: [] for name in gateways}
    for _ in range(ROTATIONS * len(SITES)):
        for name, gateway in gateways.items():
            sequences[name] += quota_routing.served_sites(gateway, share[name])
    for name, sequence in sequences.items():
        try:
            assert_round_robin(sequence, set(SITES))
        except AssertionError as exc:
            raise AssertionError(f"{name}, its requests interleaved with the other gateway's: {exc}") from None


@pytest.mark.conformance(id="DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-ROUTING-LOCAL", profile="demos", level="demo",
                         feature=DEMO,
                         spec=_claim("Provider selection rotates across the active Grid group without calling Grid or "
                                     "Valkey for the routing decision.") + "; routing guide: \"AGN, Kubernetes, "
                              "Prometheus, and EPP are not consulted synchronously for every request.\"",
                         statements=["RG-DEMO-TOKEN-RATE-LIMIT", "RG-INTRO-NO-SYNC-CONSULT",
                                     "OC-LIFECYCLE-REQUEST-PATH-MEMORY"])
def test_selection_goes_on_with_the_control_plane_stopped(quota_routing_own: QuotaRouting) -> None:
    """With every site's operator stopped, west's gateway still rotates across the three provider gateways
    from its accepted overlay, and meanwhile nothing asks the providers' backends for their metrics (no
    operator is left to scrape them, so a scrape could only come from the request path)."""
    world = quota_routing_own
    gateway = world.consumer("west")
    assert_round_robin(world.served_sites(gateway, len(SITES) * 2), set(SITES))
    for at in SITES:
        world.timeline.action(f"stop {at}'s operator", site=at)
        world.world.mesh.kill(at)
    backends = {at: world.world.mesh.site(at) for at in SITES}
    before = {at: s.site.backend_metrics_requests(s.backend) for at, s in backends.items()}
    served = world.served_sites(gateway, LOOKUP_REQUESTS)
    after = {at: s.site.backend_metrics_requests(s.backend) for at, s in backends.items()}
    assert_round_robin(served, set(SITES))
    grown = {at: after[at] - before[at] for at in SITES if after[at] != before[at]}
    assert sum(grown.values()) < LOOKUP_REQUESTS // 2, (
        f"{LOOKUP_REQUESTS} requests made the backends' /metrics answer {grown} times with no operator running: "
        "a lookup per request")


_NOT_APPLICABLE = {
    "AUTHENTICATION": (
        "Basic authentication publishes a trusted identity.user_id only after the credentials have been verified.",
        "authentication of the client by the gateway, not AGN provider selection"),
    "SHARED-LEDGER": (
        "A shared Valkey ledger lets a horizontally scaled fleet of consumer gateways enforce one Alice/model quota "
        "instead of multiplying the quota per replica.",
        "quota state of the token-rate-limit filter; the README: \"Grid does not store quota state or enforce token "
        "limits\""),
    "QUOTA-429": (
        "Once the shared 60-token window is exhausted, either consumer returns HTTP 429 before a provider is "
        "contacted.",
        "quota admission happens before routing; no AGN routing decision is made for a refused request"),
    "SLIDING-WINDOW": (
        "Capacity returns incrementally as entries age out of the sliding window.",
        "quota accounting of the token-rate-limit filter, not routing"),
    "LEDGER-OUTAGE": (
        "A Valkey outage fails closed with HTTP 503 rather than bypassing the quota.",
        "availability of the quota ledger, not routing"),
}


@pytest.mark.conformance(id="DEMO-DISTRIBUTED-TOKEN-RATE-LIMIT-NOT-APPLICABLE", profile="demos", level="demo",
                         feature=DEMO, spec=f"{README}, What this demonstrates")
@pytest.mark.parametrize("claim", sorted(_NOT_APPLICABLE))
def test_claims_not_judged_here(claim: str) -> None:
    """Listed in the report as not applicable, with the reason: never silently dropped."""
    not_applicable(_NOT_APPLICABLE, claim)
