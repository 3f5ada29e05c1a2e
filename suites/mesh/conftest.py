"""Fixtures of the mesh suites: three-site meshes of operators (site-a <- site-b <- site-c seeding).

One mesh is shared by the tests that only add resources (each gets networks of its own: `scenario`); a
test that crashes or stops a site gets a mesh of its own (`fresh`), one that cuts links a mesh whose
links can be cut (`cut`). What a backend cannot give a test becomes a skip naming why (see
harness.grid_factory.GridFactory.mesh).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.grid_factory import GridFactory
from harness.mesh import Mesh, MeshScenario


@pytest.fixture(scope="session")
def mesh(grid_factory: GridFactory) -> Iterator[Mesh]:
    """The shared three-site mesh, torn down at the end of the session."""
    with grid_factory.mesh() as shared:
        yield shared


@pytest.fixture
def fresh_mesh(grid_factory: GridFactory) -> Iterator[Mesh]:
    """A mesh for one test that crashes or stops a site."""
    with grid_factory.mesh(purpose="own") as own:
        yield own


@pytest.fixture
def fabric_mesh(grid_factory: GridFactory) -> Iterator[Mesh]:
    """A mesh for one test that cuts links: sites in network namespaces (local) or clusters of its own (kind)."""
    with grid_factory.mesh(purpose="cut") as cuttable:
        yield cuttable


@pytest.fixture
def scenario(request: pytest.FixtureRequest, mesh: Mesh) -> Iterator[MeshScenario]:
    """This test's own networks on the shared mesh, deleted when it ends, pass or fail."""
    with MeshScenario(mesh, request.node.nodeid) as world:
        yield world


@pytest.fixture
def fresh(request: pytest.FixtureRequest, fresh_mesh: Mesh) -> Iterator[MeshScenario]:
    with MeshScenario(fresh_mesh, request.node.nodeid) as world:
        yield world


@pytest.fixture
def cut(request: pytest.FixtureRequest, fabric_mesh: Mesh) -> Iterator[MeshScenario]:
    with MeshScenario(fabric_mesh, request.node.nodeid) as world:
        yield world
