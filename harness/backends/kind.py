"""The kind backend: one kind cluster per site, the project's image loaded into each, components in-cluster.

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
and the mesh client certificate as a mounted Secret. On kind the harness also reaches into the node
containers: a crash is a SIGSTOP of the operator's process (found with crictl), a cut link is a pair of
iptables DROP rules in the raw table of the two nodes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import secrets
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import httpx
import yaml
from pytest_kubernetes.options import ClusterOptions
from pytest_kubernetes.providers.kind import KindManagerBase

from harness import http_get
from harness.addresses import AddressPlan
from harness.backends import OperationUnsupported
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
from harness.gateway_config import (
    VARIANTS,
    ListenerTls,
    UpstreamTls,
    render_gateway_config,
    render_provider_gateway_config,
)
from harness.pki import GridPKI, ServerFiles
from harness.process import ManagedProcess, Supervisor
from harness.topology import ProviderSpec, SiteSpec, Topology
from harness.waiting import WaitTimeout, poll_until

if TYPE_CHECKING:
    from harness.grid import Site
    from harness.kube_control import KubeControlPlane

NAMESPACE = "agn-system"
DEFAULT_IMAGE = "agn-conformance/reference:dev"
OVERLAY_KEY = "routing-overlay.json"
POD_OVERLAY_DIR = "/var/run/agn/overlay"
POD_FILES_DIR = "/var/run/agn/files"
POD_SEED_DIR = "/var/run/agn/seed"
GATEWAY_PORT = 8080
ADMIN_PORT = 9901
SYNC_ADMIN_PORT = 9102
FAKE_PORT = 8000
#: The fake backends' mTLS listener (hop clusters), with its certificate, key and client CA from a Secret.
FAKE_MTLS_PORT = 8444
FAKE_MTLS_DIR = "/etc/agn/mtls"
TLS_METRICS_PORT = 8443
#: The optional Secret of the standing gateway (manifests/base/gateway.yaml) with its hop client
#: certificate (tls.crt, tls.key) and the CA that signs the hop clusters (ca.crt), and where it is mounted.
GATEWAY_HOP_TLS_SECRET = "agn-gateway-hop-tls"
GATEWAY_HOP_TLS_DIR = "/etc/agn/hop-tls"
GATEWAY_NODEPORT = 30080
ADMIN_NODEPORT = 30901
FIELD_MANAGER = "agn-conformance"
RUN_LABEL = "agn.grid/run"
GATEWAY_LABEL = "agn.grid/gateway"
OPERATOR_DEPLOYMENT = "agn-operator"
OPERATOR_SELECTOR = "app.kubernetes.io/name=agn-operator"
#: The Secret holding the run's CA: the name the suites' metricsConfig.tls.caSecretRef points at.
METRICS_CA_SECRET = "metrics-ca"
METRICS_CA_DIR = "/etc/agn/metrics-ca"
#: The operator's mesh membership: the pod's UDP port and the NodePort of Service agn-operator-mesh
#: (externalTrafficPolicy Local), which members of other clusters send to at the node's address.
MESH_POD_PORT = 7946
MESH_NODEPORT = 30946
#: The Secret carrying the operator's mesh client certificate (tls.crt, tls.key) and where it is mounted.
MESH_CLIENT_SECRET = "agn-operator-mesh-client"
MESH_CLIENT_DIR = "/etc/agn/mesh-client"
MESH_CLIENT_FILES = {"client_cert": "tls.crt", "client_key": "tls.key"}
#: What the descriptor's operator placeholders name in the pod: the operator reads the API, not
#: directories, so {manifests}, {out} and {workdir} point at its scratch emptyDir.
POD_SCRATCH_DIR = "/tmp"
TLS_METRICS_NAME = "agn-tls-metrics"
#: How long a gateway following a ConfigMap waits for overlay-sync's first delivery before starting anyway.
FIRST_DELIVERY_SECONDS = 60
_FORWARD_LINE = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")
#: Waiting reasons after which a container will not start without someone changing the pod.
_STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                            "CreateContainerError"})
#: Projects stdin (base64) into a directory the way kubelet projects a ConfigMap (the harness's own code).
_WRITE_OVERLAY = ("import base64, pathlib, sys\n"
                  "from harness.projection import project\n"
                  "project(pathlib.Path(sys.argv[1]), {sys.argv[2]: base64.b64decode(sys.stdin.read())})\n")
#: Seeds the overlay directory from a mounted ConfigMap key before the gateway starts (nothing when absent).
_SEED_OVERLAY = ("import pathlib, sys\n"
                 "from harness.projection import project\n"
                 "seed = pathlib.Path(sys.argv[3])\n"
                 "if seed.is_file():\n"
                 "    project(pathlib.Path(sys.argv[1]), {sys.argv[2]: seed.read_bytes()})\n")
#: Keeps the writer container alive for `kubectl exec` and ends it at once on SIGTERM (it runs as PID 1).
_IDLE = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\nwhile True:\n    signal.pause()\n"
#: Host ports of kind port mappings claimed by the backends of this process (two grids of one session).
_CLAIMED_PORTS: dict[tuple[str, int], int] = {}
_CLAIMED_LOCK = threading.Lock()
#: (checkout, tag) of the images this process has built: the grids of one session (the main grid, the
#: provider profile's, every mesh) build the image once.
_BUILT_IMAGES: set[tuple[str, str]] = set()
_BUILD_LOCK = threading.Lock()


class BackendUnavailable(RuntimeError):
    """A tool the backend needs is missing or not working; the message names it."""


@dataclass
class SiteCluster:
    """One site's cluster and how kubectl reaches it."""

    index: int
    spec: SiteSpec
    name: str
    kubectl_args: list[str]
    host_ports: dict[int, int] = field(default_factory=dict)


@dataclass
class KubeProvider(ProviderProcess):
    """A fake backend in a cluster: `address` is its in-cluster Service, `url` the host's forwarded port."""

    host_url: str = ""

    @property
    def url(self) -> str:
        return self.host_url

    @property
    def cluster_url(self) -> str:
        """How pods of its cluster reach it (what an in-cluster operator scrapes)."""
        return f"{self.scheme}://{self.address}"


@dataclass(frozen=True)
class FollowedConfigMap:
    """An operator's ConfigMap a gateway pod's overlay-sync follows, and the scope its envelopes must carry."""

    namespace: str
    name: str
    scope: ScopeSpec


@dataclass
class KubeOverlaySync(OverlaySyncProcess):
    """The overlay-sync container of a gateway pod; its admin port is forwarded to the host.

    `process` is the pod's handle (the gateway's log stream); `target_dir` stands for the pod's overlay
    emptyDir, whose file `read_delivered` reads through `kubectl exec`; `configmap_file` only names the
    followed ConfigMap (overlay-sync reads it from the API, no such file exists).
    """

    read_delivered: Callable[[], bytes | None] = lambda: None
    pod: str = ""  # the gateway Deployment whose overlay-sync container this is

    def ready_status(self) -> dict[str, Any]:
        """overlay-sync's /ready document: `ready` and the delivered `revision` (200 or 503 alike)."""
        doc = http_get.get(f"http://{self.admin}/ready", timeout=5.0).json()
        return doc if isinstance(doc, dict) else {}

    def delivered(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.read_delivered() or b"")
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    def delivered_revision(self) -> str | None:
        """The revision overlay-sync reports as delivered on its admin /ready (None before the first)."""
        try:
            revision = self.ready_status().get("revision")
        except (httpx.HTTPError, ValueError):
            return None
        return revision if isinstance(revision, str) else None


@dataclass
class _KubeGateway:
    site: SiteCluster
    name: str
    overlay_dir: Path
    handle: ManagedProcess  # `kubectl logs -f` of the gateway container: the GatewayProcess's process
    forward: ManagedProcess
    mode: str  # "mirror", "follow" or "none"
    peer: str | None = None  # the host address other gateways' configs name it by (provider gateways)


@dataclass(frozen=True)
class _Peer:
    site: SiteCluster
    service: str  # host:port inside its own cluster
    node: str  # node address:NodePort, for pods of other clusters


class _PortForwardPKI(GridPKI):
    """The run's CA; a certificate for a pod listener ("0.0.0.0") also names 127.0.0.1.

    The harness reaches pod listeners through loopback port-forwards and verifies them by that address;
    peers in the clusters verify the SNI name the certificate also carries.
    """

    def server(self, name: str, *hosts: str) -> ServerFiles:
        if "0.0.0.0" in hosts and "127.0.0.1" not in hosts:
            hosts = (*hosts, "127.0.0.1")
        return super().server(name, *hosts)


def repo_root() -> Path:
    """The checkout holding reference/Dockerfile, manifests/ and clusters/kind/."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "manifests").is_dir() else Path.cwd()


def missing_tools(runner: Runner, tools: Sequence[str]) -> list[str]:
    return [tool for tool in tools if runner.which(tool) is None]


#: The oldest kubectl the backends work with: `kubectl patch --subresource=status` appeared in 1.24.
MIN_KUBECTL = (1, 24)


def kubectl_too_old(runner: Runner) -> str | None:
    """Why the kubectl on PATH is too old (None: new enough, or its version cannot be read)."""
    done = runner.run(["kubectl", "version", "--client", "-o", "json"], check=False, timeout=60)
    try:
        version = json.loads(done.stdout)["clientVersion"]
        found = (int(version["major"]), int(re.sub(r"\D.*$", "", str(version["minor"]))))
    except (ValueError, KeyError, TypeError):
        return None  # an unusual build: the first command that needs a newer kubectl says so itself
    if found < MIN_KUBECTL:
        return (f"kubectl {found[0]}.{found[1]} is too old: the cluster backends need kubectl >= "
                f"{MIN_KUBECTL[0]}.{MIN_KUBECTL[1]} (patch --subresource=status)")
    return None


def preflight_kind(runner: Runner) -> str | None:
    """Why the kind backend cannot run here (None: it can)."""
    missing = missing_tools(runner, ("docker", "kind", "kubectl"))
    if missing:
        return f"the kind backend needs {', '.join(missing)} on PATH (not found)"
    old = kubectl_too_old(runner)
    if old is not None:
        return old
    info = runner.run(["docker", "info"], check=False, timeout=60)
    if info.returncode != 0:
        first = (info.stderr or info.stdout).strip().splitlines()[:1]
        return f"`docker info` failed (exit {info.returncode}): no Docker engine{': ' + first[0] if first else ''}"
    return None


class _KindCluster(KindManagerBase):
    """pytest-kubernetes' kind manager with its commands sent through the Runner as argv lists.

    The upstream manager joins arguments into a shell string and sleeps between readiness probes; here
    kind and kubectl run without a shell and readiness is polled with a deadline.
    """

    def __init__(self, runner: Runner, config_path: Path, kubeconfig: Path) -> None:
        self._runner = runner
        super().__init__(provider_config=str(config_path), kubeconfig=kubeconfig)

    def _exec(self, arguments: list[str], additional_env: dict[str, str] | None = None,
              timeout: int | None = None) -> Any:
        return self._runner.run(["kind", *arguments], timeout=timeout or self._cluster_options.cluster_timeout)

    def kubectl(self, args: list[str], as_dict: bool = True, timeout: int = 60) -> dict[str, Any] | str:
        argv = ["kubectl", "--kubeconfig", str(self.kubeconfig), *args] + (["-o", "json"] if as_dict else [])
        out = self._runner.run(argv, timeout=timeout).stdout
        return dict(json.loads(out)) if as_dict else out

    def ready(self, timeout: int = 240) -> bool:
        def probe() -> bool:
            readyz = str(self.kubectl(["get", "--raw", "/readyz"], as_dict=False))
            self.kubectl(["get", "serviceaccount", "default", "--namespace", "default"], as_dict=False)
            return readyz.strip() == "ok"

        try:
            poll_until(probe, bool, what=f"cluster {self.cluster_name} to be ready", timeout=timeout,
                       interval=0.5, max_interval=2.0)
        except WaitTimeout:
            return False
        return True

    def create(self, cluster_options: ClusterOptions | None = None, timeout: int = 240, **kwargs: Any) -> None:
        self._created = True  # from here on teardown deletes it, even if creation fails half-way
        self._on_create(self._cluster_options)
        if not self.ready(timeout):
            raise RuntimeError(f"kind cluster {self.cluster_name} did not become ready in {timeout}s")

    def delete(self) -> None:
        if self._created:
            self._on_delete()


class KubeBackend:
    """Everything shared by backends whose components run in Kubernetes clusters, one per site."""

    name = "kube"
    #: A gateway pod gets the files its config names as a Secret made when it starts (see `start_gateway`).
    gateway_files_live = False

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
        self._gateway_count = 0
        self._follow_count = 0
        self._gateway_sites: dict[Path, SiteCluster] = {}
        self._gateways: dict[int, _KubeGateway] = {}
        self._forwards: dict[str, ManagedProcess] = {}
        self._follows: dict[Path, FollowedConfigMap] = {}
        self._syncs: dict[Path, KubeOverlaySync] = {}
        self._peers: dict[str, _Peer] = {}
        self._nodes: dict[str, list[tuple[str, str]]] = {}
        self._operators: dict[str, dict[str, Any]] = {}  # site -> its operator Deployment before the run changed it
        self._changed_operators: set[str] = set()  # sites whose operator Deployment the run patched or scaled
        self._cluster_urls: dict[str, str] = {}
        self._mirror = OverlayMirror(self)

    # ------------------------------------------------------------------------ lifecycle

    @property
    def pki(self) -> GridPKI:
        """The run's certificate authority, made on first use."""
        if self._pki is None:
            self._pki = _PortForwardPKI(self.workdir / "pki")
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
        """Bring every site up: clusters (where this backend makes them), image, CRDs, components."""
        self.prepare()
        self.sites = self.connect()
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

    def install(self, site: SiteCluster) -> None:
        """CRDs, the kustomize overlay, this site's rendered configuration, then readiness."""
        crds = self.root / "manifests" / "crds"
        self.kubectl(site, "apply", "--server-side", "--field-manager", FIELD_MANAGER, "-f", str(crds))
        self.kubectl(site, "wait", "--for=condition=Established", "--timeout=120s", "-f", str(crds))
        self.kubectl(site, "apply", "-k", str(self.root / "manifests" / "overlays" / "kind"))
        self.kubectl(site, "apply", "-f", str(self.render_site(site)))
        if self.image != DEFAULT_IMAGE:
            self.kubectl(site, "--namespace", NAMESPACE, "set", "image", "deployment", "--all",
                         f"*={self.image}")
        try:
            self.kubectl(site, "--namespace", NAMESPACE, "wait", "--for=condition=Available", "deployment",
                         "--all", f"--timeout={int(self.ready_timeout)}s", timeout=self.ready_timeout + 30)
        except CommandFailed as exc:
            raise BackendUnavailable(f"site {site.spec.name}: deployments not available: {exc}\n"
                                     f"{self.collect_logs(site)}") from None
        self.wait_gateway_ready(site)

    def wait_gateway_ready(self, site: SiteCluster) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop mirroring, log streams and port-forwards; subclasses then remove what they made."""
        self._mirror.stop()
        for gateway in list(self._gateways.values()):
            self.supervisor.stop(gateway.handle)
            self.supervisor.stop(gateway.forward)
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

    def render_site(self, site: SiteCluster) -> Path:
        """The site's ConfigMaps, Secrets and fake backends as one file for `kubectl apply -f`.

        The standing gateway reaches its hop clusters at the fakes' mTLS listeners with a client
        certificate of the run's CA, from the Secret agn-gateway-hop-tls its Deployment mounts.
        """
        spec = site.spec
        clusters = {p.cluster: self.fake_address(p.name) for p in spec.providers}
        model = [p.cluster for p in spec.model_providers]
        management = next((p.cluster for p in spec.providers if p.role == "management"), None)
        scope = ScopeSpec(self.topology.network, spec.gateway, spec.namespace, spec.name)
        hop = [p for p in spec.providers if is_hop_backend(p) and p.cluster in model]
        hop_tls = {p.cluster: UpstreamTls(f"{GATEWAY_HOP_TLS_DIR}/ca.crt", f"{GATEWAY_HOP_TLS_DIR}/tls.crt",
                                          f"{GATEWAY_HOP_TLS_DIR}/tls.key", fake_sni(spec.name, p.name))
                   for p in hop}
        # the provider gateway keeps the plain listeners: the fakes are its private backends
        consumer_clusters = {**clusters, **{p.cluster: self.fake_mtls_address(p.name) for p in hop}}
        gateway_config = render_gateway_config(
            VARIANTS["core"], listen=f"0.0.0.0:{GATEWAY_PORT}", admin=f"0.0.0.0:{ADMIN_PORT}",
            overlay_file=f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}", scope=scope, clusters=consumer_clusters,
            hop_clusters=model, management_cluster=management, allowlist=model, hop_tls=hop_tls)
        hop_client = self.pki.client(f"kube-{spec.name}-gateway-hop-client")
        sni = f"{spec.provider_gateway or 'provider-gateway'}.{spec.name}.grid.test"
        server = self.pki.server(f"kube-{spec.name}-provider-gateway", sni,
                                 f"agn-provider-gateway.{NAMESPACE}.svc")
        provider_config = render_provider_gateway_config(
            listen="0.0.0.0:8443", admin=f"0.0.0.0:{ADMIN_PORT}",
            tls=ListenerTls("/etc/praxis/tls/tls.crt", "/etc/praxis/tls/tls.key", "/etc/praxis/tls/ca.crt"),
            trusted_peers=None, provider_id=f"{spec.name}-{spec.provider_gateway or 'provider-gateway'}",
            routes=(), credentials=(), clusters=clusters)
        docs: list[dict[str, Any]] = [
            # before the config naming its files, so a gateway that restarts on the new config finds them
            _secret(GATEWAY_HOP_TLS_SECRET, {"tls.crt": hop_client.cert.read_bytes(),
                                             "tls.key": hop_client.key.read_bytes(),
                                             "ca.crt": self.pki.ca_path.read_bytes()}, self._labels()),
            _configmap("agn-gateway-config", {"praxis.yaml": gateway_config}, self._labels()),
            _configmap("agn-provider-gateway-config", {"praxis.yaml": provider_config}, self._labels()),
            _secret("agn-provider-gateway-tls", {"tls.crt": server.cert.read_bytes(),
                                                 "tls.key": server.key.read_bytes(),
                                                 "ca.crt": self.pki.ca_path.read_bytes()}, self._labels()),
            _secret("agn-provider-credentials", {}, self._labels()),
        ]
        for provider in spec.providers:
            docs += self._fake_backend(provider.name, provider.site,
                                       fake_sni(spec.name, provider.name) if provider in hop else None)
        path = self._site_dir(site) / "site.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return path

    def _fake_backend(self, name: str, site: str, sni: str | None = None) -> list[dict[str, Any]]:
        """A fake backend's Deployment and Service; with `sni` (a hop cluster's backend) also its mTLS
        listener, its server certificate (naming `sni` and the Service) and the run's CA as client CA."""
        kname = f"agn-fake-{name}"
        labels = self._labels(**{"app.kubernetes.io/name": kname})
        container: dict[str, Any] = {
            "name": "fake-backend", "image": self.image, "imagePullPolicy": "IfNotPresent",
            "command": ["agn-fake-backend", "--name", name, "--site", site, "--listen", f"0.0.0.0:{FAKE_PORT}"],
            "ports": [{"containerPort": FAKE_PORT, "name": "http"}],
            "readinessProbe": {"httpGet": {"path": "/admin/stats", "port": FAKE_PORT}, "periodSeconds": 1}}
        ports = [{"name": "http", "port": FAKE_PORT, "targetPort": FAKE_PORT}]
        if sni is None:
            return [_deployment(kname, labels, [container], []), _service(kname, labels, ports)]
        files = self.pki.server(f"kube-fake-{sni}", sni, f"{kname}.{NAMESPACE}.svc.cluster.local",
                                f"{kname}.{NAMESPACE}.svc")
        container["command"] += ["--mtls-listen", f"0.0.0.0:{FAKE_MTLS_PORT}", "--tls-cert", f"{FAKE_MTLS_DIR}/tls.crt",
                                 "--tls-key", f"{FAKE_MTLS_DIR}/tls.key", "--client-ca", f"{FAKE_MTLS_DIR}/ca.crt"]
        container["ports"].append({"containerPort": FAKE_MTLS_PORT, "name": "mtls"})
        container["volumeMounts"] = [{"name": "mtls", "mountPath": FAKE_MTLS_DIR, "readOnly": True}]
        ports.append({"name": "mtls", "port": FAKE_MTLS_PORT, "targetPort": FAKE_MTLS_PORT})
        secret = _secret(f"{kname}-mtls", {"tls.crt": files.cert.read_bytes(), "tls.key": files.key.read_bytes(),
                                           "ca.crt": self.pki.ca_path.read_bytes()}, labels)
        volumes = [{"name": "mtls", "secret": {"secretName": f"{kname}-mtls"}}]
        return [secret, _deployment(kname, labels, [container], volumes), _service(kname, labels, ports)]

    # ------------------------------------------------------------------------ port-forwards

    def forward(self, site: SiteCluster, target: str, ports: Sequence[int], name: str) -> dict[int, int]:
        """`kubectl port-forward` `target` on loopback; returns remote port -> local port."""
        argv = ["kubectl", *site.kubectl_args, "--namespace", NAMESPACE, "port-forward", "--address",
                "127.0.0.1", target, *[f":{p}" for p in ports]]
        proc = self.runner.spawn(self.supervisor, f"port-forward-{name}", argv)

        def mapping() -> dict[int, int]:
            if not proc.running():
                raise GatewayStartFailed(f"port-forward to {target} exited with {proc.returncode}",
                                         proc.returncode, proc.log_tail())
            found = {int(r): int(loc) for loc, r in _FORWARD_LINE.findall(proc.log_text())}
            return found

        try:
            found = poll_until(mapping, lambda m: all(p in m for p in ports), what=f"port-forward to {target}",
                               timeout=60, fatal=(GatewayStartFailed,))
        except BaseException:
            self.supervisor.stop(proc)
            raise
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
            _wait_http(f"{ready.url}/admin/stats", f"fake backend {ready.spec.name}", 60)
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
        self.apply_json(cluster, [_secret(f"{kname}-tls", {"tls.crt": files.cert.read_bytes(),
                                                           "tls.key": files.key.read_bytes()}, labels)])
        container = {"name": "fake-backend", "image": self.image, "imagePullPolicy": "IfNotPresent",
                     "command": ["agn-fake-backend", "--name", spec.name, "--site", site.name,
                                 "--listen", f"0.0.0.0:{TLS_METRICS_PORT}", "--tls-cert", "/etc/agn/tls/tls.crt",
                                 "--tls-key", "/etc/agn/tls/tls.key"],
                     "ports": [{"containerPort": TLS_METRICS_PORT, "name": "https"}],
                     "readinessProbe": {"httpGet": {"path": "/admin/stats", "port": TLS_METRICS_PORT,
                                                    "scheme": "HTTPS"}, "periodSeconds": 1},
                     "volumeMounts": [{"name": "tls", "mountPath": "/etc/agn/tls", "readOnly": True}]}
        docs = [_deployment(kname, labels, [container], [{"name": "tls", "secret": {"secretName": f"{kname}-tls"}}]),
                _service(kname, labels, [{"name": "https", "port": TLS_METRICS_PORT, "targetPort": TLS_METRICS_PORT}])]
        manifest = self._site_dir(cluster) / f"{kname}.yaml"
        manifest.write_text(yaml.safe_dump_all(docs, sort_keys=False))
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
        return provider

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

    def control_plane(self, site: Site, mesh: Mapping[str, str] | None = None) -> KubeControlPlane:
        """The site's in-cluster operator, checked installed and available; `mesh` (the values of the
        descriptor's mesh placeholders) makes it join the mesh."""
        from harness.kube_control import KubeControlPlane

        operator = getattr(self.impl, "operator", None)
        if operator is None:
            raise OperatorUnsupported("the implementation descriptor has no operator section")
        if mesh is not None and getattr(operator, "mesh_args", None) is None:
            raise OperatorUnsupported("the implementation descriptor's operator section has no mesh_args")
        cluster = self.sites[site.index]
        self.ensure_operator(cluster, mesh)
        return KubeControlPlane(site, self, cluster)

    def ensure_operator(self, site: SiteCluster, mesh: Mapping[str, str] | None = None) -> None:
        """The operator Deployment of the kustomize overlay, given the run's CA for TLS metrics (and, in a
        mesh, its mesh arguments and client certificate), rolled out.

        The reference operator reads no Secrets (its RBAC has none), so the CA reaches it as a mounted
        Secret `metrics-ca` (the name the suites' caSecretRef uses) and `--metrics-ca` pointing at it; the
        mesh client certificate likewise as Secret `agn-operator-mesh-client`. The patch is computed from
        the Deployment as this run first found it, which `restore_operators` puts back.
        """
        deployment = self.kubectl_json(site, "--namespace", NAMESPACE, "get", "deployment", OPERATOR_DEPLOYMENT,
                                       "--ignore-not-found")
        if deployment is None:
            raise OperatorUnsupported(f"site {site.spec.name} has no Deployment {NAMESPACE}/{OPERATOR_DEPLOYMENT} "
                                      "(the kustomize overlay leaves the operator out)")
        original = self._operators.setdefault(site.name, deployment)
        secret_docs = [_secret(METRICS_CA_SECRET, {"ca.crt": self.pki.ca_path.read_bytes()}, self._labels())]
        mesh_args: list[str] | None = None
        client: dict[str, bytes] = {}
        if mesh is not None:
            client = {name: Path(mesh[key]).read_bytes() for key, name in MESH_CLIENT_FILES.items() if mesh.get(key)}
            if client:
                secret_docs.append(_secret(MESH_CLIENT_SECRET, client, self._labels()))
            mesh_args = self.render_mesh_args(mesh)
        self.apply_json(site, secret_docs)
        # The advertised address is the first node's: the pod must run there (a NodePort with
        # externalTrafficPolicy Local answers only on the node of its pod). One node on kind.
        node = self.nodes(site)[0][0] if mesh is not None else None
        patch = _operator_patch(original, mesh_args, mesh_client=bool(client), node=node)
        if patch is not None:
            self._changed_operators.add(site.name)
            self.kubectl(site, "--namespace", NAMESPACE, "patch", "deployment", OPERATOR_DEPLOYMENT, "--type",
                         "strategic", "-p", json.dumps(patch))
        self.await_rollout(site, OPERATOR_DEPLOYMENT, "the operator")

    def render_mesh_args(self, mesh: Mapping[str, str]) -> list[str]:
        """The descriptor's `operator.mesh_args` rendered for the pod: the client certificate and key at the
        mounted Secret's paths instead of the run's files, the other operator placeholders in-pod values."""
        values = {"python": "python", "manifests": POD_SCRATCH_DIR, "out": POD_SCRATCH_DIR,
                  "workdir": POD_SCRATCH_DIR, "metrics_ca": f"{METRICS_CA_DIR}/ca.crt", **dict(mesh)}
        for key, name in MESH_CLIENT_FILES.items():
            if values.get(key):
                values[key] = f"{MESH_CLIENT_DIR}/{name}"
        # only the mesh arguments: the pod's command is the Deployment's, not the local backend's template
        command = dataclasses.replace(self.impl.operator, argv_template=(), env=MappingProxyType({}))
        argv, _env = command.render(Path(POD_SCRATCH_DIR), Path(POD_SCRATCH_DIR), Path(POD_SCRATCH_DIR),
                                    Path(f"{METRICS_CA_DIR}/ca.crt"), values)
        return argv

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
        pods = self.kubectl_json(site, "--namespace", NAMESPACE, "get", "pods", "-l", OPERATOR_SELECTOR) or {}
        return [p for p in pods.get("items") or [] if isinstance(p, dict)]

    def stop_operator(self, site: SiteCluster, timeout: float = 120.0) -> None:
        """Scale the operator to zero (SIGTERM: it leaves the mesh gracefully) and wait until no pod is left."""
        if site.name not in self._operators:  # what restore_operators gives back
            found = self.kubectl_json(site, "--namespace", NAMESPACE, "get", "deployment", OPERATOR_DEPLOYMENT,
                                      "--ignore-not-found")
            if found is not None:
                self._operators[site.name] = found
        self._changed_operators.add(site.name)
        self.kubectl(site, "--namespace", NAMESPACE, "scale", f"deployment/{OPERATOR_DEPLOYMENT}", "--replicas=0")
        poll_until(lambda: [(p.get("metadata") or {}).get("name") for p in self.operator_pods(site)],
                   lambda names: not names, what=f"site {site.spec.name}: the operator's pods to be gone",
                   timeout=timeout, interval=0.25, max_interval=1.0)

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
        replicas it had before (one merge patch each: lists are replaced whole, an absent key removed)."""
        errors: list[str] = []
        for site in self.sites:
            original = self._operators.get(site.name)
            if site.name not in self._changed_operators or original is None:
                continue
            try:
                self.kubectl(site, "--namespace", NAMESPACE, "patch", "deployment", OPERATOR_DEPLOYMENT, "--type",
                             "merge", "-p", json.dumps(_restore_patch(original)))
            except CommandFailed as exc:
                errors.append(f"{site.spec.name}: {exc}")
                continue
            self._changed_operators.discard(site.name)
        if errors:
            raise RuntimeError("could not restore the operator Deployment of " + "; ".join(errors))

    # ------------------------------------------------------------------------ gateways

    def allocate_gateway(self, site_index: int) -> tuple[str, str, Path]:
        """Pod addresses for the config; the work directory keeps the rendered files and the local overlay."""
        self._gateway_count += 1
        workdir = self.workdir / f"gateway-{self._gateway_count}"
        workdir.mkdir(parents=True, exist_ok=True)
        self._gateway_sites[workdir] = self.sites[site_index]
        return f"0.0.0.0:{GATEWAY_PORT}", f"0.0.0.0:{ADMIN_PORT}", workdir

    def follow_configmap(self, namespace: str, name: str, scope: ScopeSpec) -> Path:
        """A local directory standing for a gateway pod's overlay emptyDir fed by overlay-sync from a ConfigMap.

        The next gateway started on it (`start_gateway(..., overlay_dir=<it>)`, however the Grid renders
        its config) gets an overlay-sync container on `--configmap NAMESPACE/NAME`; `overlay_sync(dir)`
        then returns that container's handle.
        """
        self._follow_count += 1
        overlay_dir = self.workdir / f"overlay-sync-{self._follow_count}" / "overlay"
        overlay_dir.mkdir(parents=True, exist_ok=True)
        self._follows[overlay_dir] = FollowedConfigMap(namespace, name, scope)
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
        pod = _GatewayPod(kname, mode, follow, listen_port, admin_port, nodeport=scheme == "https")
        docs = self._gateway_docs(pod, config, seed, files, dict(env or {}))
        manifest = workdir / "kube.yaml"
        manifest.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] != "Secret"], sort_keys=False))
        self.apply_json(site, [d for d in docs if d["kind"] == "Secret"])
        self.kubectl(site, "apply", "-f", str(manifest))
        started: list[ManagedProcess] = []
        try:
            self._wait_pod(site, kname, name, float(self.impl.gateway.startup_timeout_s) + 60)
            ports = [listen_port, admin_port] + ([SYNC_ADMIN_PORT] if mode == "follow" else [])
            local = self.forward(site, f"deployment/{kname}", ports, kname)
            forward = self._forwards.pop(kname)
            started.append(forward)
            handle = self.runner.spawn(self.supervisor, f"logs-{name}-{kname}",
                                       ["kubectl", *site.kubectl_args, "--namespace", NAMESPACE, "logs", "-f",
                                        f"deployment/{kname}", "-c", "gateway"])
            started.append(handle)
            proc = GatewayProcess(name, f"127.0.0.1:{local[listen_port]}", f"127.0.0.1:{local[admin_port]}",
                                  config_path, overlay_dir, handle, scheme)
            try:
                _wait_http(f"{proc.admin_url}/ready", f"gateway {name} /ready",
                           float(self.impl.gateway.startup_timeout_s) + 30)
            except WaitTimeout as exc:
                raise GatewayStartFailed(str(exc), None, self.logs(site, kname)) from None
            peer = self._record_peer(site, kname, proc.listen, listen_port) if pod.nodeport else None
        except BaseException:
            for process in started:
                self.supervisor.stop(process)
            self._delete_gateway(site, kname)
            raise
        self._gateways[id(handle)] = _KubeGateway(site, kname, overlay_dir, handle, forward, mode, peer)
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

    def _record_peer(self, site: SiteCluster, kname: str, host_address: str, port: int) -> str:
        """Note how pods reach this gateway: its Service in its cluster, its node's NodePort from others."""
        service = self.kubectl_json(site, "--namespace", NAMESPACE, "get", "service", kname) or {}
        node_port = next((p.get("nodePort") for p in (service.get("spec") or {}).get("ports") or []
                          if p.get("port") == port), None)
        if node_port is None:
            raise GatewayStartFailed(f"Service {kname} has no NodePort for port {port}", None, json.dumps(service))
        self._peers[host_address] = _Peer(site, f"{kname}.{NAMESPACE}.svc.cluster.local:{port}",
                                          f"{self.node_address(site)}:{node_port}")
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

    def _gateway_docs(self, pod: _GatewayPod, config: str, seed: bytes | None, files: dict[str, bytes],
                      env: dict[str, str]) -> list[dict[str, Any]]:
        kname = pod.kname
        labels = self._labels(**{GATEWAY_LABEL: kname, "app.kubernetes.io/name": kname})
        command = ["agn-gateway", "-c", "/etc/praxis/praxis.yaml"]
        if pod.mode == "follow":
            # overlay-sync and the gateway start together; the gateway waits for the first delivery, as
            # connect() starts it only after one on the local backend (then starts anyway and says why)
            wait = (f'i=0; while [ ! -e "$0" ] && [ "$i" -lt {FIRST_DELIVERY_SECONDS * 10} ]; do sleep 0.1; '
                    'i=$((i+1)); done; exec "$@"')
            command = ["sh", "-c", wait, f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}", *command]
        gateway: dict[str, Any] = {
            "name": "gateway", "image": self.image, "imagePullPolicy": "IfNotPresent", "command": command,
            "envFrom": [{"secretRef": {"name": f"{kname}-env"}}],
            "ports": [{"containerPort": pod.listen_port, "name": "listen"},
                      {"containerPort": pod.admin_port, "name": "admin"}],
            "readinessProbe": {"httpGet": {"path": "/ready", "port": pod.admin_port}, "periodSeconds": 1},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/praxis", "readOnly": True},
                             {"name": "files", "mountPath": POD_FILES_DIR, "readOnly": True}]}
        containers = [gateway]
        init: list[dict[str, Any]] = []
        volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": f"{kname}-config"}},
                                         {"name": "files", "secret": {"secretName": f"{kname}-files"}}]
        docs = [_configmap(f"{kname}-config", {"praxis.yaml": config}, labels)]
        if pod.mode != "none":
            gateway["volumeMounts"].append({"name": "overlay", "mountPath": POD_OVERLAY_DIR, "readOnly": True})
            volumes.append({"name": "overlay", "emptyDir": {}})
        if pod.mode == "mirror":
            writer = {"name": "overlay-writer", "image": self.image, "imagePullPolicy": "IfNotPresent",
                      "command": ["python", "-c", _IDLE],
                      "volumeMounts": [{"name": "overlay", "mountPath": POD_OVERLAY_DIR}]}
            init.append({"name": "overlay-seed", "image": self.image, "imagePullPolicy": "IfNotPresent",
                         "command": ["python", "-c", _SEED_OVERLAY, POD_OVERLAY_DIR, OVERLAY_KEY,
                                     f"{POD_SEED_DIR}/{OVERLAY_KEY}"],
                         "volumeMounts": [{"name": "overlay", "mountPath": POD_OVERLAY_DIR},
                                          {"name": "seed", "mountPath": POD_SEED_DIR, "readOnly": True}]})
            containers.insert(0, writer)
            volumes.append({"name": "seed", "configMap": {"name": f"{kname}-overlay"}})
            seed_doc = _configmap(f"{kname}-overlay", {}, labels)
            if seed is not None:
                seed_doc["binaryData"] = {OVERLAY_KEY: base64.b64encode(seed).decode()}
            docs.append(seed_doc)
        elif pod.mode == "follow" and pod.follow is not None:
            scope = ",".join(f"{key}={value}" for key, value in pod.follow.scope.as_dict().items())
            sync = {"name": "overlay-sync", "image": self.image, "imagePullPolicy": "IfNotPresent",
                    "command": ["agn-overlay-sync", "--configmap", f"{pod.follow.namespace}/{pod.follow.name}",
                                "--target-dir", POD_OVERLAY_DIR, "--expected-scope", scope,
                                "--admin", f"0.0.0.0:{SYNC_ADMIN_PORT}"],
                    "ports": [{"containerPort": SYNC_ADMIN_PORT, "name": "sync-admin"}],
                    "volumeMounts": [{"name": "overlay", "mountPath": POD_OVERLAY_DIR}]}
            containers.insert(0, sync)
        deployment = _deployment(kname, labels, containers, volumes, service_account="agn-gateway")
        if init:
            deployment["spec"]["template"]["spec"]["initContainers"] = init
        docs += [_secret(f"{kname}-files", files, labels),
                 _secret(f"{kname}-env", {k: v.encode() for k, v in env.items()}, labels),
                 deployment]
        if pod.nodeport:
            service = _service(kname, labels, [{"name": "listen", "port": pod.listen_port,
                                                "targetPort": pod.listen_port}])
            service["spec"]["type"] = "NodePort"
            docs.append(service)
        return docs

    def write_pod_overlay(self, site: SiteCluster, kname: str, data: bytes) -> None:
        """Project `data` into a mirrored gateway pod's overlay directory (through its writer container)."""
        self.kubectl(site, "--namespace", NAMESPACE, "exec", "-i", f"deployment/{kname}", "-c", "overlay-writer",
                     "--", "python", "-c", _WRITE_OVERLAY, POD_OVERLAY_DIR, OVERLAY_KEY,
                     input=base64.b64encode(data).decode(), timeout=60)

    def _read_pod_overlay(self, site: SiteCluster, kname: str) -> bytes | None:
        result = self.runner.run(["kubectl", *site.kubectl_args, "--namespace", NAMESPACE, "exec",
                                  f"deployment/{kname}", "-c", "overlay-sync", "--", "cat",
                                  f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}"], check=False, timeout=60)
        return result.stdout.encode() if result.returncode == 0 else None

    def await_rollout(self, site: SiteCluster, deployment: str, what: str) -> None:
        """Wait for a Deployment's rollout; BackendUnavailable with its logs when it never completes."""
        try:
            self.kubectl(site, "--namespace", NAMESPACE, "rollout", "status", f"deployment/{deployment}",
                         f"--timeout={int(self.ready_timeout)}s", timeout=self.ready_timeout + 30)
        except CommandFailed as exc:
            raise BackendUnavailable(f"site {site.spec.name}: {what} did not roll out: {exc}\n"
                                     f"{self.logs(site, deployment)}") from None

    # ------------------------------------------------------------------------ diagnostics

    def logs(self, site: SiteCluster, deployment: str, tail: int = 200, *, container: str | None = None,
             previous: bool = False) -> str:
        which = ["-c", container] if container else ["--all-containers"]
        return self.kubectl(site, "--namespace", NAMESPACE, "logs", f"deployment/{deployment}", *which,
                            f"--tail={tail}", *(["--previous"] if previous else []), check=False, timeout=60)

    def collect_logs(self, site: SiteCluster | None = None) -> str:
        """`kubectl logs` of every Deployment in the namespace of one site (or all), also saved to logs/."""
        parts: list[str] = []
        for cluster in [site] if site is not None else self.sites:
            names = self.kubectl(cluster, "--namespace", NAMESPACE, "get", "deployments", "-o", "name",
                                 check=False, timeout=60).split()
            text = "\n".join(f"=== {cluster.spec.name} {n}\n{self.logs(cluster, n.split('/')[-1])}" for n in names)
            out = self.workdir / "logs" / f"kube-{cluster.spec.name}.log"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            parts.append(text)
        return "\n".join(parts)


@dataclass(frozen=True)
class _GatewayPod:
    kname: str
    mode: str
    follow: FollowedConfigMap | None
    listen_port: int
    admin_port: int
    nodeport: bool


@dataclass(frozen=True)
class PodState:
    """What a gateway pod's status says: "pending", "ready" or "failed" (with the exit code when one exited)."""

    phase: str
    exit_code: int | None = None
    detail: str = ""


def pod_state(doc: Mapping[str, Any] | None) -> PodState:
    """Read `kubectl get pods -o json` of one gateway's pods: ready, failed (why, exit code) or pending."""
    pods = [p for p in (doc or {}).get("items") or [] if isinstance(p, dict)]
    if not pods:
        return PodState("pending", detail="no pod yet")
    seen: list[str] = []
    for pod in pods:
        status = pod.get("status") or {}
        inits = status.get("initContainerStatuses") or []
        apps = status.get("containerStatuses") or []
        for container in [*inits, *apps]:
            name = container.get("name")
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in _STUCK_REASONS:
                return PodState("failed", None, f"container {name} cannot start: {waiting.get('reason')}: "
                                                f"{waiting.get('message', '')}".strip())
            for key in ("state", "lastState"):
                ended = (container.get(key) or {}).get("terminated")
                if not ended:
                    continue
                code = ended.get("exitCode")
                if container in inits and code == 0:
                    continue
                return PodState("failed", code if isinstance(code, int) else None,
                                f"container {name} exited with {code} ({ended.get('reason', 'Error')})")
        if apps and all(c.get("ready") for c in apps):
            return PodState("ready")
        seen.append(f"{(pod.get('metadata') or {}).get('name')}: {status.get('phase')} "
                    f"ready={[c.get('name') for c in apps if c.get('ready')]}")
    return PodState("pending", detail="; ".join(seen))


def _operator_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's container in a pod spec: the one running agn-operator, else the first."""
    containers = pod.get("containers") or []
    operator = next((c for c in containers if "agn-operator" in (c.get("command") or [])[:1]),
                    containers[0] if containers else None)
    if operator is None:
        raise OperatorUnsupported(f"Deployment {OPERATOR_DEPLOYMENT} has no containers")
    return dict(operator)


def _operator_patch(deployment: Mapping[str, Any], mesh_args: Sequence[str] | None = None, *,
                    mesh_client: bool = False, node: str | None = None) -> dict[str, Any] | None:
    """A strategic merge patch of the operator container (None: nothing to change).

    It mounts Secret metrics-ca and passes --metrics-ca (unless the command has it), then appends
    `mesh_args` and mounts the mesh client Secret, and with `node` pins the pod to that node (by its
    `kubernetes.io/hostname` label), whose address the mesh arguments advertise. The command list is
    replaced whole by the patch; volumes and mounts merge by name and mount path.
    """
    operator = _operator_container(((deployment.get("spec") or {}).get("template") or {}).get("spec") or {})
    command = list(operator.get("command") or [])
    if not command:
        raise OperatorUnsupported(f"Deployment {OPERATOR_DEPLOYMENT}: container {operator.get('name')} sets no "
                                  "command to add --metrics-ca to")
    wanted = list(command)
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if "--metrics-ca" not in command:
        wanted += ["--metrics-ca", f"{METRICS_CA_DIR}/ca.crt"]
        volumes.append({"name": "metrics-ca", "secret": {"secretName": METRICS_CA_SECRET}})
        mounts.append({"name": "metrics-ca", "mountPath": METRICS_CA_DIR, "readOnly": True})
    if mesh_args is not None:
        wanted += list(mesh_args)
        if mesh_client:
            volumes.append({"name": "mesh-client", "secret": {"secretName": MESH_CLIENT_SECRET}})
            mounts.append({"name": "mesh-client", "mountPath": MESH_CLIENT_DIR, "readOnly": True})
    pod_spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector = {**(pod_spec.get("nodeSelector") or {}), "kubernetes.io/hostname": node} if node else None
    if wanted == command and not volumes and (selector is None or selector == pod_spec.get("nodeSelector")):
        return None
    container: dict[str, Any] = {"name": operator["name"], "command": wanted}
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {"containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    if selector is not None:
        pod["nodeSelector"] = selector
    return {"spec": {"template": {"spec": pod}}}


def _restore_patch(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch giving a Deployment back its replicas, containers and volumes as they were."""
    spec = deployment.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    return {"spec": {"replicas": spec.get("replicas", 1),
                     "template": {"spec": {"containers": pod.get("containers") or [],
                                           "volumes": pod.get("volumes"),
                                           "nodeSelector": pod.get("nodeSelector")}}}}


class OverlayMirror:
    """Copies each mirrored gateway's local overlay file, byte for byte, into its pod's overlay directory."""

    def __init__(self, backend: KubeBackend, interval: float = 0.05) -> None:
        self.backend = backend
        self.interval = interval
        self._watched: dict[Path, tuple[SiteCluster, str, bytes | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, site: SiteCluster, kname: str, overlay_dir: Path, current: bytes | None) -> None:
        with self._lock:
            self._watched[overlay_dir] = (site, kname, current)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="overlay-mirror", daemon=True)
            self._thread.start()

    def forget(self, overlay_dir: Path) -> None:
        with self._lock:
            self._watched.pop(overlay_dir, None)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def sync_once(self) -> None:
        with self._lock:
            items = list(self._watched.items())
        for overlay_dir, (site, kname, last) in items:
            try:
                data = (overlay_dir / OVERLAY_KEY).read_bytes()
            except OSError:
                continue
            if data == last:
                continue
            self.backend.write_pod_overlay(site, kname, data)
            with self._lock:
                if overlay_dir in self._watched:
                    self._watched[overlay_dir] = (site, kname, data)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync_once()
            except CommandFailed:
                continue  # retried on the next tick; the suite's wait reports what the gateway serves


class KindBackend(KubeBackend):
    """Creates one kind cluster per site (concurrently), loads the image, installs, deletes what it made."""

    name = "kind"

    def __init__(self, workdir: Path, topology: Topology, impl: Any, **kwargs: Any) -> None:
        super().__init__(workdir, topology, impl, **kwargs)
        self.clusters: dict[str, _KindCluster] = {}
        self._claimed: set[tuple[str, int]] = set()
        self._cuts: list[tuple[str, str]] = []  # (node container, source address) of each DROP rule in place

    def cluster_name(self, site: SiteSpec) -> str:
        return f"agn-{self.run_id}-{site.name}"

    def prepare(self) -> None:
        """Build the image from the checkout, once per process (not at all when --grid-image names one)."""
        if self.image_given:
            return
        with _BUILD_LOCK:
            if (str(self.root), self.image) in _BUILT_IMAGES:
                return
            self.runner.run(["docker", "build", "-f", str(self.root / "reference" / "Dockerfile"), "-t",
                             self.image, str(self.root)], timeout=1800)
            _BUILT_IMAGES.add((str(self.root), self.image))

    def kind_config(self, site: SiteSpec) -> tuple[Path, dict[int, int]]:
        """This run's copy of clusters/kind/<site>.yaml, named for the run; and its host port mappings.

        A host port another backend of this process already maps (the provider profile's two-site grid
        beside the session's main grid) is replaced by a free one, so both can exist at once.
        """
        source = self.root / "clusters" / "kind" / f"{site.name}.yaml"
        if not source.is_file():
            raise BackendUnavailable(f"no kind cluster config for site {site.name}: {source} is missing")
        config = yaml.safe_load(source.read_text()) or {}
        config["name"] = self.cluster_name(site)
        ports: dict[int, int] = {}
        for node in config.get("nodes") or []:
            for mapping in node.get("extraPortMappings") or []:
                protocol = str(mapping.get("protocol", "TCP")).upper()
                mapping["hostPort"] = self._claim(protocol, int(mapping["hostPort"]),
                                                  str(mapping.get("listenAddress") or "127.0.0.1"))
                if protocol == "TCP":
                    ports[int(mapping["containerPort"])] = int(mapping["hostPort"])
        target = self.workdir / "kube" / site.name / "kind.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target, ports

    def connect(self) -> list[SiteCluster]:
        existing = set(self.runner.run(["kind", "get", "clusters"]).stdout.split())
        clash = [self.cluster_name(s) for s in self.topology.sites if self.cluster_name(s) in existing]
        if clash:
            raise BackendUnavailable(f"kind clusters {', '.join(clash)} already exist; not reusing them")
        sites: list[SiteCluster] = []
        for index, spec in enumerate(self.topology.sites):
            config, ports = self.kind_config(spec)
            kubeconfig = self.workdir / "kube" / spec.name / "kubeconfig"
            kubeconfig.touch()
            cluster = _KindCluster(self.runner, config, kubeconfig)
            self.clusters[cluster.cluster_name] = cluster
            sites.append(SiteCluster(index, spec, cluster.cluster_name, ["--kubeconfig", str(kubeconfig)], ports))
        self.sites = sites
        self._each_site(self._create_and_load)
        return sites

    def _claim(self, protocol: str, port: int, address: str) -> int:
        with _CLAIMED_LOCK:
            if _CLAIMED_PORTS.get((protocol, port), id(self)) != id(self):
                port = _free_port(protocol, address)
            _CLAIMED_PORTS[(protocol, port)] = id(self)
            self._claimed.add((protocol, port))
        return port

    def _create_and_load(self, site: SiteCluster) -> None:
        cluster = self.clusters[site.name]
        cluster.create(timeout=int(self.ready_timeout))
        cluster.load_image(self.image)

    def wait_gateway_ready(self, site: SiteCluster) -> None:
        port = site.host_ports.get(ADMIN_NODEPORT)
        if port is None:
            raise BackendUnavailable(f"kind config of site {site.spec.name} maps no host port to {ADMIN_NODEPORT}")
        try:
            _wait_http(f"http://127.0.0.1:{port}/ready", f"site {site.spec.name} gateway /ready", self.ready_timeout)
        except WaitTimeout as exc:
            raise BackendUnavailable(f"{exc}\n{self.collect_logs(site)}") from None

    # ------------------------------------------------------------------------ the nodes (mesh failures)

    def node_exec(self, node: str, *argv: str) -> str:
        """Run `argv` in a kind node's container (where containerd, crictl and iptables live)."""
        return self.runner.run(["docker", "exec", node, *argv], timeout=60).stdout

    def suspend_operator(self, site: SiteCluster) -> None:
        """SIGSTOP the operator's process from its node: it stops answering and gossiping without a goodbye,
        while its pod and Deployment stay as they are (nothing restarts it)."""
        pods = [p for p in self.operator_pods(site) if not (p.get("metadata") or {}).get("deletionTimestamp")]
        if len(pods) != 1:
            raise BackendUnavailable(f"site {site.spec.name}: expected one operator pod, found {len(pods)}")
        pod = pods[0]
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        container = _operator_container(pod.get("spec") or {}).get("name")
        name = (pod.get("metadata") or {}).get("name")
        if not node or not container or not name:
            raise BackendUnavailable(f"site {site.spec.name}: operator pod {name} has no node or container yet")
        ids = self.node_exec(node, "crictl", "ps", "-q", "--label", f"io.kubernetes.pod.namespace={NAMESPACE}",
                             "--label", f"io.kubernetes.pod.name={name}",
                             "--label", f"io.kubernetes.container.name={container}").split()
        if len(ids) != 1:
            raise BackendUnavailable(f"site {site.spec.name}: crictl on {node} lists {len(ids)} running "
                                     f"containers {container} of pod {name}")
        try:
            pid = int(json.loads(self.node_exec(node, "crictl", "inspect", "-o", "json", ids[0]))["info"]["pid"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BackendUnavailable(f"site {site.spec.name}: crictl inspect {ids[0]} on {node} gives no pid "
                                     f"({exc})") from None
        self.node_exec(node, "sh", "-c", f"kill -STOP {pid}")

    def partition(self, group_a: Iterable[int], group_b: Iterable[int]) -> None:
        """Drop, in the raw table before connection tracking, every packet a node of one group receives from
        a node of the other (both ways: the mesh's UDP and the gateway probes alike)."""
        a, b = [self.sites[i] for i in group_a], [self.sites[i] for i in group_b]
        for one in a:
            for other in b:
                for here, there in ((one, other), (other, one)):
                    for node, _ in self.nodes(here):
                        for _, source in self.nodes(there):
                            if (node, source) not in self._cuts:
                                self.node_exec(node, "iptables", "-t", "raw", "-I", "PREROUTING", "-s", source,
                                               "-j", "DROP")
                                self._cuts.append((node, source))

    def heal(self) -> None:
        """Delete exactly the rules `partition` inserted, newest first."""
        for node, source in list(reversed(self._cuts)):
            self.node_exec(node, "iptables", "-t", "raw", "-D", "PREROUTING", "-s", source, "-j", "DROP")
            self._cuts.remove((node, source))

    def close(self) -> None:
        """Delete exactly the clusters this run created (all of them are kept with --grid-keep)."""
        super().close()
        with _CLAIMED_LOCK:
            for claim in self._claimed:
                _CLAIMED_PORTS.pop(claim, None)
            self._claimed.clear()
        if self.keep:
            for name, cluster in self.clusters.items():
                print(f"\nagn-conformance: kept kind cluster {name} (kubeconfig {cluster.kubeconfig})")
            return
        errors: list[str] = []
        for name, cluster in self.clusters.items():
            try:
                cluster.delete()
            except CommandFailed as exc:
                errors.append(f"{name}: {exc}")
        if errors:
            raise RuntimeError("could not delete kind clusters: " + "; ".join(errors))


def _wait_http(url: str, what: str, timeout: float) -> None:
    poll_until(lambda: http_get.get(url, timeout=2.0).status_code, lambda s: s == 200, what=f"{what} to answer 200",
               timeout=timeout, interval=0.1, max_interval=1.0)


def _free_port(protocol: str, address: str) -> int:
    """A port nothing listens on at `address` right now (the kernel's pick)."""
    kind = socket.SOCK_DGRAM if protocol == "UDP" else socket.SOCK_STREAM
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind((address if address != "0.0.0.0" else "127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _meta(name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": dict(labels)}


def _configmap(name: str, data: Mapping[str, str], labels: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(name, labels), "data": dict(data)}


def _secret(name: str, data: Mapping[str, bytes], labels: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": _meta(name, labels),
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def _deployment(name: str, labels: Mapping[str, str], containers: list[dict[str, Any]],
                volumes: list[dict[str, Any]], service_account: str | None = None) -> dict[str, Any]:
    selector = {"app.kubernetes.io/name": name}
    pod: dict[str, Any] = {"containers": containers,
                           "securityContext": {"runAsNonRoot": True, "runAsUser": 10001}}
    if volumes:
        pod["volumes"] = volumes
    if service_account:
        pod["serviceAccountName"] = service_account
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, labels),
            "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": {**dict(labels), **selector}}, "spec": pod}}}


def _service(name: str, labels: Mapping[str, str], ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, labels),
            "spec": {"selector": {"app.kubernetes.io/name": name}, "ports": ports}}


__all__ = ["DEFAULT_IMAGE", "BackendUnavailable", "FollowedConfigMap", "KindBackend", "KubeBackend", "KubeOverlaySync",
           "KubeProvider", "PodState", "SiteCluster", "pod_state", "preflight_kind"]
