"""One asyncio task per peer: GET its signals endpoint over mutual TLS every interval_ms.

The client certificate and the grid CA come from the peer's entry in the serving config; the server
certificate is verified against the grid CA for `server_name`, and the request carries `authority` as
its Host. Each poll ends in one result (ok, connect_error, timeout, tls_error, http_error) handed to
`on_result` with the body of an ok poll; the poller never parses or stores anything itself.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

from reference.gateway.site_route.background import Background
from reference.gateway.site_route.serving_config import ServingPeer

MAX_BODY_BYTES = 4 * 1024 * 1024
OnResult = Callable[[ServingPeer, str, "str | None", "str | None"], None]  # peer, result, body, error


def client_context(peer: ServingPeer) -> ssl.SSLContext:
    """Verifies the peer against the grid CA and presents this gateway's client certificate."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(peer.grid_ca_path))
    context.load_cert_chain(str(peer.client_cert_path), str(peer.client_key_path))
    return context


def new_session() -> Any:
    """One client session for every poller of a gateway: kept-alive connections, no proxy from the environment."""
    import aiohttp  # the HTTP client stack only once the gateway serves

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, keepalive_timeout=30),
                                 auto_decompress=True, trust_env=False)


async def fetch(session: Any, peer: ServingPeer, context: ssl.SSLContext) -> tuple[str, str | None, str | None]:
    """One GET: (result, body, error)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=peer.request_timeout_ms / 1000,
                                    sock_connect=peer.connect_timeout_ms / 1000)
    try:
        async with session.get(peer.url, ssl=context, server_hostname=peer.server_name, timeout=timeout,
                               headers={"Host": peer.authority, "Accept": "text/plain"},
                               allow_redirects=False) as response:
            if response.status != 200:
                return "http_error", None, f"status {response.status}"
            body = await response.content.read(MAX_BODY_BYTES + 1)
            if len(body) > MAX_BODY_BYTES:
                return "http_error", None, f"body exceeds {MAX_BODY_BYTES} bytes"
            return "ok", body.decode("utf-8", "replace"), None
    except TimeoutError:
        return "timeout", None, f"no answer within {peer.request_timeout_ms} ms"
    except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
        return "tls_error", None, str(exc) or type(exc).__name__
    except (aiohttp.ClientError, OSError) as exc:
        return "connect_error", None, str(exc) or type(exc).__name__


class Poller(Background):
    """Polls one peer until cancelled."""

    def __init__(self, peer: ServingPeer, session: Any, on_result: OnResult) -> None:
        self.peer = peer
        self._session = session
        self._on_result = on_result
        self._context: ssl.SSLContext | None = None

    @property
    def task_name(self) -> str:
        return f"signals-poll:{self.peer.site}"

    async def poll_once(self) -> tuple[str, str | None, str | None]:
        if self._context is None:
            try:
                self._context = client_context(self.peer)
            except (OSError, ssl.SSLError, ValueError) as exc:
                return "tls_error", None, f"client TLS material: {exc}"
        return await fetch(self._session, self.peer, self._context)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.peer.interval_ms / 1000
        while True:
            began = loop.time()
            result, body, error = await self.poll_once()
            self._on_result(self.peer, result, body, error)
            await asyncio.sleep(max(0.0, interval - (loop.time() - began)))
