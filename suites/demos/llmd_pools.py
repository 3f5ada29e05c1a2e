"""The grid-llmd-pool-metrics demo as a scenario: two provider pools whose EPP metrics re-rank them.

The demo (praxis-proxy/demos, demos/grid-llmd-pool-metrics) runs pool-a and pool-b in two clusters, each
with a consumer gateway, a provider gateway (mTLS), vllm-vcr backends and an llm-d EPP exporting pool-level
metrics that its own site's operator scrapes; scoringPolicy queueDepth (or kvCachePressure) with
routingPolicy scoreFirst lets a pool's pressure move the other pool ahead. Selection is deterministic, the
pairing the routing guide gives for "pick the least-pressured provider" (and the default when omitted), so
the rank-0 pool takes the traffic.

Here pool-a runs at west and pool-b at central (two of the combined-site sites a session's demos share), the
test's network is applied on those two sites only, and each pool's EPP is its site's fake backend exporting
the pool's series: the demo drives real load into pool-a, here the pool's metric is set, which is what the
operator reads. Every request goes west's consumer gateway -> a pool's provider gateway (mTLS hop) -> its
backend, as in the demo. Optionally pool-a's metrics are scraped over TLS (the demo's metrics-mTLS mode)
from west's TLS metrics backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness import mesh_oracle as oracle
from harness import resources
from harness.demo_dir import DemoInputs
from harness.mesh import MeshScenario
from harness.timeline import Timeline
from suites.demos.combined_site import CombinedSite
from suites.demos.serving import revision_of

__all__ = ["CAPACITY", "IDLE", "KV_INITIAL", "KV_PRESSURED", "LIGHT", "LlmdPools", "POOLS", "PRESSURED", "README",
           "TAKES", "TLS_INITIAL", "TLS_STALE_SECONDS", "USED"]

README = "praxis-proxy/demos, demos/grid-llmd-pool-metrics/README.md"
#: The demo's pools by the site each runs on here; the consumer is west's (pool-a's) workload.
POOLS: Mapping[str, str] = {"west": "pool-a", "central": "pool-b"}
USED: tuple[str, ...] = tuple(POOLS)
#: What the scenario takes from a demo folder (--demo-dir): its policies and pressures are its claims.
TAKES: frozenset[str] = frozenset({"model", "network", "providers"})
#: The demo's metricsConfig.queueCapacity: a queue of 4 normalises to 1.0.
CAPACITY = 4
#: Pool-average queue depths: idle, light (0.25) and pressured (0.75). Pressured stays short of the
#: instantaneous admission threshold (0.85 in the public operator), so pressure moves a pool's score and
#: rank while both pools stay admitted for new work, as in the demo's failover.
IDLE, LIGHT, PRESSURED = 0.0, 1.0, 3.0
#: A pool-average KV-cache utilization under pressure (the demo's failover shows 0.81).
KV_PRESSURED = 0.8
Signals = Mapping[str, float | None]
#: The kvCachePressure configuration's start: both KV caches empty, pool-b's queue pressured, so an operator
#: that scored this strategy by queue depth would keep pool-a first.
KV_INITIAL: Mapping[str, Signals] = {"west": {"queueDepth": IDLE, "kvCacheUtilization": 0.0},
                                     "central": {"queueDepth": PRESSURED, "kvCacheUtilization": 0.0}}
#: The metrics-TLS mode's staleMetricsSeconds: long enough for a forced reconcile and a few requests to finish
#: inside it on a loaded machine, short enough to wait out (the demo uses 20).
TLS_STALE_SECONDS = 10
#: The metrics-TLS mode's start: pool-a idle, pool-b pressured (score 0.25), so pool-a leads on its TLS-scraped
#: score, and would still lead (neutral 0.5) if a failed TLS scrape fell back to neutral instead of failing
#: closed.
TLS_INITIAL: Mapping[str, Signals] = {"central": {"queueDepth": PRESSURED}}


class LlmdPools(CombinedSite):
    """One test's copy of the demo: its network (scoreFirst, one scoring strategy) on west and central, each
    trusting the other, and pool-a (west) and pool-b (central) each scraped by its own site's operator."""

    def __init__(self, world: MeshScenario, timeline: Timeline, *, scoring: str = "queueDepth",
                 tls_stale_seconds: int | None = None, inputs: DemoInputs | None = None) -> None:
        """`tls_stale_seconds`: scrape pool-a's metrics over TLS with that staleMetricsSeconds (the demo's
        metrics-mTLS mode); None scrapes both pools over plain HTTP, as the demo's default mode does.
        `inputs` (--demo-dir) give the model, the network's name and the pools' provider names."""
        super().__init__(world, timeline, inputs)
        #: the demo's own pool names, which the claims speak of (ranks, attribution, the timeline)
        self.short = dict(POOLS)
        #: each pool's InferenceProvider name: the demo folder's where it names one
        self.names = {at: (inputs.providers.get(at) if inputs is not None else None) or pool
                      for at, pool in POOLS.items()}
        self.scoring = scoring
        self.tls_stale_seconds = tls_stale_seconds
        #: the signals each pool's EPP exports now (queueDepth, kvCacheUtilization)
        self.signals: dict[str, dict[str, float | None]] = {at: {"queueDepth": IDLE, "kvCacheUtilization": None}
                                                            for at in USED}
        self._failing: list[str] = []

    def __enter__(self) -> LlmdPools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------- the grid

    def build(self, initial: Mapping[str, Signals] | None = None) -> LlmdPools:
        """Apply the network, sites, trust and pools (with `initial` signals per site), then wait for west's
        overlay to hold both pools with pool-a first."""
        for at, signals in (initial or {}).items():
            self.signals[at].update(signals)
        world = self.world
        world.network(sites=USED, routing="scoreFirst", scoring=self.scoring, selection="deterministic")
        for at in USED:
            world.own_site(at)
        self.trust_each_other(USED)
        for at in USED:
            self._provide(at)
        self.wait_overlay("west", self.first("west"), what="west's overlay with both pools, pool-a first")
        return self

    def provider_name(self, site: str) -> str:
        return f"{self.world.tag}-{self.names[site]}"

    def metrics_backend(self, site: str) -> str:
        """The fake backend standing in for `site`'s EPP metrics endpoint."""
        mesh_site = self.world.mesh.site(site)
        if site == "west" and self.tls_stale_seconds is not None:
            return mesh_site.site.tls_metrics().spec.name
        return mesh_site.backend

    def _provide(self, site: str) -> None:
        """`site`'s pool: served through its site's provider gateway, its EPP series scraped by its own site
        (queueCapacity 4, every signal mapped, as the demo's metricsConfig)."""
        mesh_site = self.world.mesh.site(site)
        name = self.provider_name(site)
        endpoint = mesh_site.site.providers[mesh_site.backend].url
        tls = site == "west" and self.tls_stale_seconds is not None
        metrics_url = mesh_site.site.tls_metrics().url if tls else endpoint
        mesh_site.site.set_pool_metrics(self.metrics_backend(site), name, healthy=1, **self.signals[site])
        for signal, value in self.signals[site].items():
            if value is not None:
                self.timeline.metric(signal, value, pool=self.short[site], site=site)
        metrics = resources.metrics_config(metrics_url, name, queue_capacity=CAPACITY, tls=tls,
                                           stale_seconds=self.tls_stale_seconds if tls else None)
        self.world.apply(site, resources.inference_provider(name, self.world.net, site=site,
                                                            cluster=mesh_site.routing_cluster, models=[self.model],
                                                            endpoint=endpoint, metrics=metrics))

    def set_signals(self, site: str, *, refresh: bool = True, **signals: float | None) -> None:
        """Set what `site`'s pool exports (queueDepth, kvCacheUtilization), on the timeline; with `refresh`,
        annotate the network at `site` (the demo's forced refresh) so its operator scrapes it now."""
        pool = self.short[site]
        for signal, value in signals.items():
            self.timeline.metric(signal, value, pool=pool, site=site)
        self.signals[site].update(signals)
        self.world.mesh.site(site).site.set_pool_metrics(self.metrics_backend(site), self.provider_name(site),
                                                         **signals)
        if refresh:
            self.refresh(site)

    def refresh(self, site: str) -> None:
        """Annotate the network at `site` (force-refresh annotation), as the demo does after a transition."""
        self.timeline.action("forced refresh (GridNetwork annotated)", site=site)
        self.world.mesh.site(site).control.force_reconcile(self.world.net)

    def fail_metrics(self, site: str) -> None:
        """Make `site`'s EPP metrics endpoint answer every scrape with 503 (until `restore_metrics` or close)."""
        backend = self.metrics_backend(site)
        self.timeline.action(f"{self.short[site]}'s metrics endpoint fails every scrape", site=site)
        self.world.mesh.site(site).site.set_metrics_failure(backend, 503)
        if site not in self._failing:
            self._failing.append(site)

    def restore_metrics(self, site: str) -> None:
        self.timeline.action(f"{self.short[site]}'s metrics endpoint answers again", site=site)
        self.world.mesh.site(site).site.set_metrics_failure(self.metrics_backend(site), None)
        if site in self._failing:
            self._failing.remove(site)

    def close(self) -> None:
        """Give back every metrics endpoint this test made fail (the sites' backends outlive the test)."""
        for site in list(self._failing):
            self.world.mesh.site(site).site.set_metrics_failure(self.metrics_backend(site), None)
            self._failing.remove(site)

    # ----------------------------------------------------------------------------------- overlays

    def ranks(self, envelope: Mapping[str, Any] | None) -> dict[str, int]:
        """Each pool's rank in an overlay of the demo's model (pools absent from it are left out)."""
        return {self.short.get(str(c.get("site")), str(c.get("site"))): int(c.get("rank", -1))
                for c in oracle.candidates_for(envelope, self.model)}

    def first(self, site: str) -> Callable[[dict[str, Any]], bool]:
        """An overlay holding both pools, `site`'s pool at rank 0 and the other at rank 1."""
        leader = self.short[site]
        return lambda envelope: self.ranks(envelope) == {p: 0 if p == leader else 1 for p in POOLS.values()}

    def without(self, site: str) -> Callable[[dict[str, Any]], bool]:
        """An overlay without `site`'s pool, the other pool at rank 0."""
        others = {p: 0 for s, p in POOLS.items() if s != site}
        return lambda envelope: self.ranks(envelope) == others

    def wait_ranked(self, until: Callable[[dict[str, Any]], bool], *, what: str, force: bool = True,
                    at: str = "west", timeout: float | None = None) -> dict[str, Any]:
        """Wait for `at`'s overlay to satisfy `until` (re-forcing `at`'s reconciles unless `force` is False);
        records the revision it reached and the ranks it publishes."""
        envelope = self.world.wait_envelope(at, until, what=what, force=force, timeout=timeout)
        self.timeline.revision("rendered", revision_of(envelope), site=at)
        for pool, rank in sorted(self.ranks(envelope).items()):
            self.timeline.metric("rank", rank, pool=pool, site=at)
        return envelope

    def served_pools(self, n: int, at: str = "west") -> list[tuple[int, str | None]]:
        """(status, pool) of `n` requests of `at`'s workload."""
        return [(r.status, self.short.get(self.site_of(r.backend) or "", None)) for r in self.serve(at, n)]
