"""The Grid/Site/Gateway facade the suites use; it hides which backend runs the components."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from harness import contract, feature_use, http_get, traffic
from harness.backends import Backend, OperationUnsupported
from harness.backends.local import GatewayProcess, GatewayStartFailed, ProviderProcess
from harness.control import ControlPlane, SyncFeed
from harness.gateway_config import (
    MODEL_HEADER,
    PROVIDER_FILTER_ORDER,
    VARIANTS,
    CredentialRef,
    CredentialSource,
    ListenerTls,
    ProviderRoute,
    TrustedPeer,
    UpstreamTls,
    render_gateway_config,
    render_hop_consumer_config,
    render_provider_gateway_config,
    variant_features,
)
from harness.pki import ClientFiles, GridPKI, ServerFiles, client_context
from harness.projection import project
from harness.replies import Refused, Reply, is_refusal
from harness.resources import SIGNAL_METRICS
from harness.run_as import RunAs
from harness.timeline import current, record_action, record_revision
from harness.topology import SiteSpec, Topology
from harness.waiting import WaitTimeout, poll_until

OVERLAY_FILE = "routing-overlay.json"
REVISION_HEADER = "x-ai-routing-revision"
CANDIDATE_HEADER = "x-ai-routing-candidate"
REQUEST_ID_HEADER = "x-ai-routing-request-id"
#: What a provider gateway sets for its backend from the revision the edge sent.
PROVIDER_REVISION_HEADER = "x-ai-provider-routing-revision"
PLACEHOLDER_MODEL = "agn-placeholder"
#: The extended feature of each credential_inject token source other than a file.
_SOURCE_FEATURES = {"value": "credentialValueSource", "env_var": "credentialEnvSource"}
#: Log words that mark a line about the overlay a gateway read, in any log format.
_OVERLAY_WORDS = re.compile(r"overlay|reload|snapshot|revision|digest|reject|invalid|scope", re.IGNORECASE)


class Gateway:
    """A running gateway under test and the overlay directory it watches."""

    #: The backend-side header carrying the serving revision; a consumer gateway whose candidates sit
    #: behind a provider gateway sees it as the provider's x-ai-provider-routing-revision.
    revision_header = REVISION_HEADER
    #: The client certificate the harness gave this gateway for its mTLS hop clusters (None: no such cluster).
    hop_client: ClientFiles | None = None
    #: The token file credential_inject was configured with, per credential reference (injecting variants).
    credential_files: Mapping[CredentialRef, Path] = MappingProxyType({})
    #: credential_inject's projected_credential_mount_base (None: the gateway has none).
    credential_mount_base: Path | None = None

    def __init__(self, site: Site, variant: str, proc: GatewayProcess,
                 features: Mapping[str, str] | None = None) -> None:
        self.site = site
        self.variant = variant
        self.proc = proc
        #: The extended features this gateway's config asks for (feature -> by what), noted for every test
        #: that uses the gateway (harness.feature_use).
        self.features: Mapping[str, str] = MappingProxyType(dict(features or {}))
        self.client = httpx.Client(base_url=proc.url, timeout=10.0, verify=http_get.default_tls())
        self.last_overlay: bytes | None = None

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def name(self) -> str:
        """The gateway's process name, as logs and diagnostics name it."""
        return self.proc.name

    def running(self) -> bool:
        """Whether the gateway process is still up (a gateway that refuses a request must not exit)."""
        return self.proc.process.running()

    def log_text(self) -> str:
        """Everything the gateway has logged so far."""
        return self.proc.process.log_text()

    def log_bytes(self) -> bytes:
        """The gateway's log as written, byte for byte (for secrets that must never reach it)."""
        return self.proc.process.log_path.read_bytes()

    def _used(self) -> None:
        """Note this gateway's extended features for the running test (harness.feature_use)."""
        feature_use.note_all(self.features)

    def write_overlay(self, doc: bytes | Mapping[str, Any]) -> None:
        self._used()
        feature_use.note_overlay(doc)
        data = doc if isinstance(doc, bytes) else contract.encode(doc)
        self.last_overlay = data
        project(self.proc.overlay_dir, {OVERLAY_FILE: data})
        # the harness projects the overlay as kubelet would: for the test's timeline, that is distribution
        if current() is None:
            return
        revision = contract.revision_in(doc)
        if revision is None:
            record_action("wrote an overlay without a revision", site=self.site.spec.name, gateway=self.name)
        else:
            self._record("distributed", revision, observed=False)

    def _record(self, stage: str, revision: str | None, *, observed: bool = True) -> None:
        """Put a revision stage of this gateway on the running test's timeline (see harness.timeline)."""
        if current() is not None:
            record_revision(stage, revision, observed=observed, site=self.site.spec.name, gateway=self.name)

    def remove_overlay(self) -> None:
        """Take the overlay file away (its visible name); the next write_overlay puts it back."""
        (self.proc.overlay_dir / OVERLAY_FILE).unlink()

    def remove_credential_file(self, ref: CredentialRef) -> None:
        """Delete the token file credential_inject was configured with for `ref`, under the running gateway.

        OperationUnsupported where the gateway does not read the harness's files (a backend that copies
        them into a cluster when the gateway starts): deleting the harness's copy would change nothing.
        """
        self._files_live()
        self.credential_files[ref].unlink()

    def mount_secret(self, ref: CredentialRef, token: str) -> None:
        """Mount a Secret key under the gateway's projected mount base, as <namespace>/<name>/<key>, the way
        kubelet does (written beside it, then renamed into place); OperationUnsupported as for
        `remove_credential_file`."""
        if self.credential_mount_base is None:
            raise ValueError("this gateway was started without a projected credential mount base")
        self._files_live()
        target = self.credential_mount_base / ref.namespace / ref.name / ref.key
        staged = target.with_name(f".{ref.key}.staged")
        write_token_file(staged, token, self.site.grid.backend.gateway_user())
        os.replace(staged, target)

    def _files_live(self) -> None:
        backend = self.site.grid.backend
        if not backend.gateway_files_live:
            raise OperationUnsupported(f"the {backend.name} backend copies a gateway's files when it starts, so "
                                       "changing them later does not reach the gateway")

    def request(self, model: str | None, *, headers: Mapping[str, str] | None = None,
                cookies: Mapping[str, str] | None = None, path: str = "/v1/chat/completions",
                body: Any = None, method: str = "POST", raw_body: bytes | None = None) -> Reply:
        self._used()
        send_headers = dict(headers or {})
        if cookies:
            send_headers["cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        if raw_body is not None:
            content = raw_body
        elif method == "GET":
            content = b""
        else:
            content = json.dumps(body if body is not None else traffic.chat_body(model)).encode()
            send_headers.setdefault("content-type", "application/json")
        resp = self.client.request(method, path, content=content or None, headers=send_headers)
        return Reply(resp.status_code, resp.headers, resp.content)

    def serving_revision(self, model: str) -> str | None:
        reply = self.request(model)
        revision = reply.forwarded_headers.get(self.revision_header) if reply.status == 200 else None
        self._record("serving", revision)
        return revision

    def wait_serving(self, revision: str, model: str, timeout: float = 10.0, what: str | None = None) -> None:
        """Poll until requests for `model` are selected from the snapshot with `revision`.

        On timeout the message says what the gateway last answered and what it logged about overlays.
        """
        try:
            poll_until(lambda: self.request(model),
                       lambda r: r.status == 200 and r.forwarded_headers.get(self.revision_header) == revision,
                       what=what or f"revision {revision[:12]} to serve model {model}", timeout=timeout,
                       describe=self._describe_serving)
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\n{self.overlay_log()}") from None
        self._record("serving", revision)

    def wait_status(self, model: str, status: int, timeout: float = 10.0) -> Reply:
        try:
            return poll_until(lambda: self.request(model), lambda r: r.status == status,
                              what=f"model {model} to answer {status}", timeout=timeout, describe=Reply.describe)
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\n{self.overlay_log()}") from None

    def _describe_serving(self, reply: Reply) -> str:
        revision = reply.forwarded_headers.get(self.revision_header)
        return f"the gateway answered {reply.describe()} serving revision {revision or '<none>'}"

    def overlay_log(self, lines: int = 400, keep: int = 8) -> str:
        """The gateway's recent log lines about overlays, reloads and rejections, for a timed-out wait."""
        tail = self.log_tail(lines).splitlines()
        wanted = [line for line in tail if _OVERLAY_WORDS.search(line)]
        if not wanted:
            return f"the gateway logged nothing about overlays in its last {len(tail)} lines"
        return "what the gateway logged about overlays (latest last):\n  " + "\n  ".join(wanted[-keep:])

    def publish(self, doc: Mapping[str, Any], model: str, timeout: float = 10.0) -> str:
        """Write an envelope and wait until it serves `model`; returns its revision."""
        self.write_overlay(doc)
        revision = contract.revision_of(dict(doc))
        self.wait_serving(revision, model, timeout)
        return revision

    def send(self, model: str, n: int, *, concurrency: int = 8,
             headers_fn: traffic.HeadersFn | None = None) -> traffic.Tally:
        return traffic.send(self.url, model, n, concurrency=concurrency, headers_fn=headers_fn)

    def metrics_text(self) -> str:
        return http_get.get(f"{self.proc.admin_url}/metrics", timeout=5.0).text

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Samples from the admin /metrics, keyed by (sample name, labels)."""
        out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                out[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return out

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics().get((name, frozenset(labels.items())), 0.0)

    def log_tail(self, lines: int = 40) -> str:
        return self.proc.process.log_tail(lines)

    def close(self) -> None:
        self.client.close()


class ProviderGateway(Gateway):
    """A provider gateway under test: an mTLS listener in front of its site's backends."""

    def __init__(self, site: Site, proc: GatewayProcess, routes: Sequence[ProviderRoute],
                 tokens: Mapping[CredentialRef, str], sni: str, server_digest: str = "",
                 features: Mapping[str, str] | None = None) -> None:
        super().__init__(site, "provider", proc, features)
        self.routes = tuple(routes)
        self.tokens = dict(tokens)
        self.sni = sni
        self.server_digest = server_digest  # SHA-256 of its certificate's DER: what peers pin

    @property
    def cluster(self) -> str:
        """The cluster name consumer gateways of other sites give this provider gateway."""
        return self.site.spec.provider_gateway_cluster

    @property
    def pki(self) -> GridPKI:
        return self.site.grid.backend.pki

    def route(self, candidate_id: str) -> ProviderRoute:
        for route in self.routes:
            if route.candidate_id == candidate_id:
                return route
        raise KeyError(candidate_id)

    def call(self, model: str | None, *, client: ClientFiles | None,
             headers: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
             path: str = "/v1/chat/completions", body: Any = None) -> Reply | Refused:
        """Send one request straight to the provider gateway presenting `client` (None: no certificate).

        `headers` as a list of pairs is sent line by line, repeated names and their letter case kept. A TLS
        failure or a connection closed without an answer is a Refused; a refused TCP connection (nothing
        listening) raises, since that is a dead gateway rather than a refusal.
        """
        self._used()
        content = json.dumps(body if body is not None else traffic.chat_body(model)).encode()
        send_headers: Any
        if headers is None or isinstance(headers, Mapping):
            send_headers = {"content-type": "application/json", **dict(headers or {})}
        else:
            send_headers = [("content-type", "application/json"), *headers]
        verify = client_context(self.pki.ca_path, client)
        try:
            with httpx.Client(base_url=self.url, verify=verify, timeout=10.0) as http:
                resp = http.post(path, content=content, headers=send_headers)
        except (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
            if _caused_by(exc, ConnectionRefusedError):
                raise
            return Refused(f"{type(exc).__name__}: {exc}")
        return Reply(resp.status_code, resp.headers, resp.content)

    def hop_headers(self, candidate_id: str | None, *, revision: str | None = None,
                    request_id: str | None = None) -> dict[str, str]:
        """Well-formed x-ai-routing-* headers as a consumer gateway would send them (None leaves one out)."""
        headers = {REQUEST_ID_HEADER: request_id or secrets.token_hex(16),
                   REVISION_HEADER: revision or secrets.token_hex(32)}
        if candidate_id is not None:
            headers[CANDIDATE_HEADER] = candidate_id
        return headers


def _initial_overlay_dir(workdir: Path, overlay: bytes | None) -> Path:
    """A gateway's own overlay directory, holding `overlay` projected the way kubelet does (or empty)."""
    overlay_dir = workdir / "overlay"
    if overlay is not None:
        project(overlay_dir, {OVERLAY_FILE: overlay})
    else:
        overlay_dir.mkdir(parents=True, exist_ok=True)
    return overlay_dir


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass
class Site:
    grid: Grid
    index: int
    spec: SiteSpec
    providers: dict[str, ProviderProcess] = field(default_factory=dict)
    _gateways: dict[str, Gateway] = field(default_factory=dict)
    _control: ControlPlane | None = None
    _tls_metrics: ProviderProcess | None = None
    _admin_client: httpx.Client | None = None
    _sync_feeds: int = 0

    @property
    def scope(self) -> contract.ScopeSpec:
        return contract.ScopeSpec(self.grid.topology.network, self.spec.gateway, self.spec.namespace, self.spec.name)

    @property
    def model_clusters(self) -> list[str]:
        return [p.cluster for p in self.spec.model_providers]

    @property
    def management_cluster(self) -> str | None:
        return next((p.cluster for p in self.spec.providers if p.role == "management"), None)

    def candidate(self, provider: str, model: str, **extra: Any) -> dict[str, Any]:
        """An overlay candidate that routes `model` to the named fake provider."""
        spec = self.spec.provider(provider)
        return contract.candidate(model, spec.site, spec.cluster, **extra)

    def envelope(self, candidates: Sequence[dict[str, Any]], mode: str | None = None) -> dict[str, Any]:
        return contract.envelope(candidates, self.scope, selection_mode=mode, generation=self.grid.next_generation())

    def placeholder(self) -> dict[str, Any]:
        return self.envelope([self.candidate(self.spec.model_providers[0].name, PLACEHOLDER_MODEL)])

    def gateway(self, variant: str = "core") -> Gateway:
        """A shared gateway of this variant, started on first use with a placeholder overlay."""
        if variant not in self._gateways:
            overlay = self.placeholder()
            if not VARIANTS[variant].expected_scope:
                overlay = contract.legacy(overlay["overlay"]["candidates"], self.spec.name)
            self._gateways[variant] = self.start_gateway(variant, contract.encode(overlay))
        return self._gateways[variant]

    def start_gateway(self, variant: str, overlay: bytes | None,
                      static_candidates: Sequence[Mapping[str, Any]] = (), *, overlay_dir: Path | None = None,
                      scope: contract.ScopeSpec | None = None, allowlist: Sequence[str] | None = None,
                      tokens: Mapping[CredentialRef, str] | None = None, projected: bool = False) -> Gateway:
        """Start a new gateway; raises GatewayStartFailed when it exits or never becomes ready.

        `overlay_dir` points the gateway at a directory something else delivers into (overlay-sync);
        `scope` overrides the site's own expected scope (an operator-rendered network); `allowlist`
        replaces the `clusters` list a variant with one renders (by default the site's model clusters);
        `tokens` are the credentials an injecting variant's credential_inject reads from files; `projected`
        gives it an (empty) projected_credential_mount_base, which `Gateway.mount_secret` fills.
        """
        backend = self.grid.backend
        listen, admin, workdir = backend.allocate_gateway(self.index)
        overlay_dir = overlay_dir or _initial_overlay_dir(workdir, overlay)
        clusters = {name: p.address for name, p in self.providers.items()}
        client, hop_tls, hop_endpoints = self._hop_mtls(f"{workdir.name}-hop-client", self.model_clusters)
        clusters.update(hop_endpoints)
        credentials, env = self._credential_sources(workdir.name, tokens, "file") if tokens else ([], {})
        mount_base = self.grid.credentials_dir / workdir.name / "projected" if projected else None
        if mount_base is not None:
            mount_base.mkdir(parents=True)
        features = variant_features(VARIANTS[variant])
        if projected:
            features["projectedCredentials"] = "a credential_inject with projected_credential_mount_base"
        feature_use.note_all(features)
        feature_use.note_overlay(overlay)
        config = render_gateway_config(
            VARIANTS[variant], listen=listen, admin=admin, overlay_file=str(overlay_dir / OVERLAY_FILE),
            scope=scope or self.scope, clusters=clusters,
            hop_clusters=self.model_clusters, management_cluster=self.management_cluster,
            allowlist=self.model_clusters if allowlist is None else allowlist,
            static_candidates=static_candidates, hop_tls=hop_tls, credentials=credentials,
            credential_mount_base=None if mount_base is None else str(mount_base),
        )
        proc = backend.start_gateway(f"gateway-{self.spec.name}-{variant}", listen, admin, workdir, config,
                                     overlay_dir, env=env)
        gateway = Gateway(self, variant, proc, features)
        gateway.hop_client = client
        gateway.last_overlay = overlay
        gateway.credential_files = MappingProxyType({c.ref: Path(c.file) for c in credentials if c.file})
        gateway.credential_mount_base = mount_base
        self.grid.track(gateway)
        return gateway

    def _hop_mtls(self, client_name: str, hop_clusters: Sequence[str]
                  ) -> tuple[ClientFiles | None, dict[str, UpstreamTls], dict[str, str]]:
        """(client certificate, upstream TLS, mTLS endpoint) for the hop clusters whose fake backend has an
        mTLS listener: a fresh grid client certificate (organization ai-grid) and the grid CA to verify them."""
        reached = [p for p in self.providers.values()
                   if p.spec.cluster in hop_clusters and p.mtls_address is not None and p.sni is not None]
        if not reached:
            return None, {}, {}
        pki = self.grid.backend.pki
        client = pki.client(client_name)
        tls = {p.spec.cluster: UpstreamTls(str(pki.ca_path), str(client.cert), str(client.key), str(p.sni))
               for p in reached}
        return client, tls, {p.spec.cluster: str(p.mtls_address) for p in reached}

    # ------------------------------------------------------------------------------ control plane

    def control_plane(self, mesh: Mapping[str, str] | None = None, *, signals: bool = False) -> ControlPlane:
        """This site's operator under test, started on first use (the producer profile); `mesh` holds the
        values of the descriptor's mesh placeholders when it joins a mesh; `signals` starts it serving its
        signals endpoint as well (only the tests of signalsRelay read it, so other operators go without)."""
        if self._control is None:
            self._control = self.grid.backend.control_plane(self, mesh, signals=signals)
        return self._control

    def start_overlay_sync(self, scope: contract.ScopeSpec, first: bytes | str) -> SyncFeed:
        """The overlay-sync under test following a ConfigMap of its own that first holds `first`; stop it
        with `stop_overlay_sync`. OperatorUnsupported where the backend cannot start one on its own."""
        feature_use.note("overlaySync", "an overlay-sync of the implementation's own")
        self._sync_feeds += 1
        directory = self.grid.workdir / f"sync-feed-{self.spec.name}-{self._sync_feeds}"
        directory.mkdir(parents=True)
        name = f"{scope.gateway}-routing-overlay"
        path = directory / f"{name}.configmap.yaml"
        path.write_text(SyncFeed.configmap_text(name, scope.namespace,
                                                first.decode("utf-8") if isinstance(first, bytes) else first))
        sync = self.grid.backend.start_overlay_sync(self.index, path, scope)
        return SyncFeed(sync, name, scope.namespace)

    def stop_overlay_sync(self, feed: SyncFeed) -> int | None:
        return self.grid.backend.stop(feed.sync.process)

    def tls_metrics(self) -> ProviderProcess:
        """A fake backend serving its EPP metrics over HTTPS, signed by the run's CA."""
        if self._tls_metrics is None:
            self._tls_metrics = self.grid.backend.start_tls_metrics(self.index, self.spec)
        return self._tls_metrics

    def backend(self, name: str) -> ProviderProcess:
        """A fake backend of this site by name (the topology's providers or the TLS metrics one)."""
        if self._tls_metrics is not None and name == self._tls_metrics.spec.name:
            return self._tls_metrics
        return self.providers[name]

    def _admin(self, backend: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """GET (or POST `body` to) a fake backend's /admin/config over one kept-alive client per site."""
        provider = self.backend(backend)
        http = self._admin_http()
        url = f"{provider.url}/admin/config"  # the plain listener (HTTPS for the TLS metrics backend)
        resp = http.post(url, json=body) if body is not None else http.get(url)
        if resp.status_code != 200:
            raise AssertionError(f"{backend} /admin/config answered {resp.status_code}: {resp.text[:200]}")
        result: dict[str, Any] = resp.json()
        return result

    def _admin_http(self) -> httpx.Client:
        """One kept-alive client (and one certificate store load) for every admin call of this site."""
        if self._admin_client is None:
            context = ssl.create_default_context(cafile=str(self.grid.backend.pki.ca_path))
            self._admin_client = httpx.Client(timeout=5.0, verify=context)
        return self._admin_client

    def set_pools(self, backend: str, pools: Mapping[str, Mapping[str, float | str | None]],
                  extra: Sequence[Mapping[str, Any]] = ()) -> None:
        """Set the EPP series of several pools on a fake backend in one round trip; other pools keep theirs.

        `pools` maps a pool name to signals (queueDepth, kvCacheUtilization, healthy = ready pods): a number,
        "NaN", "+Inf" or "-Inf"; None removes the series so the signal is missing. `extra` appends raw
        samples ({name, labels, value}), e.g. a series under a name of the test's choosing.
        """
        unknown = {signal for signals in pools.values() for signal in signals} - set(SIGNAL_METRICS)
        if unknown:
            raise KeyError(f"unknown signals {sorted(unknown)} (known: {sorted(SIGNAL_METRICS)})")
        replaced = {(SIGNAL_METRICS[signal], pool) for pool, signals in pools.items() for signal in signals}
        added = [{"name": SIGNAL_METRICS[signal], "labels": {"name": pool}, "value": value}
                 for pool, signals in pools.items() for signal, value in signals.items() if value is not None]
        current = self._admin(backend)["metrics"]
        kept = [m for m in current if (m["name"], m["labels"].get("name")) not in replaced]
        self._admin(backend, {"metrics": kept + added + [dict(sample) for sample in extra]})

    def remove_series(self, backend: str, name: str) -> None:
        """Remove every sample named `name` from a fake backend's metrics (a series a test added by name)."""
        kept = [m for m in self._admin(backend)["metrics"] if m["name"] != name]
        self._admin(backend, {"metrics": kept})

    def set_pool_metrics(self, backend: str, pool: str, **signals: float | str | None) -> None:
        """Set the EPP series of one pool on a fake backend (see `set_pools`)."""
        self.set_pools(backend, {pool: signals})

    def set_backend_latency(self, backend: str, milliseconds: int) -> None:
        """Make a fake backend hold every model API request this long before answering (0 restores it)."""
        self._admin(backend, {"latency_ms": milliseconds})

    def set_backend_hold(self, backend: str, hold: bool) -> None:
        """Hold a fake backend's model API requests until released (False releases every held one)."""
        self._admin(backend, {"hold": hold})

    def set_backend_error(self, backend: str, status: int | None) -> None:
        """Make a fake backend answer every model API request with `status` (None restores it)."""
        self._admin(backend, {"error_status": status})

    def set_metrics_failure(self, backend: str, status: int | None) -> None:
        """Make a fake backend's /metrics answer `status` (None restores it)."""
        self._admin(backend, {"metrics_error_status": status})

    def serve_mcp_tools(self, backend: str, tools: Sequence[str] | None) -> str:
        """Make a fake backend serve MCP on /mcp advertising `tools` (None: no MCP server); returns the
        endpoint URL (its plain listener)."""
        self._admin(backend, {"mcp_tools": None if tools is None else list(tools)})
        return f"{self.backend(backend).url}/mcp"

    def backend_mcp_requests(self, name: str) -> int:
        """How many tools/list calls a fake backend's MCP server has answered."""
        return self._backend_stats(name)["mcp_requests"]

    # ------------------------------------------------------------------------------ provider hop

    def backend_requests(self, name: str) -> int:
        """How many model API requests a fake backend of this site has answered."""
        return self._backend_stats(name)["requests"]

    def backend_metrics_requests(self, name: str) -> int:
        """How many times a fake backend of this site has been asked for its /metrics exposition."""
        return self._backend_stats(name)["metrics_requests"]

    def _backend_stats(self, name: str) -> dict[str, int]:
        resp = self._admin_http().get(f"{self.backend(name).url}/admin/stats")
        if resp.status_code != 200:
            raise AssertionError(f"{name} /admin/stats answered {resp.status_code}: {resp.text[:200]}")
        return {key: int(value) for key, value in resp.json().items()}

    def remote_candidate(self, peer: ProviderGateway, route: ProviderRoute, **extra: Any) -> dict[str, Any]:
        """An overlay candidate of this site that reaches `route` through the peer's provider gateway."""
        extra.setdefault("stable_id", route.candidate_id)
        return contract.candidate(route.model, peer.site.spec.name, peer.cluster, **extra)

    def start_provider_gateway(
        self, *, trusted_peers: Sequence[TrustedPeer] | None, routes: Sequence[ProviderRoute],
        tokens: Mapping[CredentialRef, str], source: str = "file", client_cert_mode: str | None = "require",
        tls: bool = True, filter_order: Sequence[str] = PROVIDER_FILTER_ORDER,
        insecure_options: Mapping[str, bool] | None = None, server_cert: ServerFiles | None = None,
    ) -> ProviderGateway:
        """Start this site's provider gateway; raises GatewayStartFailed when it refuses to start.

        `tokens` maps each credential reference to its token; `source` says how credential_inject gets
        it: "file" (written under the run's credentials directory), "env_var" or "value" (inline in the
        config, so only for tests that expect the token in the config). `server_cert` replaces the
        listener's certificate (by default one from the grid CA for its address and its sni), for tests
        of peers that must refuse it.
        """
        if self.spec.provider_gateway is None:
            raise KeyError(f"site {self.spec.name} runs no provider gateway in this topology")
        backend = self.grid.backend
        listen, admin, workdir = backend.allocate_gateway(self.index)
        host = listen.rsplit(":", 1)[0]
        sni = f"{self.spec.provider_gateway}.{self.spec.name}.grid.test"
        server = server_cert or backend.pki.server(f"{workdir.name}-{self.spec.provider_gateway}", host, sni)
        listener_tls = ListenerTls(str(server.cert), str(server.key), str(backend.pki.ca_path),
                                   client_cert_mode) if tls else None
        credentials, env = self._credential_sources(workdir.name, tokens, source)
        features = {feature: f"a credential_inject with a {source} token source"
                    for feature in (_SOURCE_FEATURES.get(source),) if feature is not None}
        feature_use.note_all(features)
        config = render_provider_gateway_config(
            listen=listen, admin=admin, tls=listener_tls, trusted_peers=trusted_peers,
            provider_id=f"{self.spec.name}-{self.spec.provider_gateway}", routes=routes, credentials=credentials,
            clusters={name: p.address for name, p in self.providers.items()}, filter_order=filter_order,
            insecure_options=insecure_options,
        )
        proc = backend.start_gateway(f"provider-{self.spec.name}-{workdir.name}", listen, admin, workdir, config,
                                     workdir, env=env, scheme="https")
        gateway = ProviderGateway(self, proc, routes, tokens, sni, server.digest, features)
        self.grid.track(gateway)
        return gateway

    def _credential_sources(self, tag: str, tokens: Mapping[CredentialRef, str],
                            source: str) -> tuple[list[CredentialSource], dict[str, str]]:
        """How a gateway's credential_inject gets each token; files are 0600, owned by the user gateways run as."""
        owner = self.grid.backend.gateway_user()
        sources: list[CredentialSource] = []
        env: dict[str, str] = {}
        for i, (ref, token) in enumerate(tokens.items()):
            if source == "file":
                path = self.grid.credentials_dir / tag / ref.name / ref.key
                write_token_file(path, token, owner)
                sources.append(CredentialSource(ref, file=str(path)))
            elif source == "env_var":
                name = f"AGN_PROVIDER_TOKEN_{i}"
                env[name] = token
                sources.append(CredentialSource(ref, env_var=name))
            elif source == "value":
                sources.append(CredentialSource(ref, value=token))
            else:
                raise ValueError(f"unknown credential source {source!r} (file, env_var, value)")
        return sources, env

    def start_hop_consumer(self, peers: Sequence[ProviderGateway], overlay: bytes | None, client: ClientFiles,
                           variant: str = "core", *, overlay_dir: Path | None = None,
                           scope: contract.ScopeSpec | None = None,
                           aliases: Mapping[str, ProviderGateway] | None = None) -> Gateway:
        """Start this site's consumer gateway reaching each peer provider gateway over mTLS as `client`.

        `overlay_dir` and `scope` work as for `start_gateway` (overlay-sync delivering, an operator's network).
        `aliases` are further cluster names reaching a peer: the upstream cluster names an operator gives a
        remote site's providers (their clusterName, say) when they are not that site's gateway cluster.
        """
        backend = self.grid.backend
        listen, admin, workdir = backend.allocate_gateway(self.index)
        overlay_dir = overlay_dir or _initial_overlay_dir(workdir, overlay)
        clusters = {name: p.address for name, p in self.providers.items()}
        reached = [(peer.cluster, peer) for peer in peers] + [(name, peer) for name, peer in (aliases or {}).items()]
        clusters.update({name: peer.proc.listen for name, peer in reached})
        hop_tls = {name: UpstreamTls(str(backend.pki.ca_path), str(client.cert), str(client.key), peer.sni)
                   for name, peer in reached}
        features = variant_features(VARIANTS[variant])
        feature_use.note_all(features)
        feature_use.note_overlay(overlay)
        config = render_hop_consumer_config(VARIANTS[variant], listen=listen, admin=admin,
                                            overlay_file=str(overlay_dir / OVERLAY_FILE), scope=scope or self.scope,
                                            clusters=clusters, hop_tls=hop_tls)
        proc = backend.start_gateway(f"gateway-{self.spec.name}-hop-{workdir.name}", listen, admin, workdir,
                                     config, overlay_dir)
        gateway = Gateway(self, variant, proc, features)
        gateway.revision_header = PROVIDER_REVISION_HEADER
        gateway.last_overlay = overlay
        self.grid.track(gateway)
        return gateway

    def stop_gateway(self, gateway: Gateway) -> int | None:
        gateway.close()
        self.grid.untrack(gateway)
        for key, value in list(self._gateways.items()):
            if value is gateway:
                del self._gateways[key]
        return self.grid.backend.stop(gateway.proc.process)


class Grid:
    """A running topology: sites with their providers, gateways started on demand."""

    def __init__(self, topology: Topology, backend: Backend, features: frozenset[str]) -> None:
        self.topology = topology
        self.backend = backend
        self.features = features
        self.sites: dict[str, Site] = {}
        self._generation = 0
        self._live: list[Gateway] = []

    def start(self) -> Grid:
        for index, spec in enumerate(self.topology.sites):
            site = Site(self, index, spec)
            site.providers = self.backend.start_providers(index, spec)
            self.sites[spec.name] = site
        return self

    @property
    def workdir(self) -> Path:
        """Everything the run writes: logs, rendered configs, overlays, certificates, credentials."""
        return Path(self.backend.workdir)

    @property
    def credentials_dir(self) -> Path:
        """Where provider credential files are written; the only place a token may be stored."""
        return self.workdir / "credentials"

    @property
    def gateways(self) -> tuple[Gateway, ...]:
        """The gateways running now (consumer and provider)."""
        return tuple(self._live)

    def files_containing(self, needle: bytes, *, exclude: Sequence[Path] = ()) -> list[Path]:
        """Files under the run's work directory that contain `needle`, except under `exclude`."""
        skipped = [Path(p).resolve() for p in exclude]
        found = []
        for path in sorted(self.workdir.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            resolved = path.resolve()
            if any(resolved.is_relative_to(root) for root in skipped):
                continue
            try:
                if needle in resolved.read_bytes():
                    found.append(path)
            except OSError:
                continue
        return found

    def site(self, name: str | None = None) -> Site:
        return self.sites[name] if name else next(iter(self.sites.values()))

    def next_generation(self) -> int:
        self._generation += 1
        return self._generation

    def track(self, gateway: Gateway) -> None:
        self._live.append(gateway)

    def untrack(self, gateway: Gateway) -> None:
        if gateway in self._live:
            self._live.remove(gateway)

    def diagnostics(self) -> str:
        """What was serving and what the gateways and operators logged: attached to failing tests."""
        parts = [site._control.diagnostics() for site in self.sites.values() if site._control is not None]
        for gateway in self._live:
            overlay = (gateway.last_overlay or b"")[:4000].decode(errors="replace")
            parts.append(f"=== gateway {gateway.proc.name} ({gateway.url})\n--- last overlay written ---\n"
                         f"{overlay}\n--- log tail ---\n{gateway.log_tail()}")
        return "\n".join(parts)

    def close(self) -> None:
        for gateway in list(self._live):
            gateway.close()
        self._live.clear()
        for site in self.sites.values():
            if site._admin_client is not None:
                site._admin_client.close()
        self.backend.supervisor.stop_all()
        self.backend.plan.close()


def unique_model(request_name: str, suffix: str = "") -> str:
    """A model name unique to a test, so overlays and session bindings never leak between tests."""
    tag = hashlib.sha256(request_name.encode()).hexdigest()[:10]
    return f"m-{tag}{('-' + suffix) if suffix else ''}"




__all__ = ["Gateway", "GatewayStartFailed", "Grid", "MODEL_HEADER", "ProviderGateway", "Refused", "Reply", "Site",
           "is_refusal", "unique_model"]


def write_token_file(path: Path, token: str, owner: RunAs | None) -> None:
    """A token file as a Secret volume holds it: mode 0600, owned by the user gateways run as (if switched)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        if owner is not None:
            os.fchown(handle.fileno(), owner.uid, owner.gid)
        handle.write(token + "\n")
