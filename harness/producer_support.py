"""One producer test's world: its own GridNetwork, sites and providers, removed when the test ends.

Names are prefixed with a tag derived from the test, so tests sharing one operator never see each
other's resources, and order-sensitive names (sites, clusters) keep their order within a test.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness import resources
from harness.control import Chain, ControlPlane
from harness.grid import Site
from harness.timeouts import timeouts

METRICS_BACKEND = "provider-a"


class Scenario:
    """Builds and applies one test's resources; `close` deletes them."""

    def __init__(self, control: ControlPlane, site: Site, test_name: str) -> None:
        self.control = control
        self.site = site
        self.tag = "n" + hashlib.sha256(test_name.encode()).hexdigest()[:8]
        self.net = self.tag
        self.model = f"{self.tag}-model"
        self.local = self.name("a")
        self.metrics_backend = METRICS_BACKEND
        self._applied: list[tuple[str, str]] = []
        self._chains: list[Chain] = []
        self._failed_metrics: list[str] = []
        self._mcp_backends: list[str] = []

    def name(self, short: str) -> str:
        """The test-unique name of a site or provider called `short` in the test."""
        return f"{self.tag}-{short}"

    # ----------------------------------------------------------------------------------- resources

    def apply(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            key = (obj["kind"], obj["metadata"]["name"])
            if key not in self._applied:
                self._applied.append(key)
        self.control.apply(*objects)

    def network(self, *, local: str | None = None, gateways: tuple[str, ...] = (resources.DEFAULT_GATEWAY,),
                consumer_config: Mapping[str, Any] | None = None, **policy: Any) -> dict[str, Any]:
        """Apply the test's GridNetwork; `policy` takes the keywords of `resources.grid_network`, and
        `consumer_config` becomes every gateway reference's `consumerConfig`."""
        local_site = local or self.local
        refs: list[dict[str, Any]] = [resources.gateway_ref(local_site, name=gateway) for gateway in gateways]
        if consumer_config is not None:
            for ref in refs:
                ref["consumerConfig"] = dict(consumer_config)
        obj = resources.grid_network(self.net, refs, **policy)
        self.apply(obj)
        return obj

    def grid_site(self, short: str, *, region: str | None = None, zone: str | None = None,
                  phase: str = "Active", labels: dict[str, str] | None = None) -> str:
        name = self.name(short)
        self.apply(resources.grid_site(name, self.net, region=region, zone=zone, phase=phase, labels=labels))
        return name

    def metrics_url(self) -> str:
        return self.site.backend(self.metrics_backend).url

    def provider(self, short: str, *, site: str | None = None, cluster: str | None = None,
                 models: tuple[str, ...] | None = None, metrics: bool | dict[str, Any] = False,
                 **extra: Any) -> str:
        """Apply an InferenceProvider named after `short`, hosted at site `site` (short name; default local).

        `metrics=True` scrapes its pool on the test's metrics backend with every signal mapped; a dict
        gives the keywords of `resources.metrics_config` instead.
        """
        name = self.name(short)
        config = None
        if metrics:
            options = metrics if isinstance(metrics, dict) else {}
            config = resources.metrics_config(options.pop("url", self.metrics_url()), name, **options)
        self.apply(resources.inference_provider(
            name, self.net, site=self.name(site) if site else self.local, cluster=cluster or short,
            models=models or (self.model,), metrics=config, **extra))
        return name

    def tool_provider(self, short: str, *, discovered: Sequence[str] | None, allow: Sequence[str] = (),
                      phase: str = "Available", access: Mapping[str, str] | None = None,
                      site: str | None = None, cluster: str | None = None, endpoint: str | None = None) -> str:
        """Apply an AgentToolProvider named after `short`, hosted at site `site` (short name; default local).

        Its status is what the operator's tools/list probe would have left: `phase` and the `discovered` tool
        names (None: no discoveredTools, for the operator's own probe of `endpoint` to find); `allow` is
        spec.tools (the allowlist) and `access` the accessPolicy.siteSelector.matchLabels.
        """
        name = self.name(short)
        extra = {} if endpoint is None else {"endpoint": endpoint}
        obj = resources.tool_provider(name, self.net, cluster=cluster or short, allow=allow,
                                      discovered=discovered or (), site=self.name(site) if site else self.local,
                                      **extra)
        if discovered is None:
            del obj["status"]["discoveredTools"]
        obj["status"]["phase"] = phase
        if access is not None:
            obj["spec"]["accessPolicy"] = {"siteSelector": {"matchLabels": dict(access)}}
        self.apply(obj)
        return name

    def set_metrics(self, short: str, **signals: float | str | None) -> None:
        """Set the EPP series of provider `short`'s pool (see Site.set_pools)."""
        self.site.set_pools(self.metrics_backend, {self.name(short): signals})

    def set_pools(self, pools: Mapping[str, Mapping[str, float | str | None]], backend: str | None = None,
                  extra: Sequence[Mapping[str, Any]] = ()) -> None:
        """Set several providers' pools (keyed by short name) on one fake backend in one round trip."""
        named = {self.name(short): signals for short, signals in pools.items()}
        self.site.set_pools(backend or self.metrics_backend, named, extra)

    def fail_metrics(self, backend: str) -> None:
        """Make `backend`'s /metrics answer 503 until the scenario closes (or `restore_metrics`)."""
        self.site.set_metrics_failure(backend, 503)
        if backend not in self._failed_metrics:
            self._failed_metrics.append(backend)

    def serve_mcp(self, backend: str, tools: Sequence[str]) -> str:
        """Make a fake backend an MCP server advertising `tools` until the scenario closes; its endpoint."""
        if backend not in self._mcp_backends:
            self._mcp_backends.append(backend)
        return self.site.serve_mcp_tools(backend, tools)

    def restore_metrics(self, backend: str) -> None:
        self.site.set_metrics_failure(backend, None)
        if backend in self._failed_metrics:
            self._failed_metrics.remove(backend)

    def restart_operator(self) -> None:
        """Restart the operator under test (see ControlPlane.restart); later tests get the new process."""
        self.control.restart()

    def delete(self, kind: str, short_or_name: str) -> None:
        name = short_or_name if short_or_name.startswith(self.tag) else self.name(short_or_name)
        self.control.delete(kind, name)
        if (kind, name) in self._applied:
            self._applied.remove((kind, name))

    # --------------------------------------------------------------------------------------- output

    def envelope(self, until: Callable[[dict[str, Any]], bool] = lambda _e: True, *, what: str = "an overlay",
                 force: bool = False, gateway: str = resources.DEFAULT_GATEWAY,
                 timeout: float | None = None) -> dict[str, Any]:
        """Wait for the rendered envelope to satisfy `until`; `force` re-forces reconciles while waiting."""
        timeout = timeouts().reconcile if timeout is None else timeout
        return self.control.wait_envelope(self.net, until, what=what, gateway=gateway, timeout=timeout,
                                          force_every=1.0 if force else None)

    def settled(self, envelope: dict[str, Any], gateway: str = resources.DEFAULT_GATEWAY) -> dict[str, Any]:
        """Wait until the status names `envelope`'s revision as rendered, then return `envelope`.

        A sink writes the ConfigMap before the status, so the reconcile that rendered `envelope` may still be
        writing its status when the ConfigMap is read; a forced reconcile right after it would then take that
        status write for its own. Tests that count reconciles from a first overlay settle it first.
        """
        revision = (envelope.get("revision") or {}).get("value")
        self.control.wait_status(self.net, lambda entry: entry.get("renderedRevision") == revision,
                                 what=f"the status of the reconcile that rendered {str(revision)[:12]}",
                                 gateway=gateway)
        return envelope

    def reconcile(self, gateway: str = resources.DEFAULT_GATEWAY) -> dict[str, Any]:
        """Force one reconcile and return the envelope it left."""
        envelope = self.control.reconcile(self.net, gateway)
        assert envelope is not None, f"no ConfigMap for {self.net}/{gateway} after a forced reconcile"
        return envelope

    def connect(self) -> Chain:
        chain = self.control.connect(self.net)
        self._chains.append(chain)
        return chain

    def close(self) -> None:
        for backend in list(self._failed_metrics):
            self.restore_metrics(backend)
        for backend in self._mcp_backends:
            self.site.serve_mcp_tools(backend, None)
        for chain in self._chains:
            self.control.disconnect(chain)
        for kind, name in reversed(self._applied):
            self.control.delete(kind, name)
        self._applied.clear()
