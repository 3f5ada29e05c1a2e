"""The running gateway: listeners, admin endpoint, overlay reloaders, grid_site_route pollers and the
upstream session.

Startup order: build filters (cold-start overlays, serving configs), bind the admin endpoint, bind
listeners, start reloaders and the grid_site_route pollers and watchers, mark ready, then print one
``LISTENING <name> <host>:<port>`` line per listener and an ``ADMIN <host>:<port>`` line on stdout, so
callers that bound port 0 learn the real ports.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from reference.gateway.admin import AdminState, make_handler
from reference.gateway.build import Built, build
from reference.gateway.config import GatewayConfig
from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters.load_balancer import LoadBalancerConfig
from reference.gateway.logfmt import kv
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.pipeline import Pipeline
from reference.gateway.proxy import Forwarder, text_response
from reference.gateway.reload import OverlayReloader
from reference.gateway.site_route.runtime import SiteRouteRuntime
from reference.gateway.tls import peer_identity

log = logging.getLogger("agn.gateway")
access_log = logging.getLogger("agn.gateway.access")

MAX_BODY_BYTES = 8 * 1024 * 1024
Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class BodyTooLarge(Exception):
    pass


async def read_body(request: web.BaseRequest, limit: int = MAX_BODY_BYTES) -> bytes:
    """The whole request body, refusing more than `limit` bytes without buffering them."""
    length = request.content_length
    if length is not None and length > limit:
        raise BodyTooLarge
    if not request.body_exists:
        return b""
    buffer = bytearray()
    while True:
        chunk = await request.content.readany()
        if not chunk:
            return bytes(buffer)
        buffer += chunk
        if len(buffer) > limit:
            raise BodyTooLarge


def _format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def reject_response(rejection: Reject) -> web.Response:
    """A filter's own answer: its status, body, content type and extra headers."""
    return web.Response(status=rejection.status, text=rejection.body, content_type=rejection.content_type,
                        headers=rejection.headers or None)


def make_listener_handler(
    pipeline: Pipeline, forwarder: Forwarder, max_body: int = MAX_BODY_BYTES, *, tls: bool = False
) -> Handler:
    run = pipeline.run

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        try:
            body = await read_body(request, max_body)
        except BodyTooLarge:
            too_large = text_response(413, "request body too large\n")
            too_large.force_close()
            return too_large
        except (web.HTTPException, ConnectionError, OSError, ValueError):
            return text_response(400, "malformed request body\n")
        ctx = RequestContext(
            request.method, request.path, request.raw_path, CIMultiDict(request.headers), body
        )
        if tls:
            ctx.peer = peer_identity(request.transport)
        try:
            rejection = run(ctx)
        except Exception:
            log.exception("filter error %s", kv(listener=pipeline.name))
            return text_response(500, "internal error\n")
        if rejection is not None:
            response: web.StreamResponse = reject_response(rejection)
        elif ctx.cluster is None:
            response = text_response(404, "no route\n")
        elif ctx.upstream is None:
            log.warning("cluster not configured %s", kv(listener=pipeline.name, cluster=ctx.cluster))
            response = text_response(503, "selected cluster is not configured\n")
        else:
            try:
                response = await forwarder.forward(request, ctx)
            except Exception:
                log.exception("proxy error %s", kv(listener=pipeline.name, cluster=ctx.cluster))
                response = text_response(502, "upstream request failed\n")
        if access_log.isEnabledFor(logging.DEBUG):
            access_log.debug(
                "decision %s",
                kv(
                    listener=pipeline.name,
                    method=ctx.method,
                    path=ctx.path,
                    status=response.status,
                    cluster=ctx.cluster,
                    **{"metadata." + k: v for k, v in ctx.metadata.items()},
                ),
            )
        return response

    return handle


class Gateway:
    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics | None = None,
                 built: Built | None = None) -> None:
        """`built` is what `build(config, metrics)` returned, when the caller built the filters already."""
        self.config = config
        self.metrics = metrics or GatewayMetrics()
        self.state = AdminState()
        self.built: Built | None = built
        if built is not None:
            self._warn_private_endpoints()
        self.listener_addresses: dict[str, tuple[str, int]] = {}
        self.admin_address: tuple[str, int] | None = None
        self._runners: list[web.BaseRunner] = []
        self._admin_runner: web.BaseRunner | None = None
        self._reloaders: list[OverlayReloader] = []
        self._site_routes: list[SiteRouteRuntime] = []  # grid_site_route pollers and serving-config watchers
        self._forwarder: Forwarder | None = None

    def build(self) -> Built:
        """Construct filters and cold-start snapshots; raises ConfigError."""
        if self.built is None:
            self.built = build(self.config, self.metrics)
            self._warn_private_endpoints()
        return self.built

    def _warn_private_endpoints(self) -> None:
        if self.config.allow_private_endpoints:
            return
        for chain in self.config.chains.values():
            for spec in chain.filters:
                if isinstance(spec.options, LoadBalancerConfig):
                    for cluster in spec.options.clusters:
                        if cluster.private_endpoints:
                            log.warning(
                                "private upstream endpoint %s",
                                kv(
                                    cluster=cluster.name,
                                    endpoint=cluster.private_endpoints[0],
                                    hint="set insecure_options.allow_private_endpoints: true",
                                ),
                            )

    async def start(self) -> None:
        built = self.build()
        forwarder = self._forwarder = Forwarder(self.config.max_response_bytes)
        try:
            if self.config.admin is not None:
                self._admin_runner, self.admin_address = await self._serve(
                    make_handler(self.state, self.metrics), self.config.admin
                )
            for listener in self.config.listeners:
                runner, bound = await self._serve(
                    make_listener_handler(
                        built.pipelines[listener.name],
                        forwarder,
                        self.config.max_request_bytes,
                        tls=listener.tls is not None,
                    ),
                    (listener.host, listener.port),
                    shutdown_timeout=self.config.shutdown_timeout_secs,
                    ssl_context=listener.tls.context if listener.tls is not None else None,
                )
                self._runners.append(runner)
                self.listener_addresses[listener.name] = bound
            for route in built.routes:
                if route.config.overlay_file is not None and route.config.reload_enabled:
                    reloader = OverlayReloader(route, self.metrics)
                    await reloader.start()
                    self._reloaders.append(reloader)
            for site_route in built.site_routes:
                self._site_routes.append(site_route.runtime)
                await site_route.runtime.start()
        except BaseException:
            await self.stop()
            raise
        self.state.ready = True
        self._announce()

    async def _serve(
        self,
        handler: Handler,
        addr: tuple[str, int],
        shutdown_timeout: float = 1.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> tuple[web.BaseRunner, tuple[str, int]]:
        server = web.Server(handler, access_log=None)
        runner = web.ServerRunner(server, shutdown_timeout=max(0.1, shutdown_timeout * 0.8))
        await runner.setup()
        site = web.TCPSite(
            runner, addr[0], addr[1], reuse_address=True, backlog=1024, ssl_context=ssl_context
        )
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        sockname: Any = runner.addresses[0]
        return runner, (addr[0], int(sockname[1]))

    def _announce(self) -> None:
        lines = [
            f"LISTENING {lst.name} {_format_address(*self.listener_addresses[lst.name])}"
            for lst in self.config.listeners
        ]
        if self.admin_address is not None:
            lines.append(f"ADMIN {_format_address(*self.admin_address)}")
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        log.info(
            "startup %s",
            kv(
                listeners=",".join(
                    f"{lst.name}@{_format_address(*self.listener_addresses[lst.name])}"
                    for lst in self.config.listeners
                ),
                admin=_format_address(*self.admin_address) if self.admin_address else None,
                overlays=",".join(
                    f"{r.store.current.format}:{r.store.current.revision or r.store.current.semantic_key}"
                    for r in (self.built.routes if self.built else [])
                )
                or None,
            ),
        )

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish within the shutdown timeout, release everything."""
        self.state.ready = False
        for reloader in self._reloaders:
            await reloader.stop()
        self._reloaders.clear()
        for runtime in self._site_routes:
            await runtime.stop()
        self._site_routes.clear()
        await asyncio.gather(*(runner.cleanup() for runner in self._runners), return_exceptions=True)
        self._runners.clear()
        if self._admin_runner is not None:
            await self._admin_runner.cleanup()
            self._admin_runner = None
        if self._forwarder is not None:
            await self._forwarder.aclose()
            self._forwarder = None
        if self.built is not None:
            for route in self.built.routes:
                route.close()


async def run(config: GatewayConfig, stop: asyncio.Event, metrics: GatewayMetrics | None = None,
              built: Built | None = None) -> None:
    """Serve until `stop` is set, then shut down gracefully (`built`: filters built from `config` already)."""
    gateway = Gateway(config, metrics, built)
    gateway.build()
    await gateway.start()
    try:
        await stop.wait()
        log.info("shutdown %s", kv(timeout_secs=config.shutdown_timeout_secs))
    finally:
        try:
            await asyncio.wait_for(gateway.stop(), timeout=config.shutdown_timeout_secs + 1.0)
        except TimeoutError:
            log.warning("shutdown timed out %s", kv(timeout_secs=config.shutdown_timeout_secs))
