"""The provider-hop Grid API without a gateway: refusal classification, credential sources, leak scans."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from harness.gateway_config import CredentialRef
from harness.grid import Grid, ProviderGateway, Refused, Reply, Site, is_refusal
from harness.pki import GridPKI
from harness.topology import load_topology

REF = CredentialRef("tok", "ns", "token")


class _Echo(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the stdlib handler's name
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps({"agn": {"backend": "echo", "request": {"headers": {"x-seen": "1"}}}}).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def grid(tmp_path: Path) -> Grid:
    backend: Any = SimpleNamespace(workdir=tmp_path, pki=GridPKI(tmp_path / "pki"), gateway_user=lambda: None)
    return Grid(load_topology("two-site"), backend, frozenset())


@pytest.fixture
def mtls_server(grid: Grid) -> Iterator[str]:
    """An HTTPS echo server on loopback that requires a client certificate from the grid CA."""
    pki = grid.backend.pki
    files = pki.server("echo", "127.0.0.1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(files.cert), str(files.key))
    context.load_verify_locations(cafile=str(pki.ca_path))
    context.verify_mode = ssl.CERT_REQUIRED
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _provider(grid: Grid, listen: str) -> ProviderGateway:
    site = Site(grid, 1, grid.topology.site("site-b"))
    proc: Any = SimpleNamespace(url=f"https://{listen}", listen=listen, name="echo")
    return ProviderGateway(site, proc, (), {}, "provider-gateway.site-b.grid.test")


def test_trusted_client_gets_an_answer(grid: Grid, mtls_server: str) -> None:
    gateway = _provider(grid, mtls_server)
    reply = gateway.call("m", client=grid.backend.pki.client("peer"))
    assert isinstance(reply, Reply) and reply.status == 200 and reply.forwarded_headers == {"x-seen": "1"}
    assert not is_refusal(reply)
    gateway.close()


@pytest.mark.parametrize("variant", ["none", "foreign", "expired"])
def test_failed_handshake_is_a_refusal(grid: Grid, mtls_server: str, variant: str) -> None:
    pki = grid.backend.pki
    client = {"none": lambda: None, "foreign": lambda: pki.foreign_client("f"),
              "expired": lambda: pki.expired_client("e")}[variant]()
    outcome = _provider(grid, mtls_server).call("m", client=client)
    assert isinstance(outcome, Refused) and is_refusal(outcome), outcome


def test_nothing_listening_is_not_a_refusal(grid: Grid) -> None:
    with pytest.raises(httpx.ConnectError):
        _provider(grid, "127.0.0.1:1").call("m", client=None)


def test_status_403_is_a_refusal_and_others_are_not() -> None:
    assert is_refusal(Reply(403, httpx.Headers(), b""))
    assert not is_refusal(Reply(404, httpx.Headers(), b""))


def test_hop_headers_are_well_formed(grid: Grid) -> None:
    headers = _provider(grid, "127.0.0.1:1").hop_headers("cand")
    assert headers["x-ai-routing-candidate"] == "cand"
    assert len(headers["x-ai-routing-request-id"]) == 32 and len(headers["x-ai-routing-revision"]) == 64
    assert "x-ai-routing-candidate" not in _provider(grid, "127.0.0.1:1").hop_headers(None)


def test_credential_sources(grid: Grid) -> None:
    site = Site(grid, 1, grid.topology.site("site-b"))
    sources, env = site._credential_sources("gw-1", {REF: "s3cret"}, "file")
    path = Path(str(sources[0].file))
    assert path.read_text() == "s3cret\n" and path.stat().st_mode & 0o777 == 0o600 and env == {}
    assert path.is_relative_to(grid.credentials_dir)
    sources, env = site._credential_sources("gw-2", {REF: "s3cret"}, "env_var")
    assert env == {str(sources[0].env_var): "s3cret"}
    sources, _ = site._credential_sources("gw-3", {REF: "s3cret"}, "value")
    assert sources[0].value == "s3cret"
    with pytest.raises(ValueError, match="unknown credential source"):
        site._credential_sources("gw-4", {REF: "x"}, "vault")


def test_files_containing_scans_everything_but_exclusions(grid: Grid) -> None:
    (grid.workdir / "logs").mkdir()
    (grid.workdir / "logs" / "gw.log").write_text("line with needle-123\n")
    (grid.workdir / "clean.yaml").write_text("nothing\n")
    grid.credentials_dir.mkdir()
    (grid.credentials_dir / "token").write_text("needle-123")
    assert set(grid.files_containing(b"needle-123")) == {grid.workdir / "logs" / "gw.log",
                                                        grid.credentials_dir / "token"}
    assert grid.files_containing(b"needle-123", exclude=[grid.credentials_dir]) == [grid.workdir / "logs" / "gw.log"]
