"""A mesh of sites on the local backend: one operator per site gossiping with the others.

Every site runs its operator under test (joined to the mesh through the sites its topology names as
seeds), a provider gateway (the certificate peers pin, and the mTLS hop into the site) and its fake
backends. The operators watch their own resource directories; a `MeshScenario` gives each test its own
GridNetwork on every site so tests sharing one mesh never see each other's resources. Where network
namespaces work, a mesh can live in a `Fabric` so tests can cut and heal links between sites.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import mesh_oracle, resources
from harness.addresses import AddressPlan, SiteHostPlan
from harness.contract import ScopeSpec
from harness.control import ControlPlane, OperatorExited, _read_yaml
from harness.gateway_config import CredentialRef, ProviderRoute, TrustedPeer
from harness.grid import Gateway, Grid, ProviderGateway, Site
from harness.mesh_oracle import SwimTiming
from harness.process import Supervisor
from harness.topology import Topology, load_topology
from harness.waiting import poll_until

if TYPE_CHECKING:
    from harness.backends.local import LocalBackend
    from harness.netns import Fabric

TOPOLOGY = "three-node-mesh"
MESH_PORT = 17946
MESH_STATUS = "mesh.state.yaml"
GRIDSITE_SUFFIX = ".gridsite.yaml"
ANCHOR_MODEL = "mesh-anchor"
DEFAULT_TIMEOUT = 30.0


def start_site_provider_gateway(site: Site, candidate_id: str, model: str) -> ProviderGateway:
    """A provider gateway of `site` routing one candidate id to the site's backend with a site credential.

    The provider pipeline injects a credential on every route, so each gateway gets a random token of its
    own (written where the run keeps credentials, never in a config).
    """
    credential = CredentialRef(f"{site.spec.name}-provider-token", "agn-system")
    route = ProviderRoute(candidate_id, model, next(iter(site.providers)), credential=credential)
    return site.start_provider_gateway(trusted_peers=[TrustedPeer(organization="ai-grid")], routes=[route],
                                       tokens={credential: f"agn-mesh-token-{secrets.token_hex(16)}"})


class PartitionUnsupported(RuntimeError):
    """Links between sites can only be cut when the mesh runs in network namespaces."""


@dataclass
class MeshSite:
    """One site of the mesh: its operator, its provider gateway and where its membership listens."""

    site: Site
    control: ControlPlane
    gateway: ProviderGateway
    mesh_address: str

    @property
    def name(self) -> str:
        return self.site.spec.name

    @property
    def routing_cluster(self) -> str:
        """The cluster name peers' consumer gateways reach this site by (its records carry it)."""
        return self.site.spec.provider_gateway_cluster

    @property
    def backend(self) -> str:
        return next(iter(self.site.providers))

    def mesh_status(self) -> dict[str, Any]:
        self.control.check_running()
        return _read_yaml(self.control.out / MESH_STATUS) or {}

    def gridsite(self, network: str, of: str) -> dict[str, Any] | None:
        """The GridSite this site's operator keeps for site `of` in `network`, as it last wrote it."""
        return _read_yaml(self.control.out / f"{mesh_oracle.discovered_site_name(network, of)}{GRIDSITE_SUFFIX}")


def phase_of(gridsite: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    status = (gridsite or {}).get("status") or {}
    return status.get("phase"), status.get("reason")


@dataclass
class Mesh:
    """A running mesh: `sites` by name, the timing every operator got, and the fabric when there is one."""

    grid: Grid
    sites: dict[str, MeshSite]
    timing: SwimTiming
    fabric: Fabric | None = None
    _killed: set[str] = field(default_factory=set)

    @classmethod
    def start(cls, impl: Any, workdir: Path, *, seed: int | None = None, fabric: Fabric | None = None,
              timing: SwimTiming | None = None, topology: Topology | None = None) -> Mesh:
        """Start fake backends, provider gateways and operators for every site; closes what it started
        when any part fails."""
        from harness.backends.local import LocalBackend

        timing = timing or SwimTiming()
        topology = topology or load_topology(TOPOLOGY)
        plan: AddressPlan | SiteHostPlan = AddressPlan(seed=seed)
        if fabric is not None:
            plan = SiteHostPlan(tuple(fabric.site_address(i) for i in range(len(topology.sites))))
        backend = LocalBackend(workdir, Supervisor(workdir / "logs"), plan, impl, seed, fabric=fabric)
        grid = Grid(topology, backend, impl.features)
        try:
            grid.start()
            return cls._start_control(grid, backend, timing, fabric)
        except BaseException:
            grid.close()
            raise

    @classmethod
    def _start_control(cls, grid: Grid, backend: LocalBackend, timing: SwimTiming, fabric: Fabric | None) -> Mesh:
        gateways: dict[str, ProviderGateway] = {}
        binds: dict[str, str] = {}
        for site in grid.sites.values():
            gateways[site.spec.name] = start_site_provider_gateway(site, f"{site.spec.name}-anchor", ANCHOR_MODEL)
            host, port = backend.plan.allocate(site.index, MESH_PORT)
            binds[site.spec.name] = f"{host}:{port}"
        sites: dict[str, MeshSite] = {}
        for site in grid.sites.values():
            client = backend.pki.client(f"operator-{site.spec.name}")
            values = {
                "site": site.spec.name, "mesh_bind": binds[site.spec.name],
                "mesh_seeds": ",".join(binds[name] for name in site.spec.seeds),
                "gateway_address": gateways[site.spec.name].proc.listen,
                "routing_cluster": site.spec.provider_gateway_cluster,
                "client_cert": str(client.cert), "client_key": str(client.key), **timing.as_placeholders(),
            }
            control = site.control_plane(mesh=values)
            sites[site.spec.name] = MeshSite(site, control, gateways[site.spec.name], binds[site.spec.name])
        mesh = cls(grid, sites, timing, fabric)
        mesh.wait_members()
        return mesh

    def site(self, name: str) -> MeshSite:
        return self.sites[name]

    def live(self) -> list[MeshSite]:
        return [s for name, s in self.sites.items() if name not in self._killed]

    def wait_members(self, timeout: float = 2 * DEFAULT_TIMEOUT) -> None:
        """Wait until every running operator reports every other one alive."""
        names = sorted(self.sites)

        def probe() -> dict[str, dict[str, str | None]]:
            return {s.name: {n: mesh_oracle.member_status(s.mesh_status(), n) for n in names if n != s.name}
                    for s in self.live()}

        poll_until(probe, lambda seen: all(v == "alive" for row in seen.values() for v in row.values()),
                   timeout=timeout, what="every operator to see every other site alive in its mesh status",
                   fatal=(OperatorExited,))

    def kill(self, name: str) -> None:
        """Crash a site's operator (SIGKILL: it cannot announce that it leaves)."""
        self.sites[name].control.process.kill()
        self._killed.add(name)

    def partition(self, group_a: Iterable[str], group_b: Iterable[str]) -> None:
        """Cut every link between the sites of `group_a` and those of `group_b`, both ways."""
        if self.fabric is None:
            raise PartitionUnsupported("this mesh does not run in network namespaces")
        index = {name: s.site.index for name, s in self.sites.items()}
        self.fabric.partition([index[n] for n in group_a], [index[n] for n in group_b])

    def heal(self) -> None:
        if self.fabric is None:
            raise PartitionUnsupported("this mesh does not run in network namespaces")
        self.fabric.heal()

    def diagnostics(self) -> str:
        parts = [self.grid.diagnostics()]
        for site in self.sites.values():
            files = sorted(p.name for p in site.control.out.glob("*.yaml"))
            parts.append(f"=== {site.name} mesh status ({files})\n{(site.control.out / MESH_STATUS).read_text()}"
                         if (site.control.out / MESH_STATUS).exists() else f"=== {site.name}: no mesh status")
        return "\n".join(parts)

    def close(self) -> None:
        try:
            self.grid.close()
        finally:
            if self.fabric is not None:
                self.fabric.close()


class MeshScenario:
    """One test's networks and resources on every site of a mesh; `close` deletes them."""

    def __init__(self, mesh: Mesh, test_name: str) -> None:
        self.mesh = mesh
        self.tag = "m" + hashlib.sha256(test_name.encode()).hexdigest()[:8]
        self.net = f"{self.tag}-net"
        self._applied: list[tuple[str, str, str]] = []  # (site, kind, name)
        self._extra_gateways: list[tuple[Site, Gateway]] = []
        self._chains: list[Any] = []

    def model(self, short: str) -> str:
        return f"{self.tag}-{short}"

    def apply(self, at: str, *objects: dict[str, Any]) -> None:
        for obj in objects:
            key = (at, obj["kind"], obj["metadata"]["name"])
            if key not in self._applied:
                self._applied.append(key)
        self.mesh.sites[at].control.apply(*objects)

    def network(self, *, network: str | None = None, sites: Sequence[str] | None = None,
                ttl: int | None = None) -> str:
        """Apply the GridNetwork on each site (default: all), each naming itself the local site."""
        name = network or self.net
        extra: dict[str, Any] = {}
        if ttl is not None:
            extra["staleCandidateTtlSeconds"] = ttl
        for site in sites or list(self.mesh.sites):
            self.apply(site, resources.grid_network(name, [resources.gateway_ref(site)], **extra))
        return name

    def provider(self, at: str, short: str, models: Sequence[str], *, network: str | None = None) -> str:
        """An InferenceProvider of site `at` served by its fake backend; returns its name."""
        site = self.mesh.sites[at]
        name = f"{self.tag}-{short}"
        endpoint = site.site.providers[site.backend].url
        self.apply(at, resources.inference_provider(name, network or self.net, site=at, cluster=site.backend,
                                                     models=models, endpoint=endpoint))
        return name

    def own_site(self, at: str, *, network: str | None = None) -> None:
        """Declare site `at`'s own GridSite (named after the site, Active) at `at`, as sites do for locality."""
        self.apply(at, resources.grid_site(at, network or self.net, phase="Active"))

    def trust(self, at: str, of: str, *, pins: Sequence[str] | None = None, network: str | None = None,
              address: str | None = None) -> dict[str, Any]:
        """Site `at`'s GridSite for site `of`: pinned to `of`'s gateway certificate unless `pins` says otherwise."""
        net = network or self.net
        peer = self.mesh.sites[of]
        spec: dict[str, Any] = {
            "gridNetworkRef": net,
            "gatewayEndpoint": {"address": address or peer.gateway.proc.listen},
            "trust": {"canonicalFingerprints": list(pins if pins is not None else [peer.gateway.server_digest])},
        }
        obj = {"apiVersion": resources.API_VERSION, "kind": "GridSite",
               "metadata": {"name": mesh_oracle.discovered_site_name(net, of)}, "spec": spec}
        self.apply(at, obj)
        return obj

    # ------------------------------------------------------------------------------------ waiting

    def envelope(self, at: str, *, network: str | None = None) -> dict[str, Any] | None:
        return self.mesh.sites[at].control.envelope(network or self.net)

    def wait_envelope(self, at: str, until: Callable[[dict[str, Any]], bool], *, what: str,
                      network: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        return self.mesh.sites[at].control.wait_envelope(network or self.net, until, what=what, timeout=timeout)

    def wait_gridsite(self, at: str, of: str, until: Callable[[str | None, str | None], bool], *, what: str,
                      network: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Poll `at`'s GridSite for `of` until `until(phase, reason)` holds."""
        site = self.mesh.sites[at]
        net = network or self.net
        found = poll_until(lambda: site.gridsite(net, of), lambda g: until(*phase_of(g)), timeout=timeout,
                           what=f"{at}'s GridSite for {of} in {net} to be {what}",
                           describe=lambda g: "no GridSite written" if g is None else f"phase/reason {phase_of(g)}")
        assert found is not None
        return found

    def wait_record(self, at: str, of: str, provider: str, *, network: str | None = None,
                    timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Wait until site `at` knows the record `of` wrote for `provider` (its mesh status lists it)."""
        site = self.mesh.sites[at]
        net = network or self.net
        rows = poll_until(lambda: mesh_oracle.records_of(site.mesh_status(), site=of, network=net,
                                                         provider=provider),
                          bool, timeout=timeout, what=f"{at} to hold {of}'s record of {provider} in {net}",
                          describe=lambda _r: f"records: {_records_summary(site.mesh_status())}",
                          fatal=(OperatorExited,))
        return rows[0]

    # -------------------------------------------------------------------------------- data path

    def hop_chain(self, at: str, to: str, candidate_id: str, model: str) -> Gateway:
        """Serve `model` at site `at` from `at`'s rendered overlay, reaching site `to` over the mTLS hop.

        Site `to` gets a provider gateway whose route maps `candidate_id` (the id in `at`'s overlay) to
        its own backend; `at` gets overlay-sync on its operator's ConfigMap and a consumer gateway whose
        cluster for `to` points at that provider gateway.
        """
        origin, target = self.mesh.sites[at], self.mesh.sites[to]
        provider = start_site_provider_gateway(target.site, candidate_id, model)
        self._extra_gateways.append((target.site, provider))
        client = self.mesh.grid.backend.pki.client(f"consumer-{at}-{self.tag}")

        def start(overlay_dir: Path, scope: ScopeSpec) -> Gateway:
            return origin.site.start_hop_consumer([provider], None, client, overlay_dir=overlay_dir, scope=scope)

        chain = origin.control.connect(self.net, start_gateway=start)
        self._chains.append(chain)
        return chain.gateway

    def close(self) -> None:
        for chain in self._chains:
            chain.control.disconnect(chain)
        for site, gateway in self._extra_gateways:
            site.stop_gateway(gateway)
        for at, kind, name in reversed(self._applied):
            if at in self.mesh.sites and self.mesh.sites[at].control.process.running():
                self.mesh.sites[at].control.delete(kind, name)


def _records_summary(status: Mapping[str, Any]) -> str:
    rows = [r for r in status.get("records") or [] if isinstance(r, dict)]
    return ", ".join(f"{r.get('network')}/{r.get('site')}/{r.get('provider')}" for r in rows) or "none"
