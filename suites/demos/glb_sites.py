"""The grid-glb-demo's four sites as a scenario, shared by grid-workload-inference and grid-route53-edge-entry.

The demo (praxis-proxy/demos, demos/grid-glb-demo) runs two edge sites (east-edge, west-edge), each a Praxis
consumer gateway on its own operator-rendered overlay, and two provider sites behind provider gateways:
east-provider with two independent providers (primary and secondary) and west-provider with one, on the grid's
default policies (scoringPolicy and routingPolicy omitted: noMetrics, geographyFirst). Regions are the demo's:
east-edge and east-provider are in east, west-edge and west-provider in west. grid-workload-inference is the same
layout without the edge selector (its consumer sites are the two edges), and grid-route53-edge-entry has the
same two layers (public edges, private providers).

The demo's edge selector (a GTM emulator, or Route 53) is played by the harness: a request is sent to one edge's
consumer gateway or the other's. Each provider's model server is a fake backend of its site, each site's
operator is the implementation under test, and the harness's certificates stand in for the demo's. Everything
a test does and sees goes on its timeline.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import mesh_oracle as oracle
from harness import resources
from harness.contract import ScopeSpec
from harness.demo_dir import DemoInputs
from harness.gateway_config import SESSION_HEADER, CredentialRef, ProviderRoute, TrustedPeer
from harness.grid import Gateway, ProviderGateway, Reply
from harness.mesh import MeshScenario
from harness.pki import GRID_ORGANIZATION
from harness.timeline import Timeline
from harness.timeouts import timeouts
from harness.waiting import poll_until
from suites.demos.serving import revision_of, wait_accepted_and_serving

__all__ = ["EDGES", "PROVIDERS", "PROVIDER_SITES", "README", "SITES", "TAKES", "TOPOLOGY", "GlbSites", "Provider"]

TOPOLOGY = "glb"
EDGES: tuple[str, ...] = ("east-edge", "west-edge")
PROVIDER_SITES: tuple[str, ...] = ("east-provider", "west-provider")
SITES: tuple[str, ...] = (*EDGES, *PROVIDER_SITES)
README = "praxis-proxy/demos, demos/grid-glb-demo/README.md"
#: What the scenario takes from a demo folder (--demo-dir): its geography and policies are the demo's defaults.
TAKES: frozenset[str] = frozenset({"model", "network", "providers"})


@dataclass(frozen=True)
class Provider:
    """One of the demo's providers: the site hosting it, the fake backend standing in for its model server,
    and its own routing cluster when it has one (None: the site's provider gateway cluster)."""

    short: str
    site: str
    backend: str
    cluster: str | None = None


#: The demo's three providers. Each of east's two has its own upstream cluster name reaching east's provider
#: gateway, as in the demo (vcr-east-provider, vcr-east-provider-secondary): a candidate is one per model and
#: provider, and two providers of one model behind one cluster name would be one (kind, name, site, cluster).
#: The primary's is the site's gateway cluster, so the edges reach it whatever their operator announces.
PROVIDERS: tuple[Provider, ...] = (
    Provider("east-primary", "east-provider", "vcr-east-primary"),
    Provider("east-secondary", "east-provider", "vcr-east-secondary", cluster="east-provider-secondary"),
    Provider("west", "west-provider", "vcr-west"),
)


class GlbSites:
    """One test's copy of the demo: its network on the four sites with the default policies, each edge
    trusting both provider sites (knowing their regions), and the three providers serving the demo's model.

    `metered`: every provider's pool is scraped by its site (ready pods 1, queue 0), for tests of health.
    """

    def __init__(self, world: MeshScenario, timeline: Timeline, *, metered: bool = False,
                 inputs: DemoInputs | None = None) -> None:
        """`inputs` are a demo folder's (``--demo-dir``): the model, the network's name and the providers'
        names (east's two in the folder's order); each test still gets its own network and providers."""
        self.world = world
        self.timeline = timeline
        self.metered = metered
        self.model = inputs.model if inputs is not None and inputs.model else world.model("qwen3")
        if inputs is not None and inputs.network:
            world.net = f"{world.tag}-{inputs.network}"
        #: each provider's name in this test, after the test's tag (the folder's names where it has them)
        self.names = {p.short: p.short for p in PROVIDERS}
        for site in PROVIDER_SITES:
            hosted = [p for p in PROVIDERS if p.site == site]
            named = inputs.providers_of(site) if inputs is not None else ()
            for provider, name in zip(hosted[:len(named)], named[:len(hosted)], strict=True):
                self.names[provider.short] = name
        self.consumers: dict[str, Gateway] = {}
        #: Each consumer's provider gateways, by provider site: the hops its requests take.
        self.peers: dict[str, dict[str, ProviderGateway]] = {}
        self._chains: list[Any] = []
        self._provider_gateways: list[tuple[str, ProviderGateway]] = []

    # ----------------------------------------------------------------------------------- the grid

    def provider(self, short: str) -> Provider:
        return next(p for p in PROVIDERS if p.short == short)

    def name(self, short: str) -> str:
        """The InferenceProvider name of provider `short` in this test."""
        return f"{self.world.tag}-{self.names[short]}"

    def cluster(self, provider: Provider) -> str:
        return provider.cluster or self.world.mesh.site(provider.site).routing_cluster

    def region(self, site: str) -> str:
        return self.world.mesh.site(site).site.spec.region

    def provider_of(self, backend: str | None) -> str | None:
        """The provider (short name) whose model server `backend` stands in for."""
        return next((p.short for p in PROVIDERS if p.backend == backend), None)

    def site_of(self, backend: str | None) -> str | None:
        return next((p.site for p in PROVIDERS if p.backend == backend), None)

    def build(self) -> GlbSites:
        """Apply everything; nothing is awaited here, so an operator that renders wrongly fails in the test."""
        self.world.network()
        for at in SITES:
            spec = self.world.mesh.site(at).site.spec
            self.world.apply(at, resources.grid_site(at, self.world.net, region=spec.region, zone=spec.zone,
                                                     phase="Active"))
        for at in EDGES:
            for of in PROVIDER_SITES:
                spec = self.world.mesh.site(of).site.spec
                self.world.trust(at, of, region=spec.region, zone=spec.zone)
        for provider in PROVIDERS:
            self._provide(provider)
        return self

    def _provide(self, provider: Provider, phase: str | None = None) -> None:
        site = self.world.mesh.site(provider.site).site
        name = self.name(provider.short)
        endpoint = site.providers[provider.backend].url
        metrics = None
        if self.metered:
            site.set_pool_metrics(provider.backend, name, queueDepth=0, healthy=1)
            metrics = resources.metrics_config(endpoint, name, queue_capacity=10)
        self.world.apply(provider.site, resources.inference_provider(
            name, self.world.net, site=provider.site, cluster=self.cluster(provider), models=[self.model],
            endpoint=endpoint, metrics=metrics, phase=phase))

    def withdraw(self, *shorts: str) -> None:
        """Withdraw providers from the grid (their InferenceProviders are deleted)."""
        self.timeline.action(f"withdraw {', '.join(shorts)}")
        for short in shorts:
            provider = self.provider(short)
            self.world.mesh.site(provider.site).control.delete("InferenceProvider", self.name(short))

    def restore(self, *shorts: str) -> None:
        """Return withdrawn providers to the grid."""
        self.timeline.action(f"restore {', '.join(shorts)}")
        for short in shorts:
            self._provide(self.provider(short))

    def set_phase(self, phase: str, *shorts: str) -> None:
        """Set providers' availability (status.phase), as the demo withdraws and restores availability."""
        self.timeline.action(f"{', '.join(shorts)} {phase}")
        for short in shorts:
            self._provide(self.provider(short), phase=phase)

    def set_ready_pods(self, short: str, ready: int) -> None:
        """Make provider `short`'s pool report `ready` ready pods (a metered scenario), scraped at once."""
        provider = self.provider(short)
        site = self.world.mesh.site(provider.site)
        site.site.set_pool_metrics(provider.backend, self.name(short), queueDepth=0, healthy=ready)
        self.timeline.metric("ready pods", ready, provider=short, site=provider.site)
        site.control.force_reconcile(self.world.net)

    # ----------------------------------------------------------------------------------- overlays

    def sites_in(self, envelope: Mapping[str, Any] | None) -> list[str]:
        """The sites of the overlay's candidates for the demo's model, in the overlay's order."""
        return [str(c.get("site")) for c in oracle.candidates_for(envelope, self.model)]

    def holds_every_provider(self, envelope: Mapping[str, Any] | None) -> bool:
        """An overlay with a candidate of each of the demo's providers (two at east-provider, one at
        west-provider). Anything less is not final: the providers' records reach an edge one by one, and an
        overlay that holds both sites may still lack east's second provider."""
        return sorted(self.sites_in(envelope)) == sorted(p.site for p in PROVIDERS)

    def wait_overlay(self, at: str, until: Callable[[dict[str, Any]], bool], *, what: str) -> dict[str, Any]:
        """Wait for `at`'s rendered overlay to satisfy `until`; records the revision it reached."""
        envelope = self.world.wait_envelope(at, until, what=what)
        self.timeline.revision("rendered", revision_of(envelope), site=at)
        return envelope

    def own_region_first(self, at: str, envelope: Mapping[str, Any] | None) -> bool:
        """Edge `at`'s overlay holds both provider sites, its own region's alone in the first selection group."""
        candidates = oracle.candidates_for(envelope, self.model)
        if not candidates or set(self.sites_in(envelope)) != set(PROVIDER_SITES):
            return False
        first = candidates[0].get("selection_group")
        return all((self.region(str(c.get("site"))) == self.region(at)) == (c.get("selection_group") == first)
                   for c in candidates)

    # ----------------------------------------------------------------------------------- traffic

    def consumer(self, at: str) -> Gateway:
        """`at`'s consumer gateway on `at`'s overlay (delivered by overlay-sync), reaching each provider site
        through that site's provider gateway over the mTLS hop, once the overlay holds the three providers."""
        envelope = self.wait_overlay(at, self.holds_every_provider, what=f"{at}'s overlay with the three providers")
        self.peers[at] = {site: self._provider_gateway(site, envelope) for site in PROVIDER_SITES}
        peers = list(self.peers[at].values())
        # every upstream cluster name the overlay gives a provider site's candidates reaches that site's
        # provider gateway (the demo's edge config maps vcr-east-provider and its secondary alike)
        aliases = {}
        for candidate in oracle.candidates_for(envelope, self.model):
            peer = self.peers[at].get(str(candidate.get("site")))
            if peer is not None and candidate.get("cluster") != peer.cluster:
                aliases[str(candidate.get("cluster"))] = peer
        origin = self.world.mesh.site(at)
        client = self.world.mesh.grid.backend.pki.client(f"consumer-{at}-{self.world.tag}-{len(self._chains)}")

        def start(overlay_dir: Path, scope: ScopeSpec) -> Gateway:
            return origin.site.start_hop_consumer(peers, None, client, overlay_dir=overlay_dir, scope=scope,
                                                  aliases=aliases)

        chain = origin.control.connect(self.world.net, start_gateway=start)
        self._chains.append(chain)
        gateway: Gateway = chain.gateway
        wait_accepted_and_serving(self.timeline, chain, gateway, revision_of(envelope), self.model, at)
        self.consumers[at] = gateway
        return gateway

    def chain_of(self, gateway: Gateway) -> Any:
        return next(chain for chain in self._chains if chain.gateway is gateway)

    def _provider_gateway(self, site: str, envelope: Mapping[str, Any]) -> ProviderGateway:
        """A provider gateway of `site` routing each of its candidates in `envelope` to its provider's model
        server, injecting that provider's own credential (east's two providers each have their own)."""
        return self.provider_gateway(site, oracle.from_site(envelope, self.model, site))

    def provider_gateway(self, site: str, candidates: Sequence[Mapping[str, Any]]) -> ProviderGateway:
        """Start `site`'s provider gateway for `candidates` (stopped when the test ends); each candidate goes
        to the provider whose cluster it names (the site's gateway cluster: the site's first provider)."""
        by_cluster = {self.cluster(p): p for p in PROVIDERS if p.site == site}
        default = next(p for p in PROVIDERS if p.site == site)
        routes: list[ProviderRoute] = []
        tokens: dict[CredentialRef, str] = {}
        for candidate in candidates:
            provider = by_cluster.get(str(candidate.get("cluster")), default)
            credential = CredentialRef(f"{provider.backend}-token", resources.DEFAULT_NAMESPACE)
            tokens.setdefault(credential, f"agn-glb-{provider.short}-{secrets.token_hex(12)}")
            routes.append(ProviderRoute(str(candidate["stable_id"]), self.model, provider.backend,
                                        credential=credential))
        target = self.world.mesh.site(site).site
        gateway = target.start_provider_gateway(trusted_peers=[TrustedPeer(organization=GRID_ORGANIZATION)],
                                                routes=routes, tokens=tokens)
        self._provider_gateways.append((site, gateway))
        return gateway

    def request(self, at: str, *, session: str | None = None, headers: Mapping[str, str] | None = None,
                cookies: Mapping[str, str] | None = None) -> Reply:
        """One request to edge `at`'s consumer gateway, as the edge selector sends it there; its outcome goes
        on the timeline."""
        sent = {**(headers or {}), **({SESSION_HEADER: session} if session else {})}
        reply = self.consumers[at].request(self.model, headers=sent or None, cookies=cookies)
        self.timeline.request(reply.backend if reply.status == 200 else None, reply.status, site=at,
                              session=session)
        return reply

    def served(self, at: str, n: int, **key: Any) -> list[tuple[int, str | None]]:
        """(status, provider) of `n` requests to `at`."""
        return [(r.status, self.provider_of(r.backend)) for r in (self.request(at, **key) for _ in range(n))]

    def wait_served_by(self, at: str, shorts: Sequence[str], *, what: str, **key: Any) -> Reply:
        """Poll `at`'s gateway until a request is served by one of the providers `shorts`."""
        wanted = {self.provider(s).backend for s in shorts}
        return poll_until(lambda: self.request(at, **key), lambda r: r.status == 200 and r.backend in wanted,
                          timeout=timeouts().remote_route, what=what,
                          describe=lambda r: f"{r.describe()}\n{self.consumers[at].overlay_log()}")

    def close(self) -> None:
        """Stop this test's consumer chains and provider gateways (its resources go with its MeshScenario)."""
        for chain in self._chains:
            chain.control.disconnect(chain)
        for site, gateway in self._provider_gateways:
            self.world.mesh.site(site).site.stop_gateway(gateway)
