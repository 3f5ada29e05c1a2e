"""The backend protocol: what the Grid facade needs from any backend, and the capabilities a backend declares."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from harness.backends.local import GatewayProcess, ProviderProcess
    from harness.contract import ScopeSpec
    from harness.control import ControlPlane, OverlaySyncProcess
    from harness.grid import Site
    from harness.pki import GridPKI
    from harness.process import ManagedProcess
    from harness.run_as import RunAs
    from harness.topology import SiteSpec

BACKEND_NAMES = ("local", "kind", "existing")

#: Capabilities a backend declares in `capabilities`; callers ask for one, never probe for methods.
#: The operator under test runs where the backend puts it (a cluster's Deployment), not as a local process.
OPERATOR_IN_CLUSTER = "operator-in-cluster"
#: The backend itself cuts and heals links between sites (on the nodes it owns).
PARTITION = "partition"
#: The backend crashes an operator without a goodbye (frozen on its node).
CRASH = "crash"
CAPABILITIES = (OPERATOR_IN_CLUSTER, PARTITION, CRASH)


class OperationUnsupported(RuntimeError):
    """Something a test asks of the grid that this backend cannot do (crash an operator without a goodbye,
    cut the links between sites); the message says why, and the suites skip with it."""


class _Stoppable(Protocol):
    def stop_all(self) -> None: ...


class _Closable(Protocol):
    def close(self) -> None: ...


class Backend(Protocol):
    """Starts fake providers, gateways and host-side control components for one run.

    `mesh_addresses` is (bind, advertise) of a site's mesh member: where its operator binds its UDP
    membership and the address peers send to. `peer_address` turns the address the harness knows a
    gateway by into the one components of other sites dial.
    """

    @property
    def name(self) -> str: ...

    @property
    def workdir(self) -> Path: ...

    @property
    def supervisor(self) -> _Stoppable: ...

    @property
    def plan(self) -> _Closable: ...

    @property
    def pki(self) -> GridPKI: ...

    #: Whether a running gateway reads the files the harness wrote for it (certificates, token files) in
    #: place, so that changing one later reaches the gateway (False where they are copied in at start).
    gateway_files_live: bool
    #: What this backend can do beyond the common protocol (see CAPABILITIES).
    capabilities: frozenset[str]

    def control_plane(self, site: Site, mesh: Mapping[str, str] | None = None, *,
                      signals: bool = False) -> ControlPlane:
        """The site's operator under test, started (or found installed) now; `mesh` holds the values of the
        descriptor's mesh placeholders when it joins a mesh; `signals` asks for its signals endpoint too, where
        the backend starts the operator itself."""
        ...

    def partition(self, group_a: Iterable[int], group_b: Iterable[int]) -> None:
        """Cut every link between two groups of sites (OperationUnsupported without PARTITION)."""
        ...

    def heal(self) -> None: ...

    def gateway_user(self) -> RunAs | None:
        """The user this backend starts gateways as, when that is another user than the harness's."""
        ...

    def start_providers(self, site_index: int, site: SiteSpec) -> dict[str, ProviderProcess]: ...

    def start_tls_metrics(self, site_index: int, site: SiteSpec) -> ProviderProcess: ...

    def start_operator(self, site_index: int, name: str,
                       mesh: Mapping[str, str] | None = None) -> tuple[ManagedProcess, Path, Path]: ...

    def start_overlay_sync(self, site_index: int, configmap_file: Path, scope: ScopeSpec) -> OverlaySyncProcess: ...

    def allocate_gateway(self, site_index: int) -> tuple[str, str, Path]: ...

    def start_gateway(self, name: str, listen: str, admin: str, workdir: Path, config_text: str,
                      overlay_dir: Path, *, env: Mapping[str, str] | None = None,
                      scheme: str = "http") -> GatewayProcess: ...

    def stop(self, process: ManagedProcess) -> int | None: ...

    def mesh_addresses(self, site_index: int) -> tuple[str, str]: ...

    def peer_address(self, address: str) -> str: ...


__all__ = ["BACKEND_NAMES", "CAPABILITIES", "CRASH", "OPERATOR_IN_CLUSTER", "PARTITION", "Backend",
           "OperationUnsupported"]
