"""Helpers for the gateway tests: overlay builders, a kubelet-style projected directory, an echo
upstream on a background loop, and a supervised `agn-gateway` process."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import queue
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml
from aiohttp import web

from reference.overlay import canonical_digest

REPO = Path(__file__).resolve().parents[2]
OVERLAY_NAME = "routing-overlay.json"
SCOPE = {"network": "net-1", "gateway": "gw-1", "namespace": "praxis-system", "local_site": "site-a"}


def candidate(
    name: str, site: str, cluster: str, kind: str = "inference_model", **extra: Any
) -> dict[str, Any]:
    return {"kind": kind, "name": name, "site": site, "cluster": cluster, "fresh": True, **extra}


def envelope_doc(
    candidates: Sequence[Mapping[str, Any]],
    *,
    mode: str | None = None,
    scope: Mapping[str, str] = SCOPE,
    generation: int = 1,
) -> dict[str, Any]:
    overlay: dict[str, Any] = {
        "network": scope["network"],
        "local_site": scope["local_site"],
        "candidates": [dict(c) for c in candidates],
    }
    if mode is not None:
        overlay["selection_policy"] = {"mode": mode}
    digest = canonical_digest(overlay)
    return {
        "schema_version": "1.0.0",
        "revision": {"kind": "content_addressed", "algorithm": "sha256", "value": digest},
        "content_digest": {"algorithm": "sha256", "value": digest},
        "scope": dict(scope),
        "provenance": {
            "producer": "grid-operator",
            "producer_version": "0.1.0",
            "source_name": scope["network"],
            "source_uid": "00000000-0000-0000-0000-000000000001",
            "source_generation": generation,
            "rendered_at": "2026-07-29T00:00:00Z",
        },
        "overlay": overlay,
    }


def envelope(candidates: Sequence[Mapping[str, Any]], **kwargs: Any) -> bytes:
    return json.dumps(envelope_doc(candidates, **kwargs)).encode()


def revision_of(data: bytes) -> str:
    return str(json.loads(data)["revision"]["value"])


class ProjectedDir:
    """A directory laid out the way kubelet projects a ConfigMap volume, updated the same way.

    ``routing-overlay.json -> ..data/routing-overlay.json`` and ``..data -> ..<timestamp>``; an update
    writes a new timestamped directory and atomically replaces the ``..data`` symlink.
    """

    _counter = itertools.count()

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / OVERLAY_NAME

    def publish(self, data: bytes) -> None:
        version = self.root / f"..2026_01_01_00_00_{next(self._counter):02d}.{os.getpid()}"
        version.mkdir()
        (version / OVERLAY_NAME).write_bytes(data)
        tmp = self.root / "..data_tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(version.name)
        os.replace(tmp, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to(Path("..data") / OVERLAY_NAME)


class EchoUpstream:
    """An HTTP upstream on 127.0.0.1 that answers with its name, the request line and headers."""

    def __init__(self, name: str, handler: Callable[[web.Request], Any] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.name = name
        self.ssl_context = ssl_context  # None: plain HTTP
        self.port = 0
        self.requests: list[dict[str, Any]] = []
        self._handler = handler
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    async def _echo(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen = {
            "upstream": self.name,
            "method": request.method,
            "path_qs": request.path_qs,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body": body.decode("utf-8", "replace"),
        }
        self.requests.append(seen)
        if self._handler is not None:
            result = self._handler(request)
            if asyncio.iscoroutine(result):
                result = await result
            if result is not None:
                return result  # type: ignore[no-any-return]
        return web.json_response(seen, headers={"X-Upstream": self.name})

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._echo)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    def __enter__(self) -> EchoUpstream:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll until condition() is truthy; on timeout fail saying what was awaited and what was seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")


def config_text(filters: list[dict[str, Any]], **top: Any) -> str:
    config: dict[str, Any] = {
        "listeners": [{"name": "proxy", "address": "127.0.0.1:0", "filter_chains": ["main"]}],
        "filter_chains": [{"name": "main", "filters": filters}],
        "admin": {"address": "127.0.0.1:0"},
        "shutdown_timeout_secs": 5,
        "insecure_options": {"allow_private_endpoints": True},
    }
    config.update(top)
    return yaml.safe_dump(config, sort_keys=False)


class GatewayProcess:
    """`python -m reference.gateway.cli` as a child process; stop() always reaps it."""

    def __init__(
        self, config_path: Path, *, env: Mapping[str, str] | None = None, log_level: str = "info"
    ) -> None:
        self.config_path = config_path
        self.stderr_path = config_path.with_suffix(".stderr")
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reference.gateway.cli", "-c", str(config_path), "--log-level", log_level],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=full_env,
            cwd=str(REPO),
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        self.listeners: dict[str, str] = {}
        self.admin: str | None = None

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._lines.put(raw.decode("utf-8", "replace").rstrip("\n"))

    def wait_started(self, timeout: float = 15.0) -> GatewayProcess:
        """Read LISTENING/ADMIN lines until the admin address is known."""
        deadline = time.monotonic() + timeout
        while self.admin is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.proc.poll() is not None:
                raise AssertionError(f"gateway did not start (exit={self.proc.poll()}): {self.stderr_tail()}")
            try:
                line = self._lines.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                continue
            parts = line.split()
            if parts[:1] == ["LISTENING"] and len(parts) == 3:
                self.listeners[parts[1]] = parts[2]
            elif parts[:1] == ["ADMIN"] and len(parts) == 2:
                self.admin = parts[1]
        return self

    def url(self, listener: str = "proxy") -> str:
        return f"http://{self.listeners[listener]}"

    def admin_url(self) -> str:
        return f"http://{self.admin}"

    def stderr_tail(self, limit: int = 4000) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-limit:]

    def terminate(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._stderr.close()


@contextlib.contextmanager
def running_gateway(config_path: Path, **kwargs: Any) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(config_path, **kwargs)
    try:
        yield gateway.wait_started()
    finally:
        gateway.stop()


def client() -> httpx.Client:
    return httpx.Client(timeout=10.0, trust_env=False)


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text format, or None when absent."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


# --- in-process filter helpers ---------------------------------------------------------------------


def route_filter(options: Mapping[str, Any], overlay: bytes | None = None, **kwargs: Any) -> Any:
    """An IntelligentRouteFilter from a config block and (in overlay mode) overlay bytes."""
    from reference.gateway.filters.intelligent_route import IntelligentRouteFilter
    from reference.gateway.filters.intelligent_route_config import parse
    from reference.gateway.metrics import GatewayMetrics
    from reference.gateway.snapshot import Snapshot
    from reference.gateway.snapshot_store import build_snapshot

    raw = {"filter": "intelligent_route", **options}
    if overlay is not None:
        raw.setdefault("overlay_file", "/nonexistent/routing-overlay.json")
    config = parse(raw, "route")
    if config.static is not None:
        snapshot = Snapshot(config.static, "static")
    else:
        assert overlay is not None
        snapshot = build_snapshot(overlay, config.expected_scope, config.clusters)
    kwargs.setdefault("metrics", GatewayMetrics())
    metrics = kwargs.pop("metrics")
    return IntelligentRouteFilter(config, snapshot, metrics, **kwargs)


def run_request(
    route: Any,
    model: str | None = None,
    *,
    path: str = "/v1/chat/completions",
    headers: Mapping[str, str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    cluster: str | None = None,
) -> tuple[Any, Any]:
    """Run one request through the filter; returns (ctx, rejection-or-None)."""
    from multidict import CIMultiDict

    from reference.gateway.context import RequestContext

    hdrs: CIMultiDict[str] = CIMultiDict(headers or {})
    if model is not None:
        hdrs["X-Model"] = model
    ctx = RequestContext("POST", path, path, hdrs, b"")
    ctx.cluster = cluster
    ctx.metadata.update(metadata or {})
    return ctx, route.on_request(ctx)
