"""Sinks: where rendered ConfigMaps and GridNetwork status go; `OverlaySink` builds the status entries.

Every sink shares `OverlaySink.publish`, so the `overlayStatus` entries (phase, reasons, the revision kept
after a failure) are the same whether they land in files or in a cluster (`kube.KubeSink`).

The `dir` sink writes rendered ConfigMaps and GridNetwork status to a directory.

For each gateway it writes `<configmap>.configmap.yaml` (the object a cluster would store) and
`<configmap>/`, the same data laid out the way kubelet projects a ConfigMap volume (timestamped data
directory, `..data` symlink swapped atomically, one symlink per key), so a gateway or overlay-sync can
watch it exactly as in a cluster. Unchanged revisions are not rewritten. `<network>.status.yaml` carries
the per-gateway overlay status; a failed render or write keeps the last distributed revision and says why.

With the mesh enabled a sink also takes the mesh outputs (`MeshOutputs`): the discovered GridSites and
the mesh status document. The `dir` sink writes `<gridsite>.gridsite.yaml`, one GridSite object per
discovered site (rewritten when its spec, labels, phase, reason or message change, removed when the site
or its network goes away), and `mesh.state.yaml`, the membership and merged record view. Every file is
replaced atomically, so a reader never sees half of one. The helpers below (`mesh_status_text`,
`owned_gridsite`, `gridsite_status`, ...) are what every sink stores, so files and cluster agree.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from reference.files import DATA_LINK, project_files, write_atomic
from reference.operator.core.configmap import configmap_name, needs_write
from reference.operator.core.consumer_config import ConsumerConfigOutput
from reference.operator.core.model import GridNetworkSpec
from reference.operator.core.render import Rendered
from reference.operator.mesh.sites import API_VERSION, LABEL_DISCOVERED, LABEL_NETWORK
from reference.operator.sources import SAFE_LOADER

log = logging.getLogger("agn.operator.sinks")

STATUS_SUFFIX = ".status.yaml"
CONFIGMAP_SUFFIX = ".configmap.yaml"
GRIDSITE_SUFFIX = ".gridsite.yaml"
TOOL_STATUS_SUFFIX = ".agenttoolprovider.yaml"
MESH_STATUS_FILE = "mesh.state.yaml"


def project(directory: Path, data: Mapping[str, str]) -> None:
    """Write a ConfigMap's data as kubelet projects it (see reference.files.project_files)."""
    project_files(directory, {key: value.encode("utf-8") for key, value in data.items()})


@dataclass(frozen=True)
class GatewayStatus:
    """One `status.overlayStatus[]` entry."""

    entry: dict[str, Any]

    @property
    def distributed(self) -> str | None:
        value = self.entry.get("distributedRevision")
        return value if isinstance(value, str) else None


def entries_by_gateway(status: Mapping[str, Any] | None) -> dict[tuple[Any, Any], dict[str, Any]]:
    """`status.overlayStatus` keyed by (gatewayName, gatewayNamespace); tolerant of missing or odd values."""
    entries = (status or {}).get("overlayStatus") or []
    if not isinstance(entries, list):
        return {}
    return {(e.get("gatewayName"), e.get("gatewayNamespace")): e for e in entries if isinstance(e, dict)}


def status_body(network: GridNetworkSpec, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The GridNetwork `status` a sink stores: the generation it answers and one entry per gateway."""
    return {"observedGeneration": network.generation, "overlayStatus": entries}


class OverlaySink(abc.ABC):
    """What every sink shares: one status entry per gateway reference, built the same way everywhere.

    A sink says where ConfigMaps and status live: `previous_entries` (the status it stored last),
    `write_configmap` (True when written, False when the revision is unchanged, OSError on failure) and
    `write_status`.
    """

    @abc.abstractmethod
    def previous_entries(self, network: str) -> dict[tuple[Any, Any], dict[str, Any]]:
        raise NotImplementedError

    @abc.abstractmethod
    def write_configmap(self, rendered: Rendered) -> bool:
        raise NotImplementedError

    @abc.abstractmethod
    def write_status(self, network: GridNetworkSpec, status: dict[str, Any]) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def write_consumer_config(self, output: ConsumerConfigOutput) -> None:
        """Store a generated consumer config, or remove the one stored under its name (configmap None);
        OSError on failure."""
        raise NotImplementedError

    def _consumer_config(self, network: str, output: ConsumerConfigOutput) -> None:
        """A consumer config follows the overlay it was generated from; its failures never fail the overlay."""
        if output.problem is not None:
            log.error("consumer config %s of %s not generated: %s", output.name, network, output.problem)
            return
        try:
            self.write_consumer_config(output)
        except OSError as exc:
            log.error("consumer config %s of %s not written: %s", output.name, network, exc)

    def write_tool_status(self, name: str, discovered: Sequence[str]) -> bool:
        """Record the tools a discovery probe found in AgentToolProvider `name`'s status; True when written
        (an unchanged list is not written again). Sinks without somewhere to put it keep nothing."""
        return False

    def publish(
        self,
        networks: Iterable[GridNetworkSpec],
        rendered: Iterable[Rendered],
        wall: datetime,
        render_error: str | None = None,
    ) -> dict[str, list[dict[str, Any]]]:
        """Write every rendered overlay and each network's status; returns the status entries written."""
        by_gateway = {(r.network, r.gateway, r.namespace): r for r in rendered}
        written: dict[str, list[dict[str, Any]]] = {}
        for network in networks:
            previous = self.previous_entries(network.name)
            entries = []
            for ref in network.gateway_refs:
                before = previous.get((ref.name, ref.namespace), {})
                result = by_gateway.get((network.name, ref.name, ref.namespace))
                entries.append(self._gateway(network.name, ref.name, ref.namespace, result, before, render_error, wall))
            written[network.name] = entries
            self.write_status(network, status_body(network, entries))
        return written

    def _gateway(
        self,
        network: str,
        gateway: str,
        namespace: str,
        result: Rendered | None,
        before: Mapping[str, Any],
        render_error: str | None,
        wall: datetime,
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "gatewayName": gateway,
            "gatewayNamespace": namespace,
            "configMapName": configmap_name(network, gateway),
        }
        for key in (
            "renderedRevision",
            "distributedRevision",
            "contentDigest",
            "schemaVersion",
            "renderedAt",
            "candidateCount",
        ):
            if key in before:
                entry[key] = before[key]
        if result is None:
            reason = render_error or "no overlay was rendered for this gateway"
            entry.update(phase="Error", reason="RenderFailed", message=reason)
            return entry
        envelope = result.envelope
        entry.update(
            renderedRevision=result.revision,
            contentDigest=envelope["content_digest"]["value"],
            schemaVersion=str(envelope["schema_version"]),
            renderedAt=envelope["provenance"]["rendered_at"],
            candidateCount=result.candidate_count,
        )
        try:
            changed = self.write_configmap(result)
        except OSError as exc:  # a sink reports any failure to store the ConfigMap as an OSError
            entry.update(phase="Error", reason="WriteFailed", message=f"writing the overlay failed: {exc}")
            return entry
        entry.update(
            distributedRevision=result.revision,
            phase="Distributed",
            reason="Distributed",
            message="overlay distributed" if changed else "overlay unchanged",
        )
        if result.consumer_config is not None:
            self._consumer_config(network, result.consumer_config)
        return entry


# --- mesh outputs ---------------------------------------------------------------------------------

#: The GridSite status keys a sink stores for a discovered site.
GRIDSITE_STATUS_KEYS = ("phase", "reason", "message", "lastProbeTime", "lastTransitionTime")


def mesh_status_text(document: Mapping[str, Any]) -> str:
    """`mesh.state.yaml` as every sink stores it (the file, or the ConfigMap's data key)."""
    return yaml.safe_dump(dict(document), sort_keys=True)


def owned_gridsite(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a discovered GridSite the operator owns in a cluster: its name, the network and
    auto-discovered labels and `spec.gridNetworkRef`. Everything else (an admin's `spec.trust`,
    `spec.gatewayEndpoint`, other labels) belongs to whoever wrote it."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return {
        "apiVersion": API_VERSION,
        "kind": "GridSite",
        "metadata": {
            "name": metadata.get("name"),
            "labels": {key: labels[key] for key in (LABEL_NETWORK, LABEL_DISCOVERED) if key in labels},
        },
        "spec": {"gridNetworkRef": (obj.get("spec") or {}).get("gridNetworkRef")},
    }


def gridsite_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The status of a discovered GridSite as stored: phase, reason, message and the two times."""
    status = obj.get("status") or {}
    return {key: status.get(key) for key in GRIDSITE_STATUS_KEYS}


def gridsite_verdict(obj: Mapping[str, Any] | None) -> tuple[Any, Any, Any]:
    """(phase, reason, message): what decides whether a stored status is rewritten (not the probe time)."""
    status = (obj or {}).get("status") or {}
    if not isinstance(status, Mapping):
        return (None, None, None)
    return (status.get("phase"), status.get("reason"), status.get("message"))


def holds_owned_fields(stored: Mapping[str, Any] | None, owned: Mapping[str, Any]) -> bool:
    """True when a stored GridSite carries every field of `owned_gridsite(...)` with the same value."""
    if stored is None:
        return False
    labels = (stored.get("metadata") or {}).get("labels") or {}
    spec = stored.get("spec") or {}
    return dict(labels).items() >= owned["metadata"]["labels"].items() and (
        spec.get("gridNetworkRef") == owned["spec"]["gridNetworkRef"]
    )


def admin_configured(obj: Mapping[str, Any] | None) -> bool:
    """Whether a stored GridSite holds configuration besides the operator's own fields (an admin's
    `spec.trust` or `spec.gatewayEndpoint`, say): deleting it would lose what someone else wrote."""
    spec = (obj or {}).get("spec") or {}
    return isinstance(spec, Mapping) and any(value not in (None, {}, []) for key, value in spec.items()
                                             if key != "gridNetworkRef")


def auto_discovered(obj: Mapping[str, Any] | None) -> bool:
    """Whether a stored GridSite carries the auto-discovered label (only those are ever deleted)."""
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return isinstance(labels, Mapping) and labels.get(LABEL_DISCOVERED) == "true"


class MeshOutputs(abc.ABC):
    """Where the mesh's outputs go: the discovered GridSites and the mesh status document.

    Both methods are called after every reconcile and on every loop pass, so they must be cheap when
    nothing changed and write only what did; a failure raises OSError and the next pass tries again.
    """

    @abc.abstractmethod
    def write_gridsites(
        self, objects: Mapping[str, Mapping[str, Any]], networks: Collection[str] = ()
    ) -> list[str]:
        """Make the stored discovered GridSites `objects` (name -> object with status); `networks` are
        the local GridNetworks. Returns the names written or removed."""
        raise NotImplementedError

    @abc.abstractmethod
    def write_mesh_status(self, document: Mapping[str, Any]) -> bool:
        """Store the mesh status document when it changed; True when written."""
        raise NotImplementedError


class DirSink(OverlaySink, MeshOutputs):
    """Writes overlays and status under `out`; every method is safe to repeat."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._gridsites: dict[str, Any] = {}
        self._mesh_status: Any = None
        self._tool_status: dict[str, list[str]] = {}

    def configmap_path(self, name: str) -> Path:
        return self.out / f"{name}{CONFIGMAP_SUFFIX}"

    def status_path(self, network: str) -> Path:
        return self.out / f"{network}{STATUS_SUFFIX}"

    def read_configmap(self, name: str) -> dict[str, Any] | None:
        try:
            doc = yaml.load(self.configmap_path(name).read_text(encoding="utf-8"), Loader=SAFE_LOADER)
        except (OSError, yaml.YAMLError):
            return None
        return doc if isinstance(doc, dict) else None

    def read_status(self, network: str) -> dict[str, Any]:
        try:
            doc = yaml.load(self.status_path(network).read_text(encoding="utf-8"), Loader=SAFE_LOADER)
        except (OSError, yaml.YAMLError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def write_configmap(self, rendered: Rendered) -> bool:
        """Write the object and its projected form when the revision changed; True when written."""
        configmap = rendered.configmap
        name = configmap["metadata"]["name"]
        projected = self.out / name
        if not needs_write(self.read_configmap(name), configmap) and (projected / DATA_LINK).exists():
            return False
        project(projected, configmap["data"])
        write_atomic(self.configmap_path(name), yaml.safe_dump(configmap, sort_keys=True))
        return True

    def previous_entries(self, network: str) -> dict[tuple[Any, Any], dict[str, Any]]:
        status = self.read_status(network).get("status")
        return entries_by_gateway(status if isinstance(status, Mapping) else None)

    def write_consumer_config(self, output: ConsumerConfigOutput) -> None:
        path = self.configmap_path(output.name)
        if output.configmap is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        text = yaml.safe_dump(output.configmap, sort_keys=True)
        with contextlib.suppress(OSError):
            if path.read_text(encoding="utf-8") == text:
                return
        write_atomic(path, text)

    def write_status(self, network: GridNetworkSpec, status: dict[str, Any]) -> None:
        doc = {
            "apiVersion": "grid.praxis.fast/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": network.name},
            "status": status,
        }
        write_atomic(self.status_path(network.name), yaml.safe_dump(doc, sort_keys=True))

    def tool_status_path(self, name: str) -> Path:
        return self.out / f"{name}{TOOL_STATUS_SUFFIX}"

    def write_tool_status(self, name: str, discovered: Sequence[str]) -> bool:
        """`<name>.agenttoolprovider.yaml`: the provider's status as discovery recorded it."""
        wanted = list(discovered)
        if self._tool_status.get(name) == wanted and self.tool_status_path(name).exists():
            return False
        write_atomic(self.tool_status_path(name), yaml.safe_dump(tool_status_object(name, wanted),
                                                                     sort_keys=True))
        self._tool_status[name] = wanted
        return True

    def gridsite_path(self, name: str) -> Path:
        return self.out / f"{name}{GRIDSITE_SUFFIX}"

    def mesh_status_path(self) -> Path:
        return self.out / MESH_STATUS_FILE

    def write_gridsites(
        self, objects: Mapping[str, Mapping[str, Any]], networks: Collection[str] = ()
    ) -> list[str]:
        """Make the `*.gridsite.yaml` files exactly `objects`; returns the names written or removed.

        A file is rewritten only when the object changed apart from `status.lastProbeTime`, so a site that
        is re-probed every second without a new verdict is not rewritten every second.
        """
        touched = []
        for name, obj in sorted(objects.items()):
            comparable = _without_probe_time(obj)
            path = self.gridsite_path(name)
            if self._gridsites.get(name) == comparable and path.exists():
                continue
            write_atomic(path, yaml.safe_dump(dict(obj), sort_keys=True))
            self._gridsites[name] = comparable
            touched.append(name)
        for path in sorted(self.out.glob(f"*{GRIDSITE_SUFFIX}")):
            name = path.name[: -len(GRIDSITE_SUFFIX)]
            if name not in objects:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                self._gridsites.pop(name, None)
                touched.append(name)
        return touched

    def write_mesh_status(self, document: Mapping[str, Any]) -> bool:
        """Write `mesh.state.yaml` when its content changed; True when written."""
        path = self.mesh_status_path()
        if self._mesh_status == document and path.exists():
            return False
        write_atomic(path, mesh_status_text(document))
        self._mesh_status = copy.deepcopy(dict(document))
        return True


def _without_probe_time(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(obj))
    status = out.get("status")
    if isinstance(status, dict):
        status.pop("lastProbeTime", None)
    return out


def tool_status_object(name: str, discovered: Sequence[str]) -> dict[str, Any]:
    """AgentToolProvider `name` with the status tool discovery records."""
    return {"apiVersion": API_VERSION, "kind": "AgentToolProvider", "metadata": {"name": name},
            "status": {"discoveredTools": list(discovered)}}
