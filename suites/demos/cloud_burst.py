"""The grid-cloud-burst demo's routing as a scenario: local pools first, then the region, then external capacity.

The demo (praxis-proxy/experimental, demos/grid-cloud-burst) runs consumer gateways in front of local
inference pools, regional pools and an external provider, and shows requests leaving the local pools only
when queue pressure has restricted them, first to the region, then to the external overflow. Here, on the
combined-site sites, west is the consumer's site with two local pools (its two fake backends), central is
another zone of west's region (regional capacity) and east a provider of another region declared
``backendKind: api_provider`` (the external overflow). The network is the demo's composition in stable API
terms: geographyFirst (locality groups), roundRobin inside the chosen group, queueDepth scoring with
instantaneous admission (admissionPolicy omitted), so a local pool whose queue reaches the admission
threshold is restricted to existing_only at the next reconcile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness import mesh_oracle as oracle
from harness import resources
from harness.demo_dir import DemoInputs
from harness.grid import Gateway
from harness.mesh import MeshScenario
from harness.timeline import Timeline
from harness.timeouts import timeouts
from harness.waiting import poll_until
from suites.demos.combined_site import CombinedSite
from suites.demos.serving import revision_of

__all__ = ["CloudBurst", "EXTERNAL", "LOCAL", "PRESSURED", "README", "REGIONAL", "TAKES"]

README = "praxis-proxy/experimental, demos/grid-cloud-burst/README.md"
#: What the scenario takes from a demo folder (--demo-dir): its groups, pools and policies are its claims.
TAKES: frozenset[str] = frozenset({"model", "network"})
#: The consumer's local pools, by the index of west's fake backend each runs on.
LOCAL: tuple[str, ...] = ("pool-west-a", "pool-west-b")
REGIONAL = "pool-central"
EXTERNAL = "external-east"
#: A queue depth over the admission threshold (9 of a capacity of 10 is 0.9 >= 0.85), and an idle one.
PRESSURED, IDLE = 9, 0
#: Where each site sits: central is another zone of west's region, east another region.
GEOGRAPHY: Mapping[str, tuple[str, str]] = {"west": ("west", "west-1"), "central": ("west", "west-2"),
                                            "east": ("east", "east-1")}
NEW, EXISTING_ONLY = "new_and_existing", "existing_only"


class CloudBurst(CombinedSite):
    """One test's copy of the demo's routing: west's two queue-scored local pools, central's regional pool and
    east's external provider, in one network on the three sites, with west knowing every site's geography."""

    def __init__(self, world: MeshScenario, timeline: Timeline, inputs: DemoInputs | None = None) -> None:
        super().__init__(world, timeline, inputs)
        if inputs is None or not inputs.model:
            self.model = world.model("burst")
        west = world.mesh.site("west").site
        backends = list(west.providers)
        if len(backends) < len(LOCAL):
            raise ValueError(f"the cloud-burst scenario needs {len(LOCAL)} fake backends at west, it has {backends}")
        #: pool name -> the fake backend that serves it
        self.backends: dict[str, str] = {pool: backends[i] for i, pool in enumerate(LOCAL)}
        self.backends[REGIONAL] = world.mesh.site("central").backend
        self.backends[EXTERNAL] = world.mesh.site("east").backend

    # ----------------------------------------------------------------------------------- the grid

    def build(self) -> CloudBurst:
        world = self.world
        world.network(routing="geographyFirst", scoring="queueDepth", selection="roundRobin")
        for at, (region, zone) in GEOGRAPHY.items():
            world.apply(at, resources.grid_site(at, world.net, region=region, zone=zone, phase="Active"))
        for of in ("central", "east"):
            region, zone = GEOGRAPHY[of]
            world.trust("west", of, region=region, zone=zone)
        for pool in LOCAL:
            world.provider("west", pool, [self.model], backend=self.backends[pool], queue=IDLE)
        world.provider("central", REGIONAL, [self.model], cluster=world.mesh.site("central").routing_cluster)
        world.provider("east", EXTERNAL, [self.model], cluster=world.mesh.site("east").routing_cluster,
                       backend_kind="api_provider")
        self.wait_overlay("west", self.admitted(), what="west's overlay with all four pools admitted")
        return self

    def pool_of(self, backend: str | None) -> str | None:
        return next((pool for pool, served_by in self.backends.items() if served_by == backend), None)

    def groups(self, envelope: Mapping[str, Any] | None) -> list[set[str]]:
        """west's selection groups for the model, each as its pools, in group order."""
        by_group: dict[int, set[str]] = {}
        for candidate in oracle.candidates_for(envelope, self.model):
            group = by_group.setdefault(int(candidate.get("selection_group", 0)), set())
            group.add(_pool_of_candidate(candidate, self))
        return [by_group[g] for g in sorted(by_group)]

    def states(self, envelope: Mapping[str, Any] | None) -> dict[str, str]:
        return {_pool_of_candidate(c, self): str(c.get("admission_state")) for c in
                oracle.candidates_for(envelope, self.model)}

    def admitted(self) -> Callable[[dict[str, Any]], bool]:
        """An overlay of west holding all four pools, each admitted for new work."""
        return lambda envelope: self.states(envelope) == {pool: NEW for pool in self.backends}

    def tiers(self) -> Callable[[dict[str, Any]], bool]:
        """An overlay of west with every pool admitted: the local pools, the region, the external provider."""
        expected = [set(LOCAL), {REGIONAL}, {EXTERNAL}]
        return lambda envelope: self.groups(envelope) == expected and set(self.states(envelope).values()) == {NEW}

    def pressure(self, pools: tuple[str, ...], queue: float) -> None:
        """Set the queue depth each local pool in `pools` exports, and make west scrape it now."""
        for pool in pools:
            self.timeline.metric("queueDepth", queue, pool=pool, site="west")
            self.world.set_queue("west", pool, queue, backend=self.backends[pool])

    def withdraw_pool(self, at: str, pool: str) -> None:
        """Withdraw one provider from the grid (its InferenceProvider is deleted)."""
        self.timeline.action(f"withdraw {pool}", site=at)
        self.world.mesh.site(at).control.delete("InferenceProvider", f"{self.world.tag}-{pool}")

    # ----------------------------------------------------------------------------------- traffic

    def consumer(self, at: str = "west") -> Gateway:
        """west's consumer gateway on west's overlay: its local pools reached directly, central's and east's
        providers over the mTLS hop through those sites' provider gateways. A local pool's answer names no
        routing revision (only the hop carries one), so readiness is a request served by a local pool."""
        envelope = self.world.envelope(at)
        hops = {str(c["site"]): str(c["stable_id"]) for c in oracle.candidates_for(envelope, self.model)
                if c.get("site") != at}
        gateway = self.world.consumer(at, hops, self.model)
        self.consumers[at] = gateway
        revision = revision_of(envelope)
        if revision is not None:
            self.world.chain_of(gateway).wait_accepted(revision)
            self.timeline.revision("accepted", revision, site=at)
        self.wait_serving_pool(set(LOCAL), what=f"{at}'s gateway to serve its local pools")
        return gateway

    def served_pools(self, n: int, at: str = "west") -> list[tuple[int, str | None]]:
        """(status, pool) of `n` sessionless requests of `at`'s workload."""
        return [(r.status, self.pool_of(r.backend)) for r in self.serve(at, n)]

    def wait_serving_pool(self, pools: set[str], *, what: str, at: str = "west") -> None:
        """Poll `at`'s gateway until three requests in a row are served by `pools`.

        A local pool's answer names no routing revision, so the new snapshot is recognised by what it
        serves: three in a row cannot all come from one pool while the old snapshot's round robin still
        alternates between two.
        """
        backends = {self.backends[p] for p in pools}
        poll_until(lambda: [self.request(at) for _ in range(3)],
                   lambda replies: all(r.status == 200 and r.backend in backends for r in replies),
                   timeout=timeouts().remote_route, what=what,
                   describe=lambda replies: "; ".join(r.describe() for r in replies) +
                   f"\n{self.consumers[at].overlay_log()}")


def _pool_of_candidate(candidate: Mapping[str, Any], burst: CloudBurst) -> str:
    """The scenario's pool of one of west's candidates: a local pool by its cluster (the fake backend it
    names), the regional and external ones by their site."""
    cluster, site = str(candidate.get("cluster", "")), str(candidate.get("site", ""))
    if site == "west":
        return next((pool for pool in LOCAL if burst.backends[pool] == cluster), f"west/{cluster}")
    return {"central": REGIONAL, "east": EXTERNAL}.get(site, f"{site}/{cluster}")
