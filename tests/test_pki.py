"""The run's PKI: grid CA, server and client certificates, the untrusted variants, digests and files."""

from __future__ import annotations

import datetime
import hashlib
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from harness.pki import GRID_ORGANIZATION, GridPKI, client_context, file_digest, leaf_digest


def _leaf(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificates(path.read_bytes())[0]


@pytest.fixture
def pki(tmp_path: Path) -> GridPKI:
    return GridPKI(tmp_path / "pki")


def test_server_certificate_keeps_its_api(pki: GridPKI) -> None:
    files = pki.server("gw", "127.0.0.1", "gw.grid.test")
    assert files.cert.is_file() and files.key.is_file()
    assert files.key.stat().st_mode & 0o777 == 0o600
    sans = _leaf(files.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gw.grid.test" in sans.get_values_for_type(x509.DNSName)
    assert files.digest == file_digest(files.cert)


def test_server_certificate_may_carry_uri_names_and_still_verifies(pki: GridPKI) -> None:
    """A SPIFFE ID rides beside the DNS and IP names; the grid CA still verifies the certificate for its
    address, and the plain twin carries no URI."""
    files = pki.server("relay", "127.0.0.1", "site-a.signals", uris=("spiffe://grid.internal/site/site-a",))
    sans = _leaf(files.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.UniformResourceIdentifier) == ["spiffe://grid.internal/site/site-a"]
    assert "site-a.signals" in sans.get_values_for_type(x509.DNSName)
    assert files.digest == file_digest(files.cert) and files.key.stat().st_mode & 0o777 == 0o600
    plain = pki.server("plain", "127.0.0.1")
    assert not _leaf(plain.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value \
        .get_values_for_type(x509.UniformResourceIdentifier)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(files.cert), str(files.key))  # the key still matches the re-signed leaf
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        accepted: list[str] = []

        def serve() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"x")
                accepted.append("ok")

        thread = threading.Thread(target=serve)
        thread.start()
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                client_context(pki.ca_path).wrap_socket(raw, server_hostname="site-a.signals") as tls:
            assert tls.recv(1) == b"x"
        thread.join(10)
    assert accepted == ["ok"]


def test_client_certificate_has_grid_organization_and_digest(pki: GridPKI) -> None:
    client = pki.client("consumer-a")
    leaf = _leaf(client.cert)
    orgs = [a.value for a in leaf.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)]
    assert orgs == [GRID_ORGANIZATION] and client.organization == GRID_ORGANIZATION
    expected = hashlib.sha256(leaf.public_bytes(Encoding.DER)).hexdigest()
    assert client.digest == expected and len(expected) == 64 and expected == expected.lower()
    assert client.serial_number == leaf.serial_number
    assert client.issuer_ca == pki.ca_path
    assert leaf_digest(client.cert.read_bytes()) == expected


def test_digests_differ_between_certificates(pki: GridPKI) -> None:
    assert pki.client("one").digest != pki.unlisted_client("two").digest


def test_untrusted_variants(pki: GridPKI) -> None:
    foreign = pki.foreign_client("foreign")
    assert foreign.issuer_ca == pki.foreign_ca_path != pki.ca_path
    assert _leaf(foreign.cert).issuer != _leaf(pki.ca_path).subject
    wrong = pki.wrong_organization_client("wrong")
    assert wrong.organization != GRID_ORGANIZATION
    assert _leaf(wrong.cert).issuer == _leaf(pki.ca_path).subject
    expired = pki.expired_client("expired")
    assert _leaf(expired.cert).not_valid_after_utc < datetime.datetime.now(datetime.UTC)
    with pytest.raises(ValueError):
        pki.wrong_organization_client("still-grid", GRID_ORGANIZATION)


def test_names_are_unique_and_safe(pki: GridPKI) -> None:
    pki.client("peer")
    with pytest.raises(ValueError, match="already used"):
        pki.client("peer")
    with pytest.raises(ValueError, match="certificate name"):
        pki.client("../escape")


def _handshake(pki: GridPKI, server_name: str, client_files: object) -> str:
    """Run one mutual-TLS handshake over loopback; returns 'ok' or the server-side error."""
    files = pki.server(server_name, "127.0.0.1")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(files.cert), str(files.key))
    server_ctx.load_verify_locations(cafile=str(pki.ca_path))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    outcome: list[str] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"x")
                    outcome.append("ok")
            except (ssl.SSLError, OSError) as exc:
                outcome.append(f"error: {exc}")

        thread = threading.Thread(target=serve)
        thread.start()
        ctx = client_context(pki.ca_path, client_files)  # type: ignore[arg-type]
        try:
            with socket.create_connection(("127.0.0.1", port)) as raw, \
                    ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass
        thread.join(10)
    return outcome[0] if outcome else "no outcome"


def test_grid_client_passes_mutual_tls(pki: GridPKI) -> None:
    assert _handshake(pki, "srv1", pki.client("consumer")) == "ok"


@pytest.mark.parametrize("variant", ["foreign", "expired", "none"])
def test_untrusted_clients_fail_mutual_tls(pki: GridPKI, variant: str) -> None:
    client = {"foreign": lambda: pki.foreign_client("c"), "expired": lambda: pki.expired_client("c"),
              "none": lambda: None}[variant]()
    assert _handshake(pki, "srv2", client).startswith("error"), variant


def test_files_live_under_the_run_directory(tmp_path: Path) -> None:
    pki = GridPKI(tmp_path / "run" / "pki")
    pki.client("a")
    pki.foreign_client("b")
    assert {p.parent for p in (tmp_path / "run").rglob("*.pem")} == {tmp_path / "run" / "pki"}
    assert all(p.is_relative_to(tmp_path / "run") for p in (tmp_path / "run").rglob("*"))
