"""Fixtures of the mesh suites: a three-site mesh of operators (site-a <- site-b <- site-c seeding).

The mesh profile always runs on the bundled three-node-mesh topology; --grid-backend picks where. One
mesh is shared by the tests that only add resources (each gets networks of its own through `scenario`);
tests that crash or cut a site get a mesh of their own (`fresh_mesh`), one whose links can be cut when
they do (`fabric_mesh`):

- local: processes on this machine; the links of `fabric_mesh` run through network namespaces (it skips
  with the reason where namespaces are unavailable);
- kind: each mesh is three kind clusters of its own; a crash freezes the operator on its node and links
  are cut with iptables in the node containers;
- existing: the shared mesh runs in the clusters of the given contexts; `fresh_mesh` and `fabric_mesh`
  skip, since crashing an operator or cutting links needs clusters the run owns and their nodes.

Whatever a backend cannot do to a mesh (OperationUnsupported) turns a test into a skip with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import plugin
from harness.backends import OperationUnsupported
from harness.mesh import TOPOLOGY, Mesh, MeshScenario

_MESH_KEY = pytest.StashKey[list[Mesh]]()
#: Why the existing backend cannot give a test a mesh of its own, by what the test does to it.
_EXISTING_CANNOT = {
    "own": "crashing or stopping an operator needs a mesh of the test's own, and the existing backend has only "
           "the clusters of the given contexts (run it with --grid-backend kind or local)",
    "cut": "cutting links between sites needs access to the clusters' nodes, which the existing backend does "
           "not have (run it with --grid-backend kind, or local with network namespaces)",
}


def _start(pytestconfig: pytest.Config, impl: Any, workdir: Path, *, purpose: str | None = None) -> Mesh:
    """A started mesh on the session's backend; `purpose` ("own" or "cut") says what the test does to it."""
    from harness.backends.local import OperatorUnsupported

    if impl.operator is None or impl.operator.mesh_args is None:
        pytest.skip("unsupported feature: mesh profile (the implementation descriptor has no operator.mesh_args)")
    backend_name = pytestconfig.getoption("--grid-backend")
    try:
        if backend_name == "local":
            return _start_local(pytestconfig, impl, workdir, netns=purpose == "cut")
        return _start_on_clusters(pytestconfig, impl, workdir, backend_name, purpose)
    except OperatorUnsupported as exc:
        pytest.skip(f"unsupported feature: mesh profile ({exc})")


def _start_local(pytestconfig: pytest.Config, impl: Any, workdir: Path, *, netns: bool) -> Mesh:
    fabric = None
    if netns:
        from harness.netns import Fabric, NetnsUnavailable, netns_unavailable

        reason = netns_unavailable()
        if reason is not None:
            pytest.skip(f"network namespaces unavailable, so links cannot be cut: {reason}")
        try:
            fabric = Fabric.create("mesh", 3)
        except NetnsUnavailable as exc:
            pytest.skip(f"network namespaces unavailable, so links cannot be cut: {exc}")
    try:
        mesh = Mesh.start(impl, workdir, seed=pytestconfig.getoption("--grid-seed"), fabric=fabric)
    except BaseException:
        if fabric is not None:
            fabric.close()
        raise
    pytestconfig.stash.setdefault(_MESH_KEY, []).append(mesh)
    return mesh


def _start_on_clusters(pytestconfig: pytest.Config, impl: Any, workdir: Path, backend_name: str,
                       purpose: str | None) -> Mesh:
    """Three clusters of the mesh's own (kind) or the user's (existing), made by the plugin's factory."""
    from harness.topology import load_topology

    topology = load_topology(TOPOLOGY)
    reason = plugin.cluster_preflight(pytestconfig, backend_name, topology)
    if reason:
        pytest.skip(reason)
    if backend_name == "existing":
        if purpose is not None:
            pytest.skip(f"not on the existing backend: {_EXISTING_CANNOT[purpose]}")
        if pytestconfig.stash.get(plugin.GRID_KEY, None) is not None:
            pytest.skip("the existing backend would install the mesh into the clusters the session's main grid is "
                        "using (same object names); run the mesh profile in a session of its own")

    def factory(work: Path, top: Any, supervisor: Any, plan: Any) -> Any:
        return plugin.make_cluster_backend(pytestconfig, backend_name, work, top, impl, supervisor, plan)

    mesh = Mesh.start(impl, workdir, seed=pytestconfig.getoption("--grid-seed"), topology=topology,
                      cluster=factory)
    pytestconfig.stash.setdefault(_MESH_KEY, []).append(mesh)
    return mesh




def _stop(request: pytest.FixtureRequest, mesh: Mesh) -> None:
    config = request.config
    meshes = config.stash.get(_MESH_KEY, [])
    if mesh in meshes:
        meshes.remove(mesh)
    mesh.close(failed=bool(request.session.testsfailed))
    if config.getoption("--grid-keep"):
        print(f"\nagn-conformance: mesh work directory kept at {mesh.grid.workdir}")


def _own_mesh(request: pytest.FixtureRequest, impl: Any, factory: pytest.TempPathFactory, name: str, *,
              purpose: str | None = None) -> Iterator[Mesh]:
    """Start a mesh and stop it when the fixture ends, pass or fail."""
    started = _start(request.config, impl, plugin.run_workdir(request.config, factory, impl, name), purpose=purpose)
    try:
        yield started
    finally:
        _stop(request, started)


@pytest.fixture(scope="session")
def mesh(request: pytest.FixtureRequest, impl: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """The shared three-site mesh, torn down at the end of the session."""
    yield from _own_mesh(request, impl, tmp_path_factory, "mesh")


@pytest.fixture
def fresh_mesh(request: pytest.FixtureRequest, impl: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A mesh for one test that crashes or stops a site."""
    yield from _own_mesh(request, impl, tmp_path_factory, "mesh-fresh", purpose="own")


@pytest.fixture
def fabric_mesh(request: pytest.FixtureRequest, impl: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A mesh for one test that cuts links: sites in network namespaces (local) or clusters of its own (kind)."""
    yield from _own_mesh(request, impl, tmp_path_factory, "mesh-netns", purpose="cut")


def _scenario(request: pytest.FixtureRequest, mesh: Mesh) -> Iterator[MeshScenario]:
    world = MeshScenario(mesh, request.node.nodeid)
    try:
        yield world
    finally:
        world.close()


@pytest.fixture
def scenario(request: pytest.FixtureRequest, mesh: Mesh) -> Iterator[MeshScenario]:
    """This test's own networks on the shared mesh, deleted when it ends, pass or fail."""
    yield from _scenario(request, mesh)


@pytest.fixture
def fresh(request: pytest.FixtureRequest, fresh_mesh: Mesh) -> Iterator[MeshScenario]:
    yield from _scenario(request, fresh_mesh)


@pytest.fixture
def cut(request: pytest.FixtureRequest, fabric_mesh: Mesh) -> Iterator[MeshScenario]:
    yield from _scenario(request, fabric_mesh)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A test asking the backend for something it cannot do to a mesh is skipped with the backend's reason."""
    try:
        return (yield)
    except OperationUnsupported as exc:
        pytest.skip(f"not on this backend: {exc}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach every running mesh's operator logs, mesh status and gateways to a failing test."""
    report = yield
    meshes = item.config.stash.get(_MESH_KEY, [])
    if report.failed and meshes and item.get_closest_marker("conformance") is not None:
        for mesh in meshes:
            report.sections.append(("agn-conformance mesh", mesh.diagnostics()))
    return report
