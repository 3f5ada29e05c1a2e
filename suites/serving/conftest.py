"""Fixtures of the serving suites: a three-site and a two-site grid (clusters/serving-*.yaml), each site's
pool a fake backend with an EPP load model and a signals relay in its operator's place; every test starts
from quiet pools and starts the grid gateways it judges (stopped when it ends, pass or fail)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.grid import unique_model
from harness.grid_factory import GridFactory
from harness.serving.grid import ServingGrid


def _serving(grid_factory: GridFactory, topology: str) -> Iterator[ServingGrid]:
    if grid_factory.backend_name != "local":
        pytest.skip(f"not on the {grid_factory.backend_name} backend: the serving profile's signals relays and "
                    "fake pools run as local processes (run it with --backend local)")
    with grid_factory.open(topology, purpose=f"{topology} grid") as grid:
        serving = ServingGrid(grid)
        try:
            yield serving
        finally:
            serving.close()


@pytest.fixture(scope="session")
def serving_three_grid(grid_factory: GridFactory) -> Iterator[ServingGrid]:
    yield from _serving(grid_factory, "serving-three")


@pytest.fixture(scope="session")
def serving_two_grid(grid_factory: GridFactory) -> Iterator[ServingGrid]:
    yield from _serving(grid_factory, "serving-two")


@pytest.fixture
def three(serving_three_grid: ServingGrid) -> Iterator[ServingGrid]:
    """Three sites (site-a, site-b, site-c), quiet pools; the test's gateways run at site-a."""
    serving_three_grid.reset()
    yield serving_three_grid
    serving_three_grid.reset()


@pytest.fixture
def two(serving_two_grid: ServingGrid) -> Iterator[ServingGrid]:
    """Two sites (site-a, site-b), quiet pools; the test's gateways run at site-a."""
    serving_two_grid.reset()
    yield serving_two_grid
    serving_two_grid.reset()


@pytest.fixture
def model(request: pytest.FixtureRequest) -> str:
    return unique_model(request.node.nodeid)
