"""A site's control plane on a cluster backend: the operator Deployment under test and the objects it reads and writes.

The same suites run against it as against the local `ControlPlane`:

- resources are server-side applied (`kubectl apply --server-side --field-manager agn-conformance -f -`);
  a `status` the suite gives (a GridSite's phase, a tool provider's discovered tools) is then written
  through the status subresource, since the API server drops it from the object itself. URLs of the
  site's fake backends, which the suites know by their host port-forwards, are rewritten to the
  in-cluster Services the operator reaches;
- the overlay ConfigMap and the GridNetwork status are read back with `kubectl get -o json`, from the
  spec's places or where a descriptor's `operator.kubernetes.outputs` says the operator writes them; a snapshot
  of the ConfigMap is kept as `<configmap>.configmap.yaml` under the control plane's work directory and
  replaced only when the object's resourceVersion changes, so "the ConfigMap was not rewritten" still
  reads as "the file kept its identity";
- a forced reconcile patches the force-refresh annotation once, in the second after the last renderedAt;
  the status stamp is the status content, which every render then changes (`renderedAt`);
- the operator is the Deployment its manifests make: agn-system/agn-operator as the reference's are, or
  wherever the descriptor's `operator.kubernetes.deployment` says (harness.backends.kube.operator_workload);
- `check_running` reads the Deployment's available replicas and the pods' restart counts; the log is
  `kubectl logs deployment/<name>` in its namespace;
- `connect` starts a gateway pod whose overlay-sync watches the operator's ConfigMap itself;
- in a mesh, the operator's status is ConfigMap `agn-mesh-state` in the gateway namespace (key
  `mesh.state.yaml`, the dir sink's document) and the GridSites it discovers are objects with their
  status; `process` is the Deployment seen as a process: `kill` crashes it without a goodbye (where the
  backend reaches the nodes), `stop` scales it to zero so it leaves gracefully.

A resource that breaks its CRD schema never reaches an operator in a cluster: the API server validates it
against the same schema and refuses it. `apply_raw` records that refusal (the server's message names the
resource and the field) and `log_text` returns such refusals after the operator's log, labelled as the
API server's. The producer test that applies an invalid provider therefore still checks, on this backend,
that the invalid object is refused with a reason naming it, that valid providers keep rendering and that
the corrected resource is picked up; the operator's own schema check is what the local backend judges.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import hashlib
import json
import os
import time
from collections.abc import Callable, Hashable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from harness import feature_use, status_shapes
from harness.backends.kube.handles import KubeOverlaySync, SiteCluster
from harness.backends.kube.install_plan import kube_outputs
from harness.backends.kube.names import FIELD_MANAGER, NAMESPACE
from harness.backends.runner import CommandFailed
from harness.contract import ScopeSpec
from harness.control import FORCE_REFRESH, MESH_STATE, Chain, ControlPlane, OperatorExited
from harness.overlay_facts import pick_by_facts
from harness.projection import write_atomic
from harness.reconcile_watch import ReconcileWatch
from harness.resources import API_VERSION, DEFAULT_GATEWAY, DEFAULT_NAMESPACE
from harness.site_inputs import SiteInventory, as_operator_reads
from harness.spelling import spelled
from harness.timeouts import timeouts
from harness.waiting import poll_until

if TYPE_CHECKING:
    from harness.backends.kube.backend import KubeBackend
    from harness.grid import Gateway, Site

GROUP = API_VERSION.split("/", 1)[0]
#: kubectl resource names of the grid kinds (cluster-scoped CRDs).
GRID_RESOURCES = {kind: f"{kind.lower()}s.{GROUP}"
                  for kind in ("GridNetwork", "InferenceProvider", "GridSite", "AgentToolProvider")}
#: Field managers of the harness and of Kubernetes itself: whatever else wrote an object is the operator.
_NOT_OPERATOR_PREFIXES = ("kubectl", "kube-", FIELD_MANAGER)
#: The ConfigMap (in the gateway namespace, where the reference writes it) holding the operator's mesh status
#: under key `mesh.state.yaml`.
MESH_STATE_CONFIGMAP = "agn-mesh-state"


class KubeOperatorProcess:
    """The operator Deployment handled like the local backend's operator process.

    `kill` is a crash without a goodbye: the backend freezes the operator's process on its node, leaving
    the pod and Deployment in place so nothing restarts it (backends without node access refuse with
    OperationUnsupported). `stop` scales the Deployment to zero: SIGTERM, so the operator leaves the mesh,
    and waits until no pod is left. Either way it is no longer `running`.
    """

    def __init__(self, backend: KubeBackend, cluster: SiteCluster) -> None:
        self.backend = backend
        self.cluster = cluster
        self.deployment = backend.operator_deployment
        self.ended: str | None = None  # "killed" or "stopped" once the harness ended it

    @property
    def name(self) -> str:
        return f"{self.deployment.ref} in {self.cluster.name}"

    @property
    def returncode(self) -> int | None:
        return None  # a Deployment has no exit status; check_running reads its replicas and restarts

    def kill(self) -> int | None:
        self.backend.suspend_operator(self.cluster)
        self.ended = "killed"
        return None

    def stop(self) -> int | None:
        self.backend.stop_operator(self.cluster)
        self.ended = "stopped"
        return 0

    def running(self) -> bool:
        """Not ended by the harness and the Deployment has an available replica."""
        if self.ended is not None:
            return False
        deployment = self.deployment.get(self.cluster)
        return int(((deployment or {}).get("status") or {}).get("availableReplicas") or 0) >= 1

    def log_text(self) -> str:
        return self.deployment.logs(self.cluster, -1)

    def log_tail(self, lines: int = 40) -> str:
        return self.deployment.logs(self.cluster, lines)


class KubeControlPlane(ControlPlane):
    """The operator Deployment of one site's cluster, driven and read through the backend's kubectl."""

    process: KubeOperatorProcess

    def __init__(self, site: Site, backend: KubeBackend, cluster: SiteCluster, *,
                 check_interval: float = 2.0) -> None:
        self.site = site
        self.backend = backend
        self.cluster = cluster
        self.check_interval = check_interval
        work = backend.workdir / "kube" / cluster.spec.name / "control"
        self.manifests = work / "applied"  # files apply_raw was given
        self.out = work / "outputs"  # snapshots of the ConfigMaps read back
        self.manifests.mkdir(parents=True, exist_ok=True)
        self.out.mkdir(parents=True, exist_ok=True)
        self._applied: dict[tuple[str, str], dict[str, Any]] = {}
        self._with_status: set[tuple[str, str]] = set()
        operator = backend.impl.operator
        #: how hosting sites are written for this operator (harness.site_inputs)
        self.sites = SiteInventory(operator.provider_site if operator is not None else "siteSelector")
        self._snapshots: dict[Path, str] = {}
        self._found_overlays: dict[tuple[str, str, str], str] = {}  # (namespace, network, gateway) -> name
        self.refusals: list[str] = []
        self.chains: list[Chain] = []
        self.process = KubeOperatorProcess(backend, cluster)
        #: the operator's Deployment, pods and logs, wherever its manifests put them
        self.deployment = backend.operator_deployment
        #: where the operator writes overlays and status: the spec's places, or the descriptor's outputs
        self.outputs = kube_outputs(backend.impl)
        self._last_check = 0.0
        self._restarts = self._restart_count()

    def restart(self) -> None:
        """Replace the operator's pod (a rollout restart of its Deployment) and wait until the new one has
        rolled out; what the old one kept only in memory is gone, the objects it wrote stay."""
        self.deployment.restart(self.cluster)
        self._restarts = self._restart_count()

    # --------------------------------------------------------------------------------------- kubectl

    def _kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.backend.kubectl(self.cluster, *args, input=input, check=check, timeout=120)

    def _json(self, *args: str) -> dict[str, Any] | None:
        return self.backend.kubectl_json(self.cluster, *args)

    def _get(self, resource: str, name: str, namespace: str | None = None, *,
             managed_fields: bool = False) -> dict[str, Any] | None:
        where = ["--namespace", namespace] if namespace else []
        extra = ["--show-managed-fields"] if managed_fields else []
        return self._json(*where, "get", resource, name, "--ignore-not-found", *extra)

    @staticmethod
    def _resource(kind: str) -> str:
        return GRID_RESOURCES.get(kind, kind.lower())

    # ---------------------------------------------------------------------------------------- inputs

    def apply(self, *objects: dict[str, Any]) -> None:
        """Server-side apply each object, then write its `status` (if any) through the status subresource."""
        feature_use.note_resources(objects)
        for obj in objects:
            kind, name = obj["kind"], obj["metadata"]["name"]
            self._applied[(kind, name)] = copy.deepcopy(obj)
            for site in self.sites.sites_for(obj):  # a hosting site to select (harness.site_inputs), first
                self._apply_one("GridSite", site["metadata"]["name"], site)
            self._apply_one(kind, name, self._for_cluster(obj))

    def _apply_one(self, kind: str, name: str, body: dict[str, Any]) -> None:
        """Server-side apply `body` (as the cluster holds it), then its status through the status subresource."""
        status = body.pop("status", None)
        self._kubectl("apply", "--server-side", "--field-manager", FIELD_MANAGER, "-f", "-", input=json.dumps(body))
        if status is not None or (kind, name) in self._with_status:
            patch = [{"op": "add", "path": "/status", "value": status or {}}]
            self._kubectl("patch", self._resource(kind), name, "--subresource=status", "--type=json",
                          "-p", json.dumps(patch))
            if status is None:
                self._with_status.discard((kind, name))
            else:
                self._with_status.add((kind, name))

    def apply_raw(self, filename: str, text: str) -> Path:
        """Apply a resource file verbatim; the API server's refusal of a schema-breaking one is recorded."""
        path = self.manifests / filename
        write_atomic(path, text)
        try:
            self._kubectl("apply", "--server-side", "--field-manager", FIELD_MANAGER, "-f", "-",
                          input=self.backend.cluster_url(text))
        except CommandFailed as exc:
            message = " ".join((exc.stderr or exc.stdout).split())
            if " is invalid" not in message:
                raise
            self.refusals.append(f"kube-apiserver refused {filename}: {message}")
        return path

    def delete(self, kind: str, name: str) -> None:
        obj = self._applied.pop((kind, name), None)
        self._with_status.discard((kind, name))
        namespace = ((obj or {}).get("metadata") or {}).get("namespace")
        self._delete(kind, name, namespace)
        for site in self.sites.released(kind, name):  # the GridSites added for this network's providers
            self._with_status.discard(("GridSite", site))
            self._delete("GridSite", site, None)

    def _delete(self, kind: str, name: str, namespace: str | None) -> None:
        where = ["--namespace", namespace] if namespace else []
        self._kubectl(*where, "delete", self._resource(kind), name, "--ignore-not-found", "--wait=false")

    def delete_file(self, path: Path) -> None:
        """Delete what a file given to `apply_raw` describes, and the file."""
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            docs = []
        for doc in docs:
            metadata = doc.get("metadata") or {}
            if doc.get("kind") and metadata.get("name"):
                self._delete(str(doc["kind"]), str(metadata["name"]), metadata.get("namespace"))
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def force_reconcile(self, network: str) -> None:
        """Patch a fresh force-refresh annotation onto the GridNetwork (remembered for later applies)."""
        obj = self._applied[("GridNetwork", network)]
        value = os.urandom(16).hex()
        obj["metadata"].setdefault("annotations", {})[FORCE_REFRESH] = value
        patch = {"metadata": {"annotations": {FORCE_REFRESH: value}}}
        self._kubectl("patch", GRID_RESOURCES["GridNetwork"], network, "--type=merge", "-p", json.dumps(patch))

    def _for_cluster(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The object as the cluster should hold it: fake backend URLs as pods reach them, fields spelled as the
        operator reads them (harness.spelling)."""
        operator = self.backend.impl.operator
        spelt = spelled(obj, operator.metrics_endpoint_key if operator is not None else "endpoint")
        text = json.dumps(as_operator_reads(spelt, self.sites.mode))
        translated: dict[str, Any] = json.loads(self.backend.cluster_url(text))
        return translated

    # --------------------------------------------------------------------------------------- outputs

    def _gateway_namespace(self, network: str, gateway: str) -> str:
        obj = self._applied.get(("GridNetwork", network)) or {}
        for ref in (obj.get("spec") or {}).get("gatewayRefs") or []:
            if isinstance(ref, dict) and ref.get("name") == gateway and ref.get("namespace"):
                return str(ref["namespace"])
        return DEFAULT_NAMESPACE

    def _overlay_location(self, network: str, gateway: str, namespace: str) -> tuple[str, str, dict[str, Any] | None]:
        """(namespace, name, object or None) of the overlay ConfigMap: where the outputs say; without a name given
        and nothing there, the ConfigMap of that namespace whose overlay key holds this scope's envelope
        (harness.overlay_facts), remembered once found."""
        where, name = self.outputs.overlay.locate(network, gateway, namespace)
        name = self._found_overlays.get((where, network, gateway), name)
        doc = self._get("configmap", name, where)
        if doc is None and self.outputs.overlay.name is None:
            items = (self._json("--namespace", where, "get", "configmaps") or {}).get("items") or []
            found = pick_by_facts(items, self.outputs.overlay.key, network, gateway)
            if found is not None:
                self._found_overlays[(where, network, gateway)] = found
                name, doc = found, next(i for i in items if (i.get("metadata") or {}).get("name") == found)
        return where, name, doc

    def configmap_path(self, network: str, gateway: str = DEFAULT_GATEWAY) -> Path:
        """A snapshot of the ConfigMap, rewritten only when the object changed (absent: no file)."""
        namespace, name, doc = self._overlay_location(network, gateway, self._gateway_namespace(network, gateway))
        path = self.out / f"{name}.configmap.yaml"
        if doc is None:
            self._snapshots.pop(path, None)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return path
        version = str((doc.get("metadata") or {}).get("resourceVersion"))
        if self._snapshots.get(path) != version or not path.exists():
            write_atomic(path, yaml.safe_dump(doc, sort_keys=False))
            self._snapshots[path] = version
        return path

    def configmap_named(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any] | None:
        """Another ConfigMap the operator writes under its own name (a generated consumer config)."""
        return self._get("configmap", name, namespace)

    def configmap(self, network: str, gateway: str = DEFAULT_GATEWAY) -> dict[str, Any] | None:
        path = self.configmap_path(network, gateway)
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            return None
        return doc if isinstance(doc, dict) else None

    def envelope(self, network: str, gateway: str = DEFAULT_GATEWAY) -> dict[str, Any] | None:
        """The envelope under the overlay key of the outputs (the spec's `routing-overlay.json` by default)."""
        data = (self.configmap(network, gateway) or {}).get("data") or {}
        try:
            doc = json.loads(data[self.outputs.overlay.key])
        except (KeyError, TypeError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def status(self, network: str) -> dict[str, Any]:
        """The GridNetwork's status where the outputs say (the object's own `status` by default)."""
        resource, name, namespace = self.outputs.status.locate(network)
        return self.outputs.status.read(self._get(resource, name, namespace))

    def _last_rendered(self, network: str) -> float | None:
        """The latest renderedAt of the network's status entries, as epoch seconds (None: none readable)."""
        stamps = []
        for entry in status_shapes.entries(self.status(network)):
            value = entry.get("renderedAt")
            with contextlib.suppress(TypeError, ValueError):
                stamps.append(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp())
        return max(stamps) if stamps else None

    def status_stamp(self, network: str) -> Hashable | None:
        """A digest of the status content (None while there is none): each reconcile writes a new renderedAt."""
        status = self.status(network)
        if not status:
            return None
        return hashlib.sha256(json.dumps(status, sort_keys=True).encode()).hexdigest()

    def mesh_state(self) -> dict[str, Any] | None:
        """The document in ConfigMap agn-mesh-state, key mesh.state.yaml; None while absent or unreadable."""
        configmap = self._get("configmap", MESH_STATE_CONFIGMAP, NAMESPACE)
        text = ((configmap or {}).get("data") or {}).get(MESH_STATE)
        if not isinstance(text, str):
            return None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
        return doc if isinstance(doc, dict) else None

    def generation(self, kind: str, name: str) -> int | None:
        """metadata.generation as the API server assigned it (it ignores a client's value)."""
        value = ((self._get(self._resource(kind), name) or {}).get("metadata") or {}).get("generation")
        return value if isinstance(value, int) else None

    def gridsite(self, name: str) -> dict[str, Any] | None:
        """The GridSite object `name` with its status (None: no such object)."""
        return self._get(GRID_RESOURCES["GridSite"], name)

    def tool_status(self, name: str) -> dict[str, Any]:
        """The `status` of AgentToolProvider `name` as the cluster holds it."""
        obj = self._get(self._resource("AgentToolProvider"), name) or {}
        status = obj.get("status")
        return status if isinstance(status, dict) else {}

    def log_text(self) -> str:
        """The operator container's log, then any API server refusals of resources applied raw."""
        text = self.deployment.kubectl(self.cluster, "logs", self.deployment.ref, "--tail=-1", check=False,
                                       timeout=120)
        return text + "".join(f"{line}\n" for line in self.refusals)

    def _outputs(self) -> dict[str, tuple[str, str]]:
        """What the operator wrote in the cluster: output name -> (where, YAML text)."""
        found: dict[str, tuple[str, str]] = {}
        configmaps = self._json("--namespace", NAMESPACE, "get", "configmaps", "--show-managed-fields") or {}
        for item in configmaps.get("items") or []:
            if _written_by_operator(item):
                metadata = item.get("metadata") or {}
                found[f"{metadata.get('name')}.configmap.yaml"] = (
                    f"{metadata.get('namespace', NAMESPACE)}/{metadata.get('name')}.configmap.yaml",
                    yaml.safe_dump(_without_managed_fields(item), sort_keys=False))
        networks = self._json("get", GRID_RESOURCES["GridNetwork"], "--show-managed-fields") or {}
        for item in networks.get("items") or []:
            if _written_by_operator(item, subresource="status"):
                name = (item.get("metadata") or {}).get("name")
                found[f"{name}.status.yaml"] = (f"{name}.status.yaml", yaml.safe_dump(
                    {"metadata": {"name": name}, "status": item.get("status")}, sort_keys=False))
        sites = self._json("get", GRID_RESOURCES["GridSite"], "--show-managed-fields") or {}
        for item in sites.get("items") or []:
            if _written_by_operator(item):
                name = (item.get("metadata") or {}).get("name")
                found[f"{name}.gridsite.yaml"] = (f"{name}.gridsite.yaml",
                                                   yaml.safe_dump(_without_managed_fields(item), sort_keys=False))
        return found

    def output_names(self, pattern: str = "*") -> list[str]:
        """Names of what the operator wrote (ConfigMaps, GridNetwork statuses, GridSites), matching a glob."""
        return sorted(name for name in self._outputs() if fnmatch.fnmatchcase(name, pattern))

    def written_texts(self) -> dict[str, str]:
        """The operator's log and every ConfigMap, GridNetwork status and GridSite it wrote, as YAML."""
        texts = {"operator log": self.log_text()}
        texts.update(dict(self._outputs().values()))
        return texts

    # ----------------------------------------------------------------------------------------- waits

    def _restart_count(self) -> int:
        return sum(int(c.get("restartCount") or 0) for pod in self.backend.operator_pods(self.cluster)
                   for c in (pod.get("status") or {}).get("containerStatuses") or [])

    def check_running(self) -> None:
        """Raise OperatorExited when the Deployment has no available replica or its container restarted.

        Checked at most every `check_interval` seconds: each check is two API round trips. An operator the
        harness crashed or stopped (`process`) has exited at once.
        """
        if self.process.ended is not None:
            raise OperatorExited(f"the operator of {self.cluster.name} was {self.process.ended} by the harness")
        now = time.monotonic()
        if now - self._last_check < self.check_interval:
            return
        self._last_check = now
        deployment = self.deployment.get(self.cluster)
        if deployment is None:
            raise OperatorExited(f"the operator Deployment {self.deployment.where} is gone")
        available = int((deployment.get("status") or {}).get("availableReplicas") or 0)
        if available < 1:
            raise OperatorExited(f"the operator Deployment {self.deployment.where} has no available "
                                 f"replica\n--- operator log (tail) ---\n{self._tail(previous=True)}")
        restarts = self._restart_count()
        if restarts > self._restarts:
            self._restarts = restarts
            raise OperatorExited(f"the operator container restarted ({restarts} restarts)\n"
                                 f"--- operator log before the restart (tail) ---\n{self._tail(previous=True)}")

    def _tail(self, lines: int = 40, *, previous: bool = False) -> str:
        if previous:
            text = self.deployment.logs(self.cluster, lines, previous=True)
            if text.strip():
                return text
        return self.deployment.logs(self.cluster, lines)

    def reconcile(self, network: str, gateway: str = DEFAULT_GATEWAY,
                  timeout: float | None = None) -> dict[str, Any] | None:
        """Force one reconcile and wait until it has rewritten the status.

        The status carries renderedAt to the second, and an API server keeps no trace of a write that
        changes nothing: a reconcile within the second of the last render can be invisible. So the force
        waits for the next second after the last renderedAt, and is sent once (forcing again would make
        reconciles the suites do not count: an admission test counts its pressured samples). An operator
        that answers with the status it already has (one that writes only on change, or a network it refuses
        to render the same way each time) is seen by its providers' metrics scraped again after the force, or
        else only as quiet (harness.reconcile_watch); a network with no status yet must get one.
        """
        timeout = timeouts().reconcile if timeout is None else timeout
        before = self.status_stamp(network)
        last = self._last_rendered(network)
        if last is not None:
            poll_until(time.time, lambda now: now >= last + 1.0, timeout=2.5, interval=0.02,
                       what=f"the second after {network}'s last renderedAt")
        watch = ReconcileWatch(before, self.scrapes, timeout)
        self.force_reconcile(network)

        def probe() -> Hashable | None:
            self.check_running()
            return self.status_stamp(network)

        poll_until(probe, watch.answered, timeout=timeout,
                   what=f"a forced reconcile of {network} to be answered (its status rewritten, or its providers "
                        "scraped again)", fatal=(OperatorExited,))
        return self.envelope(network, gateway)

    # ----------------------------------------------------------------------------------------- chain

    def connect(self, network: str, gateway_ref: str = DEFAULT_GATEWAY, namespace: str = DEFAULT_NAMESPACE,
                timeout: float | None = None,
                start_gateway: Callable[[Path, ScopeSpec], Gateway] | None = None) -> Chain:
        """A gateway pod whose overlay-sync follows the operator's ConfigMap, once it holds a first overlay."""
        timeout = timeouts().reconcile if timeout is None else timeout
        envelope = self.wait_envelope(network, gateway=gateway_ref, what="a first overlay", timeout=timeout)
        scope = ScopeSpec(network, gateway_ref, namespace, envelope["scope"]["local_site"])
        where, name, _doc = self._overlay_location(network, gateway_ref, namespace)
        overlay_dir = self.backend.follow_configmap(where, name, scope, key=self.outputs.overlay.key)
        gateway = self._chain_gateway(overlay_dir, scope, start_gateway)
        sync: KubeOverlaySync = self.backend.overlay_sync(overlay_dir)
        poll_until(sync.delivered_revision, lambda r: r is not None, timeout=timeout,
                   what=f"overlay-sync to deliver the first revision of {network}")
        return self._add_chain(Chain(self, network, gateway_ref, sync, gateway))

    def disconnect(self, chain: Chain) -> None:
        """Remove the chain's gateway pod (overlay-sync is one of its containers)."""
        if chain in self.chains:
            self.chains.remove(chain)
        self.site.stop_gateway(chain.gateway)

    def diagnostics(self) -> str:
        try:
            names = self.output_names()
            tail = self._tail()
        except (CommandFailed, ValueError) as exc:
            return f"=== operator {self.deployment.ref} in {self.cluster.name}: unreadable ({exc})"
        parts = [f"=== operator {self.deployment.ref} in {self.cluster.name}: outputs {names}\n"
                 f"--- log tail ---\n{tail}"]
        parts += [f"=== refused by the API server\n{line}" for line in self.refusals]
        for chain in self.chains:
            if isinstance(chain.sync, KubeOverlaySync) and chain.sync.pod:
                parts.append(f"=== overlay-sync for {chain.network} (deployment/{chain.sync.pod})\n"
                             f"{self.backend.logs(self.cluster, chain.sync.pod, 20, container='overlay-sync')}")
        return "\n".join(parts)


def _written_by_operator(obj: Mapping[str, Any], subresource: str | None = None) -> bool:
    """Whether a field manager other than the harness's or Kubernetes' own wrote the object (or its status)."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        manager = str(entry.get("manager") or "")
        if manager.startswith(_NOT_OPERATOR_PREFIXES):
            continue
        if subresource is None or entry.get("subresource") == subresource:
            return True
    return False


def _without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(dict(obj))
    (doc.get("metadata") or {}).pop("managedFields", None)
    return doc




__all__ = ["GRID_RESOURCES", "MESH_STATE_CONFIGMAP", "KubeControlPlane", "KubeOperatorProcess"]
