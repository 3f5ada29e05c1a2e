"""A site's control plane on the local backend: the operator under test, what it reads and what it writes.

The operator watches a directory of grid resources and writes, per gateway reference,
`<configmap>.configmap.yaml` and, per network, `<network>.status.yaml` (rewritten on every reconcile);
in a mesh also `mesh.state.yaml` (members and merged records) and `<gridsite>.gridsite.yaml` per
discovered site, which `mesh_state` and `gridsite` read.
The suites apply and delete resources, force reconciles with the force-refresh annotation, read back the
ConfigMap and status, and connect the reference overlay-sync and a gateway to follow a revision from
rendered to distributed, accepted and serving. `output_names` and `written_texts` list what the operator
wrote without the suites knowing where it lives (files here, objects of a cluster in
`harness.backends.kube.control.KubeControlPlane`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness import fastyaml, feature_use, http_get, producer_oracle, status_shapes
from harness.backends import OperationUnsupported
from harness.contract import ScopeSpec
from harness.overlay_facts import pick_by_facts
from harness.process import ManagedProcess
from harness.projection import write_atomic
from harness.reconcile_watch import ReconcileWatch
from harness.resources import DEFAULT_GATEWAY, DEFAULT_NAMESPACE
from harness.site_inputs import SiteInventory, as_operator_reads
from harness.spelling import spelled
from harness.timeline import current, record_action, record_revision
from harness.timeouts import timeouts
from harness.waiting import WaitTimeout, poll_until

if TYPE_CHECKING:
    from harness.grid import Gateway, Site

FORCE_REFRESH = "grid.praxis.fast/force-refresh"
ENVELOPE_KEY = "routing-overlay.json"
#: Where the operator records a tool provider's discovered tools: `<name>.agenttoolprovider.yaml`.
TOOL_STATUS_SUFFIX = ".agenttoolprovider.yaml"
LEGACY_KEY = "routing-config.json"
#: The dir sink's mesh outputs: the membership and merged records, and one file per discovered GridSite.
MESH_STATE = "mesh.state.yaml"
GRIDSITE_SUFFIX = ".gridsite.yaml"


class OperatorExited(RuntimeError):
    """The operator under test is no longer running; carries its log tail."""


class OperatorProcess(Protocol):
    """The operator under test as the suites handle it: a process here, a Deployment in a cluster.

    `kill` crashes it with no chance to say goodbye, `stop` lets it shut down gracefully.
    """

    @property
    def name(self) -> str: ...

    @property
    def returncode(self) -> int | None: ...

    def running(self) -> bool: ...

    def kill(self) -> int | None: ...

    def stop(self) -> int | None: ...

    def log_text(self) -> str: ...

    def log_tail(self, lines: int = 40) -> str: ...


@dataclass(frozen=True)
class StatusStamp:
    """Identity of the status file as last written: a rewrite shows that a reconcile finished."""

    inode: int
    mtime_ns: int
    size: int


class ControlPlane:
    """The operator process of one site with its resource and output directories."""

    process: OperatorProcess

    #: how the operator spells a provider's metrics URL (harness.spelling); resources are written that way
    metrics_endpoint_key = "endpoint"

    def __init__(self, site: Site, process: ManagedProcess, manifests: Path, out: Path,
                 respawn: Callable[[], ManagedProcess] | None = None, *,
                 metrics_endpoint_key: str = "endpoint", provider_site: str = "siteSelector") -> None:
        self.site = site
        self.process = process
        self.manifests = manifests
        self.out = out
        self.metrics_endpoint_key = metrics_endpoint_key
        self.sites = SiteInventory(provider_site)  # how hosting sites are written (harness.site_inputs)
        self._respawn = respawn  # starts the operator again on these directories
        self._applied: dict[tuple[str, str], dict[str, Any]] = {}
        self.chains: list[Chain] = []

    # ---------------------------------------------------------------------------------------- inputs

    def _path(self, kind: str, name: str) -> Path:
        return self.manifests / f"{kind.lower()}-{name}.yaml"

    def apply(self, *objects: dict[str, Any]) -> None:
        """Create or replace resources (one file each, replaced atomically)."""
        feature_use.note_resources(objects)
        for obj in objects:
            kind, name = obj["kind"], obj["metadata"]["name"]
            self._applied[(kind, name)] = copy.deepcopy(obj)
            for site in self.sites.sites_for(obj):  # a hosting site to select, written first
                self._write(self._path("GridSite", site["metadata"]["name"]), yaml.safe_dump(site, sort_keys=False))
            written = as_operator_reads(spelled(obj, self.metrics_endpoint_key), self.sites.mode)
            self._write(self._path(kind, name), yaml.safe_dump(written, sort_keys=False))

    def apply_raw(self, filename: str, text: str) -> Path:
        """Write a resource file verbatim, e.g. one that breaks its CRD schema."""
        path = self.manifests / filename
        self._write(path, text)
        return path

    def delete(self, kind: str, name: str) -> None:
        self._applied.pop((kind, name), None)
        for path in [self._path(kind, name), *(self._path("GridSite", s) for s in self.sites.released(kind, name))]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def delete_file(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def applied(self, kind: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self._applied[(kind, name)])

    def generation(self, kind: str, name: str) -> int | None:
        """The object's metadata.generation as the operator's source holds it: here the file as written (a
        client's value kept), where an API server assigns its own (1, then one more per spec change)."""
        value = (self._applied.get((kind, name)) or {}).get("metadata", {}).get("generation")
        return value if isinstance(value, int) else None

    def restart(self) -> None:
        """Stop the operator (SIGTERM, as a pod is stopped) and start a new process of it on the same
        resources and outputs, as a Deployment replaces its pod: whatever it kept only in memory is gone,
        whatever it wrote stays."""
        if self._respawn is None:
            raise OperationUnsupported("this control plane was not given a way to start its operator again")
        if isinstance(self.process, ManagedProcess):
            self.site.grid.backend.stop(self.process)  # also forgets it, so teardown does not stop it again
        else:
            self.process.stop()
        self.process = self._respawn()
        record_action(f"restarted {self.site.spec.name}'s operator", site=self.site.spec.name)

    def force_reconcile(self, network: str) -> None:
        """Set a fresh force-refresh annotation on the GridNetwork, as the demos do."""
        obj = self._applied[("GridNetwork", network)]
        obj["metadata"].setdefault("annotations", {})[FORCE_REFRESH] = uuid.uuid4().hex
        self._write(self._path("GridNetwork", network), yaml.safe_dump(obj, sort_keys=False))

    @staticmethod
    def _write(path: Path, text: str) -> None:
        write_atomic(path, text)

    # --------------------------------------------------------------------------------------- outputs

    def configmap_path(self, network: str, gateway: str = DEFAULT_GATEWAY) -> Path:
        """Where the operator writes the overlay ConfigMap: under the name the reference and the public operator
        give it, else the one ConfigMap file of the output directory holding this scope's envelope (the spec
        names the ConfigMap's keys, not its name: harness.overlay_facts)."""
        path = self.out / f"{producer_oracle.configmap_name(network, gateway)}.configmap.yaml"
        if path.exists():
            return path
        written = [(candidate, doc) for candidate in sorted(self.out.glob("*.configmap.yaml"))
                   if (doc := _read_yaml(candidate)) is not None]
        found = pick_by_facts([doc for _, doc in written], ENVELOPE_KEY, network, gateway)
        if found is None:
            return path
        return next((candidate for candidate, doc in written
                     if (doc.get("metadata") or {}).get("name") == found), path)

    def configmap(self, network: str, gateway: str = DEFAULT_GATEWAY) -> dict[str, Any] | None:
        return _read_yaml(self.configmap_path(network, gateway))

    def configmap_named(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any] | None:
        """Another ConfigMap the operator writes under its own name (a generated consumer config)."""
        return _read_yaml(self.out / f"{name}.configmap.yaml")

    def envelope(self, network: str, gateway: str = DEFAULT_GATEWAY) -> dict[str, Any] | None:
        """The envelope in the ConfigMap's `routing-overlay.json`, or None when absent or unreadable."""
        configmap = self.configmap(network, gateway)
        data = (configmap or {}).get("data") or {}
        try:
            doc = json.loads(data[ENVELOPE_KEY])
        except (KeyError, TypeError, ValueError):
            return None
        if not isinstance(doc, dict):
            return None
        self._saw("rendered", _revision_value(doc), network, gateway)
        return doc

    def _saw(self, stage: str, revision: Any, network: str, gateway: str) -> None:
        """Put a revision stage the harness read from this operator's outputs on the running test's timeline."""
        if isinstance(revision, str) and current() is not None:
            ref = None if gateway == DEFAULT_GATEWAY else gateway
            record_revision(stage, revision, site=self.site.spec.name, network=network, gatewayRef=ref)

    def status_path(self, network: str) -> Path:
        return self.out / f"{network}.status.yaml"

    def status(self, network: str) -> dict[str, Any]:
        """`status` of the GridNetwork as last written ({} before the first reconcile)."""
        doc = _read_yaml(self.status_path(network)) or {}
        status = doc.get("status")
        return status if isinstance(status, dict) else {}

    def status_entry(self, network: str, gateway: str = DEFAULT_GATEWAY,
                     namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any]:
        entry = status_shapes.find_entry(self.status(network), gateway, namespace)
        if entry is None:
            return {}
        self._saw("rendered", entry.get("renderedRevision"), network, gateway)
        self._saw("distributed", entry.get("distributedRevision"), network, gateway)
        return entry

    def status_stamp(self, network: str) -> Hashable | None:
        """A value that changes whenever the status is written again (None before the first write)."""
        try:
            st = self.status_path(network).stat()
        except FileNotFoundError:
            return None
        return StatusStamp(st.st_ino, st.st_mtime_ns, st.st_size)

    def mesh_state(self) -> dict[str, Any] | None:
        """The operator's mesh status (`site`, `members`, `records`) as last written; None before the first."""
        return _read_yaml(self.out / MESH_STATE)

    def gridsite(self, name: str) -> dict[str, Any] | None:
        """The GridSite `name` with its status as the operator last wrote it; None while it wrote none."""
        return _read_yaml(self.out / f"{name}{GRIDSITE_SUFFIX}")

    def tool_status(self, name: str) -> dict[str, Any]:
        """The `status` the operator recorded for AgentToolProvider `name` ({} while it recorded none)."""
        doc = _read_yaml(self.out / f"{name}{TOOL_STATUS_SUFFIX}") or {}
        status = doc.get("status")
        return status if isinstance(status, dict) else {}

    def log_text(self) -> str:
        return self.process.log_text()

    def output_names(self, pattern: str = "*") -> list[str]:
        """Names of the operator's outputs matching a glob: `<configmap>.configmap.yaml`, `<network>.status.yaml`."""
        return sorted(p.name for p in self.out.glob(pattern))

    def written_texts(self) -> dict[str, str]:
        """Everything the operator has written, as text: every output (by path) and its log."""
        texts = {"operator log": self.log_text()}
        for path in sorted(Path(self.out).rglob("*")):
            with contextlib.suppress(OSError):  # a file replaced while listing is read under its new name
                if path.is_file():
                    texts[str(path)] = path.read_bytes().decode("utf-8", errors="replace")
        return texts

    # ----------------------------------------------------------------------------------------- waits

    def check_running(self) -> None:
        if not self.process.running():
            raise OperatorExited(f"the operator exited with {self.process.returncode}\n--- operator log (tail) ---\n"
                                 f"{self.process.log_tail()}")

    def wait_envelope(self, network: str, until: Callable[[dict[str, Any]], bool] = lambda _e: True, *,
                      what: str = "the expected overlay", gateway: str = DEFAULT_GATEWAY,
                      timeout: float | None = None, force_every: float | None = None) -> dict[str, Any]:
        """Poll the rendered envelope until `until` holds; optionally force a reconcile every few seconds.

        Forcing is for conditions that depend on metrics, which the operator only reads when it reconciles.
        """
        timeout = timeouts().reconcile if timeout is None else timeout
        last_force = [0.0]

        def probe() -> dict[str, Any] | None:
            self.check_running()
            envelope = self.envelope(network, gateway)
            if force_every is not None and (envelope is None or not until(envelope)):
                now = _monotonic()
                if now - last_force[0] >= force_every:
                    self.force_reconcile(network)
                    last_force[0] = now
            return envelope

        result = poll_until(probe, lambda e: e is not None and until(e), timeout=timeout,
                            what=f"{what} in the ConfigMap of {network}/{gateway}", describe=_summary,
                            fatal=(OperatorExited,))
        assert result is not None
        return result

    def reconcile(self, network: str, gateway: str = DEFAULT_GATEWAY,
                  timeout: float | None = None) -> dict[str, Any] | None:
        """Force a reconcile and wait until it has written status; returns the envelope after it."""
        timeout = timeouts().reconcile if timeout is None else timeout
        self._wait_recorded(network, gateway, timeout)
        watch = ReconcileWatch(self.status_stamp(network), self.scrapes, timeout)
        self.force_reconcile(network)

        def probe() -> Hashable | None:
            self.check_running()
            return self.status_stamp(network)

        poll_until(probe, watch.answered, timeout=timeout,
                   what=f"a forced reconcile of {network} to be answered (its status rewritten, or its providers "
                        "scraped again)", fatal=(OperatorExited,))
        return self.envelope(network, gateway)

    def scrapes(self) -> int:
        """How often the site's fake backends' /metrics have been read: each reconcile of a network whose
        providers have metricsConfig scrapes them, so a count that grows shows a reconcile that wrote nothing."""
        total = 0
        for provider in self.site.spec.providers:
            try:
                total += self.site.backend_metrics_requests(provider.name)
            except (AssertionError, httpx.HTTPError):  # a backend a test stopped or made fail: no evidence either way
                continue
        return total

    def _wait_recorded(self, network: str, gateway: str, timeout: float) -> None:
        """Wait until the status records the ConfigMap on disk as distributed.

        The operator applies the ConfigMap and then records the revision status (contract: "Applies the overlay
        ConfigMap and records rendered/distributed revision status"), and on a successful apply the
        distributed revision is the one applied. Until that record lands, its status write would be taken
        for the write of a reconcile forced now, and the forced reconcile's envelope for the previous one.
        """
        revision = _revision_value(self.envelope(network, gateway) or {})
        if revision is None:
            return
        what = f"the distributed revision {str(revision)[:12]} of the ConfigMap on disk"
        self.wait_status(network, lambda entry: entry.get("distributedRevision") == revision, gateway=gateway,
                         timeout=timeout, what=what)

    def wait_status(self, network: str, until: Callable[[dict[str, Any]], bool], *, what: str,
                    gateway: str = DEFAULT_GATEWAY, timeout: float | None = None) -> dict[str, Any]:
        timeout = timeouts().reconcile if timeout is None else timeout
        def probe() -> dict[str, Any]:
            self.check_running()
            return self.status_entry(network, gateway)

        def describe(entry: Any) -> str:
            if entry:
                return str(entry)
            return status_shapes.missing(self.status(network), gateway, DEFAULT_NAMESPACE)

        return poll_until(probe, until, timeout=timeout, what=f"{what} in the status of {network}/{gateway}",
                          describe=describe, fatal=(OperatorExited,))

    # ----------------------------------------------------------------------------------------- chain

    def connect(self, network: str, gateway_ref: str = DEFAULT_GATEWAY, namespace: str = DEFAULT_NAMESPACE,
                timeout: float | None = None,
                start_gateway: Callable[[Path, ScopeSpec], Gateway] | None = None) -> Chain:
        """Start overlay-sync on the rendered ConfigMap and a gateway on what it delivers.

        `start_gateway(overlay_dir, scope)` starts some other gateway than the site's core consumer
        gateway (one with a provider hop, say) on the delivered directory.
        """
        timeout = timeouts().reconcile if timeout is None else timeout
        envelope = self.wait_envelope(network, gateway=gateway_ref, what="a first overlay", timeout=timeout)
        scope = ScopeSpec(network, gateway_ref, namespace, envelope["scope"]["local_site"])
        sync = self.site.grid.backend.start_overlay_sync(self.site.index, self.configmap_path(network, gateway_ref),
                                                         scope)
        delivered = poll_until(lambda: sync.delivered_revision(), lambda r: r is not None, timeout=timeout,
                               what=f"overlay-sync to deliver the first revision of {network}")
        self._saw("accepted", delivered, network, gateway_ref)
        gateway = self._chain_gateway(sync.target_dir, scope, start_gateway)
        return self._add_chain(Chain(self, network, gateway_ref, sync, gateway))

    def _chain_gateway(self, overlay_dir: Path, scope: ScopeSpec,
                       start_gateway: Callable[[Path, ScopeSpec], Gateway] | None) -> Gateway:
        """The chain's gateway on `overlay_dir`: the caller's starter, else a core gateway of the site."""
        if start_gateway is None:
            return self.site.start_gateway("core", None, overlay_dir=overlay_dir, scope=scope)
        return start_gateway(overlay_dir, scope)

    def _add_chain(self, chain: Chain) -> Chain:
        self.chains.append(chain)
        return chain

    def disconnect(self, chain: Chain) -> None:
        if chain in self.chains:
            self.chains.remove(chain)
        self.site.stop_gateway(chain.gateway)
        self.site.grid.backend.stop(chain.sync.process)

    def diagnostics(self) -> str:
        files = sorted(p.name for p in self.out.glob("*.yaml")) if self.out.is_dir() else []
        parts = [f"=== operator {self.process.name}: outputs {files}\n--- log tail ---\n{self.process.log_tail()}"]
        for chain in self.chains:
            parts.append(f"=== overlay-sync for {chain.network}\n{chain.sync.process.log_tail(20)}")
        return "\n".join(parts)


@dataclass
class OverlaySyncProcess:
    """A running overlay-sync: the ConfigMap file it follows, where it delivers, and its probes."""

    process: ManagedProcess
    configmap_file: Path
    target_dir: Path
    admin: str
    ready_path: str = "/ready"
    live_path: str = "/healthy"
    metrics_path: str | None = None

    def _probe(self, path: str) -> bool:
        """An HTTP probe as kubelet runs one: success is a 2xx or 3xx answer."""
        try:
            return 200 <= http_get.get(f"http://{self.admin}{path}", timeout=2.0).status_code < 400
        except httpx.HTTPError:
            return False

    def ready(self) -> bool:
        return self._probe(self.ready_path)

    def live(self) -> bool:
        return self._probe(self.live_path)

    def delivered(self) -> dict[str, Any] | None:
        try:
            doc = json.loads((self.target_dir / ENVELOPE_KEY).read_bytes())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def delivered_revision(self) -> str | None:
        doc = self.delivered()
        revision = (doc or {}).get("revision") or {}
        value = revision.get("value") if isinstance(revision, dict) else None
        return value if isinstance(value, str) else None

    def metrics_text(self) -> str:
        """Its Prometheus text at the descriptor's metrics_path."""
        if self.metrics_path is None:
            raise ValueError("this overlay-sync's descriptor names no metrics_path")
        return http_get.get(f"http://{self.admin}{self.metrics_path}", timeout=5.0).text


@dataclass
class SyncFeed:
    """An overlay-sync under test on a ConfigMap the harness writes itself (no operator involved): the
    suites publish any bytes under the envelope key and read back what the sidecar delivered."""

    sync: OverlaySyncProcess
    name: str
    namespace: str

    @staticmethod
    def configmap_text(name: str, namespace: str, data: str) -> str:
        """The ConfigMap object as the operator's directory sink writes it."""
        return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": name, "namespace": namespace},
                               "data": {ENVELOPE_KEY: data}}, sort_keys=False)

    def publish(self, data: bytes | str) -> None:
        """Replace the ConfigMap's envelope (written beside the file, then renamed over it)."""
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        ControlPlane._write(self.sync.configmap_file, self.configmap_text(self.name, self.namespace, text))

    @property
    def delivered_path(self) -> Path:
        return self.sync.target_dir / ENVELOPE_KEY

    def delivered_bytes(self) -> bytes | None:
        try:
            return self.delivered_path.read_bytes()
        except OSError:
            return None

    def delivered_inode(self) -> int | None:
        """The inode behind the serving file's name (through a symlink, as kubelet projects one)."""
        try:
            return os.stat(self.delivered_path).st_ino
        except OSError:
            return None

    def ready(self) -> bool:
        return self.sync.ready()

    def live(self) -> bool:
        return self.sync.live()

    def log_tail(self, lines: int = 30) -> str:
        return self.sync.process.log_tail(lines)

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Samples of its Prometheus text, keyed by (sample name, labels)."""
        return {(sample.name, frozenset(sample.labels.items())): sample.value
                for family in text_string_to_metric_families(self.sync.metrics_text()) for sample in family.samples}


@dataclass
class Chain:
    """Operator -> ConfigMap -> overlay-sync -> gateway for one network's gateway reference."""

    control: ControlPlane
    network: str
    gateway_ref: str
    sync: OverlaySyncProcess
    gateway: Gateway

    def wait_accepted(self, revision: str, timeout: float | None = None) -> None:
        timeout = timeouts().reconcile if timeout is None else timeout
        def seen(delivered: str | None) -> str:
            # a wait for a revision the operator has since replaced can never end: say so when it times out
            rendered = _revision_value(self.control.envelope(self.network, self.gateway_ref) or {})
            return f"delivered {delivered}; the operator now renders {rendered}"

        poll_until(self.sync.delivered_revision, lambda r: r == revision, timeout=timeout,
                   what=f"overlay-sync to deliver revision {revision[:19]}", describe=seen)
        self.control._saw("accepted", revision, self.network, self.gateway_ref)


def _revision_value(envelope: dict[str, Any]) -> Any:
    revision = envelope.get("revision")
    return revision.get("value") if isinstance(revision, dict) else None


def _read_yaml(path: Path) -> dict[str, Any] | None:
    try:
        doc = fastyaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _summary(envelope: dict[str, Any] | None) -> str:
    if envelope is None:
        return "no ConfigMap yet"
    candidates = (envelope.get("overlay") or {}).get("candidates") or []
    rows = [
        f"{c.get('name')}@{c.get('site')}/{c.get('cluster')} g={c.get('selection_group')} "
        f"adm={c.get('admission_state')} fresh={c.get('fresh')} score={c.get('score')}"
        for c in candidates if isinstance(c, dict)
    ]
    return f"revision {str((envelope.get('revision') or {}).get('value'))[:19]} candidates {rows}"


def _monotonic() -> float:
    return time.monotonic()


__all__ = ["Chain", "ControlPlane", "FORCE_REFRESH", "GRIDSITE_SUFFIX", "MESH_STATE", "OperatorExited",
           "OperatorProcess", "OverlaySyncProcess", "WaitTimeout"]
