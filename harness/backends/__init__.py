"""Where grid components run. `Backend` is what the Grid facade needs from any of them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from harness.backends.local import GatewayProcess, ProviderProcess
    from harness.contract import ScopeSpec
    from harness.control import OverlaySyncProcess
    from harness.pki import GridPKI
    from harness.process import ManagedProcess
    from harness.topology import SiteSpec

BACKEND_NAMES = ("local", "kind", "existing")


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


__all__ = ["BACKEND_NAMES", "Backend", "OperationUnsupported"]
