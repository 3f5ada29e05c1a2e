"""The grid-weighted-dynamic-routing demo's experimental half: pressure reduces a pool's available capacity.

The routing guide gives the demo's simplified model (7. Dynamic pressure-based weighting - experimental):
available capacity = configured capacity * (1 - normalized pressure), and a pool's traffic share is its
available capacity over the group's. No stable GridNetwork field turns it on: the implementation's
descriptor says which does (operator.dynamic_weights, extended feature dynamicWeights), and each pool's
pressure is its queue depth over a capacity of 10, scraped by its own site (scoringPolicy queueDepth).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness.demo_dir import DemoInputs
from harness.mesh import MeshScenario
from harness.timeline import Timeline
from suites.demos.combined_site import SITES
from suites.demos.weighted_pools import WeightedPools

__all__ = ["CAPACITY", "DynamicPools"]

#: Every pool's configured capacity, as in the demo's static baseline.
CAPACITY = 100
#: The queue capacity a pool's queue depth is normalized by (resources.metrics_config's).
QUEUE_CAPACITY = 10


class DynamicPools(WeightedPools):
    """The three pools at capacity 100 each, every pool's pressure scraped by its site, in one weightedRandom
    group whose weights the implementation derives from pressure (its `spec` switch)."""

    def __init__(self, world: MeshScenario, timeline: Timeline, spec: Mapping[str, Any],
                 queues: Mapping[str, float], inputs: DemoInputs | None = None) -> None:
        super().__init__(world, timeline, weights={site: CAPACITY for site in SITES}, inputs=inputs)
        if set(queues) != set(SITES):
            raise ValueError(f"one queue depth per pool ({', '.join(SITES)}): {dict(queues)}")
        self.spec = dict(spec)
        self.queues = dict(queues)

    def build(self) -> DynamicPools:
        for at, queue in self.queues.items():
            self.timeline.metric("queueDepth", queue, pool=self.short[at], site=at)
        self.world.network(selection="weightedRandom", routing="scoreFirst", scoring="queueDepth", spec=self.spec)
        self.populate()
        return self

    def _provide(self, site: str) -> None:
        self.world.provider(site, self.short[site], [self.model], cluster=self.world.mesh.site(site).routing_cluster,
                            capacity_weight=self.weights[site], queue=self.queues[site])

    def available(self) -> dict[str, float]:
        """Each pool's available capacity: configured capacity * (1 - normalized pressure)."""
        return {site: self.weights[site] * (1 - self.queues[site] / QUEUE_CAPACITY) for site in SITES}

    def shares(self) -> dict[str, float]:
        """Each pool's backend's expected share: its available capacity over the group's."""
        available = self.available()
        total = sum(available.values())
        return {self.backend(site): value / total for site, value in available.items()}

    def follows_pressure(self) -> Callable[[dict[str, Any]], bool]:
        """An overlay with the three pools in one group, each published weight's share of the group within
        one unit of rounding of its available capacity's (the weights' scale is the implementation's)."""
        expected = {site: value / sum(self.available().values()) for site, value in self.available().items()}

        def holds(envelope: dict[str, Any]) -> bool:
            if not self.one_group()(envelope):
                return False
            weights = self.weights_in(envelope)
            if not all(type(w) is int and w > 0 for w in weights.values()):
                return False
            total = sum(weights.values())
            return all(abs(weights[site] / total - share) <= 1 / total for site, share in expected.items())
        return holds

    def published(self, at: str) -> dict[str, Any]:
        """`at`'s published weight per pool, for messages."""
        return {self.short[site]: weight for site, weight in self.weights_in(self.world.envelope(at)).items()}
