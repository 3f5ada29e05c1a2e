"""The admin endpoint: readiness, liveness and Prometheus metrics on their own address.

Bodies follow Praxis: small JSON status documents, and Prometheus text on /metrics.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from reference.gateway.metrics import CONTENT_TYPE, GatewayMetrics

_OK = b'{"status":"ok"}'
_STARTING = b'{"status":"starting"}'
_NOT_FOUND = b'{"error":"not found"}'
_NOT_ALLOWED = b'{"error":"method not allowed"}'


class AdminState:
    """Readiness is true once every listener is bound and every initial snapshot is loaded."""

    def __init__(self) -> None:
        self.ready = False


def _json(status: int, body: bytes, **headers: str) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json", headers=headers or None)


def make_handler(
    state: AdminState, metrics: GatewayMetrics
) -> Callable[[web.BaseRequest], Awaitable[web.Response]]:
    async def handle(request: web.BaseRequest) -> web.Response:
        path = request.path
        if path not in ("/ready", "/healthy", "/metrics"):
            return _json(404, _NOT_FOUND)
        if request.method not in ("GET", "HEAD"):
            return _json(405, _NOT_ALLOWED, Allow="GET, HEAD")
        if path == "/healthy":
            return _json(200, _OK)
        if path == "/ready":
            return _json(200, _OK) if state.ready else _json(503, _STARTING)
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    return handle
