"""Admin HTTP endpoints: readiness, liveness and Prometheus metrics.

`/ready` answers 200 once a revision has been delivered (or a valid one was found in the target at
start) and 503 with the reason before; `/healthy` answers 200 while the process runs.
"""

from __future__ import annotations

from aiohttp import web

from reference.overlay_sync.metrics import CONTENT_TYPE
from reference.overlay_sync.sync import OverlaySyncer


def build_app(syncer: OverlaySyncer) -> web.Application:
    async def ready(_request: web.Request) -> web.Response:
        status = syncer.status()
        return web.json_response(status, status=200 if status["ready"] else 503)

    async def healthy(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=syncer.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/ready", ready)
    app.router.add_get("/healthy", healthy)
    app.router.add_get("/metrics", metrics)
    return app


async def start_admin(syncer: OverlaySyncer, host: str, port: int) -> tuple[web.AppRunner, str, int]:
    """Bind the admin server; returns the runner and the bound address (port 0 picks a free one)."""
    runner = web.AppRunner(build_app(syncer), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound_host, bound_port = sockets[0].getsockname()[:2] if sockets else (host, port)
    return runner, str(bound_host), int(bound_port)
