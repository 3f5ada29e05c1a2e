"""The grid-combined-site demo as a scenario: three sites, each both consumer and provider.

The demo (praxis-proxy/demos, demos/grid-combined-site) runs west, central and east, each with a consumer
gateway, a provider gateway and a private model server, on the grid's default policies (scoringPolicy and
routingPolicy omitted: noMetrics, geographyFirst). Here each site's model server is a fake backend, each
site's operator is the implementation under test, and the harness's certificates stand in for the demo's.
Everything a test does and sees goes on its timeline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness import mesh_oracle as oracle
from harness import resources
from harness.demo_dir import DemoInputs
from harness.gateway_config import SESSION_HEADER
from harness.grid import Gateway, Reply
from harness.mesh import MeshScenario
from harness.timeline import Timeline
from harness.timeouts import timeouts
from harness.waiting import poll_until
from suites.demos.serving import revision_of, wait_accepted_and_serving

__all__ = ["README", "SITES", "TOPOLOGY", "CombinedSite"]

TOPOLOGY = "combined-site"
SITES: tuple[str, ...] = ("west", "central", "east")
README = "praxis-proxy/demos, demos/grid-combined-site/README.md"


class CombinedSite:
    """One test's copy of the demo: its network on every site with the default policies, each site trusting
    the other two, and one provider per site serving the demo's model from that site's backend."""

    def __init__(self, world: MeshScenario, timeline: Timeline, inputs: DemoInputs | None = None) -> None:
        """`inputs` are a demo folder's (``--demo-dir``): its model, network, provider names, geography and
        policies; each test still gets its own network and providers, named after the folder's."""
        self.world = world
        self.timeline = timeline
        self.inputs = inputs
        self.model = inputs.model if inputs is not None and inputs.model else world.model("qwen3")
        if inputs is not None and inputs.network:
            world.net = f"{world.tag}-{inputs.network}"
        self.short = {site: (inputs.providers.get(site, site) if inputs is not None else site) for site in SITES}
        self.consumers: dict[str, Gateway] = {}

    # ----------------------------------------------------------------------------------- the grid

    def provider_name(self, site: str) -> str:
        return f"{self.world.tag}-{self.short[site]}"

    def backend(self, site: str) -> str:
        """The fake backend standing in for `site`'s private model server."""
        return self.world.mesh.site(site).backend

    def site_of(self, backend: str | None) -> str | None:
        return next((site for site in SITES if self.backend(site) == backend), None)

    def build(self) -> CombinedSite:
        inputs = self.inputs
        # scoringPolicy and routingPolicy omitted, as in the demo (or as the demo folder's network has them)
        self.world.network(scoring=inputs.scoring if inputs else None, routing=inputs.routing if inputs else None)
        for at in SITES:
            region, zone = inputs.geography.get(at, (None, None)) if inputs else (None, None)
            self.world.apply(at, resources.grid_site(at, self.world.net, region=region, zone=zone, phase="Active"))
        self.trust_each_other()
        for at in SITES:
            self._provide(at)
        for at in SITES:
            self.wait_overlay(at, self.holds_all_local_first(at),
                              what=f"every site's candidate for {self.model}, {at}'s own first")
        return self

    def trust_each_other(self, sites: Sequence[str] = SITES) -> None:
        """Every site of `sites` trusting each of the others (a GridSite pinned to its gateway certificate)."""
        for at in sites:
            for of in sites:
                if of != at:
                    self.world.trust(at, of)

    def holds_all_local_first(self, at: str) -> Callable[[dict[str, Any]], bool]:
        """An overlay of `at` holding one candidate per site, `at`'s own first."""
        return lambda envelope: self.local_first(at, self.sites_in(envelope))

    def sites_in(self, envelope: Mapping[str, Any] | None) -> list[str]:
        """The sites of the overlay's candidates for the demo's model, in the overlay's order."""
        return [str(c.get("site")) for c in oracle.candidates_for(envelope, self.model)]

    @staticmethod
    def local_first(at: str, sites: Sequence[str]) -> bool:
        """One candidate per site, `at`'s own first (the order of the other two is the tie-break's)."""
        return len(sites) == len(SITES) and set(sites) == set(SITES) and sites[0] == at

    def wait_overlay(self, at: str, until: Callable[[dict[str, Any]], bool], *, what: str) -> dict[str, Any]:
        """Wait for `at`'s rendered overlay to satisfy `until`; records the revision it reached."""
        envelope = self.world.wait_envelope(at, until, what=what)
        self.timeline.revision("rendered", revision_of(envelope), site=at)
        return envelope

    def withdraw(self, site: str) -> None:
        """Withdraw `site`'s provider from the grid (its InferenceProvider is deleted)."""
        self.timeline.action(f"withdraw {site}'s provider", site=site)
        self.world.mesh.site(site).control.delete("InferenceProvider", self.provider_name(site))

    def restore(self, site: str) -> None:
        """Return `site`'s provider to the grid."""
        self.timeline.action(f"restore {site}'s provider", site=site)
        self._provide(site)

    def _provide(self, site: str) -> None:
        """`site`'s provider, served through its own provider gateway as in the demo (consumer gateway ->
        provider gateway -> private inference), so every path, local or remote, is the mTLS hop."""
        self.world.provider(site, self.short[site], [self.model], cluster=self.world.mesh.site(site).routing_cluster,
                            capacity_weight=self.capacity_weight(site))

    def capacity_weight(self, site: str) -> int | None:
        """`site`'s provider's capacityWeight; None (the default) in this demo."""
        return None

    # ----------------------------------------------------------------------------------- traffic

    def consumer(self, at: str) -> Gateway:
        """`at`'s consumer gateway on `at`'s overlay (delivered by overlay-sync), reaching every site's
        provider, its own included, through that site's provider gateway over the mTLS hop."""
        envelope = self.world.envelope(at)
        hops = {str(c["site"]): str(c["stable_id"]) for c in oracle.candidates_for(envelope, self.model)}
        gateway = self.world.consumer(at, hops, self.model)
        chain = self.world.chain_of(gateway)
        wait_accepted_and_serving(self.timeline, chain, gateway, revision_of(envelope), self.model, at)
        self.consumers[at] = gateway
        return gateway

    def request(self, at: str, *, session: str | None = None) -> Reply:
        """One request of `at`'s workload to its consumer gateway; its outcome goes on the timeline."""
        headers = {SESSION_HEADER: session} if session else None
        reply = self.consumers[at].request(self.model, headers=headers)
        self.timeline.request(reply.backend if reply.status == 200 else None, reply.status, site=at,
                              session=session)
        return reply

    def serve(self, at: str, n: int, *, session: str | None = None) -> list[Reply]:
        return [self.request(at, session=session) for _ in range(n)]

    def wait_served_from(self, at: str, sites: Sequence[str], *, what: str, session: str | None = None) -> Reply:
        """Poll `at`'s gateway until a request is served by a backend of one of `sites`."""
        wanted = {self.backend(s) for s in sites}
        return poll_until(lambda: self.request(at, session=session),
                          lambda r: r.status == 200 and r.backend in wanted, timeout=timeouts().remote_route,
                          what=what, describe=lambda r: f"{r.describe()}\n{self.consumers[at].overlay_log()}")
