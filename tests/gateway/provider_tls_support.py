"""Certificates and clients for the provider-side (mTLS) gateway tests.

One test CA issues the gateway's server certificate (for 127.0.0.1 and localhost) and the client
certificates a consumer gateway would present; a second, unrelated CA issues a certificate no provider
trusts. Files land in a temporary directory so the gateway reads them like mounted Secrets.
"""

from __future__ import annotations

import datetime
import hashlib
import ssl
from dataclasses import dataclass
from pathlib import Path

import httpx
import trustme
from cryptography import x509

TRUSTED_ORG = "ai-grid"


@dataclass
class CertFiles:
    cert: Path
    key: Path

    @property
    def digest(self) -> str:
        """SHA-256 of the leaf certificate's DER encoding, as 64 lowercase hex characters."""
        leaf = x509.load_pem_x509_certificates(self.cert.read_bytes())[0]
        from cryptography.hazmat.primitives.serialization import Encoding

        return hashlib.sha256(leaf.public_bytes(Encoding.DER)).hexdigest()

    @property
    def serial(self) -> str:
        """The serial number in the colon-separated lowercase hex form the gateway reports."""
        leaf = x509.load_pem_x509_certificates(self.cert.read_bytes())[0]
        n = leaf.serial_number
        return ":".join(f"{b:02x}" for b in n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True))


def _write(leaf: trustme.LeafCert, root: Path, name: str) -> CertFiles:
    cert = root / f"{name}.crt"
    key = root / f"{name}.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    key.write_bytes(leaf.private_key_pem.bytes())
    return CertFiles(cert, key)


class Pki:
    """A CA, the gateway's server certificate and a set of client certificates, all as files."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.ca = trustme.CA(organization_name="grid-test-ca")
        self.other_ca = trustme.CA(organization_name="untrusted-ca")
        self.ca_file = root / "ca.crt"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.other_ca_file = root / "other-ca.crt"
        self.other_ca.cert_pem.write_to_path(str(self.other_ca_file))
        self.server = _write(self.ca.issue_cert("127.0.0.1", "localhost", common_name="provider"), root, "server")
        self.client = _write(
            self.ca.issue_cert("consumer.grid.test", organization_name=TRUSTED_ORG), root, "client"
        )
        self.other_org = _write(
            self.ca.issue_cert("intruder.grid.test", organization_name="other-org"), root, "other-org"
        )
        self.listed = _write(self.ca.issue_cert("listed.grid.test", organization_name="listed-org"), root, "listed")
        self.wrong_ca = _write(
            self.other_ca.issue_cert("consumer.grid.test", organization_name=TRUSTED_ORG), root, "wrong-ca"
        )
        now = datetime.datetime.now(datetime.UTC)
        self.expired = _write(
            self.ca.issue_cert(
                "consumer.grid.test",
                organization_name=TRUSTED_ORG,
                not_before=now - datetime.timedelta(days=30),
                not_after=now - datetime.timedelta(days=1),
            ),
            root,
            "expired",
        )

    def client_context(self, client: CertFiles | None) -> ssl.SSLContext:
        """Verifies the gateway against the test CA and presents `client` (if any)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
        return context

    def https(self, client: CertFiles | None) -> httpx.Client:
        # httpx drops client certificates when verify is a path, so pass a prepared SSLContext.
        return httpx.Client(verify=self.client_context(client), timeout=10.0, trust_env=False)

    def listener_tls(self, *, mode: str = "require", client_ca: bool = True) -> dict[str, object]:
        block: dict[str, object] = {
            "certificates": [{"cert_path": str(self.server.cert), "key_path": str(self.server.key)}],
            "client_cert_mode": mode,
        }
        if client_ca:
            block["client_ca"] = {"ca_path": str(self.ca_file)}
        return block

    def cluster_tls(self, sni: str = "localhost") -> dict[str, object]:
        return {
            "ca": {"ca_path": str(self.ca_file)},
            "client_cert": {"cert_path": str(self.client.cert), "key_path": str(self.client.key)},
            "sni": sni,
            "verify": True,
        }
