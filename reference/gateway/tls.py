"""TLS for listeners (server role, optional mutual TLS) and clusters (client role, optional client cert).

The config keys follow the public Praxis format: a listener ``tls`` block has ``certificates``
(``cert_path``/``key_path``), ``client_ca`` (``ca_path``), ``client_cert_mode`` (none | request | require)
and ``min_version`` (tls12 | tls13); a cluster ``tls`` block has ``ca`` (``ca_path``), ``client_cert``
(``cert_path``/``key_path``), ``sni`` and ``verify``. Files are read and checked while the config is
parsed, so a missing, unreadable or mismatched certificate or key fails startup naming its key.

A verified client certificate becomes a PeerIdentity: the SHA-256 of its DER encoding as 64 lowercase
hex characters, its subject organization(s) joined without separator, and its serial number as
colon-separated lowercase hex pairs of the DER integer bytes (the form Praxis reports).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
import ssl
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from reference.gateway.schema import ConfigError, boolean, item, key, mapping, sequence, string

MAX_PEM_BYTES = 1024 * 1024
MAX_CERTIFICATES = 1
CLIENT_CERT_MODES = ("none", "request", "require")
MIN_VERSIONS = {"tls12": ssl.TLSVersion.TLSv1_2, "tls13": ssl.TLSVersion.TLSv1_3}
_DNS_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True)
class PeerIdentity:
    """What a verified client certificate says about the peer; no secrets."""

    cert_digest: str
    organization: str | None
    serial_number: str | None
    uri_sans: tuple[str, ...] = ()

    @property
    def spiffe_id(self) -> str | None:
        """The SPIFFE ID when the certificate carries exactly one URI SAN and it is one."""
        if len(self.uri_sans) == 1 and self.uri_sans[0].startswith("spiffe://"):
            return self.uri_sans[0]
        return None


@dataclass(frozen=True)
class ListenerTls:
    cert_path: str
    key_path: str
    client_ca: str | None
    client_cert_mode: str
    min_version: str | None
    path: str
    context: ssl.SSLContext = field(compare=False, repr=False)

    @property
    def mutual(self) -> bool:
        return self.client_cert_mode == "require"


@dataclass(frozen=True)
class ClusterTls:
    ca_path: str | None
    cert_path: str | None
    key_path: str | None
    sni: str | None
    verify: bool
    path: str
    context: ssl.SSLContext = field(compare=False, repr=False)


def _file_path(value: Any, path: str) -> str:
    text = string(value, path, max_len=4096)
    if ".." in text.replace("\\", "/").split("/"):
        raise ConfigError(path, f"must not contain path traversal (..): {text}")
    return text


def _read(file_path: str, path: str) -> bytes:
    try:
        with open(file_path, "rb") as handle:
            data = handle.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise ConfigError(path, f"cannot read {file_path!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_PEM_BYTES:
        raise ConfigError(path, f"{file_path!r} exceeds {MAX_PEM_BYTES} bytes")
    return data


def _certificates(file_path: str, path: str) -> list[x509.Certificate]:
    data = _read(file_path, path)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise ConfigError(path, f"{file_path!r} holds no PEM certificate")
    return certs


def _check_key(cert_path: str, key_path: str, cert_key: str, key_key: str) -> None:
    """The key file must hold an unencrypted private key matching the certificate's public key."""
    leaf = _certificates(cert_path, cert_key)[0]
    data = _read(key_path, key_key)
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError(key_key, f"{key_path!r} holds no readable unencrypted PEM private key") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if private.public_key().public_bytes(serialization.Encoding.DER, public) != leaf.public_key().public_bytes(
        serialization.Encoding.DER, public
    ):
        raise ConfigError(key_key, f"{key_path!r} does not match the certificate in {cert_path!r}")


def _pair(raw: Any, path: str, *, optional: tuple[str, ...] = ()) -> tuple[str, str]:
    mapping(raw, path, required=("cert_path", "key_path"), optional=optional)
    cert_key, key_key = key(path, "cert_path"), key(path, "key_path")
    cert_path = _file_path(raw["cert_path"], cert_key)
    key_path = _file_path(raw["key_path"], key_key)
    _check_key(cert_path, key_path, cert_key, key_key)
    return cert_path, key_path


def _ca(raw: Any, path: str) -> str:
    mapping(raw, path, required=("ca_path",), optional=("crl_paths",))
    if raw.get("crl_paths"):
        raise ConfigError(key(path, "crl_paths"), "crl_paths is not supported by this gateway build")
    where = key(path, "ca_path")
    ca_path = _file_path(raw["ca_path"], where)
    _certificates(ca_path, where)
    return ca_path


def parse_listener_tls(raw: Any, path: str) -> ListenerTls:
    mapping(
        raw,
        path,
        required=("certificates",),
        optional=("client_ca", "client_cert_mode", "hot_reload", "min_version", "cipher_suites",
                  "trusted_spiffe_ids"),
    )
    for unsupported in ("cipher_suites", "trusted_spiffe_ids"):
        if raw.get(unsupported) is not None:
            raise ConfigError(key(path, unsupported), f"{unsupported} is not supported by this gateway build")
    certs_path = key(path, "certificates")
    if raw["certificates"] == []:
        raise ConfigError(
            path, "listener tls is not supported without a certificate: at least one certificate is required"
        )
    entries = sequence(raw["certificates"], certs_path, max_items=64, min_items=1)
    if len(entries) > MAX_CERTIFICATES:
        raise ConfigError(certs_path, "more than one certificate (SNI selection) is not supported by this build")
    cert_path, key_path = _pair(entries[0], item(certs_path, 0), optional=("default", "server_names"))
    mode_path = key(path, "client_cert_mode")
    mode = raw.get("client_cert_mode", "none")
    if mode not in CLIENT_CERT_MODES:
        shown = f"{mode!r} is not supported by this gateway build" if mode == "require_named" else f"unknown {mode!r}"
        raise ConfigError(mode_path, f"client_cert_mode {shown} (supported: {', '.join(CLIENT_CERT_MODES)})")
    client_ca = _ca(raw["client_ca"], key(path, "client_ca")) if raw.get("client_ca") is not None else None
    if mode != "none" and client_ca is None:
        raise ConfigError(key(path, "client_ca"), f"client_ca is required when client_cert_mode is {mode}")
    if raw.get("hot_reload") is not None:
        boolean(raw["hot_reload"], key(path, "hot_reload"))
    min_version = raw.get("min_version")
    if min_version is not None and min_version not in MIN_VERSIONS:
        raise ConfigError(key(path, "min_version"), f"must be one of {', '.join(MIN_VERSIONS)}, got {min_version!r}")
    context = server_context(cert_path, key_path, client_ca, mode, min_version, path)
    return ListenerTls(cert_path, key_path, client_ca, mode, min_version, path, context)


def server_context(
    cert_path: str, key_path: str, client_ca: str | None, mode: str, min_version: str | None, path: str
) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MIN_VERSIONS[min_version or "tls12"]
    context.set_alpn_protocols(["http/1.1"])
    try:
        context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(key(path, "certificates"), f"cannot load certificate and key: {exc}") from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(key(path, "client_ca.ca_path"), f"cannot load CA: {exc}") from None
    context.verify_mode = {"none": ssl.CERT_NONE, "request": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}[mode]
    return context


def _sni(value: Any, path: str) -> str:
    text = string(value, path, max_len=253)
    try:
        ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        raise ConfigError(path, f"sni must be a valid DNS hostname, not an IP literal: {text}")
    if "*" in text or not all(_DNS_LABEL.fullmatch(label) for label in text.split(".")):
        raise ConfigError(path, f"sni must be a valid DNS hostname: {text}")
    return text


def parse_cluster_tls(raw: Any, path: str) -> ClusterTls:
    if raw is None:
        raw = {}
    mapping(raw, path, optional=("ca", "client_cert", "sni", "verify"))
    ca_path = _ca(raw["ca"], key(path, "ca")) if raw.get("ca") is not None else None
    cert_path = key_path = None
    if raw.get("client_cert") is not None:
        cert_path, key_path = _pair(raw["client_cert"], key(path, "client_cert"))
    sni = _sni(raw["sni"], key(path, "sni")) if raw.get("sni") is not None else None
    verify = boolean(raw.get("verify", True), key(path, "verify"))
    context = client_context(ca_path, cert_path, key_path, verify, path)
    return ClusterTls(ca_path, cert_path, key_path, sni, verify, path, context)


def client_context(
    ca_path: str | None, cert_path: str | None, key_path: str | None, verify: bool, path: str
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_path) if verify else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_path is not None and key_path is not None:
        try:
            context.load_cert_chain(cert_path, key_path)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(key(path, "client_cert"), f"cannot load certificate and key: {exc}") from None
    return context


def _serial_hex(serial: int) -> str:
    raw = serial.to_bytes((serial.bit_length() + 8) // 8, "big", signed=True)
    return ":".join(f"{b:02x}" for b in raw)


@functools.lru_cache(maxsize=1024)
def identity_from_der(der: bytes) -> PeerIdentity:
    """Parse a peer certificate once per distinct certificate."""
    digest = hashlib.sha256(der).hexdigest()
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return PeerIdentity(digest, None, None)
    orgs = [
        a.value if isinstance(a.value, str) else a.value.decode("utf-8", "replace")
        for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    ]
    uris: tuple[str, ...] = ()
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = tuple(san.get_values_for_type(x509.UniformResourceIdentifier))
    except (x509.ExtensionNotFound, ValueError):
        pass
    return PeerIdentity(digest, "".join(orgs) if orgs else None, _serial_hex(cert.serial_number), uris)


def peer_identity(transport: Any) -> PeerIdentity | None:
    """The verified client certificate's identity on a TLS connection, or None."""
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return identity_from_der(der)
