"""Selection groups, admission states and selection modes, judged from what served each request."""

from __future__ import annotations

from typing import Any

import pytest

from harness import contract
from harness.grid import Gateway, Reply, Site
from harness.stats import assert_distribution, assert_round_robin, plan_distribution
from harness.suite_support import EMPTY_ACCEPTED
from harness.timeouts import timeouts
from harness.waiting import WaitTimeout, poll_until

GUIDE = "routing-guide"
#: The worker group of the tests that judge a distribution: thousands of requests each, which run best one after
#: another on one worker (harness.dealing).
LOAD = "load"
FILTER = "intelligent-route-filter: Selection"

ROUND_ROBIN = ("routing guide 3: \"Round robin takes equal turns among eligible providers inside the first viable "
               "selection group.\"")
GROUP_PER_CAPABILITY = ("overlay contract: \"selection_group is a zero-based, contiguous priority group for each "
                        "capability (the candidate\u2019s kind and name)\"")
FALLBACK_GROUPS = ("routing guide 1: \"Providers in lower-priority groups are fallback capacity and do not participate "
                   "while an earlier group remains viable.\"")
FIRST_VIABLE = ("intelligent-route-filter, Selection: \"New requests use the overlay\u2019s selection mode within the "
                "first viable producer-defined group.\"")
OMITTED_POLICY = "overlay contract: \"If selection_policy is omitted, Praxis uses deterministic selection.\""
DETERMINISTIC = ("routing guide 2: \"Deterministic mode selects the first provider after AGN has ordered the active "
                 "group.\"")
RELATIVE_WEIGHTS = ("overlay contract: \"traffic_weight is a relative weight for weightedRandom, not a percentage or a "
                    "score.\"")
EMPTY_ANY_MODE = ("intelligent-route-filter, Selection: \"A validated versioned overlay may have no candidates in any "
                  "selection mode; matching requests are rejected with HTTP 404.\"")


def _serve_all(gw: Gateway, model: str, n: int) -> list[str | None]:
    out = []
    for _ in range(n):
        reply = gw.request(model)
        assert reply.status == 200, reply.describe()
        out.append(reply.backend)
    return out


@pytest.mark.conformance(id="CONS-SEL-DETERMINISTIC-DEFAULT", profile="consumer", level="core",
                         feature="deterministic", spec=FILTER + ": missing policy uses deterministic first-admitted",
                         statements=["IR-SELECTION-MISSING-METADATA-DETERMINISTIC",
                                     "OC-FORMAT-SELECTION-POLICY-DEFAULT", "RG-NEED-SELECTION-POLICY-DEFAULT",
                                     "OC-CONSUMER-MATCH-PRE-RENDERED", "PS-BOUNDARY-PRAXIS-DURING-REQUEST",
                                     "OC-OVERVIEW-PRAXIS-LOCAL"])
def test_no_policy_serves_first_admitted(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, admission_state="existing_only"),
        site.candidate("provider-b", model),
        site.candidate("provider-c", model),
    ]), model)
    served = set(_serve_all(gw, model, 20))
    assert served == {"provider-b"}, f"first admitted candidate is provider-b; served {served}"


@pytest.mark.conformance(id="CONS-SEL-DETERMINISTIC", profile="consumer", level="core", feature="deterministic",
                         spec=GUIDE + " 2. Deterministic selection",
                         statements=["RG-DETERMINISTIC-FIRST", "RG-NEED-DETERMINISTIC",
                                     "RG-DETERMINISTIC-PRAXIS-FIRST", "OC-MULTI-FIRST-MATCHING",
                                     "OC-CONSUMER-MATCH-PRE-RENDERED", "OC-EDGE-IDENTICAL-ROUTE",
                                     "RG-INTRO-PRAXIS-LOCAL-CHOICE", "RG-LOADAWARE-MODE-STILL-PICKS",
                                     "RG-PROFILES-GEOGRAPHY-FIRST"])
def test_deterministic_mode_always_first_of_group(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-c", model, selection_group=0),
        site.candidate("provider-a", model, selection_group=0),
        site.candidate("provider-b", model, selection_group=1),
    ], mode="deterministic"), model)
    served = set(_serve_all(gw, model, 20))
    assert served == {"provider-c"}, f"deterministic must always pick provider-c; served {served}"


@pytest.mark.conformance(id="CONS-SEL-POLICY-WITHOUT-GROUPS", profile="consumer", level="core", feature="groups",
                         spec=FILTER + ": missing group metadata uses deterministic first-admitted ordering",
                         statements=["IR-SELECTION-MISSING-METADATA-DETERMINISTIC"])
def test_policy_without_groups_is_deterministic(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-b", model), site.candidate("provider-a", model)],
                             mode="roundRobin"), model)
    assert set(_serve_all(gw, model, 12)) == {"provider-b"}


@pytest.mark.conformance(id="CONS-SEL-GROUPS-WITHOUT-POLICY", profile="consumer", level="core",
                         feature="deterministic", spec=OMITTED_POLICY + "; " + DETERMINISTIC,
                         statements=["OC-FORMAT-SELECTION-POLICY-DEFAULT", "RG-NEED-SELECTION-POLICY-DEFAULT",
                                     "IR-SELECTION-MISSING-METADATA-DETERMINISTIC", "RG-DETERMINISTIC-FIRST",
                                     "OC-MULTI-FIRST-MATCHING"])
def test_groups_without_policy_are_deterministic(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0),
        site.candidate("provider-b", model, selection_group=0),
        site.candidate("provider-c", model, selection_group=1),
    ]), model)
    served = set(_serve_all(gw, model, 12))
    assert served == {"provider-a"}, (
        f"grouped candidates without a selection_policy are selected deterministically: always provider-a, the "
        f"first of group 0; served {sorted(b or '<none>' for b in served)}")


@pytest.mark.conformance(id="CONS-SEL-ROUND-ROBIN", profile="consumer", level="core", feature="roundRobin",
                         spec=GUIDE + " 3. Round-robin: rotates inside the active group only",
                         statements=["RG-RR-EQUAL-TURNS", "RG-RR-ACTIVE-GROUP-ONLY", "RG-RR-NO-FALLBACK-MIX",
                                     "RG-NEED-ROUND-ROBIN", "IR-SELECTION-FIRST-VIABLE-GROUP",
                                     "OC-FORMAT-FIRST-VIABLE-GROUP", "RG-GROUPS-LOWER-FALLBACK",
                                     "RG-FAILOVER-GROUP0-WHILE-ELIGIBLE", "RG-PROFILES-FIRST-VIABLE-ONLY",
                                     "RG-NOTMEAN-PICKER-FIRST-VIABLE", "RG-INTRO-MODE-INSIDE-GROUP",
                                     "RG-GROUPS-SAME-GROUP-SHARE", "OC-OVERVIEW-PRAXIS-LOCAL",
                                     "RG-INTRO-PRAXIS-LOCAL-CHOICE", "RG-INTRO-GROUPS-DECIDE-COMPETITION",
                                     "RG-GEO-LOCAL-ROTATE", "RG-GEO-REMOTE-FALLBACK",
                                     "RG-LOADAWARE-MODE-STILL-PICKS", "RG-PROFILES-GEOGRAPHY-FIRST",
                                     "RG-PROFILES-SCORE-FIRST", "RG-PROFILES-LOCAL-EVEN-RESULT",
                                     "RG-PROFILES-CROSS-SITE-RESULT"])
def test_round_robin_exact_cycle_never_touches_fallback(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0),
        site.candidate("provider-b", model, selection_group=0),
        site.candidate("provider-c", model, selection_group=0),
        site.candidate("provider-d", model, selection_group=1),
    ], mode="roundRobin"), model)
    sequence = [b or "<none>" for b in _serve_all(gw, model, 30)]
    assert_round_robin(sequence, {"provider-a", "provider-b", "provider-c"})


#: A site label no provider of the consumer grid uses: candidates carrying it are "remote" to the gateway.
REMOTE_SITE = "site-remote"


def _by_mode(test_id: str, feature: str, spec: str, statements: list[str], *, weighted: list[str],
             params: list[str | None] | None = None) -> list[Any]:
    """One parameter per (mode, *rest): the core modes under `test_id`, weightedRandom (an extended feature)
    under `test_id`-WEIGHTED with `weighted` statements, so a gateway that declines the mode is judged on the
    core modes alone."""
    out = []
    for mode in ("roundRobin", "random", "weightedRandom"):
        for rest in params or [None]:
            values = (mode,) if rest is None else (mode, rest)
            if mode == "weightedRandom":
                marker = pytest.mark.conformance(id=test_id + "-WEIGHTED", profile="consumer", level="extended",
                                                 feature="weightedRandom", spec=spec, statements=weighted)
            else:
                marker = pytest.mark.conformance(id=test_id, profile="consumer", level="core", feature=feature,
                                                 spec=spec, statements=statements)
            out.append(pytest.param(*values, marks=marker))
    return out


@pytest.mark.parametrize("mode", [p for p in _by_mode(
    "CONS-SEL-CROSS-SITE-GROUP", "groups",
    "routing-guide, 6. Score-first: equal selections across fresh, admitted providers of the active cross-site "
    "group; \"Praxis AI does not recompute source geography\"",
    ["RG-SCOREFIRST-EQUAL-ACROSS-SITES"], weighted=["RG-SCOREFIRST-EQUAL-ACROSS-SITES",
                                                     "RG-WEIGHTED-SCOREFIRST-SHARED-DRAW"])
    if p.values[0] != "random"])
def test_group_members_of_other_sites_compete_equally(gw: Gateway, site: Site, model: str, mode: str) -> None:
    """One group holding a remote candidate first and a local one second: the site plays no part.

    roundRobin: the exact cycle over both. weightedRandom: remote weight 1000, local 1, so
    remote serves at least 25 of 30 requests; a correct gateway fails that with probability below 1e-9,
    one that prefers its own site passes it never. Fails if the gateway re-applies locality inside the
    group (local first, or local only).
    """
    weights = {"traffic_weight": 1000}, {"traffic_weight": 1}
    remote = site.candidate("provider-a", model, selection_group=0, **(weights[0] if mode != "roundRobin" else {}))
    remote["site"] = REMOTE_SITE
    local = site.candidate("provider-b", model, selection_group=0, **(weights[1] if mode != "roundRobin" else {}))
    assert local["site"] == site.scope.local_site, "the second candidate is hosted at the gateway's own site"
    gw.publish(site.envelope([remote, local], mode=mode), model)
    served = _serve_all(gw, model, 30)
    if mode == "roundRobin":
        assert_round_robin([b or "<none>" for b in served], {"provider-a", "provider-b"})
    else:
        assert served.count("provider-a") >= 25, f"remote (weight 1000) served {served.count('provider-a')} of 30"


#: provider-a's hold in the concurrent round-robin test: long enough for requests to pile up on it.
SLOW_MS = 300


@pytest.mark.conformance(id="CONS-SEL-ROUND-ROBIN-CONCURRENT", profile="consumer", level="core",
                         feature="roundRobin",
                         spec="routing-guide, 3. Round-robin selection: \"It balances request selections, not token "
                              "count, request cost, latency, or concurrent work.\"",
                         statements=["RG-RR-BALANCES-SELECTIONS"])
def test_round_robin_counts_turns_not_load(gw: Gateway, site: Site, model: str) -> None:
    """Two members, provider-a slow (300 ms), 16 requests 8 at a time: exactly 8 each.

    Sixteen consecutive selections of a two-member rotation give each member eight, however the requests
    overlap. Fails if roundRobin is a least-request, latency-aware or power-of-two balancer, which gives the
    slow member fewer turns.
    """
    gw.publish(site.envelope([site.candidate("provider-a", model, selection_group=0),
                              site.candidate("provider-b", model, selection_group=0)], mode="roundRobin"), model)
    site.set_backend_latency("provider-a", SLOW_MS)
    try:
        tally = gw.send(model, 16, concurrency=8)
    finally:
        site.set_backend_latency("provider-a", 0)
    assert tally.statuses == {200: 16}, tally.describe()
    assert dict(tally.backends) == {"provider-a": 8, "provider-b": 8}, tally.describe()


@pytest.mark.conformance(id="CONS-SEL-ROUND-ROBIN-FALLBACK", profile="consumer", level="core", feature="roundRobin",
                         spec=GUIDE + " 3. Round robin in the first viable group",
                         statements=["RG-RR-EQUAL-TURNS", "RG-RR-NO-FALLBACK-MIX", "RG-FAILOVER-FALL-THROUGH",
                                     "RG-INTRO-STEP-FIRST-VIABLE", "RG-INTRO-STEP-MODE",
                                     "IR-SELECTION-FIRST-VIABLE-GROUP", "OC-FORMAT-FIRST-VIABLE-GROUP",
                                     "RG-GEO-REMOTE-FALLBACK", "RG-PROFILES-GEOGRAPHY-FIRST",
                                     "RG-PROFILES-LOCAL-EVEN-RESULT"])
def test_round_robin_in_first_viable_group(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="existing_only"),
        site.candidate("provider-b", model, selection_group=1),
        site.candidate("provider-c", model, selection_group=1),
        site.candidate("provider-d", model, selection_group=2),
    ], mode="roundRobin"), model)
    sequence = [b or "<none>" for b in _serve_all(gw, model, 20)]
    assert_round_robin(sequence, {"provider-b", "provider-c"})


@pytest.mark.conformance(id="CONS-SEL-ROUND-ROBIN-PER-CAPABILITY", profile="consumer", level="core",
                         feature="roundRobin", spec=ROUND_ROBIN + "; " + GROUP_PER_CAPABILITY,
                         statements=["RG-RR-EQUAL-TURNS", "RG-GEO-LOCAL-ROTATE"])
def test_round_robin_turns_are_per_capability(gw: Gateway, site: Site, model: str) -> None:
    """Groups belong to a capability, so do their turns: requests for two models, interleaved, rotate each."""
    other = model + "-other"
    members = ("provider-a", "provider-b")
    gw.publish(site.envelope([site.candidate(p, name, selection_group=0) for name in (model, other) for p in members],
                             mode="roundRobin"), model)
    sequences: dict[str, list[str]] = {model: [], other: []}
    for _ in range(6):
        for name, sequence in sequences.items():
            reply = gw.request(name)
            assert reply.status == 200, reply.describe()
            sequence.append(reply.backend or "<none>")
    for name, sequence in sequences.items():
        try:
            assert_round_robin(sequence, set(members))
        except AssertionError as exc:
            raise AssertionError(f"model {name}, its requests interleaved with the other model's: {exc}") from None


LOCAL_TURNS = ("routing-guide, 3. Round-robin selection: \"Each Praxis gateway maintains its own local round-robin "
               "state; gateways do not coordinate a global cursor.\"")


@pytest.mark.conformance(id="CONS-SEL-ROUND-ROBIN-PER-GATEWAY", profile="consumer", level="core",
                         feature="roundRobin", spec=LOCAL_TURNS,
                         statements=["RG-RR-LOCAL-STATE", "RG-RR-NOT-GRID-WIDE"])
def test_each_gateway_keeps_its_own_round_robin_turns(gw: Gateway, site: Site, model: str,
                                                      fresh_gateway: Any) -> None:
    """Two gateways on one two-member roundRobin overlay, requests alternating between them: each
    gateway's own sequence is an exact rotation. A cursor shared between gateways gives each of them one
    member every time. The one-gateway rotation (CONS-SEL-ROUND-ROBIN) is the twin."""
    doc = site.envelope([site.candidate("provider-a", model, selection_group=0),
                         site.candidate("provider-b", model, selection_group=0)], mode="roundRobin")
    gw.publish(doc, model)
    gateways = {"the shared gateway": gw, "a second gateway": fresh_gateway("core", contract.encode(doc))}
    sequences: dict[str, list[str]] = {name: [] for name in gateways}
    for _ in range(12):
        for name, gateway in gateways.items():
            reply = gateway.request(model)
            assert reply.status == 200, f"{name}: {reply.describe()}"
            sequences[name].append(reply.backend or "<none>")
    for name, sequence in sequences.items():
        try:
            assert_round_robin(sequence, {"provider-a", "provider-b"})
        except AssertionError as exc:
            raise AssertionError(f"{name}, its requests alternating with the other gateway's: {exc}") from None


NO_REQUEST_TIME_LOOKUP = ("routing-guide, AI Grid Network Routing Guide: \"AGN, Kubernetes, Prometheus, and EPP are "
                          "not consulted synchronously for every request.\"; 2. Deterministic selection: \"Praxis does "
                          "not query EPP during the request.\"")
#: Requests the no-lookup test sends; a per-request lookup scrapes at least once for each.
LOOKUP_REQUESTS = 40


@pytest.mark.conformance(id="CONS-SEL-NO-REQUEST-TIME-METRICS", profile="consumer", level="core",
                         feature="deterministic",
                         spec=NO_REQUEST_TIME_LOOKUP,
                         statements=["RG-INTRO-NO-SYNC-CONSULT", "RG-DETERMINISTIC-NO-EPP-QUERY"])
@pytest.mark.parametrize("mode", ["deterministic", "roundRobin"])
def test_selection_never_scrapes_the_backends_per_request(gw: Gateway, site: Site, model: str, mode: str) -> None:
    """Forty sequential requests on a two-candidate overlay, all served: the candidates' EPP /metrics
    endpoints (the fake backends export them) are asked fewer than twenty times in all meanwhile.

    No operator runs in this profile, so every scrape comes from the gateway. A background poll is allowed;
    a gateway that looks up load during each request scrapes at least forty times. Fails if selection
    queries the candidates' metrics before forwarding.
    """
    members = ("provider-a", "provider-b")
    gw.publish(site.envelope([site.candidate(p, model, selection_group=0) for p in members], mode=mode), model)
    before = {name: site.backend_metrics_requests(name) for name in site.providers}
    served = _serve_all(gw, model, LOOKUP_REQUESTS)
    after = {name: site.backend_metrics_requests(name) for name in site.providers}
    grown = {name: after[name] - before[name] for name in after if after[name] != before[name]}
    assert set(served) == ({"provider-a"} if mode == "deterministic" else set(members)), served
    assert sum(grown.values()) < LOOKUP_REQUESTS // 2, (
        f"{LOOKUP_REQUESTS} {mode} requests made the backends' /metrics answer {grown}: a lookup per request")


@pytest.mark.conformance(id="CONS-SEL-RANDOM", profile="consumer", level="core", feature="random",
                         spec=GUIDE + " 4. Random: uniform among the active group",
                         statements=["RG-RANDOM-UNIFORM", "RG-RANDOM-EQUAL-PROBABILITY", "RG-NEED-RANDOM",
                                     "IR-SELECTION-FIRST-VIABLE-GROUP", "OC-FORMAT-FIRST-VIABLE-GROUP",
                                     "RG-GROUPS-LOWER-FALLBACK", "RG-FAILOVER-GROUP0-WHILE-ELIGIBLE",
                                     "RG-PROFILES-FIRST-VIABLE-ONLY", "RG-NOTMEAN-PICKER-FIRST-VIABLE",
                                     "RG-INTRO-MODE-INSIDE-GROUP", "RG-GROUPS-SAME-GROUP-SHARE",
                                     "RG-INTRO-GROUPS-DECIDE-COMPETITION", "RG-LOADAWARE-MODE-STILL-PICKS",
                                     "RG-PROFILES-GEOGRAPHY-FIRST", "RG-PROFILES-SCORE-FIRST"])
@pytest.mark.xdist_group(LOAD)
def test_random_is_uniform_within_group(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0),
        site.candidate("provider-b", model, selection_group=0),
        site.candidate("provider-c", model, selection_group=0),
        site.candidate("provider-d", model, selection_group=1),
    ], mode="random"), model)
    plan = plan_distribution({"provider-a": 1 / 3, "provider-b": 1 / 3, "provider-c": 1 / 3, "provider-d": 0.0})
    print(plan.describe())
    tally = gw.send(model, plan.sample_size, concurrency=16)
    assert tally.statuses == {200: plan.sample_size}, tally.describe()
    assert_distribution(tally.backends, plan)


WEIGHTS = {
    "50-30-20": {"provider-a": 50, "provider-b": 30, "provider-c": 20},
    "70-30": {"provider-a": 70, "provider-b": 30},
    "1-1-1": {"provider-a": 1, "provider-b": 1, "provider-c": 1},
    "1000-100": {"provider-a": 1000, "provider-b": 100},  # relative weights, not percentages: 10/11 and 1/11
}


@pytest.mark.conformance(id="CONS-SEL-WEIGHTED", profile="consumer", level="extended", feature="weightedRandom",
                         spec=GUIDE + " 5. Weighted-random: weights apply only within the first viable group; "
                         + RELATIVE_WEIGHTS,
                         statements=["RG-WEIGHTED-RELATIVE-IN-GROUP", "RG-NEED-WEIGHTED",
                                     "IR-SELECTION-WEIGHTS-FIRST-GROUP-ONLY", "RG-GROUPS-WEIGHTS-FIRST-VIABLE-ONLY",
                                     "RG-GROUPS-WEIGHTS-NOT-ACROSS", "OC-FORMAT-TRAFFIC-WEIGHT-RELATIVE",
                                     "RG-WEIGHTED-NOT-PERCENTAGES", "RG-WEIGHTED-EXPECTED-DISTRIBUTION",
                                     "RG-NOTMEAN-WEIGHTS-PROPORTIONAL", "IR-SELECTION-FIRST-VIABLE-GROUP",
                                     "OC-FORMAT-FIRST-VIABLE-GROUP", "RG-GROUPS-LOWER-FALLBACK",
                                     "RG-FAILOVER-GROUP0-WHILE-ELIGIBLE", "RG-PROFILES-FIRST-VIABLE-ONLY",
                                     "RG-NOTMEAN-PICKER-FIRST-VIABLE", "RG-INTRO-MODE-INSIDE-GROUP",
                                     "RG-GROUPS-SAME-GROUP-SHARE", "RG-WEIGHTED-GEO-REMOTE-FALLBACK",
                                     "RG-SCORES-NOT-WEIGHTS", "RG-PROFILES-GEOGRAPHY-FIRST",
                                     "RG-PROFILES-SCORE-FIRST"])
@pytest.mark.parametrize("weights", list(WEIGHTS), ids=list(WEIGHTS))
@pytest.mark.xdist_group(LOAD)
def test_weighted_random_shares_within_group(gw: Gateway, site: Site, model: str, weights: str) -> None:
    chosen = WEIGHTS[weights]
    candidates = [site.candidate(p, model, selection_group=0, traffic_weight=w) for p, w in chosen.items()]
    candidates.append(site.candidate("provider-d", model, selection_group=1, traffic_weight=1000))
    gw.publish(site.envelope(candidates, mode="weightedRandom"), model)
    total = sum(chosen.values())
    expected = {p: w / total for p, w in chosen.items()}
    expected["provider-d"] = 0.0
    plan = plan_distribution(expected)
    print(plan.describe())
    tally = gw.send(model, plan.sample_size, concurrency=16)
    assert tally.statuses == {200: plan.sample_size}, tally.describe()
    assert_distribution(tally.backends, plan)


@pytest.mark.conformance(id="CONS-GROUP-FALLBACK-EXISTING-ONLY", profile="consumer", level="core", feature="groups",
                         spec=GUIDE + " 1. Selection groups; 9. Admission and failover",
                         statements=["RG-FAILOVER-FALL-THROUGH", "IR-SELECTION-FIRST-VIABLE-GROUP",
                                     "OC-FORMAT-FIRST-VIABLE-GROUP", "RG-PROFILES-FIRST-VIABLE-ONLY",
                                     "RG-NOTMEAN-PICKER-FIRST-VIABLE", "PS-BOUNDARY-PRAXIS-DURING-REQUEST",
                                     "OC-API-FALLBACK-SELECTED"])
def test_group_without_new_work_falls_back(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="existing_only"),
        site.candidate("provider-b", model, selection_group=0, admission_state="existing_only"),
        site.candidate("provider-c", model, selection_group=1),
    ], mode="deterministic"), model)
    assert set(_serve_all(gw, model, 10)) == {"provider-c"}


@pytest.mark.conformance(id="CONS-GROUP-FALLBACK-NO-RETRY", profile="consumer", level="core", feature="groups",
                         spec=GUIDE + " 9. Admission and failover: \"Group fallback does not imply automatic retry of "
                              "a request already sent upstream; retry behavior must be configured separately.\"",
                         statements=["RG-FAILOVER-NO-AUTO-RETRY"])
def test_failed_upstream_answer_is_not_retried_elsewhere(gw: Gateway, site: Site, model: str) -> None:
    """provider-a (group 0) answers 503: the client gets that answer, provider-a saw the request once and
    provider-b (group 1) not at all. The twin: once provider-a answers again, the same request is served."""
    gw.publish(site.envelope([site.candidate("provider-a", model, selection_group=0),
                              site.candidate("provider-b", model, selection_group=1)]), model)
    before = {p: site.backend_requests(p) for p in ("provider-a", "provider-b")}
    site.set_backend_error("provider-a", 503)
    try:
        failed = gw.request(model)
    finally:
        site.set_backend_error("provider-a", None)
    after = {p: site.backend_requests(p) for p in ("provider-a", "provider-b")}
    sent = {p: after[p] - before[p] for p in after}
    assert sent == {"provider-a": 1, "provider-b": 0}, \
        f"the request was sent upstream once, to provider-a; requests each provider saw: {sent} " \
        f"(the client got {failed.describe()})"
    assert not 200 <= failed.status < 300, f"provider-a's failure reaches the client: {failed.describe()}"
    served = gw.request(model)
    assert served.status == 200 and served.backend == "provider-a", f"the twin is served: {served.describe()}"


@pytest.mark.conformance(id="CONS-GROUP-FALLBACK-DEEP", profile="consumer", level="core", feature="groups",
                         spec=FALLBACK_GROUPS + "; " + FIRST_VIABLE,
                         statements=["RG-FAILOVER-FALL-THROUGH", "RG-INTRO-STEP-FIRST-VIABLE", "RG-GROUPS-BOUNDARY",
                                     "RG-NOTMEAN-GROUPS-BOUNDARIES", "IR-SELECTION-FIRST-VIABLE-GROUP",
                                     "OC-FORMAT-FIRST-VIABLE-GROUP", "OC-API-FALLBACK-SELECTED"])
def test_fallback_passes_every_group_without_new_work(gw: Gateway, site: Site, model: str) -> None:
    """The first viable group may come after several that take no new work, not only after one."""
    other = model + "-other"
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="none"),
        site.candidate("provider-b", model, selection_group=1, admission_state="existing_only"),
        site.candidate("provider-c", model, selection_group=2),
        site.candidate("provider-d", other, selection_group=0),
    ], mode="deterministic"), other)
    replies = [gw.request(model) for _ in range(10)]
    assert all(r.status == 200 and r.backend == "provider-c" for r in replies), (
        "groups 0 (none) and 1 (existing_only) take no new work, so group 2's provider-c serves every new request; "
        f"got {[r.describe() for r in replies[:3]]}")


@pytest.mark.conformance(id="CONS-GROUP-FALLBACK-NONE", profile="consumer", level="core", feature="admission",
                         spec=FILTER + ": admission_state=none is never eligible",
                         statements=["IR-SELECTION-NONE-NEVER-ELIGIBLE", "RG-ADMISSION-NONE",
                                     "RG-FAILOVER-FALL-THROUGH", "IR-SELECTION-FIRST-VIABLE-GROUP",
                                     "OC-FORMAT-FIRST-VIABLE-GROUP", "OC-API-FALLBACK-SELECTED"])
def test_excluded_group_falls_back(gw: Gateway, site: Site, model: str) -> None:
    gw.publish(site.envelope([
        site.candidate("provider-a", model, selection_group=0, admission_state="none"),
        site.candidate("provider-d", model, selection_group=1),
    ], mode="roundRobin"), model)
    assert set(_serve_all(gw, model, 10)) == {"provider-d"}


@pytest.mark.parametrize(("mode", "state"), [p for p in _by_mode(
    "CONS-ADMISSION-DRAWS-SKIP-INELIGIBLE", "admission",
    "routing-guide, 9. Admission and failover: \"Admission is a harder boundary than score or weight.\" \"Neither a "
    "high score nor a high static weight can make an excluded provider eligible.\"; 4. Random selection: groups first",
    ["RG-ADMISSION-HARDER-BOUNDARY", "RG-ADMISSION-EXCLUDED-NEVER-ELIGIBLE", "RG-RANDOM-GROUPS-FIRST"],
    weighted=["RG-ADMISSION-HARDER-BOUNDARY", "RG-ADMISSION-EXCLUDED-NEVER-ELIGIBLE"],
    params=["none", "existing_only"]) if p.values[0] != "roundRobin"])
def test_drawing_modes_skip_a_group_without_new_work(gw: Gateway, site: Site, model: str, mode: str,
                                                    state: str) -> None:
    """Group 0 holds two `state` candidates (weight 1000 each), group 1 two admitted ones (weight 1 each).

    Every new request without a session goes to group 1. A draw that lets group 0's members in picks one of
    them with probability at least 1/2 per request (1 when group 0 is taken as the viable group), so a
    broken gateway sends all 20 requests to group 1 with probability under 1e-6. Fails if a drawing mode
    treats a group as viable before the admission filter, or lets a weight outrank admission.
    """
    weighted = mode == "weightedRandom"

    def member(provider: str, group: int, weight: int, **extra: str) -> dict[str, object]:
        return site.candidate(provider, model, selection_group=group,
                              **({"traffic_weight": weight} if weighted else {}), **extra)

    gw.publish(site.envelope([member("provider-a", 0, 1000, admission_state=state),
                              member("provider-c", 0, 1000, admission_state=state),
                              member("provider-b", 1, 1), member("provider-d", 1, 1)], mode=mode), model)
    served = _serve_all(gw, model, 20)
    seen = sorted(str(backend) for backend in set(served))
    assert set(served) <= {"provider-b", "provider-d"}, f"{mode}, group 0 {state}: served {seen}"


STALE = ("routing-architecture-and-overlay-contract, Stale candidate retention: \"if no healthy candidate exists "
         "for a model, a stale candidate is better than a hard 404.\"")


@pytest.mark.conformance(id="CONS-STALE-LAST-RESORT", profile="consumer", level="core", feature="admission",
                         spec=STALE, statements=["OC-STALE-LAST-RESORT"])
def test_stale_candidate_is_served_when_it_is_the_only_one(gw: Gateway, site: Site, model: str) -> None:
    """A model whose only candidate is `fresh: false` (admitted) is served by it, not refused."""
    gw.publish(site.envelope([site.candidate("provider-a", model, fresh=False)]), model)
    reply = gw.request(model)
    assert reply.status == 200 and reply.backend == "provider-a", \
        f"the stale candidate is the last resort, better than a 404: {reply.describe()}"


@pytest.mark.conformance(id="CONS-STALE-PRODUCER-ORDER", profile="consumer", level="core", feature="admission",
                         spec="intelligent-route-filter, Selection: \"Praxis AI does not recompute source geography, "
                              "load, or score.\"; " + STALE,
                         statements=["IR-SELECTION-NO-RECOMPUTE", "OC-LOCALITY-REQUEST-TIME-PRESORTED",
                                     "OC-OVERVIEW-PRAXIS-LOCAL", "OC-CONSUMER-NO-CALLS-NO-RESCORE"])
def test_consumer_keeps_the_producer_order_of_stale_candidates(gw: Gateway, site: Site, model: str) -> None:
    """The producer put a stale candidate first (it orders freshness, the consumer does not): without groups
    the first admitted candidate, the stale one, serves."""
    gw.publish(site.envelope([site.candidate("provider-a", model, fresh=False), site.candidate("provider-b", model)]),
               model)
    replies = [gw.request(model) for _ in range(3)]
    assert {r.backend for r in replies} == {"provider-a"}, \
        f"the consumer selects in the producer's order: {[r.describe() for r in replies]}"


@pytest.mark.conformance(id="CONS-ADMISSION-NONE-NEVER", profile="consumer", level="core", feature="admission",
                         spec=FILTER + ": admission_state=none is never eligible",
                         statements=["IR-SELECTION-NONE-NEVER-ELIGIBLE", "RG-ADMISSION-NONE",
                                     "RG-ADMISSION-NONE-IN-CONTRACT", "PS-BOUNDARY-PRAXIS-DURING-REQUEST"])
def test_only_excluded_candidates_give_404(gw: Gateway, site: Site, model: str) -> None:
    other = model + "-other"
    doc = site.envelope([
        site.candidate("provider-a", model, admission_state="none"),
        site.candidate("provider-b", other),
    ])
    gw.publish(doc, other)
    reply = gw.request(model)
    assert reply.status == 404 and reply.backend is None, f"no eligible candidate must give 404; got {reply.describe()}"
    twin = site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", other)])
    gw.publish(twin, model)
    assert gw.request(model).backend == "provider-a", "the same candidate admitted is routed"


@pytest.mark.conformance(id="CONS-ADMISSION-EXISTING-ONLY-NEW", profile="consumer", level="core", feature="admission",
                         spec=FILTER + ": existing_only is eligible only through an already-bound session",
                         statements=["IR-SELECTION-EXISTING-ONLY-AFFINITY", "RG-ADMISSION-NEW-AND-EXISTING"])
def test_existing_only_never_takes_new_requests(gw: Gateway, site: Site, model: str) -> None:
    other = model + "-other"
    gw.publish(site.envelope([
        site.candidate("provider-a", model, admission_state="existing_only"),
        site.candidate("provider-b", model, admission_state="existing_only"),
        site.candidate("provider-c", other),
    ]), other)
    for reply in (gw.request(model), gw.request(model, headers={"x-session-id": f"fresh-{model}"})):
        assert reply.status == 404, f"existing_only must not take new work; got {reply.describe()}"
    twin = site.envelope([site.candidate("provider-a", model), site.candidate("provider-b", model,
                                                                            admission_state="existing_only"),
                          site.candidate("provider-c", other)])
    gw.publish(twin, model)
    assert gw.request(model).backend == "provider-a", "the same candidate admitted for new work takes it"


@pytest.mark.conformance(id="CONS-404-EMPTY-EVERY-MODE", profile="consumer", level="core", feature="requestErrors",
                         spec=EMPTY_ANY_MODE,
                         statements=["IR-SELECTION-EMPTY-OVERLAY-404", "IR-ENVELOPE-LIFECYCLE-SERVING"])
@pytest.mark.parametrize("mode", ["deterministic", "roundRobin", "random"])
def test_empty_overlay_in_every_mode_gives_404(gw: Gateway, site: Site, model: str, mode: str) -> None:
    gw.publish(site.envelope([site.candidate("provider-a", model, selection_group=0)], mode=mode), model)
    gw.write_overlay(site.envelope([], mode=mode))
    try:
        reply = poll_until(lambda: gw.request(model), lambda r: r.status != 200,
                           what=f"the empty {mode} overlay to replace the one serving {model}",
                           timeout=timeouts().reload,
                           describe=Reply.describe)
    except WaitTimeout as exc:
        raise WaitTimeout(f"{EMPTY_ACCEPTED}\n{exc}\n{gw.overlay_log()}") from None
    assert reply.status == 404 and reply.backend is None, (
        f"an overlay with no candidates and selection mode {mode} rejects the model with 404; got {reply.describe()}")
