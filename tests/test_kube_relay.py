"""The loopback relay to a NodePort: a refused TLS handshake ends that connection only.

Real sockets on loopback and real TLS (trustme): the upstream requires a client certificate of its CA, as
a provider gateway does. Through `kubectl port-forward` the first refusal ended the forward, so the twin
request found nothing listening; through the relay the twin is served.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator

import pytest
import trustme

from harness.backends.kube.relay import TcpRelay

Upstream = tuple[int, trustme.CA, trustme.CA]  # port, the CA it trusts, another CA


@pytest.fixture
def mtls_upstream() -> Iterator[Upstream]:
    ca, other = trustme.CA(), trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    ca.configure_trust(server)
    server.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with server.wrap_socket(raw, server_side=True) as conn:
                    conn.sendall(b"hello " + conn.recv(100))
            except (ssl.SSLError, OSError):
                raw.close()  # refused: the handshake is broken off, as a gateway does

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], ca, other
    stop.set()
    listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
    listener.close()
    thread.join(timeout=5)


def _call(port: int, ca: trustme.CA, client_ca: trustme.CA) -> bytes:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    client_ca.issue_cert("client@example.test").configure_cert(context)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        conn.sendall(b"twin")
        return conn.recv(100)


def test_a_refused_handshake_leaves_the_relay_serving_the_twin(mtls_upstream: Upstream) -> None:
    port, ca, other = mtls_upstream
    relay = TcpRelay("127.0.0.1", port)
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _call(relay.port, ca, other)  # a certificate of another CA is refused
        assert _call(relay.port, ca, ca) == b"hello twin"  # the twin, through the same relay
        assert _call(relay.port, ca, ca) == b"hello twin"
    finally:
        relay.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", relay.port), timeout=5)  # closed: the port is released


def test_an_upstream_that_is_gone_ends_the_connection() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    dead = free.getsockname()[1]
    free.close()
    relay = TcpRelay("127.0.0.1", dead, connect_timeout=2)
    try:
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as conn:
            conn.settimeout(10)
            assert conn.recv(10) == b""  # ended, not left hanging
    finally:
        relay.close()
