"""A mesh of sites: one operator per site gossiping with the others, on the local or a cluster backend.

Every site runs its operator under test (joined to the mesh through the sites its topology names as
seeds), a provider gateway (the certificate peers pin, and the mTLS hop into the site) and its fake
backends. A `MeshScenario` gives each test its own GridNetwork on every site so tests sharing one mesh
never see each other's resources. The backend decides where things run and how they address each other:
on the local backend every site is a set of processes (in a `Fabric` of network namespaces where links
must be cut); on a cluster backend (made by the plugin's factory, one cluster per site) each operator is
its cluster's Deployment, reached by the others at its node's address, and links are cut on the nodes.
The operators' mesh outputs are read through their control planes, wherever those keep them.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from harness import mesh_oracle, resources
from harness.addresses import AddressPlan, SiteHostPlan
from harness.backends import PARTITION, OperationUnsupported
from harness.contract import ScopeSpec
from harness.control import ControlPlane, OperatorExited
from harness.gateway_config import CredentialRef, ProviderRoute, TrustedPeer
from harness.grid import Gateway, Grid, ProviderGateway, Site
from harness.mesh_oracle import SwimTiming
from harness.process import Supervisor
from harness.timeline import current, record_action, record_member
from harness.timeouts import timeouts
from harness.topology import Topology, load_topology
from harness.waiting import poll_until

if TYPE_CHECKING:
    from harness.netns import Fabric

TOPOLOGY = "three-node-mesh"
ANCHOR_MODEL = "mesh-anchor"
#: Makes a cluster backend (not yet started) for a topology: (workdir, topology, supervisor, plan) -> backend.
ClusterFactory = Callable[[Path, Topology, Supervisor, AddressPlan], Any]


def start_site_provider_gateway(site: Site, candidate_id: str, model: str,
                                backend: str | None = None) -> ProviderGateway:
    """A provider gateway of `site` routing one candidate id to the site's backend (`backend`, default its
    first) with a site credential.

    The provider pipeline injects a credential on every route, so each gateway gets a random token of its
    own (written where the run keeps credentials, never in a config).
    """
    credential = CredentialRef(f"{site.spec.name}-provider-token", "agn-system")
    route = ProviderRoute(candidate_id, model, backend or next(iter(site.providers)), credential=credential)
    return site.start_provider_gateway(trusted_peers=[TrustedPeer(organization="ai-grid")], routes=[route],
                                       tokens={credential: f"agn-mesh-token-{secrets.token_hex(16)}"})


class PartitionUnsupported(OperationUnsupported):
    """Links between sites can only be cut in network namespaces or on nodes the backend reaches."""


@dataclass
class MeshSite:
    """One site of the mesh: its operator, its provider gateway, the address its peers send membership
    messages to and the address other sites' components dial its provider gateway at."""

    site: Site
    control: ControlPlane
    gateway: ProviderGateway
    mesh_address: str
    gateway_address: str

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
        """This site's mesh status; each member's state in it goes on the running test's timeline (when it
        changed), so the report shows membership over time as the harness saw it."""
        self.control.check_running()
        status = self.control.mesh_state() or {}
        if current() is not None:
            for member in status.get("members") or []:
                if isinstance(member, dict) and member.get("name") and member.get("name") != self.name:
                    record_member(self.name, str(member["name"]), mesh_oracle.member_status(status, member["name"]),
                                  source="membership")
        return status

    def gridsite(self, network: str, of: str) -> dict[str, Any] | None:
        """The GridSite this site's operator keeps for site `of` in `network`, as it last wrote it (its phase
        goes on the running test's timeline when it changed)."""
        found = self.control.gridsite(mesh_oracle.discovered_site_name(network, of))
        if current() is not None:
            phase, reason = phase_of(found)
            record_member(self.name, of, phase, source="GridSite", network=network, reason=reason)
        return found


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
    cluster_backend: Any = None  # the clusters the mesh runs in, torn down by `close` (None: local)
    _killed: set[str] = field(default_factory=set)

    @classmethod
    def start(cls, impl: Any, workdir: Path, *, seed: int | None = None, fabric: Fabric | None = None,
              timing: SwimTiming | None = None, topology: Topology | None = None,
              cluster: ClusterFactory | None = None) -> Mesh:
        """Start fake backends, provider gateways and operators for every site; closes what it started
        when any part fails.

        Sites are local processes (inside `fabric` when given) unless `cluster` makes a cluster backend,
        which the mesh starts and, on `close`, tears down.
        """
        if cluster is not None and fabric is not None:
            raise ValueError("a fabric of network namespaces holds local sites only")
        timing = timing or SwimTiming()
        topology = topology or load_topology(TOPOLOGY)
        supervisor = Supervisor(workdir / "logs")
        if cluster is not None:
            cluster_plan = AddressPlan(seed=seed)
            try:
                made = cluster(workdir, topology, supervisor, cluster_plan)
            except BaseException:
                cluster_plan.close()
                raise
            return cls._start_on_clusters(made, impl, topology, timing)
        from harness.backends.local import LocalBackend

        plan: AddressPlan | SiteHostPlan = AddressPlan(seed=seed)
        if fabric is not None:
            plan = SiteHostPlan(tuple(fabric.site_address(i) for i in range(len(topology.sites))))
        backend = LocalBackend(workdir, supervisor, plan, impl, seed, fabric=fabric)
        grid = Grid(topology, backend, impl.features)
        try:
            grid.start()
            return cls._start_control(grid, timing, fabric)
        except BaseException:
            grid.close()
            raise

    @classmethod
    def _start_on_clusters(cls, backend: Any, impl: Any, topology: Topology, timing: SwimTiming) -> Mesh:
        grid = Grid(topology, backend, impl.features)
        try:
            backend.start()
            grid.start()
            return cls._start_control(grid, timing, None, backend)
        except BaseException:
            try:
                grid.close()
            finally:
                backend.teardown(failed=True)
            raise

    @classmethod
    def _start_control(cls, grid: Grid, timing: SwimTiming, fabric: Fabric | None,
                       cluster_backend: Any = None) -> Mesh:
        backend = grid.backend
        gateways: dict[str, ProviderGateway] = {}
        addresses: dict[str, tuple[str, str]] = {}  # site -> (bind, advertise)
        for site in grid.sites.values():
            gateways[site.spec.name] = start_site_provider_gateway(site, f"{site.spec.name}-anchor", ANCHOR_MODEL)
            addresses[site.spec.name] = backend.mesh_addresses(site.index)
        sites: dict[str, MeshSite] = {}
        for site in grid.sites.values():
            name = site.spec.name
            client = backend.pki.client(f"operator-{name}")
            bind, advertise = addresses[name]
            gateway_address = backend.peer_address(gateways[name].proc.listen)
            values = {
                "site": name, "mesh_bind": bind, "mesh_advertise": advertise,
                "mesh_seeds": ",".join(addresses[seed][1] for seed in site.spec.seeds),
                "gateway_address": gateway_address, "routing_cluster": site.spec.provider_gateway_cluster,
                "client_cert": str(client.cert), "client_key": str(client.key), **timing.as_placeholders(),
            }
            control = site.control_plane(mesh=values)
            sites[name] = MeshSite(site, control, gateways[name], advertise, gateway_address)
        mesh = cls(grid, sites, timing, fabric, cluster_backend)
        mesh.wait_members()
        return mesh

    def site(self, name: str) -> MeshSite:
        return self.sites[name]

    def live(self) -> list[MeshSite]:
        return [s for name, s in self.sites.items() if name not in self._killed]

    def wait_members(self, timeout: float | None = None) -> None:
        """Wait until every running operator reports every other one alive."""
        timeout = 2 * timeouts().mesh_convergence if timeout is None else timeout
        names = sorted(self.sites)

        def probe() -> dict[str, dict[str, str | None]]:
            return {s.name: {n: mesh_oracle.member_status(s.mesh_status(), n) for n in names if n != s.name}
                    for s in self.live()}

        poll_until(probe, lambda seen: all(v == "alive" for row in seen.values() for v in row.values()),
                   timeout=timeout, what="every operator to see every other site alive in its mesh status",
                   fatal=(OperatorExited,))

    def kill(self, name: str) -> None:
        """Crash a site's operator: it cannot announce that it leaves (SIGKILL here, frozen on its node in a
        cluster; OperationUnsupported where the backend cannot)."""
        self.sites[name].control.process.kill()
        self._killed.add(name)
        record_action(f"killed {name}'s operator", site=name)

    def _cutter(self) -> Any:
        """What cuts links: the fabric, else the backend when it can (on the nodes); PartitionUnsupported."""
        if self.fabric is not None:
            return self.fabric
        backend = self.grid.backend
        if PARTITION not in backend.capabilities:
            raise PartitionUnsupported(f"this mesh does not run in network namespaces, and the {backend.name} "
                                       "backend cannot cut links between sites")
        return backend

    def partition(self, group_a: Iterable[str], group_b: Iterable[str]) -> None:
        """Cut every link between the sites of `group_a` and those of `group_b`, both ways."""
        cutter = self._cutter()
        index = {name: s.site.index for name, s in self.sites.items()}
        group_a, group_b = list(group_a), list(group_b)
        cutter.partition([index[n] for n in group_a], [index[n] for n in group_b])
        record_action(f"cut links {', '.join(group_a)} | {', '.join(group_b)}")

    def heal(self) -> None:
        self._cutter().heal()
        record_action("healed every cut link")

    def diagnostics(self) -> str:
        parts = [self.grid.diagnostics()]
        for site in self.sites.values():
            try:
                outputs = site.control.output_names("*.yaml")
                state = site.control.mesh_state()
            except Exception as exc:  # diagnostics describe a failure; they must not raise one of their own
                parts.append(f"=== {site.name}: mesh status unreadable ({type(exc).__name__}: {exc})")
                continue
            parts.append(f"=== {site.name} mesh status ({outputs})\n{yaml.safe_dump(state, sort_keys=False)}"
                         if state is not None else f"=== {site.name}: no mesh status ({outputs})")
        return "\n".join(parts)

    def close(self, *, failed: bool = False) -> None:
        """Stop everything the mesh started; cluster logs are collected first when a test `failed`."""
        try:
            self.grid.close()
        finally:
            try:
                if self.cluster_backend is not None:
                    self.cluster_backend.teardown(failed=failed)
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

    def __enter__(self) -> MeshScenario:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def model(self, short: str) -> str:
        return f"{self.tag}-{short}"

    def apply(self, at: str, *objects: dict[str, Any]) -> None:
        for obj in objects:
            key = (at, obj["kind"], obj["metadata"]["name"])
            if key not in self._applied:
                self._applied.append(key)
        self.mesh.sites[at].control.apply(*objects)

    def network(self, *, network: str | None = None, sites: Sequence[str] | None = None,
                ttl: int | None = None, selection: str | None = None, static_placement: bool = False,
                routing: str | None = None, scoring: str | None = None,
                spec: Mapping[str, Any] | None = None) -> str:
        """Apply the GridNetwork on each site (default: all), each naming itself the local site; `spec` adds
        fields of its own (an implementation's switch for an extended feature, say)."""
        name = network or self.net
        extra: dict[str, Any] = dict(spec or {})
        if ttl is not None:
            extra["staleCandidateTtlSeconds"] = ttl
        for site in sites or list(self.mesh.sites):
            self.apply(site, resources.grid_network(name, [resources.gateway_ref(site)], selection=selection,
                                                    static_placement=static_placement, routing=routing,
                                                    scoring=scoring, **extra))
        return name

    def provider(self, at: str, short: str, models: Sequence[str], *, network: str | None = None,
                 capacity_weight: int | None = None, queue: float | str | None = None,
                 credential: Mapping[str, str] | None = None, cluster: str | None = None,
                 backend_kind: str | None = None, backend: str | None = None) -> str:
        """An InferenceProvider of site `at` served by its fake backend (`backend`: another of the site's
        fake backends than its first); returns its name.

        With `queue` its pool on that backend exports that queue depth (capacity 10) and one ready pod,
        and site `at` scrapes it, so its record carries the metrics its own site measured. `credential`
        is its bearer-token secretRef (a Secret the test applies at `at`). `cluster` is its clusterName
        (default: the backend's name), for several local candidates of one model. `backend_kind` replaces
        the default placement category (``local``), e.g. ``api_provider`` for an external provider.
        """
        site = self.mesh.sites[at]
        name = f"{self.tag}-{short}"
        served_by = backend or site.backend
        endpoint = site.site.providers[served_by].url
        metrics = None
        extra: dict[str, Any] = {"backendKind": backend_kind} if backend_kind else {}
        if queue is not None:
            site.site.set_pool_metrics(served_by, name, queueDepth=queue, healthy=1)
            metrics = resources.metrics_config(endpoint, name, queue_capacity=10)
        self.apply(at, resources.inference_provider(name, network or self.net, site=at,
                                                     cluster=cluster or served_by,
                                                     models=models, endpoint=endpoint, metrics=metrics,
                                                     capacity_weight=capacity_weight, credential=credential,
                                                     **extra))
        return name

    def tool_provider(self, at: str, short: str, tools: Sequence[str], *, network: str | None = None) -> str:
        """An AgentToolProvider of site `at` whose status lists `tools` as discovered (no allowlist)."""
        site = self.mesh.sites[at]
        name = f"{self.tag}-{short}"
        self.apply(at, resources.tool_provider(name, network or self.net, cluster=site.backend, allow=(),
                                               discovered=tools, site=at))
        return name

    def set_queue(self, at: str, short: str, queue: float | str, *, network: str | None = None,
                  backend: str | None = None) -> None:
        """Change the queue depth provider `short` of site `at` exports (from `backend`, default the site's
        first fake backend), and make `at` scrape it now."""
        site = self.mesh.sites[at]
        site.site.set_pool_metrics(backend or site.backend, f"{self.tag}-{short}", queueDepth=queue, healthy=1)
        site.control.force_reconcile(network or self.net)

    def own_site(self, at: str, *, network: str | None = None) -> None:
        """Declare site `at`'s own GridSite (named after the site, Active) at `at`, as sites do for locality."""
        self.apply(at, resources.grid_site(at, network or self.net, phase="Active"))

    def trust(self, at: str, of: str, *, pins: Sequence[str] | None = None, network: str | None = None,
              address: str | None = None, region: str | None = None, zone: str | None = None) -> dict[str, Any]:
        """Site `at`'s GridSite for site `of`: pinned to `of`'s gateway certificate unless `pins` says otherwise.

        `region` and `zone` are the geography `at` knows `of` by (its locality tier for `of`'s providers);
        without them `at` knows none, and `of`'s providers are of unknown locality at `at`.
        """
        net = network or self.net
        peer = self.mesh.sites[of]
        spec: dict[str, Any] = {
            "gridNetworkRef": net,
            "gatewayEndpoint": {"address": address or peer.gateway_address},
            "trust": {"canonicalFingerprints": list(pins if pins is not None else [peer.gateway.server_digest])},
        }
        if region:
            spec["region"] = region
        if zone:
            spec["zone"] = zone
        obj = {"apiVersion": resources.API_VERSION, "kind": "GridSite",
               "metadata": {"name": mesh_oracle.discovered_site_name(net, of)}, "spec": spec}
        self.apply(at, obj)
        return obj

    # ------------------------------------------------------------------------------------ waiting

    def envelope(self, at: str, *, network: str | None = None) -> dict[str, Any] | None:
        return self.mesh.sites[at].control.envelope(network or self.net)

    def wait_envelope(self, at: str, until: Callable[[dict[str, Any]], bool], *, what: str,
                      network: str | None = None, timeout: float | None = None,
                      force: bool = False) -> dict[str, Any]:
        """Wait for `at`'s overlay to satisfy `until`; `force` re-forces `at`'s reconciles while waiting."""
        timeout = timeouts().mesh_convergence if timeout is None else timeout
        return self.mesh.sites[at].control.wait_envelope(network or self.net, until, what=what, timeout=timeout,
                                                         force_every=1.0 if force else None)

    def wait_gridsite(self, at: str, of: str, until: Callable[[str | None, str | None], bool], *, what: str,
                      network: str | None = None, timeout: float | None = None) -> dict[str, Any]:
        """Poll `at`'s GridSite for `of` until `until(phase, reason)` holds."""
        timeout = timeouts().mesh_convergence if timeout is None else timeout
        site = self.mesh.sites[at]
        net = network or self.net
        found = poll_until(lambda: site.gridsite(net, of), lambda g: until(*phase_of(g)), timeout=timeout,
                           what=f"{at}'s GridSite for {of} in {net} to be {what}",
                           describe=lambda g: "no GridSite written" if g is None else f"phase/reason {phase_of(g)}")
        assert found is not None
        return found

    def wait_record(self, at: str, of: str, provider: str, *, network: str | None = None,
                    timeout: float | None = None) -> dict[str, Any]:
        """Wait until site `at` knows the record `of` wrote for `provider` (its mesh status lists it)."""
        timeout = timeouts().mesh_convergence if timeout is None else timeout
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
        return self.consumer(at, {to: candidate_id}, model)

    def consumer(self, at: str, remote: Mapping[str, str], model: str) -> Gateway:
        """Site `at`'s consumer gateway on `at`'s rendered overlay, reaching its own backend directly and
        each site of `remote` (site -> the candidate id `at`'s overlay gives that site's provider) over
        the mTLS hop, through a provider gateway of that site routing the id to its backend.

        Whatever upstream cluster name `at`'s overlay gives a remote candidate (the site's gateway cluster,
        or its provider's clusterName) reaches that site's provider gateway, and a candidate whose cluster
        names one of that site's fake backends is routed to that backend.
        """
        origin = self.mesh.sites[at]
        candidates = {str(c.get("stable_id")): c for c in mesh_oracle.candidates_for(self.envelope(at), model)}
        local = set(origin.site.providers)
        peers: dict[str, ProviderGateway] = {}
        aliases: dict[str, ProviderGateway] = {}
        for to, candidate_id in remote.items():
            cluster = str((candidates.get(candidate_id) or {}).get("cluster") or "")
            served_by = cluster if cluster in self.mesh.sites[to].site.providers else None
            peers[to] = self.provider_gateway(to, candidate_id, model, backend=served_by)
            if cluster and cluster != peers[to].cluster and cluster not in local:
                aliases[cluster] = peers[to]
        client = self.mesh.grid.backend.pki.client(f"consumer-{at}-{self.tag}-{len(self._chains)}")

        def start(overlay_dir: Path, scope: ScopeSpec) -> Gateway:
            return origin.site.start_hop_consumer(list(peers.values()), None, client, overlay_dir=overlay_dir,
                                                  scope=scope, aliases=aliases)

        chain = origin.control.connect(self.net, start_gateway=start)
        self._chains.append(chain)
        return chain.gateway

    def provider_gateway(self, at: str, candidate_id: str, model: str, *,
                         backend: str | None = None) -> ProviderGateway:
        """A provider gateway of site `at` routing `candidate_id` to its backend (`backend`, default its
        first), stopped when the test ends."""
        target = self.mesh.sites[at]
        provider = start_site_provider_gateway(target.site, candidate_id, model, backend=backend)
        self._extra_gateways.append((target.site, provider))
        return provider

    def chain_of(self, gateway: Gateway) -> Any:
        """The operator -> overlay-sync -> gateway chain `consumer` started for `gateway`."""
        return next(chain for chain in self._chains if chain.gateway is gateway)

    def close(self) -> None:
        for chain in self._chains:
            chain.control.disconnect(chain)
        for site, gateway in self._extra_gateways:
            site.stop_gateway(gateway)
        running = {at: self.mesh.sites[at].control.process.running()
                   for at in {at for at, _, _ in self._applied} if at in self.mesh.sites}
        for at, kind, name in reversed(self._applied):
            if running.get(at):
                self.mesh.sites[at].control.delete(kind, name)


def _records_summary(status: Mapping[str, Any]) -> str:
    rows = [r for r in status.get("records") or [] if isinstance(r, dict)]
    return ", ".join(f"{r.get('network')}/{r.get('site')}/{r.get('provider')}" for r in rows) or "none"
