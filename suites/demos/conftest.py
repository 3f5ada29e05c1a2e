"""Fixtures of the demo suites: each demo's sites, started once per session, and one scenario per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.demo_dir import DemoInputs
from harness.features import DYNAMIC_WEIGHTS_FEATURE
from harness.grid_factory import GridFactory
from harness.mesh import Mesh, MeshScenario
from harness.plugin import demo_inputs
from harness.timeline import Timeline
from suites.demos.cloud_burst import TAKES as BURST_TAKES
from suites.demos.cloud_burst import CloudBurst
from suites.demos.combined_site import SITES, CombinedSite
from suites.demos.combined_site import TOPOLOGY as COMBINED_SITE_TOPOLOGY
from suites.demos.dynamic_pools import DynamicPools
from suites.demos.glb_sites import SITES as GLB_SITES
from suites.demos.glb_sites import TAKES as GLB_TAKES
from suites.demos.glb_sites import TOPOLOGY as GLB_TOPOLOGY
from suites.demos.glb_sites import GlbSites
from suites.demos.llmd_pools import KV_INITIAL, TLS_INITIAL, TLS_STALE_SECONDS, LlmdPools
from suites.demos.llmd_pools import POOLS as LLMD_POOLS
from suites.demos.llmd_pools import TAKES as LLMD_TAKES
from suites.demos.llmd_pools import USED as LLMD_SITES
from suites.demos.quota_routing import TAKES as QUOTA_TAKES
from suites.demos.quota_routing import QuotaRouting
from suites.demos.weighted_pools import POOLS, WeightedPools
from suites.demos.weighted_pools import TAKES as WEIGHTED_TAKES


@pytest.fixture(scope="session")
def combined_site_mesh(grid_factory: GridFactory) -> Iterator[Mesh]:
    """The combined-site demo's three sites (west, central, east), shared by the tests that only add
    resources to them."""
    with grid_factory.mesh(topology=COMBINED_SITE_TOPOLOGY) as shared:
        yield shared


@pytest.fixture(scope="session")
def combined_site_inputs(pytestconfig: pytest.Config) -> DemoInputs | None:
    """The demo folder's inputs (--grid-demo-dir), else None: the scenario's own. A folder the scenario
    cannot run on stops the run (not judged), saying why."""
    return demo_inputs(pytestconfig, SITES, scenario="the grid-combined-site scenario")


@pytest.fixture
def combined_site(request: pytest.FixtureRequest, combined_site_mesh: Mesh, timeline: Timeline,
                  combined_site_inputs: DemoInputs | None) -> Iterator[CombinedSite]:
    """This test's own copy of the demo's network and providers on the shared sites, deleted when it ends."""
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world:
        yield CombinedSite(world, timeline, combined_site_inputs).build()


@pytest.fixture
def combined_site_own(request: pytest.FixtureRequest, grid_factory: GridFactory, timeline: Timeline,
                      combined_site_inputs: DemoInputs | None) -> Iterator[CombinedSite]:
    """The demo on sites of its own, for a test that restarts operators."""
    with grid_factory.mesh(purpose="own", topology=COMBINED_SITE_TOPOLOGY) as own, \
            MeshScenario(own, request.node.nodeid) as world:
        yield CombinedSite(world, timeline, combined_site_inputs).build()


@pytest.fixture
def weighted_pools(request: pytest.FixtureRequest, combined_site_mesh: Mesh,
                   timeline: Timeline) -> Iterator[WeightedPools]:
    """The weighted-routing demo's three pools (5/3/2) on the shared sites, deleted when the test ends."""
    inputs = demo_inputs(request.config, SITES, takes=WEIGHTED_TAKES, aliases=POOLS,
                         scenario="the grid-weighted-dynamic-routing scenario")
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world:
        yield WeightedPools(world, timeline, inputs=inputs).build()


@pytest.fixture
def dynamic_pools(request: pytest.FixtureRequest, combined_site_mesh: Mesh, timeline: Timeline,
                  impl: Any) -> Iterator[DynamicPools]:
    """The weighted-routing demo's experimental half: pools of capacity 100, pool-a (west) at pressure 0.5, in
    a network switched to the implementation's pressure-driven weights; unsupported unless it claims them."""
    if DYNAMIC_WEIGHTS_FEATURE not in impl.features or impl.operator is None:
        pytest.skip(f"unsupported feature: {DYNAMIC_WEIGHTS_FEATURE} is not claimed by the implementation")
    inputs = demo_inputs(request.config, SITES, takes=WEIGHTED_TAKES, aliases=POOLS,
                         scenario="the grid-weighted-dynamic-routing scenario")
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world:
        yield DynamicPools(world, timeline, impl.operator.dynamic_weights, {"west": 5.0, "central": 0.0, "east": 0.0},
                           inputs=inputs).build()


@pytest.fixture
def cloud_burst(request: pytest.FixtureRequest, combined_site_mesh: Mesh, timeline: Timeline) -> Iterator[CloudBurst]:
    """The cloud-burst demo's pools on the shared sites (west's two local pools, central's regional pool,
    east's external provider), deleted when the test ends."""
    inputs = demo_inputs(request.config, SITES, takes=BURST_TAKES, scenario="the grid-cloud-burst scenario")
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world:
        yield CloudBurst(world, timeline, inputs).build()


@pytest.fixture
def quota_routing(request: pytest.FixtureRequest, combined_site_mesh: Mesh,
                  timeline: Timeline) -> Iterator[QuotaRouting]:
    """The token-rate-limit demo's provider tier (one provider per site, one roundRobin group) on the shared
    sites, deleted when the test ends."""
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world:
        yield QuotaRouting(world, timeline, _quota_inputs(request.config)).build()


@pytest.fixture
def quota_routing_own(request: pytest.FixtureRequest, grid_factory: GridFactory,
                      timeline: Timeline) -> Iterator[QuotaRouting]:
    """The token-rate-limit demo's provider tier on sites of its own, for a test that stops every operator."""
    with grid_factory.mesh(purpose="own", topology=COMBINED_SITE_TOPOLOGY) as own, \
            MeshScenario(own, request.node.nodeid) as world:
        yield QuotaRouting(world, timeline, _quota_inputs(request.config)).build()


def _quota_inputs(config: pytest.Config) -> DemoInputs | None:
    return demo_inputs(config, SITES, takes=QUOTA_TAKES, scenario="the grid-distributed-token-rate-limit scenario")


@pytest.fixture
def llmd_pools(request: pytest.FixtureRequest, combined_site_mesh: Mesh, timeline: Timeline) -> Iterator[LlmdPools]:
    """The llm-d pool-metrics demo's two pools (pool-a at west, pool-b at central, both idle) in a queueDepth,
    scoreFirst network on those two shared sites, deleted when the test ends."""
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world, \
            LlmdPools(world, timeline, inputs=_llmd_inputs(request.config)) as pools:
        yield pools.build()


@pytest.fixture
def llmd_pools_kv(request: pytest.FixtureRequest, combined_site_mesh: Mesh,
                  timeline: Timeline) -> Iterator[LlmdPools]:
    """The demo's kvCachePressure configuration: both pools' KV caches empty, pool-b's queue pressured (a
    signal this strategy must not read)."""
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world, \
            LlmdPools(world, timeline, scoring="kvCachePressure", inputs=_llmd_inputs(request.config)) as pools:
        yield pools.build(KV_INITIAL)


@pytest.fixture
def llmd_pools_tls(request: pytest.FixtureRequest, combined_site_mesh: Mesh,
                   timeline: Timeline) -> Iterator[LlmdPools]:
    """The demo's metrics-mTLS mode: pool-a's metrics scraped over TLS with staleMetricsSeconds, pool-a idle and
    pool-b under pressure (so pool-a leads on its TLS-scraped score)."""
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world, \
            LlmdPools(world, timeline, tls_stale_seconds=TLS_STALE_SECONDS,
                      inputs=_llmd_inputs(request.config)) as pools:
        yield pools.build(TLS_INITIAL)


def _llmd_inputs(config: pytest.Config) -> DemoInputs | None:
    return demo_inputs(config, LLMD_SITES, takes=LLMD_TAKES, aliases=LLMD_POOLS,
                       scenario="the grid-llmd-pool-metrics scenario")


@pytest.fixture(scope="session")
def glb_mesh(grid_factory: GridFactory) -> Iterator[Mesh]:
    """The glb demo's four sites (east-edge, west-edge, east-provider, west-provider), shared by the
    grid-glb-demo, grid-workload-inference and grid-route53-edge-entry tests, which only add resources."""
    with grid_factory.mesh(topology=GLB_TOPOLOGY) as shared:
        yield shared


@pytest.fixture
def glb_sites(request: pytest.FixtureRequest, glb_mesh: Mesh, timeline: Timeline) -> Iterator[GlbSites]:
    """This test's own network and three providers on the glb sites, deleted when it ends."""
    with MeshScenario(glb_mesh, request.node.nodeid) as world:
        sites = GlbSites(world, timeline, inputs=_glb_inputs(request.config)).build()
        try:
            yield sites
        finally:
            sites.close()


@pytest.fixture
def glb_sites_metered(request: pytest.FixtureRequest, glb_mesh: Mesh, timeline: Timeline) -> Iterator[GlbSites]:
    """As glb_sites, with every provider's pool scraped by its site (ready pods 1, queue 0)."""
    with MeshScenario(glb_mesh, request.node.nodeid) as world:
        sites = GlbSites(world, timeline, metered=True, inputs=_glb_inputs(request.config)).build()
        try:
            yield sites
        finally:
            sites.close()


def _glb_inputs(config: pytest.Config) -> DemoInputs | None:
    return demo_inputs(config, GLB_SITES, takes=GLB_TAKES,
                       scenario="the four-site scenario of grid-glb-demo, grid-workload-inference and "
                                "grid-route53-edge-entry")
