"""The Kubernetes backends' shared core: components in one cluster per site, reached from the host.

The Grid facade talks to this backend exactly as to the local one. Fake backends, the TLS metrics
endpoint, gateways and the operator under test run in the site's cluster; the harness reaches them
through `kubectl port-forward` (on-demand gateways, fake backends) or the kind port mappings (each site's
standing gateway). A gateway pod gets its overlay one of three ways:

- a suite writes the gateway's local overlay directory: `OverlayMirror` copies every new file byte for
  byte into the pod's overlay emptyDir (kubelet-style projection, through `kubectl exec` into a writer
  container), so the gateway sees exactly what the suite wrote, valid or not;
- the gateway follows an operator's ConfigMap (`follow_configmap`, used by the producer chain): an
  overlay-sync container watches it with `--configmap NAMESPACE/NAME` and delivers into the emptyDir;
- it reads no overlay at all (a provider gateway).

Files a gateway config names under the run's work directory (certificates, keys, credential files) are
shipped into the pod as a Secret; addresses of other in-cluster gateways the harness knows by their
port-forward become in-cluster addresses (the Service in the same cluster, the node's NodePort across
clusters). Every external command goes through one `Runner`.

In the mesh profile the operator Deployment gets the descriptor's mesh arguments appended to its command
(its membership binds the pod's port 7946 and is reached across clusters at its node's NodePort 30946)
and the mesh client certificate as a mounted Secret.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import secrets
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from harness import http_get
from harness.addresses import AddressPlan, accepts
from harness.backends import OPERATOR_IN_CLUSTER, OperationUnsupported
from harness.backends.local import (
    GatewayProcess,
    GatewayStartFailed,
    OperatorUnsupported,
    ProviderProcess,
    fake_sni,
    is_hop_backend,
)
from harness.backends.runner import CommandFailed, Runner
from harness.contract import ScopeSpec
from harness.control import OverlaySyncProcess
from harness.environment import EnvironmentProblem
from harness.pki import GridPKI
from harness.process import ManagedProcess, Supervisor
from harness.topology import ProviderSpec, SiteSpec, Topology
from harness.waiting import WaitTimeout, poll_until

if TYPE_CHECKING:
    from harness.backends.kube.control import KubeControlPlane
    from harness.grid import Site
from harness.backends.kube import kube_yaml
from harness.backends.kube.forwarding import PortForwardPKI, port_forward
from harness.backends.kube.handles import (
    BackendUnavailable,
    FollowedConfigMap,
    KubeOverlaySync,
    KubeProvider,
    SiteCluster,
)
from harness.backends.kube.install_plan import apply_site
from harness.backends.kube.manifests import (
    GatewayPod,
    PodState,
    gateway_docs,
    pod_state,
    secret_doc,
    tls_metrics_docs,
)
from harness.backends.kube.mirror import OverlayMirror
from harness.backends.kube.names import (
    ADMIN_PORT,
    DEFAULT_IMAGE,
    FAKE_MTLS_PORT,
    FAKE_PORT,
    FIELD_MANAGER,
    GATEWAY_LABEL,
    GATEWAY_PORT,
    MESH_CLIENT_DIR,
    MESH_CLIENT_FILES,
    MESH_NODEPORT,
    MESH_POD_PORT,
    METRICS_CA_DIR,
    NAMESPACE,
    OVERLAY_KEY,
    POD_FILES_DIR,
    POD_OVERLAY_DIR,
    POD_SCRATCH_DIR,
    RUN_LABEL,
    SYNC_ADMIN_PORT,
    TLS_METRICS_NAME,
    TLS_METRICS_PORT,
)
from harness.backends.kube.operator_workload import OperatorDeployment, operator_workload
from harness.backends.kube.relay import TcpRelay
from harness.backends.kube.site_objects import render_site
from harness.backends.kube.tools import repo_root, wait_http

#: Projects stdin (base64) into a directory the way kubelet projects a ConfigMap (the harness's own code).
_WRITE_OVERLAY = ("import base64, pathlib, sys\n"
                  "from harness.projection import project\n"
                  "project(pathlib.Path(sys.argv[1]), {sys.argv[2]: base64.b64decode(sys.stdin.read())})\n")


#: What kubectl wait says of an object that has no status conditions yet (a CRD the instant it is created).
_NO_STATUS_YET = ".status.conditions accessor error"

@dataclass
class _KubeGateway:
    site: SiteCluster
    name: str
    overlay_dir: Path
    handle: ManagedProcess  # `kubectl logs -f` of the gateway container: the GatewayProcess's process
    forward: ManagedProcess
    mode: str  # "mirror", "follow" or "none"
    peer: str | None = None  # the host address other gateways' configs name it by (provider gateways)
    relay: TcpRelay | None = None  # the listener's path from the host when it is not the port-forward


@dataclass(frozen=True)
class _Peer:
    site: SiteCluster
    service: str  # host:port inside its own cluster
    node: str  # node address:NodePort, for pods of other clusters


class KubeBackend:
    """Everything shared by backends whose components run in Kubernetes clusters, one per site."""

    name = "kube"
    #: A gateway pod gets the files its config names as a Secret made when it starts (see `start_gateway`).
    gateway_files_live = False
    #: The operator is the site cluster's Deployment; nodes (crashes, cut links) are out of reach.
    capabilities: frozenset[str] = frozenset({OPERATOR_IN_CLUSTER})
    #: Whether the host reaches node addresses (kind's Docker network does; existing clusters need not):
    #: then a NodePort gateway's listener is reached through a relay to its NodePort, not a port-forward,
    #: which dies with the first connection the gateway breaks off (a refused client certificate).
    host_reaches_nodes = False

    def __init__(self, workdir: Path, topology: Topology, impl: Any, *, runner: Runner | None = None,
                 image: str | None = None, keep: bool = False, seed: int | None = None,
                 supervisor: Supervisor | None = None, plan: AddressPlan | None = None,
                 root: Path | None = None, run_id: str | None = None, ready_timeout: float = 300.0) -> None:
        self.workdir = workdir
        self.topology = topology
        self.impl = impl
        self.root = root or repo_root()
        self.runner = runner or Runner(log_path=workdir / "logs" / "commands.jsonl")
        self.image = image or DEFAULT_IMAGE
        self.image_given = image is not None
        self.keep = keep
        self.seed = seed
        self.run_id = run_id or secrets.token_hex(3)
        self.ready_timeout = ready_timeout
        self.supervisor = supervisor or Supervisor(workdir / "logs")
        self.plan = plan or AddressPlan(seed=seed)
        self.sites: list[SiteCluster] = []
        self._pki: GridPKI | None = None
        self._pki_lock = threading.Lock()  # sites install in parallel threads, each issuing certificates
        self._gateway_count = 0
        self._follow_count = 0
        self._gateway_sites: dict[Path, SiteCluster] = {}
        self._gateways: dict[int, _KubeGateway] = {}
        self._forwards: dict[str, ManagedProcess] = {}
        self._follows: dict[Path, FollowedConfigMap] = {}
        self._syncs: dict[Path, KubeOverlaySync] = {}
        self._peers: dict[str, _Peer] = {}
        self._nodes: dict[str, list[tuple[str, str]]] = {}
        #: the operator under test: its Deployment wherever the descriptor says its manifests put it
        self.operator_deployment = OperatorDeployment(self, operator_workload(impl))
        self._cluster_urls: dict[str, str] = {}
        self._mirror = OverlayMirror(self)

    # ------------------------------------------------------------------------ lifecycle

    @property
    def pki(self) -> GridPKI:
        """The run's certificate authority, made on first use, once: sites install in parallel threads, and
        two CAs made at once would leave one's ca.pem on disk and the other's certificates in the pods."""
        with self._pki_lock:
            if self._pki is None:
                self._pki = PortForwardPKI(self.workdir / "pki")
            return self._pki

    def kubectl(self, site: SiteCluster, *args: str, input: str | None = None, check: bool = True,
                timeout: float | None = 600.0) -> str:
        return self.runner.run(["kubectl", *site.kubectl_args, *args], input=input, check=check,
                               timeout=timeout).stdout

    def kubectl_json(self, site: SiteCluster, *args: str, check: bool = True,
                     timeout: float | None = 60.0) -> dict[str, Any] | None:
        """`kubectl ... -o json` parsed; None when it printed nothing (`--ignore-not-found` of a missing object)."""
        out = self.kubectl(site, *args, "-o", "json", check=check, timeout=timeout)
        if not out.strip():
            return None
        try:
            doc = json.loads(out)
        except ValueError as exc:
            raise CommandFailed(["kubectl", *args], 0, out, f"not JSON: {exc}") from None
        return doc if isinstance(doc, dict) else None

    def apply_json(self, site: SiteCluster, docs: Sequence[Mapping[str, Any]]) -> None:
        """Server-side apply objects through stdin (Secrets go this way: no file holds their data)."""
        body = docs[0] if len(docs) == 1 else {"apiVersion": "v1", "kind": "List", "items": list(docs)}
        self.kubectl(site, "apply", "--server-side", "--field-manager", FIELD_MANAGER, "-f", "-",
                     input=json.dumps(body))

    def start(self) -> KubeBackend:
        """Bring every site up: clusters (where this backend makes them), image, CRDs, components. Nothing of
        the implementation runs before its install, so a failure until then is the environment's: not judged."""
        try:
            self.prepare()
            self.sites = self.connect()
        except (RuntimeError, OSError) as exc:
            raise EnvironmentProblem(f"the {self.name} clusters could not be made ready: {exc}") from exc
        self._each_site(self.install)
        return self

    def prepare(self) -> None:
        """Before any cluster: build the image (kind)."""

    def connect(self) -> list[SiteCluster]:
        raise NotImplementedError

    def _each_site(self, step: Callable[[SiteCluster], None]) -> None:
        """Run `step` for every site at once; every site finishes (or fails) before the first error is raised."""
        if len(self.sites) <= 1:
            for site in self.sites:
                step(site)
            return
        with ThreadPoolExecutor(max_workers=len(self.sites)) as pool:
            futures = [pool.submit(step, site) for site in self.sites]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]  # type: ignore[misc]

    def wait_established(self, site: SiteCluster, crds: Path) -> None:
        """Wait for the CRDs just applied to be Established.

        `kubectl wait -f` on a CRD the API server has not yet given a status fails at once (".status.conditions
        accessor error: <nil>") instead of waiting, so such an answer is asked again; any other failure ends
        the wait with kubectl's own message.
        """
        argv = ["kubectl", *site.kubectl_args, "wait", "--for=condition=Established", "--timeout=120s", "-f", str(crds)]
        result = poll_until(lambda: self.runner.run(argv, check=False, timeout=150.0),
                            lambda done: done.returncode == 0 or _NO_STATUS_YET not in done.stderr,
                            what=f"site {site.spec.name}'s CRDs to be Established", timeout=120.0,
                            interval=0.2, max_interval=1.0, describe=lambda done: done.stderr.strip()[-400:])
        if result.returncode != 0:
            raise CommandFailed(argv, result.returncode, result.stdout, result.stderr)

    def install(self, site: SiteCluster) -> None:
        """CRDs, the kustomize overlay, this site's rendered configuration, then readiness."""
        crds = self.root / "manifests" / "crds"
        self.kubectl(site, "apply", "--server-side", "--field-manager", FIELD_MANAGER, "-f", str(crds))
        self.wait_established(site, crds)
        # one apply of the overlay (a descriptor's own components in place of the reference's) with this
        # site's objects in place of its defaults, so every pod starts on its final ConfigMaps
        apply_site(self, site)
        limit = f"--timeout={int(self.ready_timeout)}s"
        operator = self.operator_deployment
        try:
            self.kubectl(site, "--namespace", NAMESPACE, "wait", "--for=condition=Available", "deployment",
                         "--all", limit, timeout=self.ready_timeout + 30)
            if operator.workload.namespace != NAMESPACE:  # waited for as it would be among NAMESPACE's
                operator.kubectl(site, "wait", "--for=condition=Available", operator.ref, limit,
                                 timeout=self.ready_timeout + 30)
        except CommandFailed as exc:
            raise BackendUnavailable(f"site {site.spec.name}: deployments not available: {exc}\n"
                                     f"{self.collect_logs(site)}") from None
        self.wait_gateway_ready(site)

    def wait_gateway_ready(self, site: SiteCluster) -> None:
        raise NotImplementedError

    def gateway_user(self) -> None:
        """Gateways are pods: the descriptor's run_as is not applied (the pod spec says who runs them)."""
        return None

    def teardown(self, *, failed: bool) -> None:
        """The end of a run: on failures save `kubectl logs` of every site under the work directory first,
        then `close` (which tears down what this backend made)."""
        try:
            if failed and self.sites:
                self.collect_logs()
        except Exception as exc:  # logs are a courtesy; teardown must still happen
            print(f"\nagn-conformance: could not collect cluster logs: {exc}")
        finally:
            self.close()

    def close(self) -> None:
        """Stop mirroring, log streams and port-forwards; subclasses then remove what they made."""
        self._mirror.stop()
        for gateway in list(self._gateways.values()):
            self.supervisor.stop(gateway.handle)
            self.supervisor.stop(gateway.forward)
            if gateway.relay is not None:
                gateway.relay.close()
        self._gateways.clear()
        for forward in list(self._forwards.values()):
            self.supervisor.stop(forward)
        self._forwards.clear()

    # ------------------------------------------------------------------------ rendering

    def _site_dir(self, site: SiteCluster) -> Path:
        path = self.workdir / "kube" / site.spec.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _labels(self, **extra: str) -> dict[str, str]:
        return {RUN_LABEL: self.run_id, **extra}

    def fake_address(self, provider: str) -> str:
        return f"agn-fake-{provider}.{NAMESPACE}.svc.cluster.local:{FAKE_PORT}"

    def fake_mtls_address(self, provider: str) -> str:
        """The in-cluster address of a fake backend's mTLS listener (what hop clusters point at)."""
        return f"agn-fake-{provider}.{NAMESPACE}.svc.cluster.local:{FAKE_MTLS_PORT}"

    def render_site(self, site: SiteCluster, overlay: str = "") -> Path:
        """The site's objects for `kubectl apply -f` (see harness.backends.kube.site_objects)."""
        return render_site(self, site, overlay)

    # ------------------------------------------------------------------------ port-forwards

    def forward(self, site: SiteCluster, target: str, ports: Sequence[int], name: str) -> dict[int, int]:
        """`kubectl port-forward` `target` on loopback; returns remote port -> local port."""
        proc, found = port_forward(self.runner, self.supervisor, site, target, ports, name)
        self._forwards[name] = proc
        return found

    # ------------------------------------------------------------------------ the Grid's backend API

    def start_providers(self, site_index: int, site: SiteSpec) -> dict[str, ProviderProcess]:
        cluster = self.sites[site_index]
        started: dict[str, ProviderProcess] = {}
        for spec in site.providers:
            key = f"{site.name}-fake-{spec.name}"
            ports = self.forward(cluster, f"service/agn-fake-{spec.name}", [FAKE_PORT], key)
            proc = self._forwards[key]
            hop = is_hop_backend(spec)
            provider = KubeProvider(spec, self.fake_address(spec.name), proc,
                                    mtls_address=self.fake_mtls_address(spec.name) if hop else None,
                                    sni=fake_sni(site.name, spec.name) if hop else None,
                                    host_url=f"http://127.0.0.1:{ports[FAKE_PORT]}")
            self._cluster_urls[provider.host_url] = provider.cluster_url
            started[spec.name] = provider
        for ready in started.values():
            wait_http(f"{ready.url}/admin/stats", f"fake backend {ready.spec.name}", 60)
        return started

    def start_tls_metrics(self, site_index: int, site: SiteSpec) -> ProviderProcess:
        """A fake backend serving HTTPS in the site's cluster, its certificate from the run's CA.

        The certificate names its Service (what the in-cluster operator scrapes) and 127.0.0.1 (the
        harness's port-forward, through which the suites set its series).
        """
        cluster = self.sites[site_index]
        kname = TLS_METRICS_NAME
        service = f"{kname}.{NAMESPACE}.svc.cluster.local"
        files = self.pki.server(f"kube-{site.name}-tls-metrics", service, f"{kname}.{NAMESPACE}.svc", "127.0.0.1")
        spec = ProviderSpec(name=f"tls-metrics-{site.name}", site=site.name, role="metrics")
        labels = self._labels(**{"app.kubernetes.io/name": kname})
        self.apply_json(cluster, [secret_doc(f"{kname}-tls", {"tls.crt": files.cert.read_bytes(),
                                                           "tls.key": files.key.read_bytes()}, labels)])
        docs = tls_metrics_docs(kname, self.image, labels, spec.name, site.name)
        manifest = self._site_dir(cluster) / f"{kname}.yaml"
        manifest.write_text(kube_yaml.dump_all(docs))
        self.kubectl(cluster, "apply", "-f", str(manifest))
        self.await_rollout(cluster, kname, "the TLS metrics backend")
        key = f"{site.name}-{kname}"
        ports = self.forward(cluster, f"service/{kname}", [TLS_METRICS_PORT], key)
        provider = KubeProvider(spec, f"{service}:{TLS_METRICS_PORT}", self._forwards[key], scheme="https",
                                host_url=f"https://127.0.0.1:{ports[TLS_METRICS_PORT]}")
        self._cluster_urls[provider.host_url] = provider.cluster_url
        verify = ssl.create_default_context(cafile=str(self.pki.ca_path))
        poll_until(lambda: http_get.get(f"{provider.url}/admin/stats", timeout=2.0, verify=verify).status_code,
                   lambda s: s == 200, what=f"TLS metrics backend {spec.name} to answer 200", timeout=60,
                   interval=0.1, max_interval=1.0)
        self.wait_reached_in_cluster(cluster, site, service, TLS_METRICS_PORT, spec.name)
        return provider

    def wait_reached_in_cluster(self, cluster: SiteCluster, site: SiteSpec, host: str, port: int, what: str) -> None:
        """Until a pod of the site (its first fake backend's) connects to `host`:`port` through the cluster's DNS
        and Service routing, as the operator will: kube-proxy programs a new Service only after its pod is ready,
        and a port-forward, which goes to the pod, cannot tell (a first scrape refused would exclude a provider)."""
        if not site.providers:
            return
        connect = f"import socket; socket.create_connection(({host!r}, {port}), 2).close()"

        def reached() -> bool:  # a refused or timed-out connection fails the exec (CommandFailed: not yet)
            self.kubectl(cluster, "--namespace", NAMESPACE, "exec", f"deployment/agn-fake-{site.providers[0].name}",
                         "-c", "fake-backend", "--", "python3", "-c", connect, timeout=30)
            return True

        poll_until(reached, bool, interval=0.2, max_interval=1.0, timeout=60,
                   what=f"{what} to be reached at {host}:{port} from inside site {site.name}'s cluster")

    def cluster_url(self, url: str) -> str:
        """A fake backend URL as the harness reaches it, rewritten to how its cluster's pods reach it."""
        for host_url, in_cluster in self._cluster_urls.items():
            url = re.sub(re.escape(host_url) + r"(?!\d)", in_cluster, url)
        return url

    def start_operator(self, site_index: int, name: str,
                       mesh: Mapping[str, str] | None = None) -> tuple[ManagedProcess, Path, Path]:
        raise OperatorUnsupported("the operator runs in the site's cluster on this backend; use control_plane()")

    def start_overlay_sync(self, site_index: int, configmap_file: Path, scope: ScopeSpec) -> OverlaySyncProcess:
        raise OperatorUnsupported("overlay-sync runs in the gateway pod on this backend; use follow_configmap()")

    # ------------------------------------------------------------------------ the operator under test

    def control_plane(self, site: Site, mesh: Mapping[str, str] | None = None, *,
                      signals: bool = False) -> KubeControlPlane:
        """The site's in-cluster operator, checked installed and available; `mesh` (the values of the
        descriptor's mesh placeholders) makes it join the mesh. `signals` changes nothing here: the operator
        is installed as its manifests say, and the signals relay tests skip on this backend."""
        from harness.backends.kube.control import KubeControlPlane

        operator = getattr(self.impl, "operator", None)
        if operator is None:
            raise OperatorUnsupported("the implementation descriptor has no operator section")
        if mesh is not None and not operator.joins_mesh:
            raise OperatorUnsupported("the implementation descriptor's operator section has no mesh_args or mesh_env")
        cluster = self.sites[site.index]
        self.ensure_operator(cluster, mesh)
        return KubeControlPlane(site, self, cluster)

    def ensure_operator(self, site: SiteCluster, mesh: Mapping[str, str] | None = None) -> None:
        """The operator Deployment as its manifests made it (the run's CA is the Secret metrics-ca the suites'
        caSecretRef names, applied with the site); in a mesh patched to join it, then rolled out
        (see OperatorDeployment.ensure)."""
        self.operator_deployment.ensure(site, mesh)

    def render_mesh(self, mesh: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """The descriptor's `operator.mesh_args` and `operator.mesh_env` rendered for the pod: the client
        certificate and key at the mounted Secret's paths instead of the run's files, the other operator
        placeholders in-pod values."""
        values = {"python": "python", "manifests": POD_SCRATCH_DIR, "out": POD_SCRATCH_DIR,
                  "workdir": POD_SCRATCH_DIR, "metrics_ca": f"{METRICS_CA_DIR}/ca.crt", **dict(mesh)}
        for key, name in MESH_CLIENT_FILES.items():
            if values.get(key):
                values[key] = f"{MESH_CLIENT_DIR}/{name}"
        # only the mesh arguments: the pod's command is the Deployment's, not the local backend's template
        command = dataclasses.replace(self.impl.operator, argv_template=(), env=MappingProxyType({}))
        return command.render(Path(POD_SCRATCH_DIR), Path(POD_SCRATCH_DIR), Path(POD_SCRATCH_DIR),
                              Path(f"{METRICS_CA_DIR}/ca.crt"), values)

    def mesh_addresses(self, site_index: int) -> tuple[str, str]:
        """The operator pod binds its mesh port on every interface; peers send to its node's NodePort."""
        site = self.sites[site_index]
        return f"0.0.0.0:{MESH_POD_PORT}", f"{self.node_address(site)}:{MESH_NODEPORT}"

    def peer_address(self, address: str) -> str:
        """A provider gateway known by its port-forward becomes its node's address and NodePort, which pods
        of the other clusters dial (any other address is returned as is)."""
        peer = self._peers.get(address)
        return peer.node if peer is not None else address

    def operator_pods(self, site: SiteCluster) -> list[dict[str, Any]]:
        return self.operator_deployment.pods(site)

    def stop_operator(self, site: SiteCluster, timeout: float = 120.0) -> None:
        """Scale the operator to zero (SIGTERM: it leaves the mesh gracefully) and wait until no pod is left."""
        self.operator_deployment.stop(site, timeout)

    def suspend_operator(self, site: SiteCluster) -> None:
        """Crash the operator without a goodbye; needs the nodes, which only backends owning them reach."""
        raise OperationUnsupported(f"crashing the operator of site {site.spec.name} without a goodbye needs access "
                                   f"to its cluster's nodes, which the {self.name} backend does not have")

    def partition(self, group_a: Iterable[int], group_b: Iterable[int]) -> None:
        """Cut the links between two groups of sites; needs the nodes, which only backends owning them reach."""
        raise OperationUnsupported(f"cutting the links between sites needs access to the clusters' nodes, which "
                                   f"the {self.name} backend does not have")

    def heal(self) -> None:
        raise OperationUnsupported(f"the {self.name} backend cannot cut links between sites, so none to heal")

    def restore_operators(self) -> None:
        """Give every operator Deployment this run patched or scaled back the containers, volumes and
        replicas it had before."""
        self.operator_deployment.restore(self.sites)

    # ------------------------------------------------------------------------ gateways

    def allocate_gateway(self, site_index: int) -> tuple[str, str, Path]:
        """Pod addresses for the config; the work directory keeps the rendered files and the local overlay."""
        self._gateway_count += 1
        workdir = self.workdir / f"gateway-{self._gateway_count}"
        workdir.mkdir(parents=True, exist_ok=True)
        self._gateway_sites[workdir] = self.sites[site_index]
        return f"0.0.0.0:{GATEWAY_PORT}", f"0.0.0.0:{ADMIN_PORT}", workdir

    def follow_configmap(self, namespace: str, name: str, scope: ScopeSpec, key: str = OVERLAY_KEY) -> Path:
        """A local directory standing for a gateway pod's overlay emptyDir fed by overlay-sync from a ConfigMap.

        The next gateway started on it (`start_gateway(..., overlay_dir=<it>)`, however the Grid renders
        its config) gets an overlay-sync container on `--configmap NAMESPACE/NAME`; `overlay_sync(dir)`
        then returns that container's handle.
        """
        self._follow_count += 1
        overlay_dir = self.workdir / f"overlay-sync-{self._follow_count}" / "overlay"
        overlay_dir.mkdir(parents=True, exist_ok=True)
        self._follows[overlay_dir] = FollowedConfigMap(namespace, name, scope, key)
        return overlay_dir

    def overlay_sync(self, overlay_dir: Path) -> KubeOverlaySync:
        """The overlay-sync of the gateway started on a `follow_configmap` directory."""
        return self._syncs[overlay_dir]

    def start_gateway(self, name: str, listen: str, admin: str, workdir: Path, config_text: str,
                      overlay_dir: Path, *, env: Mapping[str, str] | None = None,
                      scheme: str = "http", follow: FollowedConfigMap | None = None) -> GatewayProcess:
        """Deploy one gateway pod, wait until it is ready (or failed), forward its ports, wait for /ready.

        `follow` (or a `follow_configmap` registration of `overlay_dir`) makes overlay-sync deliver the
        overlay from a ConfigMap; otherwise a config that reads `overlay_dir` gets what the harness writes
        there, and one that does not (a provider gateway) gets no overlay at all.
        """
        site = self._gateway_sites[workdir]
        kname = f"agn-gw-{workdir.name.rsplit('-', 1)[-1]}"
        overlay_file = str(overlay_dir / OVERLAY_KEY)
        follow = follow or self._follows.pop(overlay_dir, None)
        mode = "follow" if follow is not None else "mirror" if overlay_file in config_text else "none"
        config = config_text.replace(overlay_file, f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}")
        config = self._peer_addresses(site, config)
        config, files = self._pod_files(config)
        config_path = workdir / "praxis.yaml"
        config_path.write_text(config)
        seed_file = overlay_dir / OVERLAY_KEY
        seed = seed_file.read_bytes() if mode == "mirror" and seed_file.is_file() else None
        listen_port, admin_port = int(listen.rsplit(":", 1)[1]), int(admin.rsplit(":", 1)[1])
        pod = GatewayPod(kname, mode, follow, listen_port, admin_port, nodeport=scheme == "https")
        labels = self._labels(**{GATEWAY_LABEL: kname, "app.kubernetes.io/name": kname})
        docs = gateway_docs(pod, self.image, labels, config, seed, files, dict(env or {}))
        manifest = workdir / "kube.yaml"
        # Secrets and the overlay seed go server-side through stdin: no file holds a secret, and a seed
        # is too large for the annotation a client-side apply keeps (256 KiB for all of them)
        by_api = [d for d in docs if d["kind"] == "Secret" or "binaryData" in d]
        manifest.write_text(kube_yaml.dump_all([d for d in docs if d not in by_api]))
        self.apply_json(site, by_api)
        self.kubectl(site, "apply", "-f", str(manifest))
        started: list[ManagedProcess] = []
        relay: TcpRelay | None = None
        try:
            self._wait_pod(site, kname, name, float(self.impl.gateway.startup_timeout_s) + 60)
            # how anything outside the gateway's cluster reaches it: the relay here, other clusters' pods
            reachable = self._node_port(site, kname, listen_port) if pod.nodeport else None
            relayed = reachable is not None and self.host_reaches_nodes
            ports = ([] if relayed else [listen_port]) + [admin_port] + ([SYNC_ADMIN_PORT] if mode == "follow" else [])
            local = self.forward(site, f"deployment/{kname}", ports, kname)
            forward = self._forwards.pop(kname)
            started.append(forward)
            if relayed and reachable is not None:
                node, node_port = reachable.rsplit(":", 1)
                # kube-proxy programs a NodePort after the pod is ready (its endpoints first): until then
                # connections are refused there, which a client would read as a dead gateway
                poll_until(lambda: accepts(node, int(node_port)), bool, timeout=30, interval=0.1,
                           what=f"NodePort {node}:{node_port} of {kname} to accept connections")
                relay = TcpRelay(node, int(node_port))
                local[listen_port] = relay.port
            handle = self.runner.spawn(self.supervisor, f"logs-{name}-{kname}",
                                       ["kubectl", *site.kubectl_args, "--namespace", NAMESPACE, "logs", "-f",
                                        f"deployment/{kname}", "-c", "gateway"])
            started.append(handle)
            proc = GatewayProcess(name, f"127.0.0.1:{local[listen_port]}", f"127.0.0.1:{local[admin_port]}",
                                  config_path, overlay_dir, handle, scheme)
            try:
                wait_http(f"{proc.admin_url}/ready", f"gateway {name} /ready",
                           float(self.impl.gateway.startup_timeout_s) + 30)
            except WaitTimeout as exc:
                raise GatewayStartFailed(str(exc), None, self.logs(site, kname)) from None
            peer = self._record_peer(site, kname, proc.listen, listen_port, reachable) if reachable else None
        except BaseException:
            for process in started:
                self.supervisor.stop(process)
            if relay is not None:
                relay.close()
            self._delete_gateway(site, kname)
            raise
        self._gateways[id(handle)] = _KubeGateway(site, kname, overlay_dir, handle, forward, mode, peer, relay)
        if mode == "mirror":
            self._mirror.watch(site, kname, overlay_dir, seed)
        elif follow is not None:
            self._syncs[overlay_dir] = KubeOverlaySync(
                handle, overlay_dir / f"{follow.name}.configmap.yaml", overlay_dir,
                f"127.0.0.1:{local[SYNC_ADMIN_PORT]}", read_delivered=lambda: self._read_pod_overlay(site, kname),
                pod=kname)
        return proc

    def stop(self, process: ManagedProcess) -> int | None:
        """Remove an in-cluster gateway (its log stream is the handle), or stop a host process."""
        gateway = self._gateways.pop(id(process), None)
        if gateway is None:
            return self.supervisor.stop(process)
        self._mirror.forget(gateway.overlay_dir)
        self._syncs.pop(gateway.overlay_dir, None)
        if gateway.peer is not None:
            self._peers.pop(gateway.peer, None)
        self.supervisor.stop(gateway.handle)
        self.supervisor.stop(gateway.forward)
        if gateway.relay is not None:
            gateway.relay.close()
        self._delete_gateway(gateway.site, gateway.name)
        return 0

    def _delete_gateway(self, site: SiteCluster, kname: str) -> None:
        self.kubectl(site, "--namespace", NAMESPACE, "delete", "deployment,service,configmap,secret",
                     "-l", f"{GATEWAY_LABEL}={kname}", "--ignore-not-found", "--wait=false", check=False)

    def _wait_pod(self, site: SiteCluster, kname: str, name: str, timeout: float) -> None:
        """Until the pod's containers are all ready; a container that exits or cannot start fails at once.

        A gateway that refuses its config exits; its exit code (from the container status) is what
        GatewayStartFailed carries, as on the local backend.
        """
        def probe() -> PodState:
            return pod_state(self.kubectl_json(site, "--namespace", NAMESPACE, "get", "pods", "-l",
                                               f"{GATEWAY_LABEL}={kname}"))

        try:
            state = poll_until(probe, lambda s: s.phase != "pending", what=f"gateway {name} ({kname}) pod to be ready",
                               timeout=timeout, interval=0.25, max_interval=1.0, describe=lambda s: s.detail)
        except WaitTimeout as exc:
            raise GatewayStartFailed(str(exc), None, self.logs(site, kname)) from None
        if state.phase == "failed":
            raise GatewayStartFailed(f"gateway {name} ({kname}): {state.detail}", state.exit_code,
                                     self.logs(site, kname))

    def _node_port(self, site: SiteCluster, kname: str, port: int) -> str:
        """`node address:NodePort` of the gateway Service's `port`: how anything outside its cluster reaches it."""
        service = self.kubectl_json(site, "--namespace", NAMESPACE, "get", "service", kname) or {}
        node_port = next((p.get("nodePort") for p in (service.get("spec") or {}).get("ports") or []
                          if p.get("port") == port), None)
        if node_port is None:
            raise GatewayStartFailed(f"Service {kname} has no NodePort for port {port}", None, json.dumps(service))
        return f"{self.node_address(site)}:{node_port}"

    def _record_peer(self, site: SiteCluster, kname: str, host_address: str, port: int, node: str) -> str:
        """Note how pods reach this gateway: its Service in its cluster, `node` (its node's NodePort) from others."""
        self._peers[host_address] = _Peer(site, f"{kname}.{NAMESPACE}.svc.cluster.local:{port}", node)
        return host_address

    def nodes(self, site: SiteCluster) -> list[tuple[str, str]]:
        """(name, InternalIP) of every node of the site's cluster that reports one; on kind a node's name is
        also the name of its Docker container."""
        if site.name not in self._nodes:
            found: list[tuple[str, str]] = []
            for node in (self.kubectl_json(site, "get", "nodes") or {}).get("items") or []:
                address = next((a.get("address") for a in (node.get("status") or {}).get("addresses") or []
                                if a.get("type") == "InternalIP" and a.get("address")), None)
                if address:
                    found.append((str((node.get("metadata") or {}).get("name") or ""), str(address)))
            if not found:
                raise BackendUnavailable(f"site {site.spec.name}: no node reports an InternalIP")
            self._nodes[site.name] = found
        return self._nodes[site.name]

    def node_address(self, site: SiteCluster) -> str:
        """The InternalIP of the site's first node: how pods of the other clusters (same Docker network) reach it."""
        return self.nodes(site)[0][1]

    def _peer_addresses(self, site: SiteCluster, config: str) -> str:
        """Host addresses of in-cluster gateways (their port-forwards) become addresses pods can reach."""
        for host_address, peer in self._peers.items():
            target = peer.service if peer.site is site else peer.node
            config = re.sub(re.escape(host_address) + r"(?!\d)", target, config)
        return config

    def _pod_files(self, config: str) -> tuple[str, dict[str, bytes]]:
        """Local files the config names (certificates, keys, credential files) become keys of a mounted Secret."""
        files: dict[str, bytes] = {}
        pattern = re.compile(re.escape(str(self.workdir)) + r"/[^\s\"',\]]+")

        def swap(match: re.Match[str]) -> str:
            path = Path(match.group(0))
            if not path.is_file():
                return match.group(0)
            key = re.sub(r"[^A-Za-z0-9._-]", "_", str(path.relative_to(self.workdir)))
            files[key] = path.read_bytes()
            return f"{POD_FILES_DIR}/{key}"

        return pattern.sub(swap, config), files

    def write_pod_overlay(self, site: SiteCluster, kname: str, data: bytes) -> None:
        """Project `data` into a mirrored gateway pod's overlay directory (through its writer container)."""
        self.kubectl(site, "--namespace", NAMESPACE, "exec", "-i", f"deployment/{kname}", "-c", "overlay-writer",
                     "--", "python", "-c", _WRITE_OVERLAY, POD_OVERLAY_DIR, OVERLAY_KEY,
                     input=base64.b64encode(data).decode(), timeout=60)

    def remove_pod_overlay(self, site: SiteCluster, kname: str) -> None:
        """Remove a mirrored gateway pod's visible overlay name, as a suite's remove_overlay does locally."""
        self.kubectl(site, "--namespace", NAMESPACE, "exec", f"deployment/{kname}", "-c", "overlay-writer",
                     "--", "rm", "-f", f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}", timeout=60)

    def _read_pod_overlay(self, site: SiteCluster, kname: str) -> bytes | None:
        result = self.runner.run(["kubectl", *site.kubectl_args, "--namespace", NAMESPACE, "exec",
                                  f"deployment/{kname}", "-c", "overlay-sync", "--", "cat",
                                  f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}"], check=False, timeout=60)
        return result.stdout.encode() if result.returncode == 0 else None

    def await_rollout(self, site: SiteCluster, deployment: str, what: str, *, namespace: str = NAMESPACE) -> None:
        """Wait for a Deployment's rollout; BackendUnavailable with its logs when it never completes."""
        try:
            self.kubectl(site, "--namespace", namespace, "rollout", "status", f"deployment/{deployment}",
                         f"--timeout={int(self.ready_timeout)}s", timeout=self.ready_timeout + 30)
        except CommandFailed as exc:
            raise BackendUnavailable(f"site {site.spec.name}: {what} did not roll out: {exc}\n"
                                     f"{self.logs(site, deployment, namespace=namespace)}") from None

    # ------------------------------------------------------------------------ diagnostics

    def logs(self, site: SiteCluster, deployment: str, tail: int = 200, *, container: str | None = None,
             previous: bool = False, namespace: str = NAMESPACE) -> str:
        which = ["-c", container] if container else ["--all-containers"]
        return self.kubectl(site, "--namespace", namespace, "logs", f"deployment/{deployment}", *which,
                            f"--tail={tail}", *(["--previous"] if previous else []), check=False, timeout=60)

    def collect_logs(self, site: SiteCluster | None = None) -> str:
        """`kubectl logs` of every Deployment in the namespace of one site (or all), and of the operator's where
        it runs in another, also saved to logs/."""
        parts: list[str] = []
        operator = self.operator_deployment
        for cluster in [site] if site is not None else self.sites:
            names = self.kubectl(cluster, "--namespace", NAMESPACE, "get", "deployments", "-o", "name",
                                 check=False, timeout=60).split()
            text = "\n".join(f"=== {cluster.spec.name} {n}\n{self.logs(cluster, n.split('/')[-1])}" for n in names)
            if operator.workload.namespace != NAMESPACE:
                text += f"\n=== {cluster.spec.name} {operator.where}\n{operator.logs(cluster)}"
            out = self.workdir / "logs" / f"kube-{cluster.spec.name}.log"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            parts.append(text)
        return "\n".join(parts)
