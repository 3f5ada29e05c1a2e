"""Certificates for a run, made with trustme: one grid CA and leaf certificates written as PEM files.

Files live in the run's work directory and go with it; private keys never leave that directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class ServerFiles:
    """A server certificate chain and its key as PEM files."""

    cert: Path
    key: Path


class GridPKI:
    """The run's certificate authority and the certificates issued from it."""

    def __init__(self, directory: Path, organization: str = "ai-grid") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA(organization_name=organization)
        self.ca_path = self.directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_path))

    def server(self, name: str, *hosts: str) -> ServerFiles:
        """A server certificate for `hosts` (IP addresses or DNS names), stored under `name`."""
        cert = self.ca.issue_cert(*hosts)
        files = ServerFiles(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        with files.cert.open("wb") as handle:
            for blob in cert.cert_chain_pems:
                handle.write(blob.bytes())
        cert.private_key_pem.write_to_path(str(files.key))
        files.key.chmod(0o600)
        return files
