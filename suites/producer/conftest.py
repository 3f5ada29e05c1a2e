"""Fixtures shared by the producer suites: the site's operator under test and one scenario per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.backends.local import OperatorUnsupported
from harness.control import ControlPlane
from harness.grid import Grid, Site
from harness.producer_support import Scenario


@pytest.fixture(scope="session")
def site(grid: Grid) -> Site:
    return grid.site()


@pytest.fixture(scope="session")
def control(site: Site) -> ControlPlane:
    """The operator under test, started once per session on the local backend; it serves its signals endpoint
    as well, because the signalsRelay tests share it."""
    try:
        return site.control_plane(signals=True)
    except OperatorUnsupported as exc:
        pytest.skip(f"unsupported feature: producer profile ({exc})")


@pytest.fixture
def scenario(request: pytest.FixtureRequest, control: ControlPlane, site: Site) -> Iterator[Scenario]:
    """This test's own network and resources, deleted when it ends, pass or fail."""
    world = Scenario(control, site, request.node.nodeid)
    try:
        yield world
    finally:
        world.close()
