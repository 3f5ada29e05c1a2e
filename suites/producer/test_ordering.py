"""Producer conformance: candidate ordering, selection groups, ranks, exclusion, access policy and tool candidates.

Every expected order below is written from the spec's ordering table:

* geographyFirst (default): admission, locality, freshness, score descending, tie-break (site, name, cluster);
* scoreFirst: admission, freshness, score descending, locality, tie-break (site, name, cluster).

Scores come from queue depth (queueCapacity 10, so score = 1 - q/10); q/10 stays below 0.85 for providers that
must stay new_and_existing, and q=9 makes a provider existing_only. Values are chosen so that each plausible
wrong rule (locality before admission, freshness ignored, score splitting groups, reversed tie-break, zone
compared without region) yields a different order or partition than the one asserted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from harness import producer_oracle as oracle
from harness import resources
from harness.producer_support import Scenario
from harness.timeouts import timeouts
from harness.waiting import poll_until

ORDERING = "routing-architecture-and-overlay-contract#candidate-scoring-and-ordering"
LOCALITY = "routing-architecture-and-overlay-contract#locality-tier-derivation"
CANDIDATE_FIELDS = "routing-architecture-and-overlay-contract#candidate-fields"
ACCESS = "routing-guide#agent-tool-discovery-overlays; access policy (siteSelector.matchLabels)"
TOOLS = "routing-guide#agent-tool-discovery-overlays"
ZONE_NEEDS_REGION = (f"{LOCALITY}: \"Zone comparison requires a region match because zone names are not globally "
                     "unique.\"; routing-guide#geographyfirst-local-first-selection-groups: \"Groups are separated "
                     "by admission state, locality tier, and freshness\"")
RANKS_AFTER_DEDUP = (f"{ORDERING}: \"The deterministic tie-break is (site, name, cluster). After deduplication, "
                     "each candidate receives a zero-based rank.\"")
TOOLS_ALLOWLIST = (f"{TOOLS}, Tool allowlist: \"When both spec.tools and status.discoveredTools are non-empty, "
                   "spec.tools acts as an allowlist. Only discovered names present in spec.tools enter the overlay. "
                   "An empty spec.tools exposes all discovered tools.\"")
TOOLS_UNAVAILABLE = (f"{TOOLS}: \"Tool candidates do not receive inference metrics, queue-depth scores, or capacity "
                     "weighting. Unavailable providers are excluded from overlays.\"")
TOOLS_ACCESS = (f"{TOOLS}, Access policy: \"Tool providers use the same accessPolicy.siteSelector.matchLabels "
                "mechanism as inference providers.\"")
TOOLS_ACCESS_UNKNOWN = (f"{TOOLS}, Access policy: \"If the consumer site identity is unknown and matchLabels is "
                        "non-empty, evaluation fails closed and excludes the provider.\"")
POLICIES = ["geographyFirst", "scoreFirst"]


# --------------------------------------------------------------------------------------------------- helpers


def _geography(scenario: Scenario, sites: Mapping[str, tuple[str, str]]) -> None:
    """GridSites for the local site "a" (r1/z1) and every other short site name given as (region, zone)."""
    scenario.grid_site("a", region="r1", zone="z1")
    for short, (region, zone) in sites.items():
        scenario.grid_site(short, region=region, zone=zone)


def _metered(scenario: Scenario, short: str, queue: float, *, site: str | None = None, healthy: float = 1,
             models: tuple[str, ...] | None = None, phase: str | None = None) -> str:
    """A provider scraped for queue depth (capacity 10); metrics are set before the provider is applied."""
    scenario.set_metrics(short, queueDepth=queue, kvCacheUtilization=0.2, healthy=healthy)
    return scenario.provider(short, site=site, metrics=True, models=models, phase=phase)


def _render(scenario: Scenario, present: Iterable[str], *, model: str | None = None, force: bool = False,
            what: str | None = None) -> dict[str, Any]:
    """Wait until every cluster in `present` is a candidate; order and the rest are then asserted exactly."""
    wanted = set(present)
    return scenario.envelope(until=lambda env: wanted <= set(oracle.names(env, model)), force=force,
                             what=what or f"candidates {sorted(wanted)}")


def _tiers(env: Mapping[str, Any]) -> dict[str, str]:
    return {cluster: str(c.get("selection_tier")) for cluster, c in oracle.by_cluster(env).items()}


def _tools(env: Mapping[str, Any]) -> set[str]:
    """The tool names of the mcp_tool candidates. Each test gives every tool provider tools of its own: the
    spec names no cluster for a tool candidate, so the tool name is what tells the providers apart."""
    return {str(c.get("name")) for c in oracle.candidates(env, kind="mcp_tool")}


def _assert_groups_valid(env: Mapping[str, Any]) -> None:
    oracle.require(oracle.group_problems(env), "selection groups and ranks")


# ------------------------------------------------------------------------------------------------- ordering


@pytest.mark.conformance(id="PROD-ORD-GEO-TIERS", profile="producer", level="core", feature="ordering",
                         spec=LOCALITY,
                         statements=["OC-ORDERING-GEOGRAPHY-FIRST-DEFAULT", "RG-GEO-TIERS", "OC-LOCALITY-DERIVED",
                                     "OC-ORDERING-BEFORE-WRITE", "OC-RERANKING-LIST-ELIGIBLE",
                                     "OC-ORDERING-TWO-PHASES", "OC-ORDERING-ENRICHMENT",
                                     "OC-ORDERING-GEOGRAPHY-FIRST-KEYS", "RG-GEO-ORDER-KEYS",
                                     "RG-GEO-REMOTE-FALLBACK", "RG-PROFILES-GEOGRAPHY-FIRST"])
def test_geography_first_orders_by_locality_tier(scenario: Scenario) -> None:
    """Default routing (geographyFirst) puts same site, same zone, same region, cross region, unknown in that order,
    each its own group.

    Scores rise as locality worsens, so score-first ordering gives the exact reverse. Fails if the default is not
    geographyFirst, if tiers are derived wrongly, or if score outranks locality. The tiers' field values are
    judged by PROD-ORD-TIER-NAMES (the spec names only the unknown tier).
    """
    _tier_ladder(scenario)
    env = _render(scenario, ["a1", "b1", "c1", "d1", "e1"])
    assert _tiers(env)["e1"] == "unknown", f"a site without geography is the unknown tier: {_tiers(env)}"
    assert oracle.names(env) == ["a1", "b1", "c1", "d1", "e1"]
    assert oracle.groups(env, scenario.model) == [["a1"], ["b1"], ["c1"], ["d1"], ["e1"]]
    _assert_groups_valid(env)


def _tier_ladder(scenario: Scenario) -> None:
    """Providers a1..e1 at the same site, same zone, same region, another region and a site without geography,
    their scores rising as locality worsens; default routing."""
    _geography(scenario, {"b": ("r1", "z1"), "c": ("r1", "z2"), "d": ("r2", "z1")})
    _metered(scenario, "a1", 8)
    _metered(scenario, "b1", 6, site="b")
    _metered(scenario, "c1", 4, site="c")
    _metered(scenario, "d1", 2, site="d")
    _metered(scenario, "e1", 0, site="e")  # site "e" has no GridSite: no geography
    scenario.network(scoring="queueDepth")


@pytest.mark.conformance(id="PROD-ORD-TIER-NAMES", profile="producer", level="extended", feature="localityTierNames",
                         spec=LOCALITY + "; the selection_tier values of the public grid operator",
                         statements=["OC-LOCALITY-DERIVED"])
def test_selection_tier_values_name_the_locality(scenario: Scenario) -> None:
    _tier_ladder(scenario)
    env = _render(scenario, ["a1", "b1", "c1", "d1", "e1"])
    assert _tiers(env) == {"a1": "same_site", "b1": "same_zone", "c1": "same_region", "d1": "cross_region",
                           "e1": "unknown"}


@pytest.mark.conformance(id="PROD-ORD-GEO-SCORE-WITHIN-TIER", profile="producer", level="core", feature="ordering",
                         spec=ORDERING,
                         statements=["RG-NEED-GEOGRAPHY-FIRST", "RG-GROUPS-SCORE-NO-JOIN",
                                     "OC-ORDERING-GEOGRAPHY-FIRST-KEYS", "RG-GEO-ORDER-KEYS"])
def test_geography_first_orders_by_score_within_a_tier(scenario: Scenario) -> None:
    """Inside one locality tier candidates are ordered by score descending; tiers still come first.

    Within each tier the score order contradicts the tie-break order, and the best score overall sits in the
    farther tier. Fails if score is ignored within a tier, sorted ascending, or placed before locality.
    """
    _geography(scenario, {"c": ("r1", "z2")})
    _metered(scenario, "a1", 7)  # 0.3
    _metered(scenario, "a2", 2)  # 0.8
    _metered(scenario, "c1", 5, site="c")  # 0.5
    _metered(scenario, "c2", 0, site="c")  # 1.0
    _metered(scenario, "c3", 3, site="c")  # 0.7
    scenario.network(routing="geographyFirst", scoring="queueDepth")
    env = _render(scenario, ["a1", "a2", "c1", "c2", "c3"])
    assert oracle.names(env) == ["a2", "a1", "c2", "c3", "c1"]
    assert oracle.groups(env, scenario.model) == [["a2", "a1"], ["c2", "c3", "c1"]]
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-ORD-SCORE-FIRST-CROSS-SITE", profile="producer", level="core",
                         feature="ordering", spec=ORDERING,
                         statements=["OC-ORDERING-SCORE-FIRST-REMOTE-AHEAD", "RG-SCOREFIRST-LOCALITY-TIE-BREAK",
                                     "RG-SCOREFIRST-CROSS-SITE-GROUP", "RG-NEED-SCORE-FIRST",
                                     "OC-ORDERING-TWO-PHASES", "OC-ORDERING-SCORE-FIRST-KEYS",
                                     "RG-PROFILES-SCORE-FIRST", "RG-PROFILES-CROSS-SITE-RESULT"])
def test_score_first_moves_a_better_remote_ahead(scenario: Scenario) -> None:
    """scoreFirst: a better-scored cross-region provider precedes the local one; locality only breaks score ties.

    c1 (same_region) and b2 (cross_region) tie on score while the (site, name, cluster) tie-break prefers b2, so
    only locality-after-score gives c1 first. Fails if scoreFirst orders by locality first, ignores locality on a
    score tie, or puts the tie-break before locality.
    """
    _geography(scenario, {"b": ("r2", "z1"), "c": ("r1", "z2")})
    _metered(scenario, "a1", 5)  # 0.5 same_site
    _metered(scenario, "b1", 1, site="b")  # 0.9 cross_region
    _metered(scenario, "b2", 3, site="b")  # 0.7 cross_region
    _metered(scenario, "c1", 3, site="c")  # 0.7 same_region
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    env = _render(scenario, ["a1", "b1", "b2", "c1"])
    assert oracle.names(env) == ["b1", "c1", "b2", "a1"]
    assert oracle.groups(env, scenario.model) == [["b1", "c1", "b2", "a1"]]
    _assert_groups_valid(env)


NO_METRICS_POLICY = ("provider-scoring, No metrics (default): \"\u201cNo metrics\u201d does not mean \u201cno "
                     "policy\u201d: health, admission, freshness, model compatibility, geography, selection tiers, "
                     "session affinity, and Praxis selection policy continue to apply.\"")


@pytest.mark.conformance(id="PROD-ORD-NO-METRICS-POLICY", profile="producer", level="core", feature="ordering",
                         spec=NO_METRICS_POLICY, statements=["PS-NOMETRICS-POLICY-STILL-APPLIES"])
def test_no_metrics_still_applies_health_freshness_geography_and_selection(scenario: Scenario) -> None:
    """No scoringPolicy (noMetrics), roundRobin selection: a fresh local provider a1, a Degraded local a2, a
    fresh cross-region d1, a local a3 reporting no ready pods and a local x1 serving another model only.

    The overlay for the model lists a1, a2, d1 in that order, each its own group (locality, then
    freshness), a2 with fresh: false, all new_and_existing; a3 (health) and x1 (model compatibility) are
    absent, and the selection policy is roundRobin. Fails if noMetrics switches off any of these: a
    stale provider published fresh, locality ignored, an unhealthy or incompatible provider listed, or
    the selection mode dropped.
    """
    _geography(scenario, {"d": ("r2", "z1")})
    _metered(scenario, "a1", 2)
    _metered(scenario, "a2", 2, phase="Degraded")
    _metered(scenario, "a3", 2, healthy=0)
    _metered(scenario, "d1", 2, site="d")
    _metered(scenario, "x1", 2, models=(scenario.model + "-other",))
    scenario.network(selection="roundRobin")
    env = _render(scenario, ["a1", "a2", "d1", "x1"])
    ordered = oracle.names(env, scenario.model)
    assert ordered == ["a1", "a2", "d1"], f"locality, then freshness, without a3: {ordered}"
    assert oracle.groups(env, scenario.model) == [["a1"], ["a2"], ["d1"]]
    rows = {c: r for c, r in oracle.by_cluster(env).items() if r.get("name") == scenario.model}
    assert {c: (r.get("fresh"), r.get("admission_state")) for c, r in rows.items()} == {
        "a1": (True, "new_and_existing"), "a2": (False, "new_and_existing"), "d1": (True, "new_and_existing")}, rows
    assert oracle.names(env, scenario.model + "-other") == ["x1"], "x1 is a candidate of its own model only"
    assert env["overlay"].get("selection_policy") == {"mode": "roundRobin"}, env["overlay"].get("selection_policy")
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-ORD-TIE-BREAK", profile="producer", level="core", feature="ordering",
                         spec=ORDERING,
                         statements=["PS-STALE-NOMETRICS-NO-ENDPOINT", "OC-ORDERING-GEOGRAPHY-FIRST-KEYS",
                                     "OC-ORDERING-TIE-BREAK", "OC-LOCALITY-UNKNOWN-TIER", "RG-GEO-ORDER-KEYS"])
def test_equal_candidates_are_ordered_by_site_name_cluster(scenario: Scenario) -> None:
    """Equal admission, tier, freshness and score fall back to (site, name, cluster).

    Pair 1: the site order contradicts both the cluster order and the provider resource-name order. Pair 2: same
    site and model, so only the cluster decides, against the resource-name order. Fails if the tie-break starts
    with the cluster, follows resource names or arrival order, or is reversed.
    """
    scenario.provider("p2", site="b", cluster="zz")
    scenario.provider("p1", site="c", cluster="aa")
    scenario.provider("q1", site="d", cluster="yy")
    scenario.provider("q2", site="d", cluster="xx")
    scenario.network()
    env = _render(scenario, ["zz", "aa", "yy", "xx"])
    assert set(_tiers(env).values()) == {"unknown"}
    assert oracle.names(env) == ["zz", "aa", "xx", "yy"]
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-ORD-ADMISSION-FIRST", profile="producer", level="core", feature="admission",
                         spec=ORDERING,
                         statements=["OC-ORDERING-ADMISSION-BEFORE-LOCALITY-EXAMPLE",
                                     "RG-SCOREFIRST-STALE-SEPARATE", "OC-RERANKING-SCORE-ADMISSION-ORDER",
                                     "OC-ORDERING-GEOGRAPHY-FIRST-KEYS", "OC-ORDERING-SCORE-FIRST-KEYS",
                                     "OC-ORDERING-ADMISSION-PRIORITY", "RG-GEO-ORDER-KEYS"])
@pytest.mark.parametrize("policy", POLICIES)
def test_healthy_remote_ranks_before_overloaded_near(scenario: Scenario, policy: str) -> None:
    """Under both policies a healthy cross-region provider ranks before an overloaded same-region one.

    c9 (same_region, q=9 -> existing_only) must come last, after even a degraded cross-region provider, and in a
    group of its own. Fails if locality or freshness is compared before admission, or if admission does not
    separate groups.
    """
    _geography(scenario, {"c": ("r1", "z2"), "d": ("r2", "z1")})
    _metered(scenario, "c9", 9, site="c")  # overloaded, same_region
    _metered(scenario, "c2", 5, site="c")  # 0.5 same_region
    _metered(scenario, "d1", 2, site="d")  # 0.8 cross_region
    _metered(scenario, "d2", 5, site="d", phase="Degraded")  # stale cross_region
    scenario.network(routing=policy, scoring="queueDepth")
    env = _render(scenario, ["c9", "c2", "d1", "d2"])
    rows = oracle.by_cluster(env)
    assert rows["c9"]["admission_state"] == "existing_only"
    assert {rows[c]["admission_state"] for c in ("c2", "d1", "d2")} == {"new_and_existing"}
    order = oracle.names(env)
    assert order.index("d1") < order.index("c9"), f"healthy cross-region after overloaded same-region: {order}"
    if policy == "geographyFirst":
        assert order == ["c2", "d1", "d2", "c9"]
        assert oracle.groups(env, scenario.model) == [["c2"], ["d1"], ["d2"], ["c9"]]
    else:
        assert order == ["d1", "c2", "d2", "c9"]
        assert oracle.groups(env, scenario.model) == [["d1", "c2"], ["d2"], ["c9"]]
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-ORD-FRESHNESS", profile="producer", level="core", feature="ordering",
                         spec=ORDERING,
                         statements=["OC-LOCALITY-DEGRADED-STALE", "OC-STALE-RETAINED",
                                     "OC-ORDERING-POLICY-VOCABULARY", "OC-RERANKING-NORMALIZE",
                                     "OC-FORMAT-CANDIDATE-FIELDS", "OC-ORDERING-GEOGRAPHY-FIRST-KEYS",
                                     "OC-ORDERING-SCORE-FIRST-KEYS", "OC-STALE-OBSERVABILITY", "RG-GEO-ORDER-KEYS"])
@pytest.mark.parametrize("policy", POLICIES)
def test_degraded_providers_stay_but_follow_fresh_ones(scenario: Scenario, policy: str) -> None:
    """A Degraded provider stays with fresh: false, behind fresh ones of its admission state as the table orders.

    a1 (same_site, stale) has the best score. geographyFirst: locality before freshness, so a2 (fresh local),
    a1 (stale local), then d1 (fresh cross-region). scoreFirst: freshness before score, so d1, a2, then a1.
    Fails if freshness is ignored (a1 first), compared in the other policy's position, or Degraded is dropped.
    """
    _geography(scenario, {"d": ("r2", "z1")})
    _metered(scenario, "a1", 1, phase="Degraded")  # 0.9 stale same_site
    _metered(scenario, "a2", 6)  # 0.4 fresh same_site
    _metered(scenario, "d1", 5, site="d")  # 0.5 fresh cross_region
    scenario.network(routing=policy, scoring="queueDepth")
    env = _render(scenario, ["a1", "a2", "d1"])
    rows = oracle.by_cluster(env)
    assert {c: rows[c].get("fresh") for c in rows} == {"a1": False, "a2": True, "d1": True}
    if policy == "geographyFirst":
        assert oracle.names(env) == ["a2", "a1", "d1"]
        assert oracle.groups(env, scenario.model) == [["a2"], ["a1"], ["d1"]]
    else:
        assert oracle.names(env) == ["d1", "a2", "a1"]
        assert oracle.groups(env, scenario.model) == [["d1", "a2"], ["a1"]]
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-ORD-UNKNOWN-GEOGRAPHY", profile="producer", level="core", feature="ordering",
                         spec=LOCALITY + "; \"When no GridSite geography is configured, all candidates receive "
                         "unknown tier and ordering falls through to score-based ranking\"",
                         statements=["OC-LOCALITY-UNKNOWN-TIER"])
def test_without_geography_remote_tiers_are_unknown(scenario: Scenario) -> None:
    """Without GridSite geography remote candidates are unknown tier, grouped together and ordered by score.

    The local site's own provider is left out of the assertions: the spec's tier table is not part of the
    text, and whether a site without geography is same_site to itself by name is the public operator's
    rule (PROD-ORD-LOCAL-SITE-BY-NAME). The remote providers' scores are the reverse of their tie-break
    order. Fails if a tier other than unknown is derived for a remote site without region/zone (for example
    two sites without a region treated as the same region) or if the fall-through among unknown candidates
    is not score descending.
    """
    scenario.grid_site("a")
    scenario.grid_site("b")
    _metered(scenario, "a1", 6)  # 0.4 at the local site
    _metered(scenario, "b1", 3, site="b")  # 0.7
    _metered(scenario, "c1", 1, site="c")  # 0.9, no GridSite at all
    scenario.network(scoring="queueDepth")
    env = _render(scenario, ["a1", "b1", "c1"])
    tiers = _tiers(env)
    assert (tiers["b1"], tiers["c1"]) == ("unknown", "unknown"), tiers
    remote = [name for name in oracle.names(env) if name != "a1"]
    assert remote == ["c1", "b1"], f"unknown-tier candidates fall through to score descending: {oracle.names(env)}"
    assert any({"c1", "b1"} <= set(group) for group in oracle.groups(env, scenario.model)), \
        f"unknown-tier candidates of one admission and freshness share a group: {oracle.groups(env, scenario.model)}"
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-ORD-LOCAL-SITE-BY-NAME", profile="producer", level="extended",
                         feature="siteNameLocality",
                         spec="the public grid operator (praxis-proxy/grid): a provider of the consumer's own site is "
                         "same_site by its site name, also without GridSite geography, and leads geographyFirst",
                         statements=[])
def test_local_site_is_same_site_by_name_without_geography(scenario: Scenario) -> None:
    scenario.grid_site("a")
    scenario.grid_site("b")
    _metered(scenario, "a1", 6)  # 0.4 at the local site
    _metered(scenario, "b1", 3, site="b")  # 0.7
    scenario.network(scoring="queueDepth")
    env = _render(scenario, ["a1", "b1"])
    assert _tiers(env) == {"a1": "same_site", "b1": "unknown"}
    assert oracle.groups(env, scenario.model) == [["a1"], ["b1"]], "the local site's group comes first"


@pytest.mark.conformance(id="PROD-ORD-ZONE-NEEDS-REGION", profile="producer", level="core", feature="ordering",
                         spec=ZONE_NEEDS_REGION,
                         statements=["OC-LOCALITY-ZONE-REQUIRES-REGION", "RG-GEO-TIERS-ILLUSTRATIVE"])
def test_same_zone_name_in_another_region_is_not_same_zone(scenario: Scenario) -> None:
    """A site whose zone has the local zone's name is same-zone only inside the local region.

    geographyFirst shows it through groups and order: the genuine same-zone provider (e1: same region, same
    zone) leads alone in its group, ahead of the same-region one (c1), while two providers whose sites carry
    the local zone's name without the local region, one in another region (b1) and one with no region at all
    (f1), score best yet neither joins it nor precedes it. Fails if zones are compared without the region
    (b1 and f1 would join e1's group, ahead of it on score), or if the genuine same zone is not preferred.
    """
    _geography(scenario, {"b": ("r2", "z1"), "c": ("r1", "z2"), "e": ("r1", "z1")})
    scenario.grid_site("f", zone="z1")  # the local zone's name, no region
    _metered(scenario, "b1", 1, site="b")  # 0.9, zone z1 in region r2
    _metered(scenario, "c1", 5, site="c")  # 0.5, another zone of region r1
    _metered(scenario, "e1", 7, site="e")  # 0.3, the genuine same zone
    _metered(scenario, "f1", 0, site="f")  # 1.0, zone z1 without a region
    scenario.network(routing="geographyFirst", scoring="queueDepth")
    env = _render(scenario, ["b1", "c1", "e1", "f1"])
    order = oracle.names(env)
    groups = oracle.groups(env, scenario.model)
    assert order[0] == "e1" and groups[0] == ["e1"], (
        f"the genuine same-zone provider must lead alone in its group: order {order}, groups {groups}")
    assert ["c1"] in groups and order.index("c1") < order.index("b1"), (
        f"same region (c1) is closer than another region with the same zone name (b1): order {order}, "
        f"groups {groups}")
    _assert_groups_valid(env)


# --------------------------------------------------------------------------------------------------- groups


@pytest.mark.conformance(id="PROD-GRP-GEO-BOUNDARIES", profile="producer", level="core", feature="groups",
                         spec=CANDIDATE_FIELDS,
                         statements=["RG-GEO-GROUP-SEPARATION", "OC-OVERVIEW-AGN-ORDERS-GROUPS",
                                     "RG-INTRO-STEP-ORDER-GROUPS", "OC-ORDERING-GEOGRAPHY-FIRST-KEYS",
                                     "RG-INTRO-GROUPS-DECIDE-COMPETITION", "RG-GEO-LOCAL-ROTATE",
                                     "RG-GEO-REMOTE-FALLBACK", "RG-WEIGHTED-GEO-REMOTE-FALLBACK",
                                     "RG-PROFILES-GEOGRAPHY-FIRST", "RG-PROFILES-LOCAL-EVEN-RESULT"])
def test_geography_first_groups_split_on_admission_tier_and_freshness(scenario: Scenario) -> None:
    """geographyFirst starts a new selection group at each change of admission, locality tier or freshness.

    Fails if groups ignore freshness (a3 joining a1/a2), ignore admission (c9 joining c1), merge tiers, or split
    same-group candidates by score.
    """
    _geography(scenario, {"c": ("r1", "z2"), "d": ("r2", "z1")})
    _metered(scenario, "a1", 2)
    _metered(scenario, "a2", 4)
    _metered(scenario, "a3", 2, phase="Degraded")
    _metered(scenario, "c1", 3, site="c")
    _metered(scenario, "c9", 9, site="c")
    _metered(scenario, "d1", 5, site="d")
    scenario.network(routing="geographyFirst", scoring="queueDepth")
    env = _render(scenario, ["a1", "a2", "a3", "c1", "c9", "d1"])
    assert oracle.names(env) == ["a1", "a2", "a3", "c1", "d1", "c9"]
    assert oracle.groups(env, scenario.model) == [["a1", "a2"], ["a3"], ["c1"], ["d1"], ["c9"]]
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-GRP-SCORE-FIRST-SHARED", profile="producer", level="core", feature="groups",
                         spec=CANDIDATE_FIELDS,
                         statements=["RG-SCOREFIRST-GROUPING", "RG-SCOREFIRST-CROSS-SITE-GROUP",
                                     "RG-SCOREFIRST-STALE-SEPARATE", "RG-NEED-SCORE-FIRST",
                                     "OC-ORDERING-SCORE-FIRST-KEYS", "RG-INTRO-GROUPS-DECIDE-COMPETITION",
                                     "RG-PROFILES-SCORE-FIRST", "RG-PROFILES-CROSS-SITE-RESULT"])
def test_score_first_groups_split_only_on_admission_and_freshness(scenario: Scenario) -> None:
    """scoreFirst groups ignore locality: fresh admitted providers of every tier share group 0.

    Fails if scoreFirst groups by locality tier, or does not separate stale or existing_only candidates.
    """
    _geography(scenario, {"c": ("r1", "z2"), "d": ("r2", "z1")})
    _metered(scenario, "a1", 3)  # 0.7 same_site
    _metered(scenario, "a2", 0, phase="Degraded")  # stale, best score
    _metered(scenario, "c1", 5, site="c")  # 0.5 same_region
    _metered(scenario, "c9", 9, site="c")  # existing_only
    _metered(scenario, "d1", 1, site="d")  # 0.9 cross_region
    scenario.network(routing="scoreFirst", scoring="queueDepth")
    env = _render(scenario, ["a1", "a2", "c1", "c9", "d1"])
    assert oracle.names(env) == ["d1", "a1", "c1", "a2", "c9"]
    assert oracle.groups(env, scenario.model) == [["d1", "a1", "c1"], ["a2"], ["c9"]]
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-GRP-SCORES-NEVER-SPLIT", profile="producer", level="core", feature="groups",
                         spec=CANDIDATE_FIELDS,
                         statements=["RG-SCOREFIRST-CROSS-SITE-GROUP", "RG-GROUPS-SCORE-NO-JOIN"])
def test_scores_never_split_a_group(scenario: Scenario) -> None:
    """Widely different scores share a group: per tier under geographyFirst, across sites under scoreFirst.

    The same providers are judged under geographyFirst, then the network switches to scoreFirst. Fails if score
    (or a score bucket) starts a new group, or if scoreFirst keeps locality groups.
    """
    _geography(scenario, {"c": ("r1", "z2")})
    _metered(scenario, "a1", 0)  # 1.0
    _metered(scenario, "a2", 4)  # 0.6
    _metered(scenario, "a3", 8)  # 0.2
    _metered(scenario, "c1", 1, site="c")  # 0.9
    _metered(scenario, "c2", 7, site="c")  # 0.3
    scenario.network(routing="geographyFirst", scoring="queueDepth")
    env = _render(scenario, ["a1", "a2", "a3", "c1", "c2"])
    assert oracle.names(env) == ["a1", "a2", "a3", "c1", "c2"]
    assert oracle.groups(env, scenario.model) == [["a1", "a2", "a3"], ["c1", "c2"]]
    _assert_groups_valid(env)

    scenario.network(routing="scoreFirst", scoring="queueDepth")
    expected = ["a1", "c1", "a2", "c2", "a3"]
    env = scenario.envelope(until=lambda e: oracle.names(e) == expected, what=f"scoreFirst order {expected}")
    assert oracle.groups(env, scenario.model) == [expected]
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-GRP-PER-CAPABILITY", profile="producer", level="core", feature="groups",
                         spec=CANDIDATE_FIELDS,
                         statements=["OC-FORMAT-SELECTION-GROUP-CONTIGUOUS", "OC-MULTI-ONE-CANDIDATE-PER-PAIR",
                                     "OC-MULTI-MODELS-DECLARED", "OC-FORMAT-CANDIDATE-FIELDS",
                                     "RG-PROFILES-LOCAL-EVEN-RESULT", "RG-NOTMEAN-NOMETRICS-STILL-APPLY"])
def test_groups_are_numbered_per_capability(scenario: Scenario) -> None:
    """selection_group restarts at 0 for each model and is contiguous within it.

    Fails if groups are numbered across the whole list, or if a model's groups leave gaps.
    """
    first, second = f"{scenario.model}-1", f"{scenario.model}-2"
    _geography(scenario, {"c": ("r1", "z2"), "d": ("r2", "z1")})
    scenario.provider("a1", models=(first, second))
    scenario.provider("c1", site="c", models=(first,))
    scenario.provider("d1", site="d", models=(second,))
    scenario.provider("d2", site="d", models=(first, second))
    scenario.network(routing="geographyFirst")
    env = scenario.envelope(until=lambda e: set(oracle.names(e, first)) == {"a1", "c1", "d2"}
                            and set(oracle.names(e, second)) == {"a1", "d1", "d2"}, what="both models' candidates")
    assert oracle.groups(env, first) == [["a1"], ["c1"], ["d2"]]
    assert oracle.groups(env, second) == [["a1"], ["d1", "d2"]]
    numbers = {model: sorted({int(c["selection_group"]) for c in oracle.candidates(env) if c["name"] == model})
               for model in (first, second)}
    assert numbers == {first: [0, 1, 2], second: [0, 1]}
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-ORD-RANKS", profile="producer", level="core", feature="ordering",
                         spec=ORDERING,
                         statements=["OC-RERANKING-RANK-ZERO-BASED", "OC-ORDERING-ENRICHMENT",
                                     "RG-DETERMINISTIC-AGN-RANKS"])
def test_ranks_are_list_positions(scenario: Scenario) -> None:
    """Each candidate's rank is its zero-based position in the whole candidate list.

    Two models, a stale and an existing_only provider are mixed in. Fails if ranks start at 1, restart per model
    or group, repeat, or disagree with the written order.
    """
    second = f"{scenario.model}-2"
    _geography(scenario, {"c": ("r1", "z2")})
    _metered(scenario, "a1", 2, models=(scenario.model, second))
    _metered(scenario, "a2", 1, phase="Degraded")
    _metered(scenario, "c1", 4, site="c", models=(scenario.model, second))
    _metered(scenario, "c9", 9, site="c", models=(second,))
    scenario.network(scoring="queueDepth")
    env = scenario.envelope(until=lambda e: len(oracle.candidates(e, kind=None)) == 6, what="six candidates")
    rows = oracle.candidates(env, kind=None)
    assert [row.get("rank") for row in rows] == list(range(len(rows)))
    assert all(type(row.get("rank")) is int for row in rows)
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-ORD-RANKS-AFTER-DEDUP", profile="producer", level="core", feature="ordering",
                         spec=RANKS_AFTER_DEDUP,
                         statements=["OC-ORDERING-DEDUP-RANK", "OC-RERANKING-RANK-ZERO-BASED"])
def test_ranks_stay_contiguous_when_a_candidate_repeats(scenario: Scenario) -> None:
    """Ranks are 0..n-1 over the written list even when two provider records yield the same candidate.

    p1 and p2 reach the same model through the same cluster at the same site: one candidate twice, and
    by the tie-break it sorts before zz's candidate. Fails if ranks are numbered before the repeat is
    dropped (zz would keep rank 2 in a list of two), or disagree with the written order in any other way.
    The spec does not say which record of a repeated candidate is kept, so that is not judged.
    """
    scenario.provider("p1", cluster="aa")
    scenario.provider("p2", cluster="aa")
    scenario.provider("p3", cluster="zz")
    scenario.network()
    env = _render(scenario, ["aa", "zz"])
    rows = oracle.candidates(env, kind=None)
    assert [row.get("cluster") for row in rows][-1] == "zz", f"zz sorts last by its cluster: {oracle.names(env)}"
    assert [row.get("rank") for row in rows] == list(range(len(rows))), (
        f"ranks {[row.get('rank') for row in rows]} of candidates {oracle.names(env)}")
    assert all(type(row.get("rank")) is int for row in rows)
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-ORD-UNAVAILABLE-EXCLUDED", profile="producer", level="core",
                         feature="admission", spec=LOCALITY,
                         statements=["OC-LOCALITY-UNAVAILABLE-EXCLUDED", "OC-ORDERING-NONE-REMOVED",
                                     "RG-ADMISSION-AGN-REMOVES-EXCLUDED", "RG-ADMISSION-AGN-NO-NONE",
                                     "RG-INTRO-STEP-ELIGIBLE", "OC-RERANKING-LIST-ELIGIBLE",
                                     "OC-ORDERING-AFTER-HARD-CONSTRAINTS"])
def test_unavailable_and_unhealthy_providers_are_excluded(scenario: Scenario) -> None:
    """Unavailable providers and unhealthy ones (no ready pods) are absent; a Degraded one stays.

    The excluded providers have the best scores, so keeping them would put them first. Fails if phase
    Unavailable or ready pods 0 do not exclude, or if Degraded is excluded too.
    """
    _geography(scenario, {})
    _metered(scenario, "gone", 0, phase="Unavailable")
    _metered(scenario, "sick", 0, healthy=0)
    _metered(scenario, "ok", 5)
    _metered(scenario, "stale", 5, phase="Degraded")
    scenario.network(scoring="queueDepth")
    env = _render(scenario, ["ok", "stale"])
    assert oracle.names(env) == ["ok", "stale"]
    _assert_groups_valid(env)


# --------------------------------------------------------------------------------------------------- access


@pytest.mark.conformance(id="PROD-ACCESS-SITE-SELECTOR", profile="producer", level="core", feature="access",
                         spec=ACCESS,
                         statements=["OC-RECONCILE-WATCH-EARLIER"])
def test_site_selector_matches_the_consumer_site_labels(scenario: Scenario) -> None:
    """A siteSelector provider is visible only while the consumer (local) site's GridSite labels match.

    The provider's own site carries non-matching labels and the local site has an extra label. Fails if the
    selector is ignored, matched against the provider's site, required to equal all labels, or not re-evaluated
    when the consumer site's labels change.
    """
    scenario.grid_site("a", region="r1", zone="z1", labels={"tier": "gold", "env": "prod"})
    scenario.grid_site("b", region="r1", zone="z2", labels={"tier": "silver"})
    scenario.provider("gold", site="b", site_selector={"tier": "gold"})
    scenario.provider("open", site="b")
    scenario.network()
    env = _render(scenario, ["gold", "open"], what="the gold-only provider visible to a gold consumer")
    assert sorted(oracle.names(env)) == ["gold", "open"]

    scenario.grid_site("a", region="r1", zone="z1", labels={"tier": "silver", "env": "prod"})
    env = scenario.envelope(until=lambda e: "gold" not in oracle.names(e),
                            what="the gold-only provider hidden from a silver consumer")
    assert oracle.names(env) == ["open"]


@pytest.mark.conformance(id="PROD-ACCESS-UNKNOWN-SITE-FAILS-CLOSED", profile="producer", level="core",
                         feature="access", spec=ACCESS,
                         statements=[])
def test_unknown_consumer_site_fails_closed(scenario: Scenario) -> None:
    """Without a GridSite for the consumer site, a provider with a non-empty siteSelector is excluded.

    The provider's own site does carry the selected label. Fails if an unknown consumer is treated as matching,
    or if the provider's site labels are used instead of the consumer's.
    """
    scenario.grid_site("b", region="r1", zone="z1", labels={"tier": "gold"})
    scenario.provider("gold", site="b", site_selector={"tier": "gold"})
    scenario.provider("open", site="b")
    scenario.network()
    env = _render(scenario, ["open"])
    assert oracle.names(env) == ["open"]


# ---------------------------------------------------------------------------------------------------- tools


@pytest.mark.conformance(id="PROD-TOOL-ALLOWLIST", profile="producer", level="extended",
                         feature="toolCandidates", spec=TOOLS_ALLOWLIST,
                         statements=["RG-TOOLS-ALLOWLIST", "RG-TOOLS-ALLOWLIST-ONLY", "RG-TOOLS-EMPTY-ALL",
                                     "RG-TOOLS-MCP-TOOL-CANDIDATE"])
def test_tool_candidates_follow_the_allowlist(scenario: Scenario) -> None:
    """One mcp_tool candidate per discovered tool that spec.tools allows; an empty spec.tools allows all.

    Fails if the allowlist is ignored ("delete" appears), an allowed but undiscovered tool appears ("ghost"), or
    an empty allowlist hides every tool.
    """
    scenario.apply(resources.tool_provider(scenario.name("t1"), scenario.net, cluster="tools-1",
                                           allow=["search", "fetch", "ghost"],
                                           discovered=["search", "fetch", "delete"], site=scenario.local))
    scenario.apply(resources.tool_provider(scenario.name("t2"), scenario.net, cluster="tools-2", allow=[],
                                           discovered=["alpha", "beta"], site=scenario.local))
    scenario.network()
    expected = {"search", "fetch", "alpha", "beta"}
    env = scenario.envelope(until=lambda e: expected <= _tools(e), what=f"tool candidates {sorted(expected)}")
    assert _tools(env) == expected
    assert len(oracle.candidates(env, kind="mcp_tool")) == len(expected)
    _assert_groups_valid(env)


TOOLS_DISCOVERY = (f"{TOOLS}: \"AGN discovers MCP tools from AgentToolProvider resources and publishes them as "
                   "routing-overlay candidates.\"; Discovery and propagation: \"The operator probes the endpoint and "
                   "records advertised tool names in status.discoveredTools.\"; the probe speaks MCP (initialize, "
                   "tools/list over its HTTP transport)")
#: A plain fake backend of the site that serves MCP for the discovery test (not the metrics backend).
MCP_BACKEND = "provider-b"


@pytest.mark.conformance(id="PROD-TOOL-DISCOVERY-PROBES", profile="producer", level="extended",
                         feature="toolDiscovery", spec=TOOLS_DISCOVERY,
                         statements=["RG-TOOLS-DISCOVERS", "RG-TOOLS-PROBE-RECORD"])
def test_tools_are_discovered_from_the_mcp_endpoint(scenario: Scenario) -> None:
    """An AgentToolProvider with no discovered tools in its status, whose endpoint is an MCP server listing
    alpha and beta: the overlay gets mcp_tool candidates alpha and beta, the provider's status records
    them, and the server was asked tools/list. The server then lists alpha and gamma: the next reconciles
    follow, in the overlay and the status. Fails if the operator publishes only tools already in the
    status, never asks the endpoint, probes it once, or does not record what it found."""
    site = scenario.site
    asked = site.backend_mcp_requests(MCP_BACKEND)
    endpoint = scenario.serve_mcp(MCP_BACKEND, ["alpha", "beta"])
    provider = scenario.tool_provider("t1", discovered=None, endpoint=endpoint)
    scenario.network()
    first = {"alpha", "beta"}
    env = scenario.envelope(until=lambda e: _tools(e) == first, force=True,
                            what=f"tool candidates {sorted(first)} discovered from {endpoint}")
    _assert_groups_valid(env)
    assert site.backend_mcp_requests(MCP_BACKEND) > asked, "the MCP server was never asked tools/list"
    poll_until(lambda: scenario.control.tool_status(provider).get("discoveredTools"),
               lambda tools: sorted(tools or []) == ["alpha", "beta"], timeout=timeouts().status,
               what=f"the status of {provider} to record the discovered tools alpha and beta")
    scenario.serve_mcp(MCP_BACKEND, ["alpha", "gamma"])
    second = {"alpha", "gamma"}
    scenario.envelope(until=lambda e: _tools(e) == second, force=True,
                      what=f"tool candidates {sorted(second)} once the server lists alpha and gamma")
    poll_until(lambda: scenario.control.tool_status(provider).get("discoveredTools"),
               lambda tools: sorted(tools or []) == ["alpha", "gamma"], timeout=timeouts().status,
               what=f"the status of {provider} to record alpha and gamma")


@pytest.mark.conformance(id="PROD-TOOL-UNAVAILABLE-EXCLUDED", profile="producer", level="extended",
                         feature="toolCandidates", spec=TOOLS_UNAVAILABLE,
                         statements=["RG-TOOLS-UNAVAILABLE-EXCLUDED"])
def test_unavailable_tool_provider_is_excluded(scenario: Scenario) -> None:
    """An Unavailable AgentToolProvider publishes no tool candidate; the same provider Available does.

    Fails if the tool path ignores the provider phase (its "search" candidate would stay), or excludes an
    Available provider.
    """
    scenario.tool_provider("t1", discovered=["search"], phase="Unavailable")
    scenario.tool_provider("t2", discovered=["fetch"])
    scenario.network()
    env = scenario.envelope(until=lambda e: "fetch" in _tools(e), what="the Available provider's tool")
    assert _tools(env) == {"fetch"}, f"an Unavailable tool provider is excluded: {sorted(_tools(env))}"

    scenario.tool_provider("t1", discovered=["search"])
    env = scenario.envelope(until=lambda e: "search" in _tools(e), force=True,
                            what="t1's tool once t1 is Available")
    assert _tools(env) == {"fetch", "search"}
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-TOOL-ACCESS-POLICY", profile="producer", level="extended",
                         feature="toolCandidates", spec=TOOLS_ACCESS,
                         statements=["RG-TOOLS-ACCESS-POLICY"])
def test_tool_access_policy_matches_the_consumer_site(scenario: Scenario) -> None:
    """A tool provider's siteSelector is matched against the consumer (local) site's labels, as for models.

    The consumer site is gold, the tool providers' own site silver. Fails if the tool path ignores the access
    policy (the silver-only tools would appear), matches it against the provider's site (gold and silver
    swap), or hides a provider whose selector matches.
    """
    scenario.grid_site("a", region="r1", zone="z1", labels={"tier": "gold", "env": "prod"})
    scenario.grid_site("b", region="r1", zone="z2", labels={"tier": "silver"})
    scenario.tool_provider("gold", discovered=["search"], access={"tier": "gold"}, site="b")
    scenario.tool_provider("silver", discovered=["fetch"], access={"tier": "silver"}, site="b")
    scenario.tool_provider("open", discovered=["list"], site="b")
    scenario.network()
    env = scenario.envelope(until=lambda e: {"search", "list"} <= _tools(e),
                            what="the tools a gold consumer may use")
    assert _tools(env) == {"search", "list"}, (
        f"the silver-only tool provider is hidden from a gold consumer: {sorted(_tools(env))}")
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-TOOL-ACCESS-UNKNOWN-SITE", profile="producer", level="extended",
                         feature="toolCandidates", spec=TOOLS_ACCESS_UNKNOWN,
                         statements=["RG-TOOLS-ACCESS-FAIL-CLOSED"])
def test_tool_access_fails_closed_for_an_unknown_consumer(scenario: Scenario) -> None:
    """Without a GridSite for the consumer site a tool provider with a siteSelector is excluded; once the
    consumer site is known with matching labels it is included.

    The provider's own site carries the selected label. Fails if an unknown consumer is treated as matching,
    the provider's site labels are used instead, or the access policy is ignored for tools.
    """
    scenario.grid_site("b", region="r1", zone="z1", labels={"tier": "gold"})
    scenario.tool_provider("gold", discovered=["search"], access={"tier": "gold"}, site="b")
    scenario.tool_provider("open", discovered=["list"], site="b")
    scenario.network()
    env = scenario.envelope(until=lambda e: "list" in _tools(e), what="the unrestricted tool")
    assert _tools(env) == {"list"}, f"an unknown consumer site fails closed: {sorted(_tools(env))}"

    scenario.grid_site("a", region="r1", zone="z1", labels={"tier": "gold"})
    env = scenario.envelope(until=lambda e: "search" in _tools(e), force=True,
                            what="the gold-only tool once the consumer site is known as gold")
    assert _tools(env) == {"search", "list"}


@pytest.mark.conformance(id="PROD-ORD-LOCAL-NOT-PHASE-FILTERED", profile="producer", level="core",
                         feature="ordering",
                         spec="routing-architecture-and-overlay-contract, Site eligibility: \"Local providers (from "
                              "InferenceProvider resources in the same cluster) are always eligible. They are not "
                              "filtered by GridSite.status.phase.\"",
                         statements=["OC-ELIGIBILITY-LOCAL-NOT-PHASE-FILTERED"])
@pytest.mark.parametrize("phase", ["Pending", "Unreachable"])
def test_local_providers_ignore_their_gridsite_phase(scenario: Scenario, phase: str) -> None:
    """Local providers hosted at sites whose GridSite is not Active are published all the same.

    p1 is hosted at site b and p2 at the local site a; both GridSites carry `phase`, and a third local
    provider p3 at site c (Active) is the control. Fails if the remote-site eligibility gate (Active only)
    is applied to InferenceProviders of this cluster.
    """
    scenario.grid_site("a", region="r1", zone="z1", phase=phase)
    scenario.grid_site("b", region="r1", zone="z2", phase=phase)
    scenario.grid_site("c", region="r1", zone="z3")
    _metered(scenario, "p1", 2, site="b")
    _metered(scenario, "p2", 2)
    _metered(scenario, "p3", 2, site="c")
    scenario.network(scoring="queueDepth")
    env = _render(scenario, ["p3"], what="the control provider p3 at Active site c")
    assert sorted(oracle.names(env)) == ["p1", "p2", "p3"], f"GridSites a and b {phase}: {oracle.names(env)}"
    _assert_groups_valid(env)


@pytest.mark.parametrize("kind", [
    pytest.param("inference", marks=pytest.mark.conformance(
        id="PROD-RENDER-PER-NETWORK", profile="producer", level="core", feature="ordering",
        spec="routing-architecture-and-overlay-contract, Rendering: \"Lists local InferenceProvider resources for "
             "the network.\"", statements=["OC-RENDER-LIST-LOCAL-PROVIDERS"])),
    # AgentToolProviders rendered as candidates are the extended toolCandidates feature
    pytest.param("tool", marks=pytest.mark.conformance(
        id="PROD-RENDER-PER-NETWORK-TOOLS", profile="producer", level="extended", feature="toolCandidates",
        spec="routing-guide, MCP tool discovery: \"An AgentToolProvider references a GridNetwork and an MCP "
             "endpoint.\"", statements=["RG-TOOLS-REFERENCES"])),
])
def test_each_network_lists_only_its_own_providers(scenario: Scenario, kind: str) -> None:
    """Two networks on one operator, one provider each: each overlay holds its own provider only.

    Fails if providers (or tool providers) are listed by namespace or site rather than by gridNetworkRef.
    """
    other = scenario.name("other-net")
    gateway = resources.gateway_ref(scenario.local, name=resources.DEFAULT_GATEWAY)
    if kind == "inference":
        scenario.provider("p1")
        scenario.apply(resources.inference_provider(scenario.name("p2"), other, site=scenario.local, cluster="p2",
                                                    models=(scenario.model,)))
    else:
        scenario.tool_provider("p1", discovered=["p1"])
        scenario.apply(resources.tool_provider(scenario.name("p2"), other, cluster="p2", allow=(),
                                               discovered=["p2"], site=scenario.local))
    scenario.apply(resources.grid_network(other, [gateway]))
    scenario.network()

    def clusters(env: Mapping[str, Any]) -> list[str]:
        """Inference candidates by cluster; tool candidates by tool name (the spec names no tool cluster)."""
        if kind == "tool":
            return sorted(_tools(env))
        return sorted(str(c.get("cluster")) for c in oracle.candidates(env, kind=None))

    mine = scenario.envelope(lambda env: "p1" in clusters(env), what=f"{kind} provider p1 in its own network")
    theirs = scenario.control.wait_envelope(other, lambda env: "p2" in clusters(env), gateway=resources.DEFAULT_GATEWAY,
                                            what=f"{kind} provider p2 in the other network",
                                            timeout=timeouts().reconcile)
    assert clusters(mine) == ["p1"], f"{scenario.net} lists {clusters(mine)}"
    assert clusters(theirs) == ["p2"], f"{other} lists {clusters(theirs)}"


@pytest.mark.conformance(id="PROD-TOOL-SAME-NAME-AS-PROVIDER", profile="producer", level="extended",
                         feature="toolCandidates",
                         spec="routing-guide, MCP tool discovery: \"This keeps an AgentToolProvider distinct from an "
                              "InferenceProvider with the same Kubernetes name.\"",
                         statements=["RG-TOOLS-DISTINCT-IDENTITY"])
def test_tool_provider_and_inference_provider_may_share_a_name(scenario: Scenario) -> None:
    """An InferenceProvider and an AgentToolProvider both called x: the model and the tool are both published.

    Fails if providers are keyed by Kubernetes name alone, so one kind hides or overwrites the other.
    """
    scenario.provider("x", cluster="x-inference")
    scenario.tool_provider("x", discovered=["search"], cluster="x-tool")
    scenario.network()
    env = scenario.envelope(lambda e: bool(_tools(e)) and bool(oracle.names(e)),
                            what="the inference and the tool candidate of x")
    assert oracle.names(env) == ["x-inference"], f"inference candidates: {oracle.names(env)}"
    assert _tools(env) == {"search"}, f"tool candidates: {_tools(env)}"


@pytest.mark.conformance(id="PROD-TOOL-NO-INFERENCE-SIGNALS", profile="producer", level="extended",
                         feature="toolCandidates", spec=TOOLS_UNAVAILABLE, statements=["RG-TOOLS-NO-METRICS"])
def test_tool_candidates_take_no_inference_signals(scenario: Scenario) -> None:
    """Tool candidates are neither scored, admitted nor weighted from the inference signals of a same-named pool.

    InferenceProviders t1 (queue 9 of 10: existing_only, capacityWeight 5) and t2 (queue 1, capacityWeight 700)
    share their names (and, where the operator reads it, the cluster name) with AgentToolProviders t1 and t2,
    which both offer the tool alpha, under scoreFirst + queueDepth + static weightedRandom. The inference
    candidates are ordered, admitted and weighted by their signals (t2 first, t1 existing_only, weights 700
    and 5). The two alpha candidates must both be new_and_existing, in one group, in tie-break order (by
    cluster, whatever the operator names a tool candidate's cluster), with equal weights where the operator
    publishes weights. Fails if the tool path reads the same-named pool's queue score (t2's tool first), its
    admission (t1's tool existing_only) or its capacityWeight (5 against 700).
    """
    scenario.set_pools({"t1": {"queueDepth": 9, "kvCacheUtilization": 0.2, "healthy": 1},
                        "t2": {"queueDepth": 1, "kvCacheUtilization": 0.2, "healthy": 1}})
    scenario.provider("t1", metrics=True, capacity_weight=5)
    scenario.provider("t2", metrics=True, capacity_weight=700)
    scenario.tool_provider("t1", discovered=["alpha"])
    scenario.tool_provider("t2", discovered=["alpha"])
    scenario.network(routing="scoreFirst", scoring="queueDepth", selection="weightedRandom", static_placement=True)

    def settled(env: Mapping[str, Any]) -> bool:
        states = {c: str(x.get("admission_state")) for c, x in oracle.by_cluster(env).items()}
        return (len(oracle.candidates(env, kind="mcp_tool")) == 2
                and states == {"t1": "existing_only", "t2": "new_and_existing"})

    env = scenario.envelope(until=settled, what="both alpha tool candidates, and t1's pool existing_only")
    inference = oracle.by_cluster(env)
    assert oracle.names(env) == ["t2", "t1"], f"inference candidates follow their queue: {oracle.names(env)}"
    assert [inference[c].get("traffic_weight") for c in ("t2", "t1")] == [700, 5], (
        f"inference weights are the capacityWeights: {inference}")
    tools = oracle.candidates(env, kind="mcp_tool")
    clusters = [str(c.get("cluster")) for c in tools]
    assert clusters == sorted(clusters) and len(set(clusters)) == 2, (
        f"the two alpha candidates are in tie-break order, not ordered by a pool's queue score: {tools}")
    assert {str(c.get("admission_state")) for c in tools} == {"new_and_existing"}, (
        f"tool candidates take no admission from a pool's pressure: {tools}")
    assert len({c.get("selection_group") for c in tools}) == 1, f"the tool candidates form one group: {tools}"
    weights = [c.get("traffic_weight") for c in tools]
    assert weights[0] == weights[1], f"tool candidates get no capacity weighting: traffic_weight {weights}"
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-GRP-SCORES-NOT-WEIGHTS", profile="producer", level="core", feature="groups",
                         spec="routing-guide, Scores and weights: \"score != traffic weight\"; a higher score \"does "
                              "not mean A receives twice as many requests\"; round robin \"can still give equal "
                              "turns to A and B when they are both in the same active group.\"",
                         statements=["RG-SCORES-RR-EQUAL-TURNS", "RG-SCORES-NOT-PROPORTIONAL"])
def test_scores_under_round_robin_publish_no_weights(scenario: Scenario) -> None:
    """queueDepth scores 0.8 and 0.4 under roundRobin: one group, mode roundRobin, no traffic_weight.

    Fails if the operator turns scores into traffic weights or a weighted policy when a metrics strategy is
    active, which would make the consumer share traffic by score instead of giving equal turns.
    """
    _metered(scenario, "pa", 2)
    _metered(scenario, "pb", 6)
    scenario.network(routing="scoreFirst", scoring="queueDepth", selection="roundRobin")
    env = _render(scenario, ["pa", "pb"])
    assert oracle.groups(env, scenario.model) == [["pa", "pb"]], oracle.groups(env, scenario.model)
    policy = (env.get("overlay") or {}).get("selection_policy")
    assert policy == {"mode": "roundRobin"}, f"selection_policy: {policy}"
    weighted = {c["cluster"]: c["traffic_weight"] for c in oracle.candidates(env) if "traffic_weight" in c}
    assert not weighted, f"scores published as traffic weights: {weighted}"
    _assert_groups_valid(env)


@pytest.mark.conformance(id="PROD-GRP-NO-METRICS-NO-PREFERENCE", profile="producer", level="core", feature="groups",
                         spec="provider-scoring, No metrics: \"Equivalent providers can participate in the same Praxis "
                              "selection group without an unavailable metric creating an artificial preference.\"",
                         statements=["PS-NOMETRICS-NO-ARTIFICIAL-PREFERENCE"])
def test_no_metrics_ignores_metric_availability(scenario: Scenario) -> None:
    """noMetrics, three equivalent providers: aa without metricsConfig, mm whose scrape fails, zz scraped at q=0.

    All three share one group, admitted and fresh, in tie-break order aa, mm, zz. Fails if a scraped value,
    or its absence, still orders, groups or restricts providers when the network scores noMetrics.
    """
    scenario.provider("aa")
    scenario.set_pools({"mm": {"queueDepth": 5, "healthy": 1}}, "provider-b")
    scenario.provider("mm", metrics={"url": scenario.site.backend("provider-b").url})
    scenario.fail_metrics("provider-b")
    _metered(scenario, "zz", 0)
    scenario.network(routing="scoreFirst", scoring="noMetrics", selection="roundRobin")
    env = _render(scenario, ["aa", "mm", "zz"])
    assert oracle.names(env) == ["aa", "mm", "zz"], oracle.names(env)
    assert oracle.groups(env, scenario.model) == [["aa", "mm", "zz"]], oracle.groups(env, scenario.model)
    states = {c["cluster"]: (c.get("admission_state"), c.get("fresh")) for c in oracle.candidates(env)}
    assert set(states.values()) == {("new_and_existing", True)}, states
    _assert_groups_valid(env)
