"""Propagation, the GridSite eligibility gate, trust pins and record filtering across three sites.

site-b joins through site-a and site-c only through site-b, so what site-a knows of site-c has come
through site-b. A remote provider may enter site-a's overlay only while site-a's GridSite for its site
is Active, which needs the site's gateway certificate to match a pinned fingerprint; records of another
network, and site-a's own records echoed back by its peers, never do.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from harness import mesh_oracle as oracle
from harness import resources
from harness.mesh import MeshScenario
from harness.timeouts import timeouts
from harness.traffic import BACKEND_HEADER
from harness.waiting import hold_for, poll_until

ARCH = "routing-architecture-and-overlay-contract"
ELIGIBILITY = f"{ARCH}#routing-eligibility"
CRDT = f"{ARCH}#metrics-and-crdt-inputs"

#: Every test here runs on the worker's shared three-site mesh (the `scenario` fixture), which takes seconds to
#: start and converge: they belong on one worker, so that one mesh serves them all (harness.dealing).
pytestmark = pytest.mark.xdist_group("shared-mesh")


def _not_active(phase: str | None, _reason: str | None) -> bool:
    return phase is not None and phase != "Active"


def _remote_ready(scenario: MeshScenario, at: str, of: str, provider: str) -> None:
    """`at` holds `of`'s record and keeps a GridSite for `of` in this network: the gate is what decides."""
    scenario.wait_record(at, of, provider)
    scenario.wait_gridsite(at, of, lambda phase, _r: phase is not None, what="written")


@pytest.mark.conformance(id="MESH-PROPAGATION-TRANSITIVE", profile="mesh", level="core", feature="gossip",
                         spec=f"{CRDT}; {ELIGIBILITY} (verify-swim-mesh-three-node: A->B->C)",
                         statements=["OC-INPUTS-REMOTE-CRDT"])
@pytest.mark.lasts(2.5)
def test_records_travel_both_ways_through_the_middle_site(scenario: MeshScenario) -> None:
    """site-c's record reaches site-a and site-a's reaches site-c although neither was seeded with the other."""
    scenario.network()
    at_c = scenario.provider("site-c", "pc", [scenario.model("c")])
    at_a = scenario.provider("site-a", "pa", [scenario.model("a")])
    record = scenario.wait_record("site-a", "site-c", at_c)
    assert scenario.model("c") in (record.get("models") or []), f"site-a holds {record}"
    scenario.wait_record("site-c", "site-a", at_a)
    scenario.wait_record("site-b", "site-c", at_c)
    found = scenario.wait_gridsite("site-a", "site-c", lambda phase, _r: phase is not None, what="written")
    assert found.get("spec", {}).get("gridNetworkRef") == scenario.net, f"GridSite spec: {found.get('spec')}"


@pytest.mark.conformance(id="MESH-GATE-ABSENT-BEFORE-ACTIVE", profile="mesh", level="core", feature="eligibility",
                         spec=f"{ELIGIBILITY}; GridSite without trust material stays out of routing (fails closed)",
                         statements=["OC-ELIGIBILITY-GATE", "OC-ELIGIBILITY-ACTIVE-ONLY",
                                     "OC-ELIGIBILITY-MEMBERSHIP-NOT-SUFFICIENT", "OC-ELIGIBILITY-LOCAL-ALWAYS",
                                     "OC-RERANKING-LIST-ELIGIBLE", "RG-NOTMEAN-NOMETRICS-STILL-APPLY"])
def test_remote_provider_absent_until_its_site_is_active(scenario: MeshScenario) -> None:
    """site-c's record and GridSite reached site-a, but with no pins the site is not Active: not routable."""
    scenario.network()
    model = scenario.model("c")
    scenario.provider("site-a", "pa", [scenario.model("a")])
    provider = scenario.provider("site-c", "pc", [model])
    _remote_ready(scenario, "site-a", "site-c", provider)
    site = scenario.wait_gridsite("site-a", "site-c", _not_active, what="written and not Active")
    assert (site.get("status") or {}).get("reason"), f"a site kept out must say why: {site.get('status')}"
    envelope = scenario.mesh.site("site-a").control.reconcile(scenario.net)
    assert oracle.from_site(envelope, model, "site-c") == [], \
        f"site-c is {oracle.summary(oracle.from_site(envelope, model, 'site-c'))} in site-a's overlay while " \
        f"its GridSite is {(site.get('status') or {}).get('phase')}"
    assert oracle.candidates_for(envelope, scenario.model("a")), "site-a's own provider must still be rendered"


@pytest.mark.conformance(id="MESH-GATE-PRESENT-AFTER-ACTIVE", profile="mesh", level="core", feature="eligibility",
                         spec=f"{ELIGIBILITY}; Active after the fingerprint matches and TCP connects",
                         statements=["OC-ELIGIBILITY-GATE", "OC-ELIGIBILITY-ACTIVE-ONLY",
                                     "OC-ELIGIBILITY-MATCHING-RULE", "OC-ELIGIBILITY-ACTIVE-APPEARS",
                                     "OC-ELIGIBILITY-ACTIVE-CONTROL-PLANE", "OC-ELIGIBILITY-ACTIVE-ENOUGH-INFO",
                                     "OC-ELIGIBILITY-THREE-NODE-VALIDATION", "OC-ELIGIBILITY-TRANSITIVE-ABSENT",
                                     "OC-INPUTS-REMOTE-CRDT", "OC-RENDER-READ-REMOTE-CRDT",
                                     "OC-RERANKING-CANDIDATE-SET-REMOTE", "OC-REGEN-CURRENT-STATE",
                                     "RG-RELOAD-AGN-PUBLISHES"])
def test_remote_provider_appears_once_its_site_is_active(scenario: MeshScenario) -> None:
    scenario.network()
    model = scenario.model("c")
    provider = scenario.provider("site-c", "pc", [model])
    _remote_ready(scenario, "site-a", "site-c", provider)
    before = scenario.mesh.site("site-a").control.reconcile(scenario.net)
    assert oracle.from_site(before, model, "site-c") == [], "site-c must not be routable before it is trusted"
    scenario.trust("site-a", "site-c")
    scenario.wait_gridsite("site-a", "site-c", lambda phase, _r: phase == "Active", what="Active")
    envelope = scenario.wait_envelope("site-a", lambda e: bool(oracle.from_site(e, model, "site-c")),
                                      what=f"site-c's candidate for {model}")
    rows = oracle.from_site(envelope, model, "site-c")
    assert len(rows) == 1, f"expected one candidate for site-c's one provider: {oracle.summary(rows)}"
    assert rows[0].get("fresh") is True, f"a live site's candidate is fresh: {rows[0]}"


@pytest.mark.conformance(id="MESH-TRUST-MISMATCH-KEEPS-OUT", profile="mesh", level="core", feature="eligibility",
                         spec=f"{ELIGIBILITY}; trust contract: the fingerprint must match the configured policy",
                         statements=["OC-ELIGIBILITY-GATE", "OC-ELIGIBILITY-ACTIVE-ONLY",
                                     "OC-ELIGIBILITY-ACTIVE-AFTER-FINGERPRINT",
                                     "OC-ELIGIBILITY-MEMBERSHIP-NOT-SUFFICIENT"])
def test_wrong_pin_keeps_the_site_out_and_the_right_one_lets_it_in(scenario: MeshScenario) -> None:
    """Pinned to another site's (valid, grid-signed) certificate, site-c never becomes Active."""
    model = scenario.model("c")
    wrong = scenario.mesh.site("site-b").gateway.server_digest
    # the pin is in place before the network exists, so site-a's first verdict on site-c is a probe's
    scenario.trust("site-a", "site-c", pins=[wrong])
    scenario.network()
    provider = scenario.provider("site-c", "pc", [model])
    _remote_ready(scenario, "site-a", "site-c", provider)
    site = scenario.wait_gridsite("site-a", "site-c", _not_active, what="probed and not Active")
    poll_until(lambda: scenario.mesh.site("site-a").gridsite(scenario.net, "site-c"),
               lambda g: bool(((g or {}).get("status") or {}).get("lastProbeTime")), timeout=timeouts().member_state,
               what="site-a to probe site-c's gateway (status.lastProbeTime)")
    site = scenario.wait_gridsite("site-a", "site-c", _not_active, what="still not Active after the probe")
    envelope = scenario.mesh.site("site-a").control.reconcile(scenario.net)
    assert oracle.from_site(envelope, model, "site-c") == [], \
        f"a pin mismatch must keep site-c out (GridSite status {site.get('status')})"
    scenario.trust("site-a", "site-c")
    scenario.wait_gridsite("site-a", "site-c", lambda phase, _r: phase == "Active", what="Active with the right pin")
    scenario.wait_envelope("site-a", lambda e: bool(oracle.from_site(e, model, "site-c")),
                           what="site-c's candidate once the right pin is configured")


@pytest.mark.conformance(id="MESH-TRUST-ROTATION-SECOND-PIN", profile="mesh", level="core", feature="eligibility",
                         spec=f"{ELIGIBILITY}; canonical fingerprints: one or two (rotation)",
                         statements=["OC-ELIGIBILITY-ACTIVE-AFTER-FINGERPRINT"])
def test_either_of_two_pins_admits_the_site(scenario: MeshScenario) -> None:
    scenario.network()
    model = scenario.model("c")
    other = scenario.mesh.site("site-b").gateway.server_digest
    scenario.trust("site-a", "site-c", pins=[other, scenario.mesh.site("site-c").gateway.server_digest])
    scenario.provider("site-c", "pc", [model])
    scenario.wait_gridsite("site-a", "site-c", lambda phase, _r: phase == "Active", what="Active")
    scenario.wait_envelope("site-a", lambda e: bool(oracle.from_site(e, model, "site-c")),
                           what="site-c's candidate with the matching pin second in the list")


@pytest.mark.conformance(id="MESH-WRONG-NETWORK-ABSENT", profile="mesh", level="core", feature="filtering",
                         spec=f"{CRDT}; remote records are filtered by network",
                         statements=["OC-ELIGIBILITY-WRONG-NETWORK-ABSENT", "OC-INPUTS-REMOTE-FILTERED"])
def test_records_of_another_network_never_appear(scenario: MeshScenario) -> None:
    """site-c serves one model in this network and another in a network site-a is not part of."""
    scenario.network()
    other = scenario.network(network=f"{scenario.tag}-other", sites=["site-c"])
    here, elsewhere = scenario.model("here"), scenario.model("elsewhere")
    scenario.trust("site-a", "site-c")
    scenario.provider("site-c", "pc", [here])
    foreign = scenario.provider("site-c", "px", [elsewhere], network=other)
    scenario.wait_record("site-a", "site-c", foreign, network=other)
    envelope = scenario.wait_envelope("site-a", lambda e: bool(oracle.from_site(e, here, "site-c")),
                                      what=f"site-c's candidate for {here} (site-c Active)")
    envelope = scenario.mesh.site("site-a").control.reconcile(scenario.net) or envelope
    assert elsewhere not in oracle.models_in(envelope), \
        f"{elsewhere} belongs to network {other}; site-a's overlay for {scenario.net} lists it"


@pytest.mark.conformance(id="MESH-NO-SELF-ECHO", profile="mesh", level="core", feature="filtering",
                         spec=f"{CRDT}; a site does not route to its own CRDT echo",
                         statements=["OC-INPUTS-REMOTE-FILTERED"])
@pytest.mark.lasts(2.5)
def test_own_records_coming_back_are_not_remote_candidates(scenario: MeshScenario) -> None:
    """site-a's record comes back to it in its peers' state; its overlay keeps only the local candidate, at
    every reconcile over two probe intervals after both peers hold the record (each peer probes site-a
    within them, so the echo reaches it in that window whatever the machine's load)."""
    scenario.network()
    scenario.own_site("site-a")
    model = scenario.model("a")
    provider = scenario.provider("site-a", "pa", [model])
    scenario.wait_record("site-b", "site-a", provider)
    scenario.wait_record("site-c", "site-a", provider)
    # site-b's and site-c's state now carries site-a's record back to it
    site = scenario.mesh.site("site-a")
    local = [("site-a", site.backend)]

    def sites_and_clusters() -> list[tuple[Any, Any]]:
        rows = oracle.candidates_for(site.control.reconcile(scenario.net), model)
        return [(r.get("site"), r.get("cluster")) for r in rows]

    hold_for(sites_and_clusters, lambda rows: rows == local, seconds=2 * scenario.mesh.timing.probe_interval,
             what=f"only the local candidate site-a/{site.backend} while site-a's record echoes back",
             describe=lambda rows: f"candidates (site, cluster): {rows}")


@pytest.mark.conformance(id="MESH-REMOTE-REQUEST-SERVED", profile="mesh", level="core", feature="providerHop",
                         spec=f"{ARCH}#consumer-gateway-selection; provider hop over mTLS",
                         statements=["OC-MULTI-REMOTE-MTLS", "RG-INTRO-STEP-FORWARD", "OC-ORDERING-ENRICHMENT",
                                     "OC-FORWARD-AGN-CHOOSES-SITE"])
def test_request_at_a_is_served_by_the_backend_of_c(scenario: MeshScenario) -> None:
    """From site-a's rendered overlay, through its consumer gateway and the mTLS hop, to site-c's backend."""
    scenario.network()
    model = scenario.model("c")
    scenario.trust("site-a", "site-c")
    scenario.provider("site-c", "pc", [model])
    envelope = scenario.wait_envelope("site-a", lambda e: bool(oracle.from_site(e, model, "site-c")),
                                      what=f"site-c's candidate for {model}")
    candidate = oracle.from_site(envelope, model, "site-c")[0]
    gateway = scenario.hop_chain("site-a", "site-c", str(candidate["stable_id"]), model)
    backend = scenario.mesh.site("site-c").backend
    reply = poll_until(lambda: gateway.request(model), lambda r: r.status == 200, timeout=timeouts().remote_route,
                       what=f"site-a's gateway to answer {model}", describe=lambda r: r.describe())
    served = (reply.json or {}).get("agn", {}).get("backend") if isinstance(reply.json, dict) else None
    assert served == backend, f"expected {backend} of site-c to serve; body backend {served!r}, " \
                              f"header {reply.headers.get(BACKEND_HEADER)!r}"


@pytest.mark.conformance(id="MESH-TRUST-REVOKED-DEMOTES", profile="mesh", level="core", feature="eligibility",
                         spec=f"{ELIGIBILITY}: \"Active indicates control-plane eligibility: the operator has "
                              "verified the remote site’s certificate fingerprint against the configured trust "
                              "policy\"; only Active sites' records are routed",
                         statements=["OC-ELIGIBILITY-ACTIVE-MEANING", "OC-ELIGIBILITY-ACTIVE-ONLY",
                                     "OC-ELIGIBILITY-ACTIVE-AFTER-FINGERPRINT", "OC-ELIGIBILITY-GATE"])
def test_revoked_pin_takes_an_active_site_out_of_routing(scenario: MeshScenario) -> None:
    """site-c is Active and routed with the right pin; replacing the pin by another site's certificate takes
    it out, although site-c stays alive and reachable. The first half is the twin: the same site, the same
    records, admitted while the configured policy matches."""
    scenario.network()
    model = scenario.model("c")
    scenario.trust("site-a", "site-c")
    scenario.provider("site-c", "pc", [model])
    scenario.wait_gridsite("site-a", "site-c", lambda phase, _r: phase == "Active", what="Active with the right pin")
    scenario.wait_envelope("site-a", lambda e: bool(oracle.from_site(e, model, "site-c")),
                           what=f"site-c's candidate for {model} while its pin matches")
    scenario.trust("site-a", "site-c", pins=[scenario.mesh.site("site-b").gateway.server_digest])
    site = scenario.wait_gridsite("site-a", "site-c", _not_active,
                                  what="no longer Active once its pin is replaced by one that does not match")
    envelope = scenario.wait_envelope("site-a", lambda e: not oracle.from_site(e, model, "site-c"),
                                      what=f"site-c's candidate for {model} to leave the overlay "
                                           f"(GridSite status {site.get('status')})")
    assert oracle.candidates_for(envelope, model) == [], \
        f"only site-c serves {model}: {oracle.summary(oracle.candidates_for(envelope, model))}"


@pytest.mark.conformance(id="MESH-REMOTE-WEIGHT-CARRIED", profile="mesh", level="core", feature="gossip",
                         spec=f"{CRDT}; routing guide, weighted random: \"AGN copies it directly to the overlay's "
                              "relative traffic_weight; it does not normalize the value\"",
                         statements=["RG-WEIGHTED-COPIED-UNNORMALIZED", "OC-INPUTS-REMOTE-CRDT",
                                     "OC-INPUTS-SAME-SCORING-MODEL", "OC-FORMAT-CANDIDATE-FIELDS"])
def test_remote_provider_keeps_its_capacity_weight(scenario: MeshScenario) -> None:
    """Weighted random over static placement: site-c's provider (capacityWeight 7) reaches site-a's overlay
    with traffic_weight 7, as site-a's own provider (capacityWeight 3) does with 3."""
    scenario.network(selection="weightedRandom", static_placement=True)
    model = scenario.model("w")
    scenario.trust("site-a", "site-c")
    scenario.provider("site-c", "pc", [model], capacity_weight=7)
    scenario.provider("site-a", "pa", [model], capacity_weight=3)
    envelope = scenario.wait_envelope(
        "site-a", lambda e: bool(oracle.from_site(e, model, "site-c")) and bool(oracle.from_site(e, model, "site-a")),
        what=f"site-a's overlay to list {model} at site-a and at site-c")
    weights = {r.get("site"): r.get("traffic_weight") for r in oracle.candidates_for(envelope, model)}
    assert weights == {"site-a": 3, "site-c": 7}, \
        f"traffic_weight per site: {weights}; capacityWeight was 3 at site-a and 7 at site-c"


REMOTE_METRICS = (f"{ARCH}, Candidate scoring and ordering: \"Each provider is scored by scoring::score_backends "
                  "using the signal selected by GridNetwork.spec.scoringPolicy.strategy, optional live metrics, and "
                  "optional CRDT-propagated provider metrics.\"; Metrics and CRDT inputs: \"Both inputs are converted "
                  "into the same scoring model before overlay rendering.\"")


@pytest.mark.conformance(id="MESH-REMOTE-ONE-CANDIDATE-PER-PROVIDER", profile="mesh", level="core",
                         feature="gossip",
                         spec=f"{CRDT}; routing architecture, Multi-cluster model routing: \"The operator renders "
                              "one overlay candidate per routable model/provider pair.\"",
                         statements=["OC-MULTI-ONE-CANDIDATE-PER-PAIR", "OC-MULTI-CLUSTER-NAME",
                                     "OC-INPUTS-REMOTE-CRDT"])
def test_two_providers_of_one_model_at_a_remote_site_stay_two(scenario: MeshScenario) -> None:
    """site-c has two InferenceProviders of one model, each with its own clusterName; site-a (trusting
    site-c) lists two candidates for that model at site-c. Fails if records name the site rather than the
    provider, so the two collapse into one candidate elsewhere."""
    scenario.network()
    model = scenario.model("two")
    scenario.trust("site-a", "site-c")
    backend = scenario.mesh.site("site-c").backend
    scenario.provider("site-c", "pc1", [model])
    scenario.provider("site-c", "pc2", [model], cluster=f"{backend}-second")
    envelope = scenario.wait_envelope("site-a", lambda e: len(oracle.from_site(e, model, "site-c")) >= 2,
                                      what=f"two candidates for {model} at site-c, one per provider")
    rows = oracle.from_site(envelope, model, "site-c")
    assert len(rows) == 2, f"site-c's two providers of {model} at site-a: {oracle.summary(rows)}"


@pytest.mark.conformance(id="MESH-REMOTE-METRICS-SCORED", profile="mesh", level="core", feature="gossip",
                         spec=REMOTE_METRICS, statements=["OC-ORDERING-SCORE-BACKENDS"])
def test_remote_provider_is_ranked_by_the_metrics_its_site_measured(scenario: MeshScenario) -> None:
    """scoreFirst with queueDepth: site-c's provider at queue 1 of 10 ranks ahead of site-a's own at 4; once
    site-c measures 8 and site-a 6, site-a's order flips. A remote candidate scored neutral (0.5) would rank
    behind at first (0.6 locally) and ahead afterwards (0.4 locally): both orders are wrong for it. Fails if
    remote candidates are scored from anything but the record their own site wrote.
    """
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    model = scenario.model("q")
    scenario.trust("site-a", "site-c")
    scenario.provider("site-c", "pc", [model], queue=1)
    scenario.provider("site-a", "pa", [model], queue=4)

    def sites(envelope: dict[str, Any]) -> list[Any]:
        return [r.get("site") for r in oracle.candidates_for(envelope, model)]

    scenario.wait_envelope("site-a", lambda e: sites(e) == ["site-c", "site-a"], force=True,
                           what=f"site-a to rank site-c's {model} (queue 1) ahead of its own (queue 4)")
    scenario.set_queue("site-c", "pc", 8)
    scenario.set_queue("site-a", "pa", 6)
    scenario.wait_envelope("site-a", lambda e: sites(e) == ["site-a", "site-c"], force=True,
                           what=f"site-a to rank its own {model} (queue 6) ahead of site-c's (now queue 8)")


REMOTE_SANITISED = (f"{ARCH}, NaN and infinity: \"CRDT values are treated as absent when non-finite and then "
                    "defaulted/clamped in crdt_metrics_to_backend.\"; provider-scoring, Missing and Stale Metrics: "
                    "\"Ratio values received through remote state are clamped before scoring.\"")
#: site-c's raw queue (capacity 10) and the order site-a must publish: its own providers score 1.0 (queue 0),
#: 0.6 (queue 4) and 0.2 (queue 8); site-c's ratio clamped to 0 scores 1.0 (behind the same-site one on
#: locality), and a non-finite one is absent, so site-c scores the neutral 0.5.
SANITISED_ORDERS: dict[str, tuple[float | str, list[str]]] = {
    "negative": (-3, ["a0", "c", "a4", "a8"]),
    "nan": ("NaN", ["a0", "a4", "c", "a8"]),
    "infinite": ("+Inf", ["a0", "a4", "c", "a8"]),
}


@pytest.mark.conformance(id="MESH-REMOTE-RATIO-CLAMPED", profile="mesh", level="core", feature="gossip",
                         spec=REMOTE_SANITISED, statements=["PS-STALE-REMOTE-RATIO-CLAMPED", "OC-NAN-CRDT-ABSENT"])
@pytest.mark.parametrize("case", list(SANITISED_ORDERS))
def test_remote_ratios_are_sanitised_before_scoring(scenario: MeshScenario, case: str) -> None:
    """scoreFirst with queueDepth: site-c's provider exports a queue outside [0, 1] of capacity (-3 of 10) or a
    non-finite one, and site-a ranks it among three providers of its own at queue 0, 4 and 8. Clamped, -0.3
    is 0 (score 1.0, behind site-a's equal one); NaN and +Inf are absent (neutral 0.5, between 0.6 and 0.2).
    The site sending the record or the one receiving it may sanitise; the mesh runs one implementation, so
    this fails only if neither does: an unclamped -0.3 ranks site-c first (score 1.3), a non-finite value
    read as a number ranks it first (NaN as 0) or last (+Inf as a full queue).
    """
    raw, expected = SANITISED_ORDERS[case]
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    model = scenario.model("r")
    scenario.trust("site-a", "site-c")
    backend = scenario.mesh.site("site-a").backend
    local: dict[str, str] = {}  # site-a's cluster -> its provider's short name
    for short, queue in (("a0", 0), ("a4", 4), ("a8", 8)):
        local[f"{backend}-{short}"] = short
        scenario.provider("site-a", short, [model], queue=queue, cluster=f"{backend}-{short}")
    scenario.provider("site-c", "pc", [model], queue=raw)
    order = list(expected)

    def ranked(envelope: dict[str, Any]) -> list[Any]:
        """Each candidate by its provider: site-a's by their clusters, site-c's one (whatever cluster name
        its operator gives it) as "c"."""
        return ["c" if r.get("site") == "site-c" else local.get(str(r.get("cluster")), r.get("cluster"))
                for r in oracle.candidates_for(envelope, model)]

    envelope = scenario.wait_envelope("site-a", lambda e: len(ranked(e)) == 4, force=True,
                                      what=f"site-a to list its three providers of {model} and site-c's")
    scenario.wait_envelope("site-a", lambda e: ranked(e) == order, force=True,
                           what=f"site-a to rank {model} as {order} with site-c's queue {raw!r} sanitised "
                                f"(first rendered: {ranked(envelope)})")


TOOLS_PROPAGATE = ("routing-guide, Discovery and propagation: \"Tool provider state propagates to remote sites "
                   "through SWIM and CRDT state.\"; the GridSite gate of " + ELIGIBILITY)


def _tools(envelope: dict[str, Any] | None, site: str) -> list[Any]:
    """Names of the tool candidates hosted at `site` (the spec names no cluster for a tool candidate)."""
    return [r.get("name") for r in oracle.tools_from_site(envelope, site)]


@pytest.mark.conformance(id="MESH-TOOLS-PROPAGATE", profile="mesh", level="extended", feature="toolCandidates",
                         spec=TOOLS_PROPAGATE, statements=["RG-TOOLS-PROPAGATE"])
def test_remote_tool_provider_reaches_a_trusting_site(scenario: MeshScenario) -> None:
    """site-c's AgentToolProvider (discovered tool "search") reaches site-a, which trusts site-c, as an
    mcp_tool candidate at site-c. site-b holds site-c's records too but
    does not trust site-c: neither site-c's model nor its tool is in site-b's overlay. Fails if only
    InferenceProvider records are gossiped, or if remote tools skip the GridSite gate.
    """
    scenario.network()
    model = scenario.model("t")
    scenario.trust("site-a", "site-c")
    provider = scenario.provider("site-c", "pc", [model])
    scenario.tool_provider("site-c", "tc", ["search"])
    envelope = scenario.wait_envelope("site-a", lambda e: bool(_tools(e, "site-c")),
                                      what="site-a's overlay to list site-c's tool search")
    assert _tools(envelope, "site-c") == ["search"], \
        f"site-c's tools at site-a: {oracle.tools_from_site(envelope, 'site-c')}"
    _remote_ready(scenario, "site-b", "site-c", provider)
    at_b = scenario.mesh.site("site-b").control.reconcile(scenario.net)
    assert not _tools(at_b, "site-c") and not oracle.from_site(at_b, model, "site-c"), \
        f"site-b does not trust site-c, yet lists {oracle.summary(oracle.from_site(at_b, model, 'site-c'))} " \
        f"and tools {_tools(at_b, 'site-c')} from it"


@pytest.mark.conformance(id="MESH-TOOLS-DISTINCT-IDENTITY", profile="mesh", level="extended",
                         feature="toolCandidates",
                         spec="routing-guide, Discovery and propagation: \"Tool providers use a tool/ prefix in their "
                              "CRDT provider identity. This keeps an AgentToolProvider distinct from an "
                              "InferenceProvider with the same Kubernetes name.\"",
                         statements=["RG-TOOLS-DISTINCT-IDENTITY"])
def test_same_named_remote_tool_and_model_providers_both_arrive(scenario: MeshScenario) -> None:
    """site-c has an InferenceProvider and an AgentToolProvider both called x: site-a (trusting site-c) lists
    site-c's model and site-c's tool. Fails if the two share one record identity, so one replaces the other.
    """
    scenario.network()
    model = scenario.model("x")
    scenario.trust("site-a", "site-c")
    scenario.provider("site-c", "x", [model])
    scenario.tool_provider("site-c", "x", ["lookup"])
    envelope = scenario.wait_envelope(
        "site-a", lambda e: bool(_tools(e, "site-c")) and bool(oracle.from_site(e, model, "site-c")),
        what=f"site-a's overlay to list site-c's model {model} and its tool lookup")
    assert _tools(envelope, "site-c") == ["lookup"], f"site-c's tools at site-a: {_tools(envelope, 'site-c')}"


NO_SECRET_COPY = (f"{ARCH}, File-backed token source: \"In production, the same rule applies at the final-hop point: "
                  "mount the Secret only into the final-hop gateway or provider-side component that makes the final "
                  "backend call. AGN does not copy Secret values across clusters.\"")


@pytest.mark.conformance(id="MESH-SECRET-STAYS-HOME", profile="mesh", level="core", feature="gossip",
                         spec=NO_SECRET_COPY, statements=["OC-FILE-NO-CROSS-CLUSTER-COPY"])
def test_provider_token_never_leaves_its_site(scenario: MeshScenario) -> None:
    """site-c's provider authenticates with a bearer token from a Secret at site-c. Once site-a routes
    site-c's provider (so the record has crossed the mesh), the token is in nothing site-a's or site-b's
    operator wrote (overlays, status, mesh state, GridSites, log). Fails if provider records carry secret
    material to other sites.
    """
    scenario.network()
    model = scenario.model("s")
    token = "tok-" + secrets.token_urlsafe(24)
    secret = f"{scenario.tag}-creds"
    scenario.apply("site-c", resources.secret(secret, resources.DEFAULT_NAMESPACE, {"token": token}))
    scenario.trust("site-a", "site-c")
    scenario.provider("site-c", "pc", [model],
                      credential={"name": secret, "namespace": resources.DEFAULT_NAMESPACE, "key": "token"})
    scenario.wait_envelope("site-a", lambda e: bool(oracle.from_site(e, model, "site-c")),
                           what=f"site-a's overlay to list site-c's {model}")
    scenario.wait_record("site-b", "site-c", f"{scenario.tag}-pc")
    for at in ("site-a", "site-b"):
        texts = scenario.mesh.sites[at].control.written_texts()
        leaks = [name for name, text in texts.items() if token in text]
        assert not leaks, f"site-c's provider token reached {at}: {leaks}"
