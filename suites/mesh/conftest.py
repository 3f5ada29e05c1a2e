"""Fixtures of the mesh suites: a three-site mesh of operators (site-a <- site-b <- site-c seeding).

The mesh profile always runs on the bundled three-node-mesh topology. One mesh is shared by the tests
that only add resources (each gets networks of its own through `scenario`); tests that crash or cut a
site get a mesh of their own (`fresh_mesh`), in network namespaces when they cut links (`fabric_mesh`,
which skips with the reason where namespaces are unavailable).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.mesh import Mesh, MeshScenario

_MESH_KEY = pytest.StashKey[list[Mesh]]()


def _start(pytestconfig: pytest.Config, impl: Any, workdir: Path, *, netns: bool = False) -> Mesh:
    from harness.backends.local import OperatorUnsupported

    backend_name = pytestconfig.getoption("--grid-backend")
    if backend_name != "local":
        pytest.skip(f"the mesh profile runs on the local backend only in this release (got {backend_name})")
    if impl.operator is None or impl.operator.mesh_args is None:
        pytest.skip("unsupported feature: mesh profile (the implementation descriptor has no operator.mesh_args)")
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
    except OperatorUnsupported as exc:
        if fabric is not None:
            fabric.close()
        pytest.skip(f"unsupported feature: mesh profile ({exc})")
    except BaseException:
        if fabric is not None:
            fabric.close()
        raise
    pytestconfig.stash.setdefault(_MESH_KEY, []).append(mesh)
    return mesh


def _workdir(pytestconfig: pytest.Config, factory: pytest.TempPathFactory, name: str) -> Path:
    if pytestconfig.getoption("--grid-keep"):
        return Path(tempfile.mkdtemp(prefix=f"agn-{name}-"))
    return factory.mktemp(name)


def _stop(pytestconfig: pytest.Config, mesh: Mesh) -> None:
    meshes = pytestconfig.stash.get(_MESH_KEY, [])
    if mesh in meshes:
        meshes.remove(mesh)
    mesh.close()
    if pytestconfig.getoption("--grid-keep"):
        print(f"\nagn-conformance: mesh work directory kept at {mesh.grid.workdir}")


def _own_mesh(pytestconfig: pytest.Config, impl: Any, factory: pytest.TempPathFactory, name: str, *,
              netns: bool = False) -> Iterator[Mesh]:
    """Start a mesh and stop it when the fixture ends, pass or fail."""
    started = _start(pytestconfig, impl, _workdir(pytestconfig, factory, name), netns=netns)
    try:
        yield started
    finally:
        _stop(pytestconfig, started)


@pytest.fixture(scope="session")
def mesh(pytestconfig: pytest.Config, impl: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """The shared three-site mesh, torn down at the end of the session."""
    yield from _own_mesh(pytestconfig, impl, tmp_path_factory, "mesh")


@pytest.fixture
def fresh_mesh(pytestconfig: pytest.Config, impl: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A mesh for one test that crashes or cuts a site."""
    yield from _own_mesh(pytestconfig, impl, tmp_path_factory, "mesh-fresh")


@pytest.fixture
def fabric_mesh(pytestconfig: pytest.Config, impl: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A mesh for one test whose sites live in network namespaces joined by veth pairs."""
    yield from _own_mesh(pytestconfig, impl, tmp_path_factory, "mesh-netns", netns=True)


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
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach every running mesh's operator logs, mesh status and gateways to a failing test."""
    report = yield
    meshes = item.config.stash.get(_MESH_KEY, [])
    if report.failed and meshes and item.get_closest_marker("conformance") is not None:
        for mesh in meshes:
            report.sections.append(("agn-conformance mesh", mesh.diagnostics()))
    return report
