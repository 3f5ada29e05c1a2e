"""The kind backend: one kind cluster per site, the project's image loaded into each, components in-cluster.

The Grid facade talks to this backend exactly as to the local one. Fake backends and gateways run as
Deployments; the harness reaches them through `kubectl port-forward` (on-demand gateways, fake backends)
or the kind port mappings (each site's standing gateway). An overlay a suite writes into a gateway's
local overlay directory is mirrored into the ConfigMap that gateway's overlay-sync sidecar watches.
The operator, overlay-sync chains and TLS metrics endpoints of the producer profile stay host processes,
as on the local backend. Every external command goes through one `Runner`.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from pytest_kubernetes.options import ClusterOptions
from pytest_kubernetes.providers.kind import KindManagerBase

from harness.addresses import AddressPlan
from harness.backends.local import (
    GatewayProcess,
    GatewayStartFailed,
    LocalBackend,
    OperatorUnsupported,
    ProviderProcess,
)
from harness.backends.runner import CommandFailed, Runner
from harness.contract import ScopeSpec
from harness.control import OverlaySyncProcess
from harness.gateway_config import VARIANTS, ListenerTls, render_gateway_config, render_provider_gateway_config
from harness.pki import GridPKI
from harness.process import ManagedProcess, Supervisor
from harness.topology import SiteSpec, Topology
from harness.waiting import WaitTimeout, poll_until

NAMESPACE = "agn-system"
DEFAULT_IMAGE = "agn-conformance/reference:dev"
OVERLAY_KEY = "routing-overlay.json"
POD_OVERLAY_DIR = "/var/run/agn/overlay"
POD_FILES_DIR = "/var/run/agn/files"
GATEWAY_PORT = 8080
ADMIN_PORT = 9901
FAKE_PORT = 8000
GATEWAY_NODEPORT = 30080
ADMIN_NODEPORT = 30901
FIELD_MANAGER = "agn-conformance"
RUN_LABEL = "agn.grid/run"
GATEWAY_LABEL = "agn.grid/gateway"
_FORWARD_LINE = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")


class BackendUnavailable(RuntimeError):
    """A tool the backend needs is missing or not working; the message names it."""


@dataclass
class KubeProvider(ProviderProcess):
    """A fake backend in a cluster: `address` is its in-cluster Service, `url` the host's forwarded port."""

    host_url: str = ""

    @property
    def url(self) -> str:
        return self.host_url


@dataclass
class SiteCluster:
    """One site's cluster and how kubectl reaches it."""

    index: int
    spec: SiteSpec
    name: str
    kubectl_args: list[str]
    host_ports: dict[int, int] = field(default_factory=dict)


@dataclass
class _KubeGateway:
    site: SiteCluster
    name: str
    overlay_dir: Path
    forward: ManagedProcess


def repo_root() -> Path:
    """The checkout holding reference/Dockerfile, manifests/ and clusters/kind/."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "manifests").is_dir() else Path.cwd()


def missing_tools(runner: Runner, tools: Sequence[str]) -> list[str]:
    return [tool for tool in tools if runner.which(tool) is None]


def preflight_kind(runner: Runner) -> str | None:
    """Why the kind backend cannot run here (None: it can)."""
    missing = missing_tools(runner, ("docker", "kind", "kubectl"))
    if missing:
        return f"the kind backend needs {', '.join(missing)} on PATH (not found)"
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
        self.run_id = run_id or secrets.token_hex(3)
        self.ready_timeout = ready_timeout
        self.supervisor = supervisor or Supervisor(workdir / "logs")
        self.plan = plan or AddressPlan(seed=seed)
        # host-side pieces (operator, overlay-sync chains, TLS metrics) run as on the local backend
        self._host = LocalBackend(workdir, self.supervisor, self.plan, impl, seed)
        self.sites: list[SiteCluster] = []
        self._gateway_sites: dict[Path, SiteCluster] = {}
        self._gateways: dict[int, _KubeGateway] = {}
        self._forwards: dict[str, ManagedProcess] = {}
        self._mirror = OverlayMirror(self)

    # ------------------------------------------------------------------------ lifecycle

    @property
    def pki(self) -> GridPKI:
        return self._host.pki

    def kubectl(self, site: SiteCluster, *args: str, input: str | None = None, check: bool = True,
                timeout: float | None = 600.0) -> str:
        return self.runner.run(["kubectl", *site.kubectl_args, *args], input=input, check=check,
                               timeout=timeout).stdout

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
        """Stop mirroring and port-forwards; subclasses then remove what they made."""
        self._mirror.stop()
        for gateway in list(self._gateways.values()):
            self.supervisor.stop(gateway.forward)
        self._gateways.clear()

    # ------------------------------------------------------------------------ rendering

    def _site_dir(self, site: SiteCluster) -> Path:
        path = self.workdir / "kube" / site.spec.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _labels(self, **extra: str) -> dict[str, str]:
        return {RUN_LABEL: self.run_id, **extra}

    def fake_address(self, provider: str) -> str:
        return f"agn-fake-{provider}.{NAMESPACE}.svc.cluster.local:{FAKE_PORT}"

    def render_site(self, site: SiteCluster) -> Path:
        """The site's ConfigMaps, Secrets and fake backends as one file for `kubectl apply -f`."""
        spec = site.spec
        clusters = {p.cluster: self.fake_address(p.name) for p in spec.providers}
        model = [p.cluster for p in spec.model_providers]
        management = next((p.cluster for p in spec.providers if p.role == "management"), None)
        scope = ScopeSpec(self.topology.network, spec.gateway, spec.namespace, spec.name)
        gateway_config = render_gateway_config(
            VARIANTS["core"], listen=f"0.0.0.0:{GATEWAY_PORT}", admin=f"0.0.0.0:{ADMIN_PORT}",
            overlay_file=f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}", scope=scope, clusters=clusters, hop_clusters=model,
            management_cluster=management, allowlist=model)
        sni = f"{spec.provider_gateway or 'provider-gateway'}.{spec.name}.grid.test"
        server = self.pki.server(f"kube-{spec.name}-provider-gateway", sni,
                                 f"agn-provider-gateway.{NAMESPACE}.svc")
        provider_config = render_provider_gateway_config(
            listen="0.0.0.0:8443", admin=f"0.0.0.0:{ADMIN_PORT}",
            tls=ListenerTls("/etc/praxis/tls/tls.crt", "/etc/praxis/tls/tls.key", "/etc/praxis/tls/ca.crt"),
            trusted_peers=None, provider_id=f"{spec.name}-{spec.provider_gateway or 'provider-gateway'}",
            routes=(), credentials=(), clusters=clusters)
        docs: list[dict[str, Any]] = [
            _configmap("agn-gateway-config", {"praxis.yaml": gateway_config}, self._labels()),
            _configmap("agn-provider-gateway-config", {"praxis.yaml": provider_config}, self._labels()),
            _secret("agn-provider-gateway-tls", {"tls.crt": server.cert.read_bytes(),
                                                 "tls.key": server.key.read_bytes(),
                                                 "ca.crt": self.pki.ca_path.read_bytes()}, self._labels()),
            _secret("agn-provider-credentials", {}, self._labels()),
        ]
        for provider in spec.providers:
            docs += self._fake_backend(provider.name, provider.site)
        path = self._site_dir(site) / "site.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return path

    def _fake_backend(self, name: str, site: str) -> list[dict[str, Any]]:
        labels = self._labels(**{"app.kubernetes.io/name": f"agn-fake-{name}"})
        container = {"name": "fake-backend", "image": self.image, "imagePullPolicy": "IfNotPresent",
                     "command": ["agn-fake-backend", "--name", name, "--site", site,
                                 "--listen", f"0.0.0.0:{FAKE_PORT}"],
                     "ports": [{"containerPort": FAKE_PORT, "name": "http"}],
                     "readinessProbe": {"httpGet": {"path": "/admin/stats", "port": FAKE_PORT},
                                        "periodSeconds": 1}}
        return [_deployment(f"agn-fake-{name}", labels, [container], []),
                _service(f"agn-fake-{name}", labels, [{"name": "http", "port": FAKE_PORT, "targetPort": FAKE_PORT}])]

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
            started[spec.name] = KubeProvider(spec, self.fake_address(spec.name), proc,
                                              host_url=f"http://127.0.0.1:{ports[FAKE_PORT]}")
        for provider in started.values():
            _wait_http(f"{provider.url}/admin/stats", f"fake backend {provider.spec.name}", 60)
        return started

    def start_tls_metrics(self, site_index: int, site: SiteSpec) -> ProviderProcess:
        return self._host.start_tls_metrics(site_index, site)

    def start_operator(self, site_index: int, name: str,
                       mesh: Mapping[str, str] | None = None) -> tuple[ManagedProcess, Path, Path]:
        if mesh is not None:
            raise OperatorUnsupported("the mesh profile runs on the local backend only in this release")
        return self._host.start_operator(site_index, name)

    def start_overlay_sync(self, site_index: int, configmap_file: Path, scope: ScopeSpec) -> OverlaySyncProcess:
        return self._host.start_overlay_sync(site_index, configmap_file, scope)

    def allocate_gateway(self, site_index: int) -> tuple[str, str, Path]:
        """Pod addresses for the config; the work directory keeps the rendered files and the local overlay."""
        self._host._gateway_count += 1
        workdir = self.workdir / f"gateway-{self._host._gateway_count}"
        workdir.mkdir(parents=True, exist_ok=True)
        self._gateway_sites[workdir] = self.sites[site_index]
        return f"0.0.0.0:{GATEWAY_PORT}", f"0.0.0.0:{ADMIN_PORT}", workdir

    def start_gateway(self, name: str, listen: str, admin: str, workdir: Path, config_text: str,
                      overlay_dir: Path, *, env: Mapping[str, str] | None = None,
                      scheme: str = "http") -> GatewayProcess:
        """Deploy one gateway pod (overlay-sync + gateway), forward its ports, wait for /ready."""
        site = self._gateway_sites[workdir]
        kname = f"agn-gw-{workdir.name.rsplit('-', 1)[-1]}"
        config = config_text.replace(str(overlay_dir / OVERLAY_KEY), f"{POD_OVERLAY_DIR}/{OVERLAY_KEY}")
        config, files = self._pod_files(config)
        config_path = workdir / "praxis.yaml"
        config_path.write_text(config)
        overlay_file = overlay_dir / OVERLAY_KEY
        overlay = overlay_file.read_text() if overlay_file.is_file() else None
        listen_port, admin_port = int(listen.rsplit(":", 1)[1]), int(admin.rsplit(":", 1)[1])
        manifest = workdir / "kube.yaml"
        manifest.write_text(yaml.safe_dump_all(
            self._gateway_docs(kname, config, overlay, files, dict(env or {}), listen_port, admin_port),
            sort_keys=False))
        self.kubectl(site, "apply", "-f", str(manifest))
        try:
            self.kubectl(site, "--namespace", NAMESPACE, "rollout", "status", f"deployment/{kname}",
                         f"--timeout={int(self.impl.gateway.startup_timeout_s) + 60}s")
        except CommandFailed as exc:
            logs = self.logs(site, kname)
            raise GatewayStartFailed(f"gateway {name} ({kname}) did not roll out: {exc}", None, logs) from None
        ports = self.forward(site, f"deployment/{kname}", [listen_port, admin_port], kname)
        forward = self._forwards[kname]
        proc = GatewayProcess(name, f"127.0.0.1:{ports[listen_port]}", f"127.0.0.1:{ports[admin_port]}",
                              config_path, overlay_dir, forward, scheme)
        try:
            _wait_http(f"{proc.admin_url}/ready", f"gateway {name} /ready",
                       float(self.impl.gateway.startup_timeout_s) + 30)
        except WaitTimeout as exc:
            self.supervisor.stop(forward)
            raise GatewayStartFailed(str(exc), None, self.logs(site, kname)) from None
        self._gateways[id(forward)] = _KubeGateway(site, kname, overlay_dir, forward)
        self._mirror.watch(site, f"{kname}-overlay", overlay_dir, overlay)
        return proc

    def stop(self, process: ManagedProcess) -> int | None:
        """Stop a host process, or remove an in-cluster gateway (its port-forward is the handle)."""
        gateway = self._gateways.pop(id(process), None)
        if gateway is None:
            return self._host.stop(process)
        self._mirror.forget(gateway.overlay_dir)
        self.supervisor.stop(process)
        self.kubectl(gateway.site, "--namespace", NAMESPACE, "delete", "deployment,configmap,secret",
                     "-l", f"{GATEWAY_LABEL}={gateway.name}", "--ignore-not-found", "--wait=false", check=False)
        return 0

    def _pod_files(self, config: str) -> tuple[str, dict[str, bytes]]:
        """Local files the config names (certificates, credential files) become keys of a mounted Secret."""
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

    def _gateway_docs(self, kname: str, config: str, overlay: str | None, files: dict[str, bytes],
                      env: dict[str, str], listen_port: int, admin_port: int) -> list[dict[str, Any]]:
        labels = self._labels(**{GATEWAY_LABEL: kname, "app.kubernetes.io/name": kname})
        sync = {"name": "overlay-sync", "image": self.image, "imagePullPolicy": "IfNotPresent",
                "command": ["agn-overlay-sync", "--configmap", f"{NAMESPACE}/{kname}-overlay",
                            "--target-dir", POD_OVERLAY_DIR, "--admin", "0.0.0.0:9102"],
                "volumeMounts": [{"name": "overlay", "mountPath": POD_OVERLAY_DIR}]}
        gateway = {"name": "gateway", "image": self.image, "imagePullPolicy": "IfNotPresent",
                   "command": ["agn-gateway", "-c", "/etc/praxis/praxis.yaml"],
                   "envFrom": [{"secretRef": {"name": f"{kname}-env"}}],
                   "ports": [{"containerPort": listen_port, "name": "listen"},
                             {"containerPort": admin_port, "name": "admin"}],
                   "readinessProbe": {"httpGet": {"path": "/ready", "port": admin_port}, "periodSeconds": 1},
                   "volumeMounts": [{"name": "overlay", "mountPath": POD_OVERLAY_DIR, "readOnly": True},
                                    {"name": "config", "mountPath": "/etc/praxis", "readOnly": True},
                                    {"name": "files", "mountPath": POD_FILES_DIR, "readOnly": True}]}
        volumes = [{"name": "overlay", "emptyDir": {}},
                   {"name": "config", "configMap": {"name": f"{kname}-config"}},
                   {"name": "files", "secret": {"secretName": f"{kname}-files"}}]
        return [_configmap(f"{kname}-config", {"praxis.yaml": config}, labels),
                _configmap(f"{kname}-overlay", {OVERLAY_KEY: overlay} if overlay is not None else {}, labels),
                _secret(f"{kname}-files", files, labels),
                _secret(f"{kname}-env", {k: v.encode() for k, v in env.items()}, labels),
                _deployment(kname, labels, [sync, gateway], volumes, service_account="agn-gateway")]

    # ------------------------------------------------------------------------ diagnostics

    def logs(self, site: SiteCluster, deployment: str, tail: int = 200) -> str:
        return self.kubectl(site, "--namespace", NAMESPACE, "logs", f"deployment/{deployment}", "--all-containers",
                            f"--tail={tail}", check=False, timeout=60)

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


class OverlayMirror:
    """Copies each in-cluster gateway's local overlay file into the ConfigMap its overlay-sync watches."""

    def __init__(self, backend: KubeBackend, interval: float = 0.05) -> None:
        self.backend = backend
        self.interval = interval
        self._watched: dict[Path, tuple[SiteCluster, str, str | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, site: SiteCluster, configmap: str, overlay_dir: Path, current: str | None) -> None:
        with self._lock:
            self._watched[overlay_dir] = (site, configmap, current)
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
        for overlay_dir, (site, configmap, last) in items:
            try:
                text = (overlay_dir / OVERLAY_KEY).read_text()
            except OSError:
                continue
            if text == last:
                continue
            doc = _configmap(configmap, {OVERLAY_KEY: text}, {})
            del doc["metadata"]["labels"]
            self.backend.kubectl(site, "apply", "--server-side", "--force-conflicts", "--field-manager",
                                 FIELD_MANAGER, "-f", "-", input=json.dumps(doc))
            with self._lock:
                if overlay_dir in self._watched:
                    self._watched[overlay_dir] = (site, configmap, text)

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

    def cluster_name(self, site: SiteSpec) -> str:
        return f"agn-{self.run_id}-{site.name}"

    def prepare(self) -> None:
        if not self.image_given:
            self.runner.run(["docker", "build", "-f", str(self.root / "reference" / "Dockerfile"), "-t",
                             self.image, str(self.root)], timeout=1800)

    def kind_config(self, site: SiteSpec) -> tuple[Path, dict[int, int]]:
        """This run's copy of clusters/kind/<site>.yaml, named for the run; and its host port mappings."""
        source = self.root / "clusters" / "kind" / f"{site.name}.yaml"
        if not source.is_file():
            raise BackendUnavailable(f"no kind cluster config for site {site.name}: {source} is missing")
        config = yaml.safe_load(source.read_text()) or {}
        config["name"] = self.cluster_name(site)
        ports: dict[int, int] = {}
        for node in config.get("nodes") or []:
            for mapping in node.get("extraPortMappings") or []:
                if str(mapping.get("protocol", "TCP")).upper() == "TCP":
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

    def close(self) -> None:
        """Delete exactly the clusters this run created (all of them are kept with --grid-keep)."""
        super().close()
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
    poll_until(lambda: httpx.get(url, timeout=2.0).status_code, lambda s: s == 200, what=f"{what} to answer 200",
               timeout=timeout, interval=0.1, max_interval=1.0)


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


__all__ = ["DEFAULT_IMAGE", "BackendUnavailable", "KindBackend", "KubeBackend", "KubeProvider", "SiteCluster",
           "preflight_kind"]
