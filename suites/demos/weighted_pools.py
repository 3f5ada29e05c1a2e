"""The grid-weighted-dynamic-routing demo as a scenario: three provider pools, one per site.

The demo (praxis-proxy/experimental, demos/grid-weighted-dynamic-routing) runs pool A, B and C in three
clusters, each with a consumer gateway, a provider gateway (mTLS) and its model servers, and has a
consumer gateway pick among the three provider gateways by weighted random within the first viable
selection group. Here the three pools run on the combined-site sites (west, central, east: a session's
demos share those clusters), each pool's model servers are its site's fake backend, and static placement
with weightedRandom publishes each provider's capacityWeight as its traffic_weight. scoreFirst with the
default noMetrics scoring keeps the three pools in one selection group, as the demo needs (geographyFirst
would put each consumer's own pool in a group of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness import mesh_oracle as oracle
from harness.demo_dir import DemoInputs
from harness.mesh import MeshScenario
from harness.timeline import Timeline
from suites.demos.combined_site import SITES, CombinedSite

__all__ = ["POOLS", "README", "STATIC", "TAKES", "WeightedPools"]

README = "praxis-proxy/experimental, demos/grid-weighted-dynamic-routing/README.md"
#: What the scenario takes from a demo folder (--demo-dir): its pools and weights are its claims.
TAKES: frozenset[str] = frozenset({"model", "network"})
#: The demo's pools by the site each runs on here.
POOLS: Mapping[str, str] = {"west": "pool-a", "central": "pool-b", "east": "pool-c"}
#: Relative capacities of pools A, B and C: a 50/30/20 split.
STATIC: Mapping[str, int] = {"west": 5, "central": 3, "east": 2}


class WeightedPools(CombinedSite):
    """One test's copy of the demo: its network (static placement, weightedRandom, scoreFirst) on every
    site, each site trusting the other two, and one provider per pool with a capacityWeight."""

    def __init__(self, world: MeshScenario, timeline: Timeline, weights: Mapping[str, int] = STATIC,
                 inputs: DemoInputs | None = None) -> None:
        super().__init__(world, timeline, inputs)
        self.short = dict(POOLS)
        if set(weights) != set(SITES):
            raise ValueError(f"one weight per pool ({', '.join(SITES)}): {dict(weights)}")
        self.weights = dict(weights)

    def capacity_weight(self, site: str) -> int | None:
        return self.weights[site]

    def build(self) -> WeightedPools:
        self.world.network(selection="weightedRandom", static_placement=True, routing="scoreFirst")
        return self.populate()

    def populate(self) -> WeightedPools:
        """Each site trusting the other two, one provider per pool, every site's overlay with the three."""
        self.trust_each_other()
        for at in SITES:
            self._provide(at)
        for at in SITES:
            self.wait_overlay(at, self.one_group(), what=f"{at}'s overlay with every pool in one selection group")
        return self

    def reweight(self, weights: Mapping[str, int]) -> None:
        """Give each pool a new capacityWeight (its InferenceProvider applied again)."""
        self.timeline.action(f"reweight pools to {dict(weights)}")
        self.weights = dict(weights)
        for at in SITES:
            self._provide(at)

    def weights_in(self, envelope: Mapping[str, Any] | None) -> dict[str, Any]:
        """Each site's candidate traffic_weight for the demo's model in an overlay."""
        return {str(c.get("site")): c.get("traffic_weight") for c in oracle.candidates_for(envelope, self.model)}

    def one_group(self, *, weighted: bool = False) -> Callable[[dict[str, Any]], bool]:
        """An overlay with every pool in one selection group (`weighted`: each with its current weight)."""
        def holds(envelope: dict[str, Any]) -> bool:
            candidates = oracle.candidates_for(envelope, self.model)
            groups = {c.get("selection_group") for c in candidates}
            sites = sorted(str(c.get("site")) for c in candidates)
            if sites != sorted(SITES) or len(groups) != 1:
                return False
            return not weighted or self.weights_in(envelope) == self.weights
        return holds

    def wait_weights(self, at: str, *, what: str) -> dict[str, Any]:
        """Wait for `at`'s overlay to publish every pool's current capacityWeight as its traffic_weight."""
        return self.wait_overlay(at, self.one_group(weighted=True), what=what)

    def shares(self) -> dict[str, float]:
        """Each pool's backend's expected share: its weight over the group's."""
        total = sum(self.weights.values())
        return {self.backend(site): weight / total for site, weight in self.weights.items()}
