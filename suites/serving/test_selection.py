"""The pick among sites with room: two choices by ceiling taking the lower saturation at three or more, a
weighted pick between two; and the selections metric that says which was used.

The sites publish their load by hand (the fake pool's `set`), so the saturation the gateway reads stays
what the test set however many requests it sends, and every request has a distinct prompt, so prefix
affinity has nothing to hold on to. Smoothing is set to 1 where a test needs the saturations exact from
the first sample (what is judged there is the pick, not the smoothing).
"""

from __future__ import annotations

import pytest

from harness.serving.grid import ServingGateway, ServingGrid
from harness.serving.judge import absence_sample_size, assert_absent, assert_at_least, plan_at_least
from harness.serving.metrics import CEILING, PATHS, RHO, WEIGHT, selections_since
from harness.stats import assert_distribution, plan_distribution
from harness.timeline import record_action

GUIDE = "routing guide 7b. Measured site availability"
PICK = f"{GUIDE}: \"picks among the sites with room by it: two choices by ceiling taking the lower saturation at " \
       "three or more, a weighted pick between two.\""
EXACT = {"smoothing": 1.0}
#: What a weighted pick over the three sites would give the busier one in the two-choices tests, at least
#: (capacity over 1 + rho: 4.57 of 20.57), and how surely the sample catches it.
WEIGHTED_SHARE = 0.2
MISS = 1e-6
#: The most two choices can give the busier of three equal sites: both draws landing on it, (1/3)^2, when
#: the draws may repeat (the guide does not say they are distinct); the other two get the rest.
REPEATED_DRAWS_SHARE = 1.0 / 9.0
OTHERS = "site-a or site-b"
#: The core judgement: site-a and site-b together get at least their threshold, against a weighted pick
#: leaving them only 80%.
IDLE_PAIR = plan_at_least(OTHERS, 1.0 - REPEATED_DRAWS_SHARE, 1.0 - WEIGHTED_SHARE)


def _publish(grid: ServingGrid, running: dict[str, float]) -> None:
    for site, value in running.items():
        grid.publish(site, running=value, waiting=0)


def _ready(gateway: ServingGateway, rho: dict[str, float]) -> None:
    gateway.wait_until(lambda m: all(abs(m.rho.get(s, -1.0) - r) < 1e-9 for s, r in rho.items()),
                       what=f"saturations {rho}")


def _three_with_one_busier(three: ServingGrid, model: str) -> ServingGateway:
    """Three sites at the same ceiling (the floor, 8) with room: site-a and site-b idle, site-c 6 of 8 (0.75)."""
    _publish(three, {"site-a": 0, "site-b": 0, "site-c": 6})
    gateway = three.start_gateway(model, availability=EXACT, prefix_affinity={})
    _ready(gateway, {"site-a": 0.0, "site-b": 0.0, "site-c": 0.75})
    return gateway


@pytest.mark.conformance(id="SERV-TWO-CHOICES", profile="serving", level="core", feature="sitePick", spec=PICK,
                         statements=["RG-AVAIL-PICK"])
def test_three_sites_with_room_get_two_choices_taking_the_lower_saturation(three: ServingGrid, model: str) -> None:
    """Three sites at the same ceiling (the floor, 8) have room; site-c is clearly the most saturated (6 of 8
    running, 0.75) and site-a and site-b idle. Two choices taking the lower saturation give site-c a request
    only when both draws land on it: at most 1/9 of the traffic (none when the draws are distinct), so
    site-a and site-b together get at least 8/9, and each of them serves. Judged at the planned n: the pair
    must get at least the threshold, with false failure <= 1e-6 for 8/9 and power >= 0.99 against a
    weighted pick giving site-c 20% (capacity over 1 + rho gives it 22%, by ceiling alone 33%)."""
    gateway = _three_with_one_busier(three, model)
    record_action(f"sample: {IDLE_PAIR.describe()}")
    batch = gateway.send(IDLE_PAIR.sample_size)
    assert batch.statuses() == {200: IDLE_PAIR.sample_size}, batch.describe()
    counts = batch.by_site()
    assert counts["site-a"] and counts["site-b"], f"both idle sites serve: {batch.describe()}"
    pair = {OTHERS: counts["site-a"] + counts["site-b"], "site-c": counts["site-c"]}
    assert_at_least(pair, IDLE_PAIR, what="the two idle sites under two choices")


@pytest.mark.conformance(id="SERV-EXT-TWO-DISTINCT-DRAWS", profile="serving", level="extended",
                         feature="distinctDraws",
                         spec="praxis-proxy/grid gateway/ai-grid-filters/src/route.rs two_choices: \"Two distinct "
                              "draws from `sites` by capacity, taking the lower rho\"; " + PICK,
                         statements=["RG-AVAIL-PICK"])
def test_the_two_choices_are_two_distinct_sites(three: ServingGrid, model: str) -> None:
    """The same three sites: with two distinct draws taking the lower saturation, site-c (0.75) is never
    picked, so it gets none of the sample. Error rates: a correct gateway sends site-c nothing (false failure
    0); the sample is planned so a pick giving site-c 20% or more sends it at least one request with
    probability >= 1 - 1e-6."""
    gateway = _three_with_one_busier(three, model)
    n = absence_sample_size(WEIGHTED_SHARE, miss=MISS)
    record_action(f"sample of {n}: site-c must get none (a {WEIGHTED_SHARE:.0%} share is caught with probability "
                  f">= {1 - MISS:g})")
    batch = gateway.send(n)
    assert batch.statuses() == {200: n}, batch.describe()
    assert_absent(batch.by_site(), "site-c", alternative=WEIGHTED_SHARE, miss=MISS,
                  what="the more saturated site under two distinct draws")


#: The two sites' published running (of a ceiling of 8) in the weighted pick tests: 0.125 and 0.75 saturated.
BETWEEN = {"site-a": 1.0, "site-b": 6.0}


def _two_apart(two: ServingGrid, model: str) -> ServingGateway:
    """Two sites at the same ceiling (the floor, 8) with room: site-a 0.125 saturated, site-b 0.75."""
    _publish(two, BETWEEN)
    gateway = two.start_gateway(model, availability=EXACT, prefix_affinity={})
    _ready(gateway, {"site-a": 0.125, "site-b": 0.75})
    return gateway


#: site-a's share by capacity over 1 + rho (praxis-proxy/grid route.rs): (8/1.125) / (8/1.125 + 8/1.75).
FORMULA_SHARE = (8 / 1.125) / (8 / 1.125 + 8 / 1.75)
#: The core judgement: site-a gets at least 58% (the formula gives 60.9%), against a pick blind to
#: saturation (50%).
LESS_SATURATED = plan_at_least("site-a", 0.58, 0.5)


@pytest.mark.conformance(id="SERV-BETWEEN-TWO", profile="serving", level="core", feature="sitePick", spec=PICK,
                         statements=["RG-AVAIL-PICK"])
def test_two_sites_with_room_get_a_weighted_pick(two: ServingGrid, model: str) -> None:
    """Two sites with room at the same ceiling, site-a 0.125 saturated and site-b 0.75: both serve (two
    choices between two would always take site-a) and the less saturated site-a serves more. Judged at the
    planned n: site-a must get at least the threshold, with false failure <= 1e-6 for a pick giving it 58%
    (the public formula gives 60.9%) and power >= 0.99 against a pick blind to saturation (50%); site-b
    serving nothing fails surely."""
    gateway = _two_apart(two, model)
    record_action(f"sample: {LESS_SATURATED.describe()}")
    batch = gateway.send(LESS_SATURATED.sample_size)
    assert batch.statuses() == {200: LESS_SATURATED.sample_size}, batch.describe()
    counts = batch.by_site()
    assert counts["site-b"] > 0, f"a weighted pick sends the busier of two sites some traffic: {batch.describe()}"
    assert_at_least(counts, LESS_SATURATED, what="the less saturated of two sites")


@pytest.mark.conformance(id="SERV-EXT-BETWEEN-TWO-SHARE", profile="serving", level="extended",
                         feature="betweenTwoShare",
                         spec="praxis-proxy/grid gateway/ai-grid-filters/src/route.rs between_two: \"A pick between "
                              "two sites by capacity over 1 + rho, each share clamped to 0.1..0.9\"; " + PICK,
                         statements=["RG-AVAIL-PICK"])
def test_the_pick_between_two_follows_capacity_over_one_plus_rho(two: ServingGrid, model: str) -> None:
    """Two sites at the ceiling 8, site-a 0.125 saturated and site-b 0.75: site-a's share is
    (8/1.125) / (8/1.125 + 8/1.75) = 60.9%, judged as a distribution (false failure <= 1e-6, power >= 0.99
    against a 5-point shift)."""
    gateway = _two_apart(two, model)
    plan = plan_distribution({"site-a": FORMULA_SHARE, "site-b": 1.0 - FORMULA_SHARE})
    record_action(f"sample: {plan.describe()}")
    batch = gateway.send(plan.sample_size, concurrency=24)
    assert batch.statuses() == {200: plan.sample_size}, batch.describe()
    assert_distribution(batch.by_site(), plan, what="capacity over 1 + rho")


#: site-a's taught ceiling in the clamp test: by capacity over 1 + rho it would take 200 / (200 + 8/1.5) = 97%.
HUGE = 200.0


@pytest.mark.conformance(id="SERV-EXT-BETWEEN-TWO-CLAMP", profile="serving", level="extended",
                         feature="betweenTwoShare",
                         spec="praxis-proxy/grid gateway/ai-grid-filters/src/route.rs between_two: \"each share "
                              "clamped to 0.1..0.9\"",
                         statements=["RG-AVAIL-PICK"])
def test_the_pick_between_two_keeps_each_share_within_a_tenth(two: ServingGrid, model: str) -> None:
    """With explore_floor 0 (no lift), site-a's ceiling taught 200 and idle, site-b at the floor 8 and half
    saturated: capacity over 1 + rho would give site-a 97%, the clamp holds it at 90%; judged as a
    distribution (false failure <= 1e-6, power >= 0.99 against a 5-point shift)."""
    _publish(two, {"site-a": HUGE, "site-b": 4.0})
    gateway = two.start_gateway(model, availability={**EXACT, "explore_floor": 0.0}, prefix_affinity={})
    gateway.wait_ceiling("site-a", lambda c: c >= HUGE - 1e-6, what=f"to learn {HUGE:g}")
    _publish(two, {"site-a": 0.0})
    _ready(gateway, {"site-a": 0.0, "site-b": 0.5})
    plan = plan_distribution({"site-a": 0.9, "site-b": 0.1})
    record_action(f"sample: {plan.describe()}")
    batch = gateway.send(plan.sample_size, concurrency=24)
    assert batch.statuses() == {200: plan.sample_size}, batch.describe()
    assert_distribution(batch.by_site(), plan, what="the clamped share")


#: Requests per situation in the selection metric tests.
SELECTIONS_N = 100
FULL = {"running": 8.0, "waiting": 1.0}


def _full(grid: ServingGrid, sites: list[str]) -> None:
    for site in sites:
        grid.publish(site, **FULL)


@pytest.mark.conformance(id="SERV-SELECTIONS-METRIC", profile="serving", level="core", feature="routeMetrics",
                         spec=f"{GUIDE}, tuning: \"grid_route_selections_total{{path}} should be mostly two_choices "
                              "(much by_capacity means the grid is full or ceiling_floor is too low)\"",
                         statements=["RG-AVAIL-METRIC-SELECTIONS"])
def test_selections_are_mostly_two_choices_with_room_and_by_capacity_when_full(three: ServingGrid,
                                                                                model: str) -> None:
    """Three idle sites: of 100 requests, grid_route_selections_total{path="two_choices"} counts at least 90.
    Then every site publishes 8 running on its ceiling of 8 with 1 waiting (full, no room; shedding is off):
    of 100 more, {path="by_capacity"} counts at least 90, and every request is still served."""
    gateway = three.start_gateway(model, availability=EXACT, prefix_affinity={})
    gateway.wait_measured()
    before = gateway.metrics()
    batch = gateway.send(SELECTIONS_N)
    assert batch.statuses() == {200: SELECTIONS_N}, batch.describe()
    with_room = selections_since(before, gateway.metrics())
    assert with_room.get("two_choices", 0) >= 0.9 * SELECTIONS_N, f"selections with room everywhere: {with_room}"
    _full(three, list(three.names))
    _ready(gateway, {site: 1.0 for site in three.names})
    before = gateway.metrics()
    batch = gateway.send(SELECTIONS_N)
    assert batch.statuses() == {200: SELECTIONS_N}, batch.describe()
    full = selections_since(before, gateway.metrics())
    assert full.get("by_capacity", 0) >= 0.9 * SELECTIONS_N, f"selections with every site full: {full}"


#: The paths each situation counts: sites with room, and those made full.
SITUATIONS = [((), "two_choices"), (("site-c",), "between_two"), (("site-b", "site-c"), "lone"),
              (("site-a", "site-b", "site-c"), "by_capacity")]


@pytest.mark.conformance(id="SERV-EXT-SELECTION-PATHS", profile="serving", level="extended",
                         feature="routeMetricLabels",
                         spec="praxis-proxy/grid gateway/ai-grid-filters/src/route.rs select: grid_route_selections_"
                              "total{path} of by_capacity, lone, between_two, two_choices by the number of sites with "
                              "room; " + PICK,
                         statements=["RG-AVAIL-METRIC-SELECTIONS", "RG-AVAIL-PICK"])
def test_each_selection_path_counts_its_situation(three: ServingGrid, model: str) -> None:
    """With three, two, one and no site with room (the others publishing 8 running and 1 waiting on a ceiling
    of 8), 20 requests each count exactly 20 under two_choices, between_two, lone and by_capacity in turn,
    and nothing under another path; no path label outside those four appears."""
    gateway = three.start_gateway(model, availability=EXACT, prefix_affinity={})
    gateway.wait_measured()
    for full_sites, path in SITUATIONS:
        _full(three, list(full_sites))
        _ready(gateway, {site: 1.0 if site in full_sites else 0.0 for site in three.names})
        before = gateway.metrics()
        batch = gateway.send(20)
        assert batch.statuses() == {200: 20}, batch.describe()
        after = gateway.metrics()
        counted = {p: n for p, n in selections_since(before, after).items() if n}
        assert counted == {path: 20}, f"{len(full_sites)} full site(s): expected 20 {path}, counted {counted}"
        assert set(after.selections) <= set(PATHS), f"unknown path labels: {sorted(after.selections)}"


@pytest.mark.conformance(id="SERV-EXT-SITE-LABELS", profile="serving", level="extended",
                         feature="routeMetricLabels",
                         spec="praxis-proxy/grid gateway/ai-grid-filters: grid_route_site_ceiling, grid_route_site_rho "
                              "and grid_route_site_weight by site and cluster")
def test_the_per_site_gauges_name_each_site_and_its_cluster(three: ServingGrid, model: str) -> None:
    """Once the sites are measured, grid_route_site_ceiling, _rho and _weight each carry one series per site,
    labelled exactly site and cluster, with the cluster the serving config routes that site's candidate to."""
    gateway = three.start_gateway(model, availability={})
    metrics = gateway.wait_measured()
    expected = {(site, three.cluster(site)) for site in three.names}
    for name in (CEILING, RHO, WEIGHT):
        series = metrics.labels[name]
        assert all(set(labels) == {"site", "cluster"} for labels in series), f"{name}: {series}"
        assert {(labels["site"], labels["cluster"]) for labels in series} == expected, f"{name}: {series}"
        assert len(series) == len(expected), f"{name}: one series per site, got {series}"
