"""A poller against a real TLS endpoint: each poll ends in one result, and a cancelled poller stops."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path
from typing import Any

import trustme
from aiohttp import web
from gateway_support import EchoUpstream

from reference.gateway.site_route import pollers
from reference.gateway.site_route.serving_config import ServingPeer


def material(tmp_path: Path, ca: trustme.CA, name: str) -> dict[str, Path]:
    cert = ca.issue_cert(f"{name}.client")
    paths = {"grid_ca_path": tmp_path / f"{name}-ca.pem", "client_cert_path": tmp_path / f"{name}.pem",
             "client_key_path": tmp_path / f"{name}.key"}
    ca.cert_pem.write_to_path(str(paths["grid_ca_path"]))
    cert.cert_chain_pems[0].write_to_path(str(paths["client_cert_path"]))
    cert.private_key_pem.write_to_path(str(paths["client_key_path"]))
    return paths


def peer(port: int, files: dict[str, Path], **extra: Any) -> ServingPeer:
    fields: dict[str, Any] = {"site": "site-b", "addr": ("127.0.0.1", port), "server_name": "site-b.signals",
                              "authority": "site-b.signals", "path": "/v1/site/signals", "interval_ms": 50,
                              "connect_timeout_ms": 1000, "request_timeout_ms": 1000, **files}
    fields.update(extra)
    return ServingPeer(**fields)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_poll_results(tmp_path: Path) -> None:
    grid, rogue = trustme.CA(), trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.verify_mode = ssl.CERT_REQUIRED
    grid.configure_trust(server)
    grid.issue_cert("site-b.signals").configure_cert(server)
    seen: list[str | None] = []

    def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Host"))
        if request.path != "/v1/site/signals":
            return web.Response(status=404)
        return web.Response(text="llm_d_epp_ready_endpoints 1\n")

    good, other = material(tmp_path, grid, "good"), material(tmp_path, rogue, "rogue")

    async def scenario(port: int) -> list[tuple[str, str | None, str | None]]:
        session = pollers.new_session()
        try:
            results = [await pollers.Poller(p, session, lambda *a: None).poll_once() for p in (
                peer(port, good),
                peer(port, good, path="/elsewhere"),
                peer(port, good, server_name="site-c.signals"),  # the certificate names site-b only
                peer(port, {**good, "grid_ca_path": other["grid_ca_path"]}),  # a server from another CA
                peer(port, {**good, "client_key_path": tmp_path / "missing.key"}),
                peer(free_port(), good),
            )]
            ticks: list[str] = []
            poller = pollers.Poller(peer(port, good), session, lambda _p, result, *_: ticks.append(result))
            poller.start()
            await asyncio.sleep(0.3)
            await poller.stop()
            assert 3 <= len(ticks) <= 8 and set(ticks) == {"ok"}, ticks
            return results
        finally:
            await session.close()

    with EchoUpstream("signals", handler, ssl_context=server) as relay:
        results = asyncio.run(scenario(relay.port))
    assert [r[0] for r in results] == ["ok", "http_error", "tls_error", "tls_error", "tls_error", "connect_error"]
    assert results[0][1] == "llm_d_epp_ready_endpoints 1\n"
    assert set(seen) == {"site-b.signals"}  # the Host header is the peer's authority
