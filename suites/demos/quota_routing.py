"""The grid-distributed-token-rate-limit demo's routing as a scenario: admitted requests rotate across three sites.

The demo (praxis-proxy/experimental, demos/grid-distributed-token-rate-limit) puts two consumer gateways
behind one shared token quota and lets Grid publish three provider gateways (west, central, east) in one
active group with round-robin selection; Praxis picks a provider locally from its accepted overlay. Here the
combined-site sites play the three provider clusters, each provider reached through its site's provider
gateway over the mTLS hop, and the network is scoreFirst with noMetrics (one group across sites) and
roundRobin. The quota layer is not AGN routing: every request here is one the quota admitted.
"""

from __future__ import annotations

from typing import Any

from harness import mesh_oracle as oracle
from harness.demo_dir import DemoInputs
from harness.grid import Gateway
from harness.mesh import MeshScenario
from harness.timeline import Timeline
from suites.demos.combined_site import SITES, CombinedSite

__all__ = ["README", "TAKES", "QuotaRouting"]

README = "praxis-proxy/experimental, demos/grid-distributed-token-rate-limit/README.md"
#: What the scenario takes from a demo folder (--demo-dir): its one roundRobin group is its claim.
TAKES: frozenset[str] = frozenset({"model", "network", "providers"})


class QuotaRouting(CombinedSite):
    """One test's copy of the demo's provider tier: a provider per site, every site trusting the other two,
    all three in west's first group with roundRobin."""

    def __init__(self, world: MeshScenario, timeline: Timeline, inputs: DemoInputs | None = None) -> None:
        super().__init__(world, timeline, inputs)
        if inputs is None or not inputs.model:
            self.model = world.model("quota")

    def build(self) -> QuotaRouting:
        self.world.network(routing="scoreFirst", scoring="noMetrics", selection="roundRobin")
        self.trust_each_other()
        for at in SITES:
            self._provide(at)
        self.wait_overlay("west", self.one_group, what="west's overlay with every site's provider in one group")
        return self

    def one_group(self, envelope: dict[str, Any]) -> bool:
        candidates = oracle.candidates_for(envelope, self.model)
        return sorted(str(c.get("site")) for c in candidates) == sorted(SITES) and \
            len({c.get("selection_group") for c in candidates}) == 1

    def another_consumer(self, at: str) -> Gateway:
        """A second consumer gateway at `at`, on the same overlay (the demo's consumer gateway B)."""
        first = self.consumers.get(at)
        gateway = self.consumer(at)
        if first is not None:
            self.consumers[at] = first
        return gateway

    def served_sites(self, gateway: Gateway, n: int, *, at: str = "west") -> list[str]:
        """The site that served each of `n` requests sent to `gateway` (statuses other than 200 named)."""
        out = []
        for _ in range(n):
            reply = gateway.request(self.model)
            self.timeline.request(reply.backend if reply.status == 200 else None, reply.status, site=at)
            out.append((self.site_of(reply.backend) or "<unknown>") if reply.status == 200 else f"<{reply.status}>")
        return out
