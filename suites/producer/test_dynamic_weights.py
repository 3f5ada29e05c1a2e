"""Experimental pressure-driven weights (extended feature dynamicWeights): available capacity as traffic_weight.

The routing guide documents the experimental three-pool demo's model (7. Dynamic pressure-based weighting -
experimental): available capacity = configured capacity * (1 - normalized pressure), and a provider's
traffic share is its available capacity over its group's. No stable GridNetwork field turns it on, so the
implementation's descriptor gives the spec fragment that does (operator.dynamic_weights); only the shares
the published weights give are judged, not their scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from harness import producer_oracle as oracle
from harness.producer_support import Scenario

DYNAMIC = ("routing-guide#7-dynamic-pressure-based-weighting---experimental: \"available capacity = configured "
           "capacity * (1 - normalized pressure)\"; \"traffic share = provider available capacity / group "
           "available capacity\"")
#: capacityWeight and queue depth (of a capacity of 10) per provider, all below the admission threshold.
POOLS: Mapping[str, tuple[int, float]] = {"pa": (100, 5.0), "pb": (100, 0.0), "pc": (40, 2.5)}


def shares(envelope: Mapping[str, Any]) -> dict[str, float]:
    """Each candidate's share of the group's published weight, by cluster."""
    published = {cluster: c.get("traffic_weight") for cluster, c in oracle.by_cluster(envelope).items()}
    assert all(type(w) is int and 1 <= w <= 1000 for w in published.values()), f"integer weights 1-1000: {published}"
    weights = {cluster: int(w) for cluster, w in published.items() if w is not None}
    total = sum(weights.values())
    return {cluster: weight / total for cluster, weight in weights.items()}


def expected(pools: Mapping[str, tuple[int, float]]) -> dict[str, float]:
    available = {short: capacity * (1 - queue / 10) for short, (capacity, queue) in pools.items()}
    total = sum(available.values())
    return {short: value / total for short, value in available.items()}


def matches(envelope: Mapping[str, Any], pools: Mapping[str, tuple[int, float]]) -> bool:
    """The published shares are the available capacities' within one unit of rounding of the weights."""
    got = shares(envelope)
    total = sum(int(c["traffic_weight"]) for c in oracle.by_cluster(envelope).values())
    return set(got) == set(pools) and all(abs(got[k] - v) <= 1 / total for k, v in expected(pools).items())


@pytest.mark.conformance(id="PROD-WEIGHT-DYNAMIC", profile="producer", level="extended", feature="dynamicWeights",
                         spec=DYNAMIC, statements=["RG-DYNAMIC-AVAILABLE-CAPACITY", "RG-DYNAMIC-TRAFFIC-SHARE"])
def test_weights_follow_each_providers_available_capacity(scenario: Scenario, impl: Any) -> None:
    """Capacities 100, 100 and 40 at pressures 0.5, 0 and 0.25 publish weights in the proportion 50:100:30;
    once pa's queue drains, 100:100:30 at the next reconcile.

    Fails if dynamic placement copies capacityWeight (pa would have pb's share), ignores a pressure change,
    or applies the pressure the wrong way round.
    """
    scenario.set_pools({short: {"queueDepth": queue, "healthy": 1} for short, (_, queue) in POOLS.items()})
    for short, (capacity, _) in POOLS.items():
        scenario.provider(short, capacity_weight=capacity, metrics=True)
    scenario.network(routing="scoreFirst", scoring="queueDepth", selection="weightedRandom",
                     **dict(impl.operator.dynamic_weights))
    envelope = scenario.envelope(lambda env: len(oracle.candidates(env)) == len(POOLS), what="three candidates")
    assert matches(envelope, POOLS), f"shares {shares(envelope)}, expected {expected(POOLS)}"
    drained = {**POOLS, "pa": (100, 0.0)}
    scenario.set_metrics("pa", queueDepth=0, healthy=1)
    envelope = scenario.reconcile()
    assert matches(envelope, drained), f"after pa drained: shares {shares(envelope)}, expected {expected(drained)}"
