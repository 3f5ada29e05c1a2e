"""What the Kubernetes backends hand the Grid facade: clusters, fake backends and overlay-sync containers."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness import http_get
from harness.backends.local import ProviderProcess
from harness.contract import ScopeSpec
from harness.control import OverlaySyncProcess
from harness.topology import SiteSpec


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
    key: str = "routing-overlay.json"  # the data key holding the envelope (the spec's unless the outputs say)


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
