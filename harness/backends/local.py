"""The local backend: every component is a process on this machine, on per-site loopback blocks."""

from __future__ import annotations

import json
import os
import ssl
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import http_get
from harness import run_as as users
from harness.addresses import ADMIN_PORT, BACKEND_PORT, GATEWAY_PORT, AddressPlan, SiteHostPlan
from harness.backends import OperationUnsupported
from harness.contract import ScopeSpec
from harness.control import ENVELOPE_KEY, ControlPlane, OverlaySyncProcess
from harness.impl import OverlaySyncCommand, parse_overlay_sync, reference_document
from harness.pki import GridPKI
from harness.process import ManagedProcess, Supervisor
from harness.topology import ProviderSpec, SiteSpec
from harness.waiting import WaitTimeout, poll_until

if TYPE_CHECKING:
    from harness.grid import Site
    from harness.netns import Fabric

#: Port of a site's TLS metrics endpoint (a fake backend serving HTTPS), next to the plain backends.
TLS_METRICS_PORT = BACKEND_PORT + 50
#: First port of the fake backends' mTLS listeners, the endpoints consumer gateways reach hop clusters at.
HOP_MTLS_PORT = BACKEND_PORT + 443
#: UDP port a site's operator gossips on (the mesh profile), on the site's own address.
MESH_PORT = 17946
#: Port a site's operator serves its signals endpoint on (operator.signals_args), on an address of the site's.
OPERATOR_SIGNALS_PORT = 17980


class OperatorUnsupported(RuntimeError):
    """The implementation descriptor names no operator, so the producer profile cannot run."""


class GatewayStartFailed(RuntimeError):
    """The gateway exited or never became ready; carries its exit code and log tail."""

    def __init__(self, message: str, exit_code: int | None, log_tail: str) -> None:
        super().__init__(f"{message}\n--- gateway log (tail) ---\n{log_tail}")
        self.exit_code = exit_code
        self.log_tail = log_tail


def fake_sni(site: str, provider: str) -> str:
    """The DNS name a fake backend's mTLS certificate carries and hop clusters verify (SNI)."""
    return f"{provider}.{site}.backend.grid.test"


def is_hop_backend(spec: ProviderSpec) -> bool:
    """Whether consumer gateways reach this fake backend as a provider hop cluster (over mTLS)."""
    return spec.role == "model"


@dataclass
class ProviderProcess:
    """A fake backend: `address` is its plain listener (admin API, private backends), `mtls_address` the
    listener that requires a grid client certificate (hop clusters), verified by the name `sni`."""

    spec: ProviderSpec
    address: str  # host:port
    process: ManagedProcess
    scheme: str = "http"
    mtls_address: str | None = None
    sni: str | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}"


@dataclass(frozen=True)
class OperatorSignals:
    """Where a site's operator serves GET /v1/site/signals over mutual TLS (the descriptor's
    operator.signals_args): its address, the name its certificate carries, and the site it labels its rows with.
    Clients present a grid client certificate and trust the run's CA."""

    address: str  # host:port
    server_name: str
    site: str
    cert: Path
    key: Path


@dataclass
class GatewayProcess:
    name: str
    listen: str
    admin: str
    config_path: Path
    overlay_dir: Path
    process: ManagedProcess
    scheme: str = "http"  # "https" for a listener with TLS (a provider gateway)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.listen}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.admin}"


class LocalBackend:
    """Starts fake providers and gateways as supervised processes."""

    name = "local"
    #: Gateways run on this machine and read the harness's files where it wrote them.
    gateway_files_live = True
    #: The operator is a local process; links between sites are cut in the mesh's network namespaces.
    capabilities: frozenset[str] = frozenset()

    def __init__(self, workdir: Path, supervisor: Supervisor, plan: AddressPlan | SiteHostPlan, impl: Any,
                 seed: int | None = None, fabric: Fabric | None = None) -> None:
        self.workdir = workdir
        self.fabric = fabric  # sites in network namespaces: their processes start inside them
        self.seed = seed
        self.supervisor = supervisor
        self.plan = plan
        self.impl = impl
        self._gateway_count = 0
        self._sync_count = 0
        self._pki: GridPKI | None = None
        self._launchers: dict[int | None, Path] = {}  # site -> socket of its running gateway.launcher
        self._launcher_lock = threading.Lock()
        #: site index -> the signals endpoint of its operator (kept for restarts), when the descriptor gives one
        self.operator_signals: dict[int, OperatorSignals] = {}

    def _inside(self, site_index: int | None, argv: list[str]) -> list[str]:
        """`argv` started inside the site's network namespace when the sites live in a fabric."""
        if self.fabric is None or site_index is None:
            return argv
        return [*self.fabric.exec_prefix(site_index), *argv]

    def _site_of(self, host: str) -> int | None:
        if self.fabric is None or not isinstance(self.plan, SiteHostPlan) or host not in self.plan.hosts:
            return None
        return self.plan.hosts.index(host)

    @property
    def pki(self) -> GridPKI:
        """The run's certificate authority, made on first use."""
        if self._pki is None:
            self._pki = GridPKI(self.workdir / "pki")
        return self._pki

    def start_providers(self, site_index: int, site: SiteSpec) -> dict[str, ProviderProcess]:
        """The site's fake backends, served by one process (harness.fakes.group) so a site pays the start-up
        cost once; each keeps its own listener, state and admin API. Those consumer gateways reach as hop
        clusters also listen for mTLS with a certificate from the run's CA, accepting only client
        certificates the grid CA signed."""
        argv_lists: list[list[str]] = []
        listeners: list[tuple[ProviderSpec, str, str | None, str | None]] = []  # spec, address, mTLS address, SNI
        for offset, spec in enumerate(site.providers):
            host, port = self.plan.allocate(site_index, BACKEND_PORT + offset)
            argv = ["--name", spec.name, "--site", spec.site, "--listen", f"{host}:{port}"]
            mtls_address = sni = None
            if is_hop_backend(spec):
                mtls_host, mtls_port = self.plan.allocate(site_index, HOP_MTLS_PORT + offset)
                mtls_address, sni = f"{mtls_host}:{mtls_port}", fake_sni(site.name, spec.name)
                files = self.pki.server(f"fake-{site.name}-{spec.name}", mtls_host, sni)
                argv += ["--mtls-listen", mtls_address, "--tls-cert", str(files.cert), "--tls-key", str(files.key),
                         "--client-ca", str(self.pki.ca_path)]
            argv_lists.append(argv)
            listeners.append((spec, f"{host}:{port}", mtls_address, sni))
        if not argv_lists:
            return {}
        listing = self.workdir / f"fakes-{site_index}-{site.name}.json"
        listing.parent.mkdir(parents=True, exist_ok=True)
        listing.write_text(json.dumps(argv_lists, indent=1))
        proc = self.supervisor.start(f"fakes-{site.name}", self._inside(
            site_index, [sys.executable, "-m", "harness.fakes.group", str(listing)]))
        started = {spec.name: ProviderProcess(spec, address, proc, mtls_address=mtls_address, sni=sni)
                   for spec, address, mtls_address, sni in listeners}
        for provider in started.values():
            self._wait_ready(provider.process, f"{provider.url}/admin/stats", f"fake backend {provider.spec.name}", 20)
        return started

    def start_tls_metrics(self, site_index: int, site: SiteSpec) -> ProviderProcess:
        """A fake backend serving HTTPS with a certificate from the run's CA, for TLS metrics scrapes."""
        host, port = self.plan.allocate(site_index, TLS_METRICS_PORT)
        files = self.pki.server(f"metrics-{site.name}", host)
        spec = ProviderSpec(name=f"tls-metrics-{site.name}", site=site.name, role="metrics")
        argv = [sys.executable, "-m", "harness.fakes.cli", "--name", spec.name, "--site", site.name,
                "--listen", f"{host}:{port}", "--tls-cert", str(files.cert), "--tls-key", str(files.key)]
        proc = self.supervisor.start(spec.name, self._inside(site_index, argv))
        provider = ProviderProcess(spec, f"{host}:{port}", proc, scheme="https")
        self._wait_ready(proc, f"{provider.url}/admin/stats", f"TLS metrics backend {spec.name}", 20,
                         verify=ssl.create_default_context(cafile=str(self.pki.ca_path)))
        return provider

    def start_operator(self, site_index: int, name: str, mesh: Mapping[str, str] | None = None, *,
                       site_name: str | None = None) -> tuple[ManagedProcess, Path, Path]:
        """Start the operator under test on fresh resource and output directories.

        `mesh` (values of the descriptor's mesh placeholders) makes it join a mesh; a descriptor without
        `operator.mesh_args` then raises OperatorUnsupported. With `site_name`, an operator whose descriptor
        gives `operator.signals_args` also serves its signals endpoint (see `operator_signals`).
        """
        operator = getattr(self.impl, "operator", None)
        if operator is None:
            raise OperatorUnsupported("the implementation descriptor has no operator section")
        if mesh is not None and not operator.joins_mesh:
            raise OperatorUnsupported("the implementation descriptor's operator section has no mesh_args or mesh_env")
        if not operator.argv_template:  # only operator.kubernetes: installed in a cluster, never a process here
            raise OperatorUnsupported("the descriptor's operator has only a kubernetes block (no command), and the "
                                      "local backend starts operators as processes: use --backend kind or existing")
        workdir = self.workdir / f"operator-{site_index}"
        manifests, out = workdir / "manifests", workdir / "out"
        manifests.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        signals = None
        if operator.signals_args is not None and site_name is not None:
            signals = self._signals_values(site_index, site_name)
        argv, env = operator.render(manifests, out, workdir, self.pki.ca_path, mesh, signals)
        return self.supervisor.start(name, self._inside(site_index, argv), env=env, cwd=workdir), manifests, out

    def _signals_values(self, site_index: int, site_name: str) -> dict[str, str]:
        """The signals placeholders of a site's operator: one address and certificate per site, kept for restarts."""
        endpoint = self.operator_signals.get(site_index)
        if endpoint is None:
            host, port = self.plan.allocate(site_index, OPERATOR_SIGNALS_PORT)
            server_name = f"{site_name}.signals"  # as harness.serving.relay names a site's signals certificate
            files = self.pki.server(f"operator-signals-{site_name}", host, server_name)
            endpoint = OperatorSignals(f"{host}:{port}", server_name, site_name, files.cert, files.key)
            self.operator_signals[site_index] = endpoint
        return {"signals_address": endpoint.address, "signals_cert": str(endpoint.cert),
                "signals_key": str(endpoint.key), "signals_client_ca": str(self.pki.ca_path),
                "signals_site": site_name}

    def control_plane(self, site: Site, mesh: Mapping[str, str] | None = None, *,
                      signals: bool = False) -> ControlPlane:
        """The site's operator under test as a local process (restartable on the same directories); with
        `signals` it also serves its signals endpoint when the descriptor says how (operator.signals_args)."""
        name = f"operator-{site.spec.name}"
        site_name = site.spec.name if signals else None
        process, manifests, out = self.start_operator(site.index, name, mesh, site_name=site_name)

        def respawn() -> ManagedProcess:
            again, same_manifests, same_out = self.start_operator(site.index, name, mesh, site_name=site_name)
            assert (same_manifests, same_out) == (manifests, out), "an operator restarted elsewhere"
            return again

        return ControlPlane(site, process, manifests, out, respawn,
                            metrics_endpoint_key=self.impl.operator.metrics_endpoint_key,
                            provider_site=self.impl.operator.provider_site)

    def partition(self, group_a: Iterable[int], group_b: Iterable[int]) -> None:
        raise OperationUnsupported("the local backend cuts no links itself: a mesh in network namespaces does")

    def heal(self) -> None:
        raise OperationUnsupported("the local backend cuts no links itself: a mesh in network namespaces does")

    def gateway_user(self) -> users.RunAs | None:
        """The user gateways start as: the descriptor's `gateway.run_as` when that switches users."""
        return users.active_user(getattr(self.impl.gateway, "run_as", None))

    def mesh_addresses(self, site_index: int) -> tuple[str, str]:
        """(bind, advertise) of the site's mesh member: one address of the site's, which peers reach as is."""
        host, port = self.plan.allocate(site_index, MESH_PORT)
        return f"{host}:{port}", f"{host}:{port}"

    def peer_address(self, address: str) -> str:
        """Processes of every site share this machine (or a fabric that routes them): the address itself."""
        return address

    def start_overlay_sync(self, site_index: int, configmap_file: Path, scope: ScopeSpec) -> OverlaySyncProcess:
        """The descriptor's overlay-sync (the reference's when it has none) following one ConfigMap file and
        delivering into a fresh overlay directory; returns once its liveness probe answers."""
        command = self.overlay_sync_command()
        self._sync_count += 1
        workdir = self.workdir / f"overlay-sync-{self._sync_count}"
        target = workdir / "overlay"
        target.mkdir(parents=True, exist_ok=True)
        host, _ = self.plan.allocate(site_index, GATEWAY_PORT)
        admin = f"{host}:{ADMIN_PORT}"
        argv, env = command.render(configmap=configmap_file, key=ENVELOPE_KEY, target=target, file=ENVELOPE_KEY,
                                   scope=scope.as_dict(), admin=admin, workdir=workdir)
        proc = self.supervisor.start(f"overlay-sync-{self._sync_count}", self._inside(site_index, argv),
                                     env={**os.environ, **env} if env else None, cwd=workdir)
        sync = OverlaySyncProcess(proc, configmap_file, target, admin, command.ready_path, command.live_path,
                                  command.metrics_path)

        def alive() -> bool:
            if not proc.running():
                raise GatewayStartFailed(f"overlay-sync exited with {proc.returncode}", proc.returncode,
                                         proc.log_tail())
            return sync.live()

        try:
            poll_until(alive, bool, what=f"overlay-sync's liveness probe http://{admin}{command.live_path}",
                       timeout=command.startup_timeout_s, fatal=(GatewayStartFailed,))
        except BaseException:
            self.supervisor.stop(proc)
            raise
        return sync

    def overlay_sync_command(self) -> OverlaySyncCommand:
        """The overlay-sync this run starts: the descriptor's, or the reference's for one without."""
        command = getattr(self.impl, "overlay_sync", None)
        if isinstance(command, OverlaySyncCommand):
            return command
        return parse_overlay_sync(reference_document()["overlay_sync"])

    def allocate_gateway(self, site_index: int) -> tuple[str, str, Path]:
        host, port = self.plan.allocate(site_index, GATEWAY_PORT)
        self._gateway_count += 1
        workdir = self.workdir / f"gateway-{self._gateway_count}"
        workdir.mkdir(parents=True, exist_ok=True)
        # the admin address shares the gateway's loopback address, on its own port
        return f"{host}:{port}", f"{host}:{ADMIN_PORT}", workdir

    def start_gateway(self, name: str, listen: str, admin: str, workdir: Path, config_text: str,
                      overlay_dir: Path, *, env: Mapping[str, str] | None = None,
                      scheme: str = "http") -> GatewayProcess:
        """Write the config and start the gateway; `env` adds variables (credential sources).

        With the descriptor's `gateway.run_as` and a root harness the gateway runs as that user, and its
        work directory, config, overlay directory and the TLS and credential files its config names are
        made readable to it (see harness.run_as); in network namespaces it switches after entering its
        site's. A gateway that exits saying it will not run as root fails naming `gateway.run_as`.
        """
        config_path = workdir / "praxis.yaml"
        config_path.write_text(config_text)
        site = self._site_of(listen.rsplit(":", 1)[0])
        user = self.gateway_user()
        launcher = self._launcher_socket(site, user)
        argv, env_vars = self.impl.gateway.render(config_path, workdir, launcher)
        env = {**env_vars, **dict(env or {})}
        if self.seed is not None:
            # --grid-seed also fixes the reference gateway's random choices (other gateways ignore it)
            env = {"AGN_GATEWAY_SEED": f"{self.seed}-{self._gateway_count}", **env}
        if user is not None:
            public, private = users.config_files(config_text)
            users.grant_gateway_files(user, run_dir=self.workdir, workdir=workdir, config=config_path,
                                      overlay_dir=overlay_dir, public=public, private=private)
            env = {"HOME": str(workdir), **env}
        argv, switch_at_start = self._gateway_argv(site, user, argv)
        try:
            proc = self.supervisor.start(name, argv, env=env, cwd=workdir, run_as=switch_at_start)
        except OSError as exc:
            who = f" as {user}" if user is not None else ""
            raise GatewayStartFailed(f"gateway {name} could not be started{who}: {exc}", None, "") from exc
        gateway = GatewayProcess(name, listen, admin, config_path, overlay_dir, proc, scheme)
        try:
            self._wait_ready(proc, f"{gateway.admin_url}/ready", f"gateway {name} /ready",
                             float(self.impl.gateway.startup_timeout_s))
        except GatewayStartFailed as exc:
            hint = self._gateway_start_hint(proc, user)  # before stopping: only an exit of its own counts
            self.supervisor.stop(proc)
            if hint is None:
                raise
            head = str(exc).split("\n--- gateway log (tail) ---\n", 1)[0]
            raise GatewayStartFailed(f"{head}\n{hint}", exc.exit_code, exc.log_tail) from None
        return gateway

    def _gateway_argv(self, site: int | None, user: users.RunAs | None,
                      argv: list[str]) -> tuple[list[str], users.RunAs | None]:
        """`argv` as the gateway user inside the site's namespace, and the user to switch to at start."""
        if user is not None and site is not None:  # entering the namespace needs root: switch behind it
            argv = users.switch_argv(user, argv)
        return self._inside(site, argv), user if site is None else None

    def _launcher_socket(self, site: int | None, user: users.RunAs | None) -> Path | None:
        """The socket of the site's `gateway.launcher`, started on first use; None without a launcher.

        The launcher runs as the gateway user, in the site's namespace, in a directory of its own in the
        system temp directory (a Unix socket path must stay short), removed when the run stops.
        """
        launcher = self.impl.gateway.launcher
        if launcher is None:
            return None
        with self._launcher_lock:
            if site in self._launchers:
                return self._launchers[site]
            directory = Path(tempfile.mkdtemp(prefix="agn-launcher-"))
            self.supervisor.remove_after_stop(directory)
            if user is not None:
                os.chown(directory, user.uid, user.gid)
            socket_path = directory / "launcher.sock"
            argv, env = launcher.render(socket_path)
            argv, switch_at_start = self._gateway_argv(site, user, argv)
            name = "gateway-launcher" if site is None else f"gateway-launcher-{site}"
            try:
                proc = self.supervisor.start(name, argv, env=env, cwd=directory, run_as=switch_at_start)
            except OSError as exc:
                raise GatewayStartFailed(f"gateway.launcher could not be started: {exc}", None, "") from exc

            def probe() -> str:
                if not proc.running():
                    return f"exited with {proc.returncode}"
                return "listening" if socket_path.exists() else "starting"

            try:
                state = poll_until(probe, lambda s: s != "starting",
                                   what=f"gateway.launcher to listen on {socket_path}",
                                   timeout=float(self.impl.gateway.startup_timeout_s))
            except WaitTimeout as exc:
                state = str(exc)
            if state != "listening":
                self.supervisor.stop(proc)
                raise GatewayStartFailed(f"gateway.launcher did not come up: {state}", proc.returncode,
                                         proc.log_tail())
            self._launchers[site] = socket_path
            return socket_path

    @staticmethod
    def _gateway_start_hint(proc: ManagedProcess, user: Any) -> str | None:
        """What to change when a gateway exits during startup for the user it ran as, else None."""
        if proc.returncode is None:
            return None
        log = proc.log_text()
        if user is None and os.geteuid() == 0 and users.refuses_root(log):
            return ("the gateway refuses to run as root, and the harness runs as root: set `gateway.run_as` in "
                    "the implementation descriptor (for example `run_as: nobody`) to start it as that user")
        if user is not None and "permission denied" in log.lower():
            return (f"the gateway ran as {user}: something it needs (its command, a library, a file its config "
                    "names) is not readable by that user")
        return None

    def stop(self, process: ManagedProcess) -> int | None:
        return self.supervisor.stop(process)

    def _wait_ready(self, proc: ManagedProcess, url: str, what: str, timeout: float,
                    verify: ssl.SSLContext | None = None) -> None:
        def probe() -> int | str:
            if not proc.running():
                return f"exited with {proc.returncode}"
            return http_get.get(url, timeout=1.0, verify=verify).status_code

        try:
            poll_until(probe, lambda r: r == 200 or (isinstance(r, str) and r.startswith("exited")),
                       what=f"{what} to answer 200", timeout=timeout)
        except WaitTimeout as exc:
            raise GatewayStartFailed(str(exc), proc.returncode, proc.log_tail()) from None
        if not proc.running():
            raise GatewayStartFailed(f"{what}: process exited with {proc.returncode}", proc.returncode,
                                     proc.log_tail())

