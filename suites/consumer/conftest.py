"""Fixtures shared by the consumer suites."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.grid import Gateway, Grid, Site, unique_model
from harness.suite_support import ReloadProbe


@pytest.fixture(scope="session")
def site(grid: Grid) -> Site:
    return grid.site()


@pytest.fixture(scope="session")
def gw(site: Site) -> Gateway:
    """The shared core gateway: overlays are swapped, never the process."""
    return site.gateway("core")


@pytest.fixture
def model(request: pytest.FixtureRequest) -> str:
    return unique_model(request.node.nodeid)


@pytest.fixture
def reloads(gw: Gateway, grid: Grid) -> ReloadProbe:
    return ReloadProbe(gw, "prometheusMetrics" in grid.features)


@pytest.fixture
def fresh_gateway(site: Site) -> Iterator[Any]:
    """Start one-off gateways inside a test; all are stopped when it ends."""
    started: list[Gateway] = []

    def start(variant: str, overlay: bytes | None, **kwargs: Any) -> Gateway:
        gateway = site.start_gateway(variant, overlay, **kwargs)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        site.stop_gateway(gateway)
