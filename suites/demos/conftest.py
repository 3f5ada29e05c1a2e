"""Fixtures of the demo suites: each demo's sites, started once per session, and one scenario per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.demo_dir import DemoInputs
from harness.grid_factory import GridFactory
from harness.mesh import Mesh, MeshScenario
from harness.plugin import demo_inputs
from harness.timeline import Timeline
from suites.demos.cloud_burst import CloudBurst
from suites.demos.combined_site import SITES, CombinedSite
from suites.demos.combined_site import TOPOLOGY as COMBINED_SITE_TOPOLOGY
from suites.demos.quota_routing import QuotaRouting
from suites.demos.weighted_pools import WeightedPools


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
    return demo_inputs(pytestconfig, SITES)


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
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world:
        yield WeightedPools(world, timeline).build()


@pytest.fixture
def cloud_burst(request: pytest.FixtureRequest, combined_site_mesh: Mesh, timeline: Timeline) -> Iterator[CloudBurst]:
    """The cloud-burst demo's pools on the shared sites (west's two local pools, central's regional pool,
    east's external provider), deleted when the test ends."""
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world:
        yield CloudBurst(world, timeline).build()


@pytest.fixture
def quota_routing(request: pytest.FixtureRequest, combined_site_mesh: Mesh,
                  timeline: Timeline) -> Iterator[QuotaRouting]:
    """The token-rate-limit demo's provider tier (one provider per site, one roundRobin group) on the shared
    sites, deleted when the test ends."""
    with MeshScenario(combined_site_mesh, request.node.nodeid) as world:
        yield QuotaRouting(world, timeline).build()


@pytest.fixture
def quota_routing_own(request: pytest.FixtureRequest, grid_factory: GridFactory,
                      timeline: Timeline) -> Iterator[QuotaRouting]:
    """The token-rate-limit demo's provider tier on sites of its own, for a test that stops every operator."""
    with grid_factory.mesh(purpose="own", topology=COMBINED_SITE_TOPOLOGY) as own, \
            MeshScenario(own, request.node.nodeid) as world:
        yield QuotaRouting(world, timeline).build()
