"""Fixtures of the provider suites: the two-site topology (site-a consumes, site-b runs the provider gateway
under test) on --grid-backend, its shared hop, and gateways a test starts and stops itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness.grid import Gateway, Grid, ProviderGateway
from harness.grid_factory import GridFactory
from suites.provider.support import ProviderHop, start_hop

TOPOLOGY = "two-site"


@pytest.fixture(scope="session")
def provider_grid(grid_factory: GridFactory) -> Iterator[Grid]:
    """The session's two-site grid, torn down at the end, pass or fail."""
    with grid_factory.open(TOPOLOGY, purpose="provider grid") as grid:
        yield grid


@pytest.fixture(scope="session")
def hop(provider_grid: Grid) -> ProviderHop:
    return start_hop(provider_grid)


@pytest.fixture
def start_provider(hop: ProviderHop) -> Iterator[Callable[..., ProviderGateway]]:
    """Start one-off provider gateways in site-b inside a test; all are stopped when it ends."""
    started: list[ProviderGateway] = []

    def start(**kwargs: Any) -> ProviderGateway:
        gateway = hop.start_provider(**kwargs)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        hop.b.stop_gateway(gateway)


@pytest.fixture
def start_edge(hop: ProviderHop) -> Iterator[Callable[..., Gateway]]:
    """Start one-off consumer gateways in site-a inside a test: `start(overlay, peer=None)` gives one whose
    provider hop reaches `peer` (by default the session's provider gateway trusting organization ai-grid)."""
    started: list[Gateway] = []

    def start(overlay: bytes | None, peer: ProviderGateway | None = None) -> Gateway:
        gateway = hop.a.start_hop_consumer([peer or hop.by_org], overlay, hop.consumer)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        hop.a.stop_gateway(gateway)
