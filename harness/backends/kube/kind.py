"""The kind backend: one kind cluster per site, made for the run, the project's image loaded into each.

Clusters are created concurrently through pytest-kubernetes' kind manager and deleted at the end. The
harness also reaches into the node containers: a crash is a SIGSTOP of the operator's process (found
with crictl), a cut link is a pair of iptables DROP rules in the raw table of the two nodes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pytest_kubernetes.options import ClusterOptions
from pytest_kubernetes.providers.kind import KindManagerBase

from harness.backends import CRASH, OPERATOR_IN_CLUSTER, PARTITION
from harness.backends.kube import kube_yaml
from harness.backends.kube.backend import KubeBackend
from harness.backends.kube.handles import BackendUnavailable, SiteCluster
from harness.backends.kube.install_plan import install_plan
from harness.backends.kube.kind_images import (
    OFFLINE_BUILDER,
    image_present,
    offline_build,
    project_image_problem,
    resolve_node_image,
)
from harness.backends.kube.manifests import operator_container
from harness.backends.kube.names import ADMIN_NODEPORT
from harness.backends.kube.tools import kubectl_too_old, missing_tools, repo_root, wait_http
from harness.backends.runner import CommandFailed, Runner
from harness.topology import SiteSpec, Topology
from harness.waiting import WaitTimeout, poll_until

#: Host ports of kind port mappings claimed by the backends of this process (two grids of one session).
_CLAIMED_PORTS: dict[tuple[str, int], int] = {}


_CLAIMED_LOCK = threading.Lock()


#: (checkout, tag) of the images this process has built: the grids of one session (the main grid, the
#: provider profile's, every mesh) build the image once.
_BUILT_IMAGES: set[tuple[str, str]] = set()
#: Builds that failed this session, with the reason every later grid is given.
_FAILED_BUILDS: dict[tuple[str, str], str] = {}


_BUILD_LOCK = threading.Lock()


#: Where Linux keeps the per-user inotify instance limit, and what kind nodes need of it: below it, past
#: a few clusters kube-proxy exits with "too many open files" and Services stop answering.
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_INSTANCES_NEEDED = 512


def inotify_problem(path: Path | None = None) -> str | None:
    """Why this host's inotify instance limit is too low for a run's clusters (None: enough, or unreadable)."""
    try:
        have = int((path or INOTIFY_INSTANCES).read_text().strip())
    except (OSError, ValueError):
        return None
    if have >= INOTIFY_INSTANCES_NEEDED:
        return None
    return (f"fs.inotify.max_user_instances is {have}; kind nodes need {INOTIFY_INSTANCES_NEEDED} once several "
            f"clusters run (kube-proxy exits with 'too many open files'): sysctl -w "
            f"fs.inotify.max_user_instances={INOTIFY_INSTANCES_NEEDED} fs.inotify.max_user_watches=524288")


def preflight_kind(runner: Runner, *, node_image: str | None = None, image: str | None = None,
                   root: Path | None = None) -> str | None:
    """Why the kind backend cannot run here (None: it can): tools, a Docker engine, and the images."""
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
    # an engine on another host has that host's limits, not this machine's
    local_engine = os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
    limits = inotify_problem() if local_engine else None
    root = root or repo_root()
    return (limits or resolve_node_image(runner, node_image, root).problem
            or project_image_problem(runner, image, root))


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


class KindBackend(KubeBackend):
    """Creates one kind cluster per site (concurrently), loads the image (and the images of a descriptor's
    own components, `operator.kubernetes.image`), installs, deletes what it made."""

    name = "kind"
    #: This backend owns the nodes: it freezes an operator on its node and cuts links with iptables there.
    capabilities: frozenset[str] = frozenset({OPERATOR_IN_CLUSTER, PARTITION, CRASH})
    #: The nodes are containers on the host's `kind` Docker network.
    host_reaches_nodes = True

    def __init__(self, workdir: Path, topology: Topology, impl: Any, *, node_image: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(workdir, topology, impl, **kwargs)
        #: The node image as given (--grid-kind-node-image); resolved against the engine in `prepare`.
        self.node_image_given = node_image
        self.node_image: str | None = node_image
        self.clusters: dict[str, _KindCluster] = {}
        self._claimed: set[tuple[str, int]] = set()
        self._cuts: list[tuple[str, str]] = []  # (node container, source address) of each DROP rule in place

    def cluster_name(self, site: SiteSpec) -> str:
        return f"agn-{self.run_id}-{site.name}"

    def prepare(self) -> None:
        """Pick the node image; build the project image from the checkout, once per process (not at all when
        --grid-image names one). Without the public base image but with the offline one, the offline
        builder makes it (a wheelhouse on the host, `docker build --network none`)."""
        chosen = resolve_node_image(self.runner, self.node_image_given, self.root)
        if chosen.problem:
            raise BackendUnavailable(chosen.problem)
        self.node_image = chosen.image
        for component in install_plan(self.impl).components:  # a vendor's image is loaded, never pulled
            if not image_present(self.runner, component.kubernetes.image):
                raise BackendUnavailable(f"{component.section}.kubernetes.image {component.kubernetes.image} is not "
                                         "on this Docker engine (the kind backend loads it into each cluster and "
                                         "pulls nothing): build it or `docker load` it first")
        if self.image_given:
            return
        key = (str(self.root), self.image)
        with _BUILD_LOCK:
            if key in _BUILT_IMAGES:
                return
            if key in _FAILED_BUILDS:  # every later grid of the session gets the same answer, not a rebuild
                raise BackendUnavailable(_FAILED_BUILDS[key])
            if offline_build(self.runner):
                argv = ["bash", str(self.root / OFFLINE_BUILDER), "--only", "project", "--project-tag", self.image]
            else:
                argv = ["docker", "build", "-f", str(self.root / "reference" / "Dockerfile"), "-t", self.image,
                        str(self.root)]
            try:
                self.runner.run(argv, timeout=1800)
            except CommandFailed as exc:
                # nothing of the implementation ran: the run is not judged (exit 2), it does not fail
                _FAILED_BUILDS[key] = f"the image {self.image} could not be built: {exc}"
                raise BackendUnavailable(_FAILED_BUILDS[key]) from None
            _BUILT_IMAGES.add(key)

    def kind_config(self, site: SiteSpec, *, fresh_ports: bool = False) -> tuple[Path, dict[int, int]]:
        """This run's copy of clusters/kind/<site>.yaml, named for the run; and its host port mappings.

        A host port another backend of this process already maps (the provider profile's two-site grid
        beside the session's main grid) or another process of the host holds is replaced by a free one;
        with `fresh_ports` (a retry after a clash) every one is.
        """
        source = self.root / "clusters" / "kind" / f"{site.name}.yaml"
        if not source.is_file():
            raise BackendUnavailable(f"no kind cluster config for site {site.name}: {source} is missing")
        target = self.workdir / "kube" / site.name / "kind.yaml"
        if fresh_ports and target.is_file():  # the failed attempt's ports are given back first
            self._release(yaml.safe_load(target.read_text()) or {})
        config = yaml.safe_load(source.read_text()) or {}
        config["name"] = self.cluster_name(site)
        ports: dict[int, int] = {}
        for node in config.get("nodes") or []:
            if self.node_image:
                node["image"] = self.node_image
            for mapping in node.get("extraPortMappings") or []:
                protocol = str(mapping.get("protocol", "TCP")).upper()
                mapping["hostPort"] = self._claim(protocol, int(mapping["hostPort"]),
                                                  str(mapping.get("listenAddress") or "127.0.0.1"), fresh=fresh_ports)
                if protocol == "TCP":
                    ports[int(mapping["containerPort"])] = int(mapping["hostPort"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(kube_yaml.dump(config))
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

    def _release(self, config: dict[str, Any]) -> None:
        """Give back the host ports of a kind config this backend claimed."""
        with _CLAIMED_LOCK:
            for node in config.get("nodes") or []:
                for mapping in node.get("extraPortMappings") or []:
                    claim = (str(mapping.get("protocol", "TCP")).upper(), int(mapping["hostPort"]))
                    if claim in self._claimed:
                        self._claimed.discard(claim)
                        _CLAIMED_PORTS.pop(claim, None)

    def _claim(self, protocol: str, port: int, address: str, *, fresh: bool = False) -> int:
        """`port`, or a free one in its place when another grid of this process claimed it, the host holds
        it, or `fresh` (a retry after a clash)."""
        with _CLAIMED_LOCK:
            if (fresh or _CLAIMED_PORTS.get((protocol, port), id(self)) != id(self)
                    or ((protocol, port) not in self._claimed and not _host_port_free(protocol, port, address))):
                # the replacement must be one nobody has claimed: the kernel may hand a just-probed free port
                # out again, and two clusters publishing one host port leave the second unable to start
                # ("port is already allocated")
                port = _free_port(protocol, address)
                while (protocol, port) in _CLAIMED_PORTS:
                    port = _free_port(protocol, address)
            _CLAIMED_PORTS[(protocol, port)] = id(self)
            self._claimed.add((protocol, port))
        return port

    def _create_and_load(self, site: SiteCluster) -> None:
        cluster = self.clusters[site.name]
        for attempt in range(PORT_CLASH_RETRIES + 1):
            try:
                cluster.create(timeout=int(self.ready_timeout))
                break
            except CommandFailed as exc:
                if attempt == PORT_CLASH_RETRIES or not port_clash(str(exc)):
                    raise
                cluster.delete()  # kind removes a failed cluster's nodes; this makes sure
                _, ports = self.kind_config(site.spec, fresh_ports=True)
                site.host_ports.clear()
                site.host_ports.update(ports)
        cluster.load_image(self.image)
        for image in install_plan(self.impl).images:  # the descriptor's own components
            cluster.load_image(image)

    def wait_gateway_ready(self, site: SiteCluster) -> None:
        port = site.host_ports.get(ADMIN_NODEPORT)
        if port is None:
            raise BackendUnavailable(f"kind config of site {site.spec.name} maps no host port to {ADMIN_NODEPORT}")
        try:
            wait_http(f"http://127.0.0.1:{port}/ready", f"site {site.spec.name} gateway /ready", self.ready_timeout)
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
        workload = self.operator_deployment.workload
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        container = operator_container(pod.get("spec") or {}, workload).get("name")
        name = (pod.get("metadata") or {}).get("name")
        if not node or not container or not name:
            raise BackendUnavailable(f"site {site.spec.name}: operator pod {name} has no node or container yet")
        ids = self.node_exec(node, "crictl", "ps", "-q", "--label", f"io.kubernetes.pod.namespace={workload.namespace}",
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


def _host_port_free(protocol: str, port: int, address: str) -> bool:
    """Whether `port` can be bound at `address` on this host now: another process (not only another grid of
    this run) may hold it, and kind then fails to create the cluster ("address already in use")."""
    kind = socket.SOCK_DGRAM if protocol == "UDP" else socket.SOCK_STREAM
    with socket.socket(socket.AF_INET, kind) as sock:
        try:
            sock.bind((address if address != "0.0.0.0" else "127.0.0.1", port))
        except OSError:
            return False
    return True


#: What Docker and kind say when a host port of a port mapping is taken between the check and the creation.
PORT_CLASH_MARKS = ("address already in use", "port is already allocated")
#: How many times a cluster is created again, with fresh host ports, after a port clash.
PORT_CLASH_RETRIES = 2


def port_clash(error: str) -> bool:
    """Whether a failed `kind create cluster` failed for a host port someone else took."""
    text = error.lower()
    return any(mark in text for mark in PORT_CLASH_MARKS)


def _free_port(protocol: str, address: str) -> int:
    """A port nothing listens on at `address` right now (the kernel's pick)."""
    kind = socket.SOCK_DGRAM if protocol == "UDP" else socket.SOCK_STREAM
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind((address if address != "0.0.0.0" else "127.0.0.1", 0))
        return int(sock.getsockname()[1])
