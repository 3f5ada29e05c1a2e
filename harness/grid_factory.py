"""The session's grid factory: every grid and mesh of a run is opened here, as `tmp_path` comes from pytest's
`TempPathFactory`.

It owns what each grid needs besides its topology: a work directory (kept with --grid-keep), the seed, the
backend chosen by --grid-backend (looked up in harness.backends.registry), its preflight, and teardown,
pass or fail, with cluster logs collected first when a test failed. Suites ask for a topology and say
what the grid is for; a reason the backend cannot serve that (no Docker, no network namespaces, a second
grid on the user's own clusters) becomes a skip naming it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.addresses import AddressPlan
from harness.backends.registry import ClusterBackendKind, cluster_backend
from harness.environment import NOT_JUDGED_REASON, EnvironmentProblem
from harness.process import Supervisor
from harness.topology import Topology, load_topology

if TYPE_CHECKING:
    from harness.grid import Grid
    from harness.mesh import Mesh

#: What a test does to a mesh of its own that the existing backend (the user's clusters) cannot give it.
_EXISTING_CANNOT = {
    "own": "crashing or stopping an operator needs a mesh of the test's own, and the existing backend has only "
           "the clusters of the given contexts (run it with --grid-backend kind or local)",
    "cut": "cutting links between sites needs access to the clusters' nodes, which the existing backend does "
           "not have (run it with --grid-backend kind, or local with network namespaces)",
}


class GridFactory:
    """Opens the grids and meshes of one pytest session (the `grid_factory` fixture)."""

    def __init__(self, config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, impl: Any,
                 session: pytest.Session | None = None) -> None:
        self.config = config
        self.session = session
        self.tmp_path_factory = tmp_path_factory
        self.impl = impl
        self.backend_name: str = config.getoption("--grid-backend")
        self.seed: int | None = config.getoption("--grid-seed")
        self.keep: bool = bool(config.getoption("--grid-keep"))
        #: (purpose, grid or mesh) of what is open now: backends on shared clusters take one at a time, and
        #: a failing test gets the diagnostics of each
        self._open: list[tuple[str, Grid | Mesh]] = []

    @property
    def grids(self) -> list[Grid]:
        from harness.grid import Grid

        return [opened for _, opened in self._open if isinstance(opened, Grid)]

    @property
    def meshes(self) -> list[Mesh]:
        from harness.mesh import Mesh

        return [opened for _, opened in self._open if isinstance(opened, Mesh)]

    # ------------------------------------------------------------------------------------ helpers

    def workdir(self, name: str) -> Path:
        """A work directory for one grid of this session.

        With --grid-keep it outlives the run. A gateway started as another user (`gateway.run_as`) gets one
        under the system temporary directory instead of pytest's base, which pytest makes private again
        whenever another session of the same user starts; that one is removed when the session ends.
        """
        if not self.keep and getattr(self.impl.gateway, "run_as", None) is None:
            return self.tmp_path_factory.mktemp(name)
        path = Path(tempfile.mkdtemp(prefix=f"agn-{name}-"))
        if not self.keep:
            self.config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))
        return path

    def _cluster_kind(self, topology: Topology, purpose: str) -> ClusterBackendKind | None:
        """The cluster backend to use (None: local), skipping the test when it cannot serve this grid."""
        if self.backend_name == "local":
            return None
        kind = cluster_backend(self.backend_name)
        reason = kind.preflight(self.config, topology)
        if reason:  # a tool, engine or image of the host is missing: nothing of the implementation ran
            pytest.skip(f"{NOT_JUDGED_REASON}: {reason}")
        if kind.shared_clusters and self._open:
            pytest.skip(f"the {self.backend_name} backend would install the {purpose} into the clusters the "
                        f"{self._open[0][0]} is using (same object names); run it in a session of its own")
        return kind

    def _failed(self) -> bool:
        """Whether a test of the session failed (cluster logs are worth saving then); True without one."""
        return bool(self.session.testsfailed) if self.session is not None else True

    # -------------------------------------------------------------------------------------- grids

    @contextlib.contextmanager
    def open(self, topology: str | Topology, *, purpose: str) -> Iterator[Grid]:
        """A started grid of `topology` on the session's backend, closed when the block ends."""
        from harness.backends.local import LocalBackend
        from harness.grid import Grid

        top = topology if isinstance(topology, Topology) else load_topology(topology)
        kind = self._cluster_kind(top, purpose)
        workdir = self.workdir(purpose.replace(" ", "-"))
        supervisor = Supervisor(workdir / "logs")
        plan = AddressPlan(seed=self.seed)
        cluster = None
        if kind is None:
            backend: Any = LocalBackend(workdir, supervisor, plan, self.impl, self.seed)
        else:
            backend = cluster = kind.make(self.config, workdir, top, self.impl, supervisor, plan)
        grid = Grid(top, backend, self.impl.features)
        self._open.append((purpose, grid))
        try:
            if cluster is not None:
                try:
                    cluster.start()
                except EnvironmentProblem as exc:
                    pytest.skip(f"{NOT_JUDGED_REASON}: {exc}")
            grid.start()
            yield grid
        finally:
            self._open.remove((purpose, grid))
            try:
                grid.close()
            finally:
                if cluster is not None:
                    cluster.teardown(failed=self._failed())
            if self.keep:
                print(f"\nagn-conformance: {purpose} work directory kept at {workdir}")

    @contextlib.contextmanager
    def mesh(self, *, purpose: str | None = None, topology: str | None = None) -> Iterator[Mesh]:
        """A started three-site mesh, closed when the block ends; `purpose` says what the test does to it:
        "own" (crashes or stops a site) or "cut" (cuts links). `topology` names another layout of three
        sites than the mesh profile's (a demo's, say).

        local: processes on this machine, a "cut" mesh in network namespaces (a skip where they are
        unavailable); kind: three kind clusters of the mesh's own, a crash freezes the operator on its node
        and links are cut with iptables in the node containers; existing: the clusters of the given
        contexts, so "own" and "cut" skip (they need clusters the run owns and their nodes).
        """
        from harness.mesh import TOPOLOGY, Mesh

        if self.impl.operator is None or not self.impl.operator.joins_mesh:
            pytest.skip("unsupported feature: mesh profile (the implementation descriptor has neither "
                        "operator.mesh_args nor operator.mesh_env)")
        name = {"own": "mesh-fresh", "cut": "mesh-netns"}.get(purpose or "", "mesh")
        if topology is not None:
            name = f"{name}-{topology}"
        layout = load_topology(topology or TOPOLOGY)
        kind = self._cluster_kind(layout, "mesh")
        if kind is not None and kind.shared_clusters and purpose is not None:
            pytest.skip(f"not on the {self.backend_name} backend: {_EXISTING_CANNOT[purpose]}")
        fabric = self._fabric() if kind is None and purpose == "cut" else None
        workdir = self.workdir(name)

        def make(work: Path, top: Topology, supervisor: Supervisor, plan: AddressPlan) -> Any:
            assert kind is not None
            return kind.make(self.config, work, top, self.impl, supervisor, plan)

        from harness.backends.local import OperatorUnsupported

        try:
            started = Mesh.start(self.impl, workdir, seed=self.seed, fabric=fabric, topology=layout,
                                 cluster=make if kind is not None else None)
        except OperatorUnsupported as exc:
            if fabric is not None:
                fabric.close()
            pytest.skip(f"unsupported feature: mesh profile ({exc})")
        except EnvironmentProblem as exc:  # the mesh's clusters, not the implementation: not judged
            if fabric is not None:
                fabric.close()
            pytest.skip(f"{NOT_JUDGED_REASON}: {exc}")
        except BaseException:
            if fabric is not None:
                fabric.close()
            raise
        self._open.append(("mesh", started))
        try:
            yield started
        finally:
            self._open.remove(("mesh", started))
            started.close(failed=self._failed())
            if self.keep:
                print(f"\nagn-conformance: mesh work directory kept at {started.grid.workdir}")

    def _fabric(self) -> Any:
        from harness.netns import Fabric, NetnsUnavailable, netns_unavailable

        reason = netns_unavailable()
        if reason is not None:
            pytest.skip(f"network namespaces unavailable, so links cannot be cut: {reason}")
        try:
            return Fabric.create("mesh", 3)
        except NetnsUnavailable as exc:
            pytest.skip(f"network namespaces unavailable, so links cannot be cut: {exc}")
