"""The `kubernetes` source and sink: the grid resources and the overlay ConfigMaps live in a cluster.

`KubeSource` lists and watches the four grid CRDs and hands the reconcile loop the same `Loaded` the
`dir` source produces (each object checked against its CRD schema; an invalid one is reported and
skipped). `KubeSink` server-side applies each overlay ConfigMap into its gateway's namespace when the
revision changed and patches `GridNetwork.status` through the status subresource, with the status
entries every sink builds (`sinks.OverlaySink`). With the mesh enabled it also stores the mesh outputs
(`sinks.MeshOutputs`): the mesh status document in the ConfigMap `agn-mesh-state` and one GridSite per
discovered site, of which it owns only the name, two labels and `spec.gridNetworkRef` (server-side apply)
plus the status; an admin's trust pins on the same object stay the admin's. Secrets are never read:
credentials reach the overlay as references only.

Both keep their collections current with `reference.kube_client.ListWatch`.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from reference.kube_client import REQUEST_SECONDS, WATCH_SECONDS, ListWatch, api_error
from reference.operator import sinks
from reference.operator.core.consumer_config import ConsumerConfigOutput
from reference.operator.core.model import GridNetworkSpec, ResourceError, Resources
from reference.operator.core.render import Rendered
from reference.operator.mesh.sites import LABEL_NETWORK, label_value
from reference.operator.sources import Issue, Kind, Loaded, _fill_defaults, crd_dir, default_kinds, schema_errors
from reference.operator.triggers import objects_fingerprint

FIELD_MANAGER = "agn-operator"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
NETWORK_KIND = "GridNetwork"
SITE_KIND = "GridSite"
#: The ConfigMap holding `mesh.state.yaml`, in the operator's namespace.
MESH_STATE_CONFIGMAP = "agn-mesh-state"
MESH_STATE_NAMESPACE = "agn-system"
MANAGED_BY = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
log = logging.getLogger("agn-operator")
#: A mesh status that differs only in members' ages (which tick every second while a member is suspect,
#: dead or gone) is applied at most this often; any other change is applied at once.
AGE_REFRESH_SECONDS = 10.0
@dataclass(frozen=True)
class CrdResource:
    """Where one grid kind is served: group, storage version, plural and scope."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool


#: The grid kinds the operator watches, as `manifests/crds` declares them (a test keeps the two equal;
#: parsing the CRD files at start-up would cost seconds without libyaml).
GRID_RESOURCES = (
    CrdResource("AgentToolProvider", "grid.praxis.fast", "v1alpha1", "agenttoolproviders", False),
    CrdResource("GridNetwork", "grid.praxis.fast", "v1alpha1", "gridnetworks", False),
    CrdResource("GridSite", "grid.praxis.fast", "v1alpha1", "gridsites", False),
    CrdResource("InferenceProvider", "grid.praxis.fast", "v1alpha1", "inferenceproviders", False),
)


def crd_resources(directory: Path | None = None) -> list[CrdResource]:
    """The kinds as the CRD files in `directory` (default: the project's CRDs) declare them."""
    out = []
    for path in sorted((directory or crd_dir()).glob("*.yaml")):
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))["spec"]
        (storage,) = [v for v in spec["versions"] if v.get("storage")]
        names = spec["names"]
        out.append(
            CrdResource(names["kind"], spec["group"], storage["name"], names["plural"], spec["scope"] == "Namespaced")
        )
    return out


class ObjectIssue(Issue):
    """A skipped API object, named `kind/namespace/name` (documents do not apply)."""

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"


def check_object(obj: Mapping[str, Any], kinds: Mapping[str, Kind]) -> str | None:
    """Why the API object cannot be used (its CRD schema, or what the core rejects); None when it is fine."""
    metadata = obj.get("metadata") or {}
    label = f"{obj.get('kind', '?')}/{metadata.get('name', '?')}"
    errors = schema_errors(obj, kinds)
    if errors:
        return f"{label} rejected: " + "; ".join(errors)
    try:
        Resources.from_objects([obj])
    except ResourceError as exc:
        return f"{label} rejected: {exc}"
    return None


class KubeSource:
    """The grid resources of a cluster, listed and watched; `load` validates them like the `dir` source.

    Cluster-scoped kinds (all four grid CRDs today) are watched cluster-wide; namespaced ones in
    `namespace` when given, else in every namespace.
    """

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str | None = None,
        *,
        kinds: Mapping[str, Kind] | None = None,
        resources: list[CrdResource] | None = None,
        watch_seconds: int = WATCH_SECONDS,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self.kinds = dict(kinds) if kinds is not None else default_kinds()
        self.namespace = namespace
        self.resources = resources if resources is not None else list(GRID_RESOURCES)
        custom = client.CustomObjectsApi(api)
        self.watches: dict[str, ListWatch] = {}
        for res in self.resources:
            call: Callable[..., Any]
            if res.namespaced and namespace:
                call = functools.partial(
                    custom.list_namespaced_custom_object, res.group, res.version, namespace, res.plural
                )
            else:
                call = functools.partial(custom.list_cluster_custom_object, res.group, res.version, res.plural)
            self.watches[res.kind] = ListWatch(res.plural, call, watch_seconds=watch_seconds, backoff=backoff)
        self._fingerprint: tuple[tuple[int, ...], str] | None = None

    def start(self) -> None:
        for watch in self.watches.values():
            watch.start()

    def stop(self) -> None:
        for watch in self.watches.values():
            watch.stop()

    def ready(self) -> bool:
        """True once every kind has been listed at least once."""
        return all(watch.synced.is_set() for watch in self.watches.values())

    def _objects(self) -> list[dict[str, Any]]:
        objects = []
        for res in self.resources:
            for obj in self.watches[res.kind].snapshot():
                obj.setdefault("apiVersion", f"{res.group}/{res.version}")
                obj.setdefault("kind", res.kind)
                objects.append(obj)
        return objects

    def fingerprint(self) -> str:
        """Changes whenever `load` could return something else (not on the operator's own status writes)."""
        versions = tuple(watch.version for watch in self.watches.values())
        if self._fingerprint is None or self._fingerprint[0] != versions:
            self._fingerprint = (versions, objects_fingerprint(self._objects(), frozenset({NETWORK_KIND})))
        return self._fingerprint[1]

    def load(self) -> Loaded:
        objects: list[dict[str, Any]] = []
        issues: list[Issue] = []
        for obj in self._objects():
            metadata = obj.get("metadata") or {}
            where = "/".join(p for p in (obj.get("kind"), metadata.get("namespace"), metadata.get("name")) if p)
            problem = check_object(obj, self.kinds)
            if problem:
                issues.append(ObjectIssue(str(where), 0, problem))
                continue
            _fill_defaults(obj, self.kinds[obj["kind"]].openapi)
            objects.append(obj)
        return Loaded(Resources.from_objects(objects), tuple(objects), tuple(issues))

    def network_namespace(self, name: str) -> str | None:
        """The namespace of the GridNetwork `name` (None for the cluster-scoped CRD)."""
        watch = self.watches.get(NETWORK_KIND)
        for obj in watch.snapshot() if watch else []:
            metadata = obj.get("metadata") or {}
            if metadata.get("name") == name:
                return metadata.get("namespace") or None
        return None


#: What `KubeSink` last did about one GridSite: (the resourceVersion it saw then, what it wanted).
_Acted = tuple[str | None, Any]
_DELETE = "delete"


class KubeSink(sinks.OverlaySink, sinks.MeshOutputs):
    """Overlay ConfigMaps by server-side apply, GridNetwork status through its status subresource, and the
    mesh outputs: the `agn-mesh-state` ConfigMap in `mesh_namespace` and the discovered GridSites.

    `gridsites` returns the GridSites as the cluster has them (the source's watch). A GridSite is written
    only when the stored one lacks the owned fields or has another phase, reason or message, and at most
    once per stored version for the same wish: the operator's own writes come back through the watch, and
    until they do the stale copy must not cause a second write. Without `gridsites` the sink remembers
    what it wrote instead. The mesh status is applied when it changed, a change of members' ages alone at
    most every AGE_REFRESH_SECONDS.
    """

    def __init__(
        self,
        api: client.ApiClient,
        field_manager: str = FIELD_MANAGER,
        network_namespace: Callable[[str], str | None] = lambda _name: None,
        network: CrdResource | None = None,
        *,
        mesh_namespace: str = MESH_STATE_NAMESPACE,
        gridsites: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
        site: CrdResource | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.field_manager = field_manager
        self.network_namespace = network_namespace
        self.network = network or next(r for r in GRID_RESOURCES if r.kind == NETWORK_KIND)
        self.site = site or next(r for r in GRID_RESOURCES if r.kind == SITE_KIND)
        self.mesh_namespace = mesh_namespace
        self._tool_status: dict[str, list[str]] = {}
        self.gridsites = gridsites
        self._status: dict[str, dict[str, Any]] = {}
        self._now = now
        self._mesh_text: str | None = None
        self._mesh_ageless: Any = None
        self._mesh_written_at = 0.0
        self._acted: dict[str, _Acted] = {}

    def _apply_options(self) -> dict[str, Any]:
        """Server-side apply as this operator's field manager, taking over fields others set (force)."""
        return {"field_manager": self.field_manager, "force": True, "_content_type": APPLY_PATCH,
                "_request_timeout": REQUEST_SECONDS}

    def read_configmap(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The stored ConfigMap, None when there is none; other failures raise OSError."""
        try:
            response: Any = self.core.read_namespaced_config_map(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_SECONDS
            )
            doc = json.loads(response.data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise OSError(f"reading ConfigMap {namespace}/{name}: {api_error(exc)}") from exc
        except (urllib3.exceptions.HTTPError, ValueError) as exc:
            raise OSError(f"reading ConfigMap {namespace}/{name}: {api_error(exc)}") from exc
        return doc if isinstance(doc, dict) else None

    def write_configmap(self, rendered: Rendered) -> bool:
        """Apply the ConfigMap when its revision differs from the stored one; True when applied."""
        configmap = rendered.configmap
        name = configmap["metadata"]["name"]
        namespace = configmap["metadata"]["namespace"]
        if not sinks.needs_write(self.read_configmap(name, namespace), configmap):
            return False
        try:
            self.core.patch_namespaced_config_map(name, namespace, configmap, **self._apply_options())
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise OSError(f"applying ConfigMap {namespace}/{name}: {api_error(exc)}") from exc
        return True

    def write_consumer_config(self, output: ConsumerConfigOutput) -> None:
        """Apply a generated consumer config, or delete the one of that name when none may exist."""
        name, namespace = output.name, output.namespace
        try:
            if output.configmap is None:
                if self.read_configmap(name, namespace) is not None:
                    self.core.delete_namespaced_config_map(name, namespace, _request_timeout=REQUEST_SECONDS)
                return
            stored = self.read_configmap(name, namespace)
            if stored is not None and stored.get("data") == output.configmap["data"]:
                return
            self.core.patch_namespaced_config_map(name, namespace, output.configmap, **self._apply_options())
        except ApiException as exc:
            if output.configmap is None and exc.status == 404:
                return
            raise OSError(f"writing consumer config {namespace}/{name}: {api_error(exc)}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise OSError(f"writing consumer config {namespace}/{name}: {api_error(exc)}") from exc

    def _network_call(self, verb: str, name: str, suffix: str = "_status") -> Callable[..., Any]:
        """A client call on one GridNetwork (`suffix` "_status": its status subresource)."""
        res = self.network
        namespace = self.network_namespace(name) if res.namespaced else None
        if namespace:
            method = getattr(self.custom, f"{verb}_namespaced_custom_object{suffix}")
            return functools.partial(method, res.group, res.version, namespace, res.plural, name)
        method = getattr(self.custom, f"{verb}_cluster_custom_object{suffix}")
        return functools.partial(method, res.group, res.version, res.plural, name)

    def previous_entries(self, network: str) -> dict[tuple[Any, Any], dict[str, Any]]:
        """The status written last (read from the cluster once per network, then remembered).

        Read from the object itself, which carries its status: the operator may get GridNetworks but
        only patch and update their status subresource.
        """
        if network not in self._status:
            try:
                response = self._network_call("get", network, suffix="")(
                    _preload_content=False, _request_timeout=REQUEST_SECONDS)
                doc = json.loads(response.data)
            except (ApiException, urllib3.exceptions.HTTPError, ValueError) as exc:
                log.warning("reading GridNetwork %s status failed: %s", network, api_error(exc))
                return {}
            status = doc.get("status") if isinstance(doc, dict) else None
            if not isinstance(status, dict):
                return {}
            self._status[network] = status
        return sinks.entries_by_gateway(self._status[network])

    def write_status(self, network: GridNetworkSpec, status: dict[str, Any]) -> None:
        """Merge-patch `status` through the subresource, skipped when it equals what was written last."""
        if self._status.get(network.name) == status:
            return
        try:
            self._network_call("patch", network.name)(
                {"status": status}, _content_type=MERGE_PATCH, _request_timeout=REQUEST_SECONDS
            )
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            log.warning("patching GridNetwork %s status failed: %s", network.name, api_error(exc))
            return
        self._status[network.name] = copy.deepcopy(status)

    # --- mesh outputs ---------------------------------------------------------------------------------

    def write_mesh_status(self, document: Mapping[str, Any]) -> bool:
        """Apply the `agn-mesh-state` ConfigMap when the document changed (a change of members' ages
        alone at most every AGE_REFRESH_SECONDS); True when applied."""
        text = sinks.mesh_status_text(document)
        if text == self._mesh_text:
            return False
        ageless = _without_ages(document)
        if ageless == self._mesh_ageless and self._now() - self._mesh_written_at < AGE_REFRESH_SECONDS:
            return False
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": MESH_STATE_CONFIGMAP, "namespace": self.mesh_namespace, "labels": dict(MANAGED_BY)},
            "data": {sinks.MESH_STATUS_FILE: text},
        }
        try:
            self.core.patch_namespaced_config_map(MESH_STATE_CONFIGMAP, self.mesh_namespace, body,
                                                  **self._apply_options(), _preload_content=False)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise OSError(f"applying ConfigMap {self.mesh_namespace}/{MESH_STATE_CONFIGMAP}: {api_error(exc)}") from exc
        self._mesh_text, self._mesh_ageless, self._mesh_written_at = text, ageless, self._now()
        return True

    def write_gridsites(self, objects: Mapping[str, Mapping[str, Any]], networks: Collection[str] = ()) -> list[str]:
        """Apply and status-patch each discovered GridSite that differs from the stored one; delete the
        auto-discovered ones that went away (or whose network is no longer a local GridNetwork).

        Every object is tried; failures are raised together as one OSError afterwards.
        """
        stored = self._stored()
        touched: list[str] = []
        failures: list[str] = []
        for name, obj in sorted(objects.items()):
            try:
                if self._write_gridsite(name, obj, stored.get(name)):
                    touched.append(name)
            except OSError as exc:
                failures.append(str(exc))
        local = {label_value(network) for network in networks}
        swept = {
            name
            for name, obj in stored.items()
            if sinks.auto_discovered(obj) and ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_NETWORK)
            not in local
        }
        for name in sorted((set(self._acted) | swept) - set(objects)):
            try:
                if self._retire_gridsite(name, stored.get(name), network_gone=name in swept):
                    touched.append(name)
            except OSError as exc:
                failures.append(str(exc))
        if failures:
            raise OSError("; ".join(failures))
        return touched

    def _stored(self) -> dict[str, Mapping[str, Any]]:
        """The GridSites as the cluster has them, by name (empty without a watch to ask)."""
        if self.gridsites is None:
            return {}
        return {str((obj.get("metadata") or {}).get("name")): obj for obj in self.gridsites()}

    def write_tool_status(self, name: str, discovered: Sequence[str]) -> bool:
        """Merge-patch `status.discoveredTools` of AgentToolProvider `name` when it differs from what this
        sink last wrote."""
        wanted = list(discovered)
        if self._tool_status.get(name) == wanted:
            return False
        res = next(r for r in GRID_RESOURCES if r.kind == "AgentToolProvider")
        try:
            self.custom.patch_cluster_custom_object_status(
                res.group, res.version, res.plural, name, {"status": {"discoveredTools": wanted}},
                _content_type=MERGE_PATCH, _preload_content=False, _request_timeout=REQUEST_SECONDS)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise OSError(f"recording the discovered tools of AgentToolProvider {name}: {api_error(exc)}") from exc
        self._tool_status[name] = wanted
        return True

    def _write_gridsite(self, name: str, obj: Mapping[str, Any], stored: Mapping[str, Any] | None) -> bool:
        owned = sinks.owned_gridsite(obj)
        status = sinks.gridsite_status(obj)
        apply = not sinks.holds_owned_fields(stored, owned)
        patch = sinks.gridsite_verdict(stored) != sinks.gridsite_verdict(obj)
        wish = (owned, sinks.gridsite_verdict(obj))
        seen = _resource_version(stored)
        if not (apply or patch):
            self._acted[name] = (seen, wish)  # stored as wished: remembered, so its going away deletes it
            return False
        if self._acted.get(name) == (seen, wish):
            return False  # written already; the watch has not brought the new version yet
        res = self.site
        if apply:
            try:
                self.custom.patch_cluster_custom_object(res.group, res.version, res.plural, name, owned,
                                                        **self._apply_options(), _preload_content=False)
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                raise OSError(f"applying GridSite {name}: {api_error(exc)}") from exc
        if patch:
            try:
                self.custom.patch_cluster_custom_object_status(
                    res.group,
                    res.version,
                    res.plural,
                    name,
                    {"status": status},
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=REQUEST_SECONDS,
                )
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                raise OSError(f"patching GridSite {name} status: {api_error(exc)}") from exc
        self._acted[name] = (seen, wish)
        return True

    def _retire_gridsite(self, name: str, stored: Mapping[str, Any] | None, *, network_gone: bool = False) -> bool:
        """Delete a GridSite that is no longer discovered, only when it carries the auto-discovered label
        (or, not seen yet, was written by this sink). While its network is still here, one that holds what
        someone else configured (an admin's trust pins) is kept for the site's return: a site that left and
        comes back is verified against them. True when a DELETE was sent."""
        acted = self._acted.get(name)
        kept = sinks.admin_configured(stored) and not network_gone
        if stored is not None and (not sinks.auto_discovered(stored) or kept):
            self._acted.pop(name, None)
            return False
        if stored is None and (acted is None or acted[1] == _DELETE):
            self._acted.pop(name, None)
            return False
        seen = _resource_version(stored)
        if acted == (seen, _DELETE):
            return False
        res = self.site
        try:
            self.custom.delete_cluster_custom_object(
                res.group, res.version, res.plural, name, _preload_content=False, _request_timeout=REQUEST_SECONDS
            )
        except ApiException as exc:
            if exc.status != 404:
                raise OSError(f"deleting GridSite {name}: {api_error(exc)}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise OSError(f"deleting GridSite {name}: {api_error(exc)}") from exc
        self._acted[name] = (seen, _DELETE)
        return True


def _without_ages(document: Mapping[str, Any]) -> Any:
    members = document.get("members")
    if not isinstance(members, list):
        return copy.deepcopy(dict(document))
    ageless = [{k: v for k, v in m.items() if k != "ageSecs"} if isinstance(m, Mapping) else m for m in members]
    return {**copy.deepcopy(dict(document)), "members": ageless}


def _resource_version(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else str((obj.get("metadata") or {}).get("resourceVersion") or "")
