"""Locality tiers, the ordering tables of both routing policies, ranks and selection groups."""

from __future__ import annotations

import pytest

from reference.operator.core.admission import EXISTING_ONLY, NEW_AND_EXISTING
from reference.operator.core.locality import (
    CROSS_REGION,
    SAME_REGION,
    SAME_SITE,
    SAME_ZONE,
    UNKNOWN,
    derive_tier,
)
from reference.operator.core.model import GridSiteSpec
from reference.operator.core.ordering import Entry, order

SITES = {
    "a": GridSiteSpec("a", "n", region="us-east", zone="z1"),
    "b": GridSiteSpec("b", "n", region="us-east", zone="z1"),
    "c": GridSiteSpec("c", "n", region="us-east", zone="z2"),
    "d": GridSiteSpec("d", "n", region="eu-west", zone="z1"),
    "e": GridSiteSpec("e", "n"),
}


@pytest.mark.parametrize(
    ("provider", "tier"),
    [("a", SAME_SITE), ("b", SAME_ZONE), ("c", SAME_REGION), ("d", CROSS_REGION), ("e", UNKNOWN), ("x", UNKNOWN)],
)
def test_locality_tiers(provider: str, tier: str) -> None:
    assert derive_tier("a", provider, SITES) == tier


def test_same_zone_name_in_another_region_is_cross_region() -> None:
    assert derive_tier("a", "d", SITES) == CROSS_REGION  # both zone z1


def test_unknown_consumer_site_gives_unknown_except_same_site() -> None:
    assert derive_tier("x", "a", SITES) == UNKNOWN
    assert derive_tier("x", "x", SITES) == SAME_SITE


def entry(
    site: str,
    tier: str,
    score: float = 0.0,
    fresh: bool = True,
    admission: str = NEW_AND_EXISTING,
    name: str = "m",
    cluster: str | None = None,
) -> Entry:
    return Entry(
        kind="inference_model",
        name=name,
        site=site,
        cluster=cluster or f"c-{site}",
        fresh=fresh,
        admission_state=admission,
        tier=tier,
        score=score,
    )


def sites_of(entries: list[Entry]) -> list[str]:
    return [e.site for e in entries]


MIXED = [
    entry("local-busy", SAME_SITE, score=0.1),
    entry("local-stale", SAME_SITE, score=0.9, fresh=False),
    entry("zone", SAME_ZONE, score=0.5),
    entry("far-idle", CROSS_REGION, score=0.95),
    entry("region-restricted", SAME_REGION, score=0.99, admission=EXISTING_ONLY),
    entry("unknown", UNKNOWN, score=0.7),
]


def test_geography_first_table() -> None:
    ordered = order(list(MIXED), "geographyFirst")
    assert sites_of(ordered) == ["local-busy", "local-stale", "zone", "far-idle", "unknown", "region-restricted"]
    assert [e.rank for e in ordered] == list(range(6))
    assert [e.selection_group for e in ordered] == [0, 1, 2, 3, 4, 5]


def test_score_first_table() -> None:
    ordered = order(list(MIXED), "scoreFirst")
    assert sites_of(ordered) == ["far-idle", "unknown", "zone", "local-busy", "local-stale", "region-restricted"]
    assert [e.selection_group for e in ordered] == [0, 0, 0, 0, 1, 2]


def test_score_first_uses_locality_after_equal_scores() -> None:
    ordered = order([entry("far", CROSS_REGION, 0.5), entry("near", SAME_REGION, 0.5)], "scoreFirst")
    assert sites_of(ordered) == ["near", "far"]


@pytest.mark.parametrize("policy", ["geographyFirst", "scoreFirst"])
def test_healthy_cross_region_ranks_before_overloaded_same_region(policy: str) -> None:
    healthy_far = entry("far", CROSS_REGION, score=0.0)
    overloaded_near = entry("near", SAME_REGION, score=1.0, admission=EXISTING_ONLY)
    ordered = order([overloaded_near, healthy_far], policy)
    assert sites_of(ordered) == ["far", "near"]
    assert ordered[0].selection_group == 0 and ordered[1].selection_group == 1


@pytest.mark.parametrize("policy", ["geographyFirst", "scoreFirst"])
def test_tie_break_is_site_then_name_then_cluster(policy: str) -> None:
    entries = [
        entry("s2", UNKNOWN, name="a", cluster="c1"),
        entry("s1", UNKNOWN, name="b", cluster="c1"),
        entry("s1", UNKNOWN, name="a", cluster="c2"),
        entry("s1", UNKNOWN, name="a", cluster="c1"),
    ]
    ordered = order(entries, policy)
    assert [(e.site, e.name, e.cluster) for e in ordered] == [
        ("s1", "a", "c1"),
        ("s1", "a", "c2"),
        ("s1", "b", "c1"),
        ("s2", "a", "c1"),
    ]


@pytest.mark.parametrize("policy", ["geographyFirst", "scoreFirst"])
def test_scores_never_split_a_group(policy: str) -> None:
    ordered = order([entry("x", SAME_SITE, 0.9), entry("y", SAME_SITE, 0.1)], policy)
    assert [e.selection_group for e in ordered] == [0, 0]
    assert sites_of(ordered) == ["x", "y"]


def test_groups_are_per_capability_and_contiguous() -> None:
    entries = [
        entry("a", SAME_SITE, name="m1"),
        entry("b", CROSS_REGION, name="m1"),
        entry("a", SAME_SITE, name="m2"),
        entry("c", CROSS_REGION, name="m2", fresh=False),
        entry("d", CROSS_REGION, name="m2"),
    ]
    ordered = order(entries, "geographyFirst")
    groups = {(e.name, e.site): e.selection_group for e in ordered}
    assert groups == {("m1", "a"): 0, ("m1", "b"): 1, ("m2", "a"): 0, ("m2", "d"): 1, ("m2", "c"): 2}
    assert [e.rank for e in ordered] == list(range(5))


def test_duplicates_are_removed_keeping_the_best() -> None:
    ordered = order([entry("a", SAME_SITE, 0.2), entry("a", SAME_SITE, 0.8), entry("b", SAME_SITE)], "scoreFirst")
    assert [(e.site, e.score, e.rank) for e in ordered] == [("a", 0.8, 0), ("b", 0.0, 1)]
