"""Certificates for a run, made with trustme: one grid CA and leaf certificates written as PEM files.

Files live in the run's work directory and go with it; private keys never leave that directory.
Besides the grid's own server and client certificates, the provider profile needs peers a provider gateway
must refuse: a client certificate from another CA, one from the grid CA with the wrong organization, an
expired one, and one whose digest no trust list names; and a server certificate from another CA, which a
consumer gateway's provider hop must refuse. Each leaf carries its SHA-256 digest (of the DER
encoding, 64 lowercase hex), the value `peer_identity_trust` pins.
"""

from __future__ import annotations

import datetime
import hashlib
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding, load_pem_private_key

#: The organization consumer gateways carry in their client certificates; provider gateways trust it.
GRID_ORGANIZATION = "ai-grid"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class ServerFiles:
    """A server certificate chain and its key as PEM files."""

    cert: Path
    key: Path
    digest: str = ""


@dataclass(frozen=True)
class ClientFiles:
    """A client certificate, its key, and what a provider gateway sees of it."""

    name: str
    cert: Path
    key: Path
    digest: str
    organization: str
    serial_number: int
    issuer_ca: Path  # the CA that signed it (the grid CA or a foreign one)


def leaf_digest(pem: bytes) -> str:
    """SHA-256 of the first certificate's DER encoding, as 64 lowercase hex characters."""
    cert = x509.load_pem_x509_certificate(pem)
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()


def file_digest(path: Path) -> str:
    """The leaf digest of a PEM certificate file."""
    return leaf_digest(Path(path).read_bytes())


def client_context(ca_path: Path, client: ClientFiles | None = None) -> ssl.SSLContext:
    """A client-side TLS context trusting `ca_path` and presenting `client` (or no certificate).

    httpx drops a client certificate when `verify` is a path, so callers pass this context as `verify`.
    """
    context = ssl.create_default_context(cafile=str(ca_path))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


class GridPKI:
    """The run's certificate authority and the certificates issued from it."""

    def __init__(self, directory: Path, organization: str = GRID_ORGANIZATION) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA(organization_name=organization)
        self.ca_path = self.directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_path))
        self._foreign: trustme.CA | None = None
        self._issued: dict[str, ClientFiles | ServerFiles] = {}

    @property
    def foreign_ca_path(self) -> Path:
        """A second CA nobody in the grid trusts (made on first use)."""
        self._foreign_ca()
        return self.directory / "foreign-ca.pem"

    def server(self, name: str, *hosts: str, uris: tuple[str, ...] = ()) -> ServerFiles:
        """A server certificate for `hosts` (IP addresses or DNS names), stored under `name`; `uris` are
        further URI names (a SPIFFE ID, say) it carries beside them."""
        cert = self.ca.issue_cert(*hosts)
        if uris:
            cert_path, key_path = self._write_pems(name, [_with_uris(cert, self.ca, uris), *(
                blob.bytes() for blob in cert.cert_chain_pems[1:])], cert.private_key_pem.bytes())
        else:
            cert_path, key_path = self._write(name, cert)
        files = ServerFiles(cert_path, key_path, file_digest(cert_path))
        self._issued[name] = files
        return files

    def client(self, name: str, organization: str = GRID_ORGANIZATION, *, expired: bool = False,
               foreign: bool = False) -> ClientFiles:
        """A client certificate stored under `name`.

        `organization` is the subject O; `expired` makes one whose validity ended yesterday; `foreign`
        signs it with a CA outside the grid.
        """
        if not _NAME.fullmatch(name):
            raise ValueError(f"certificate name {name!r} must be 1-100 of [A-Za-z0-9._-]")
        if name in self._issued:
            raise ValueError(f"certificate name {name!r} is already used in this run")
        ca = self._foreign_ca() if foreign else self.ca
        now = datetime.datetime.now(datetime.UTC)
        not_before, not_after = (now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)) if expired \
            else (None, None)
        if not organization:
            raise ValueError("a client certificate needs an organization")
        cert = ca.issue_cert(f"{name}.peer.grid.test", common_name=name, organization_name=organization,
                             not_before=not_before, not_after=not_after)
        cert_path, key_path = self._write(name, cert)
        leaf = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes())
        files = ClientFiles(
            name=name, cert=cert_path, key=key_path, digest=hashlib.sha256(leaf.public_bytes(Encoding.DER)).hexdigest(),
            organization=organization,
            serial_number=leaf.serial_number,
            issuer_ca=self.foreign_ca_path if foreign else self.ca_path,
        )
        self._issued[name] = files
        return files

    # -------------------------------------------------------------------------- untrusted variants

    def foreign_server(self, name: str, *hosts: str) -> ServerFiles:
        """A server certificate for `hosts` signed by a CA outside the grid: a client trusting only the
        grid CA must refuse it, whatever names it carries."""
        cert = self._foreign_ca().issue_cert(*hosts)
        cert_path, key_path = self._write(name, cert)
        files = ServerFiles(cert_path, key_path, leaf_digest(cert.cert_chain_pems[0].bytes()))
        self._issued[name] = files
        return files

    def foreign_client(self, name: str, organization: str = GRID_ORGANIZATION) -> ClientFiles:
        """Right organization, wrong CA: a TLS server trusting only the grid CA must refuse it."""
        return self.client(name, organization, foreign=True)

    def wrong_organization_client(self, name: str, organization: str = "not-ai-grid") -> ClientFiles:
        """The grid CA, another organization: valid TLS, but no organization trust entry admits it."""
        if organization == GRID_ORGANIZATION:
            raise ValueError("a wrong-organization certificate cannot carry the grid organization")
        return self.client(name, organization)

    def unlisted_client(self, name: str, organization: str = GRID_ORGANIZATION) -> ClientFiles:
        """The grid CA and organization with a fresh key pair: its digest is in no trust list yet."""
        return self.client(name, organization)

    def expired_client(self, name: str, organization: str = GRID_ORGANIZATION) -> ClientFiles:
        """The grid CA and organization, but its validity period ended yesterday."""
        return self.client(name, organization, expired=True)

    # ----------------------------------------------------------------------------------- helpers

    def _foreign_ca(self) -> trustme.CA:
        if self._foreign is None:
            self._foreign = trustme.CA(organization_name="foreign-grid")
            self._foreign.cert_pem.write_to_path(str(self.directory / "foreign-ca.pem"))
        return self._foreign

    def _write_pems(self, name: str, chain: list[bytes], key: bytes) -> tuple[Path, Path]:
        if not _NAME.fullmatch(name):
            raise ValueError(f"certificate name {name!r} must be 1-100 of [A-Za-z0-9._-]")
        cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert_path.write_bytes(b"".join(chain))
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        return cert_path, key_path

    def _write(self, name: str, cert: trustme.LeafCert) -> tuple[Path, Path]:
        if not _NAME.fullmatch(name):
            raise ValueError(f"certificate name {name!r} must be 1-100 of [A-Za-z0-9._-]")
        cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        with cert_path.open("wb") as handle:
            for blob in cert.cert_chain_pems:
                handle.write(blob.bytes())
        key_path.touch(mode=0o600)
        cert.private_key_pem.write_to_path(str(key_path))
        key_path.chmod(0o600)
        return cert_path, key_path

__all__ = ["GRID_ORGANIZATION", "ClientFiles", "GridPKI", "ServerFiles", "client_context", "file_digest",
           "leaf_digest"]


def _with_uris(cert: trustme.LeafCert, ca: trustme.CA, uris: tuple[str, ...]) -> bytes:
    """`cert`'s leaf signed again by `ca` with `uris` added to its subject alternative names (trustme issues
    DNS, IP and e-mail names only); everything else, its key included, stays as trustme made it."""
    leaf = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes())
    ca_key: Any = load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    builder = (x509.CertificateBuilder().subject_name(leaf.subject).issuer_name(leaf.issuer)
               .public_key(leaf.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(leaf.not_valid_before_utc).not_valid_after(leaf.not_valid_after_utc))
    for extension in leaf.extensions:
        value: Any = extension.value
        if isinstance(value, x509.SubjectAlternativeName):
            value = x509.SubjectAlternativeName([*value, *(x509.UniformResourceIdentifier(u) for u in uris)])
        builder = builder.add_extension(value, extension.critical)
    return builder.sign(ca_key, hashes.SHA256()).public_bytes(Encoding.PEM)
