"""Fixtures of the provider suites: a two-site grid whose site-b runs the provider gateway under test.

The provider profile always runs on the bundled two-site topology (site-a consumes, site-b provides),
whatever --grid-topology names, since it judges the hop between two sites; --grid-backend picks where it
runs (on kind the provider gateways are pods of site-b's cluster, reached by site-a's pods through site-b's
node). Site-b's provider gateways and site-a's edge gateway are shared by the session; tests that need a
gateway of their own start it and stop it themselves.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness import contract, plugin
from harness.addresses import AddressPlan
from harness.gateway_config import ProviderRoute, TrustedPeer
from harness.grid import Gateway, Grid, ProviderGateway
from harness.process import Supervisor
from suites.provider.support import MODEL, OTHER_MODEL, PROVIDER_CREDENTIAL, ProviderHop

TOPOLOGY = "two-site"
_GRID_KEY = pytest.StashKey[Grid]()


@pytest.fixture(scope="session")
def provider_grid(pytestconfig: pytest.Config, impl: Any, tmp_path_factory: pytest.TempPathFactory,
                  request: pytest.FixtureRequest) -> Iterator[Grid]:
    """A two-site grid for this session on the chosen backend, torn down at the end, pass or fail.

    Cluster backends are made by the same factory as the main grid's (kind: two clusters of its own;
    existing: the contexts given for site-a and site-b).
    """
    from harness.backends.local import LocalBackend
    from harness.topology import load_topology

    backend_name = pytestconfig.getoption("--grid-backend")
    topology = load_topology(TOPOLOGY)
    if backend_name != "local":
        reason = plugin.cluster_preflight(pytestconfig, backend_name, topology)
        if reason:
            pytest.skip(reason)
        if backend_name == "existing" and pytestconfig.stash.get(plugin.GRID_KEY, None) is not None:
            pytest.skip("the existing backend would install a second grid into the clusters the session's main "
                        "grid is using (same object names); run the provider profile in a session of its own")
    keep = pytestconfig.getoption("--grid-keep")
    workdir = plugin.run_workdir(pytestconfig, tmp_path_factory, impl, "provider-grid")
    seed = pytestconfig.getoption("--grid-seed")
    supervisor = Supervisor(workdir / "logs")
    plan = AddressPlan(seed=seed)
    cluster_backend = None
    if backend_name == "local":
        backend: Any = LocalBackend(workdir, supervisor, plan, impl, seed)
    else:
        backend = cluster_backend = plugin.make_cluster_backend(pytestconfig, backend_name, workdir, topology, impl,
                                                            supervisor, plan)
    grid = Grid(topology, backend, impl.features)
    pytestconfig.stash[_GRID_KEY] = grid
    try:
        if cluster_backend is not None:
            cluster_backend.start()
        grid.start()
        yield grid
    finally:
        del pytestconfig.stash[_GRID_KEY]
        try:
            grid.close()
        finally:
            if cluster_backend is not None:
                plugin.close_cluster_backend(cluster_backend, failed=bool(request.session.testsfailed))
        if keep:
            print(f"\nagn-conformance: provider grid work directory kept at {workdir}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the provider grid's gateways (last overlay, log tails) to a failing test."""
    report = yield
    grid = item.config.stash.get(_GRID_KEY, None)
    if report.failed and grid is not None and item.get_closest_marker("conformance") is not None:
        report.sections.append(("agn-conformance provider grid", grid.diagnostics()))
    return report


@pytest.fixture(scope="session")
def hop(provider_grid: Grid) -> ProviderHop:
    grid = provider_grid
    a, b = grid.site("site-a"), grid.site("site-b")
    pki = grid.backend.pki
    token = f"agn-provider-token-{secrets.token_hex(16)}"
    primary = ProviderRoute("prov-cand-b2", MODEL, "model-b2", credential=PROVIDER_CREDENTIAL)
    spoof_target = ProviderRoute("prov-cand-b1", MODEL, "model-b1", credential=PROVIDER_CREDENTIAL)
    plain = ProviderRoute("prov-cand-plain", OTHER_MODEL, "model-b1")
    routes = (primary, spoof_target, plain)
    consumer = pki.client("consumer-site-a")
    pinned_wrong_org = pki.wrong_organization_client("pinned-wrong-org")
    pinned_both = pki.client("pinned-both-fields")
    tokens = {PROVIDER_CREDENTIAL: token}
    by_org = b.start_provider_gateway(trusted_peers=[TrustedPeer(organization="ai-grid")], routes=routes,
                                      tokens=tokens)
    pinned = b.start_provider_gateway(
        trusted_peers=[TrustedPeer(cert_digest=consumer.digest),
                       TrustedPeer(cert_digest=pinned_wrong_org.digest, organization="ai-grid"),
                       TrustedPeer(cert_digest=pinned_both.digest, organization="ai-grid")],
        routes=routes, tokens=tokens)
    overlay = a.envelope([a.remote_candidate(by_org, primary), a.remote_candidate(by_org, plain)])
    edge = a.start_hop_consumer([by_org], contract.encode(overlay), consumer)
    revision = contract.revision_of(overlay)
    edge.wait_serving(revision, MODEL)
    return ProviderHop(grid, a, b, token, primary, spoof_target, plain, consumer, pinned_wrong_org, pinned_both,
                       by_org, pinned, edge, revision)


@pytest.fixture
def start_provider(hop: ProviderHop) -> Iterator[Callable[..., ProviderGateway]]:
    """Start one-off provider gateways in site-b inside a test; all are stopped when it ends."""
    started: list[ProviderGateway] = []

    def start(**kwargs: Any) -> ProviderGateway:
        kwargs.setdefault("trusted_peers", [TrustedPeer(organization="ai-grid")])
        kwargs.setdefault("routes", hop.routes)
        kwargs.setdefault("tokens", {PROVIDER_CREDENTIAL: hop.token})
        gateway = hop.b.start_provider_gateway(**kwargs)
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
