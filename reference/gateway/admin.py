"""The admin endpoint: readiness, liveness and Prometheus metrics on their own address."""

from __future__ import annotations

from aiohttp import web

from reference.gateway.metrics import CONTENT_TYPE, GatewayMetrics


class AdminState:
    """Readiness is true once every listener is bound and every initial snapshot is loaded."""

    def __init__(self) -> None:
        self.ready = False


def make_handler(state: AdminState, metrics: GatewayMetrics):  # type: ignore[no-untyped-def]
    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text="method not allowed\n", headers={"Allow": "GET, HEAD"})
        path = request.path
        if path == "/ready":
            if state.ready:
                return web.Response(text="ready\n")
            return web.Response(status=503, text="not ready\n")
        if path == "/healthy":
            return web.Response(text="healthy\n")
        if path == "/metrics":
            return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})
        return web.Response(status=404, text="not found\n")

    return handle
