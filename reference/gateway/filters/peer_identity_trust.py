"""peer_identity_trust: admit only requests whose verified mTLS client certificate is a trusted peer.

Each ``trusted_peers`` entry names one or more of cert_digest, organization, serial_number and
spiffe_id; every field an entry gives must match (AND) and any entry may admit (OR). A request without a
verified client identity, or whose identity matches no entry, gets 403 with a body that says nothing
about why, so a probing client learns nothing about the allowlist.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from reference.gateway.context import Reject, RequestContext
from reference.gateway.logfmt import kv
from reference.gateway.schema import ConfigError, item, key, mapping, sequence, string
from reference.gateway.tls import PeerIdentity

TYPE = "peer_identity_trust"
MAX_TRUSTED_PEERS = 256
MAX_FIELD_LEN = 256
FIELDS = ("cert_digest", "organization", "serial_number", "spiffe_id")
FORBIDDEN = Reject(403, "forbidden\n")
_DIGEST = re.compile(r"[0-9a-f]{64}")

log = logging.getLogger("agn.gateway.peer_identity_trust")


@dataclass(frozen=True)
class TrustedPeer:
    cert_digest: str | None = None
    organization: str | None = None
    serial_number: str | None = None
    spiffe_id: str | None = None

    def admits(self, peer: PeerIdentity) -> bool:
        if self.cert_digest is not None and peer.cert_digest != self.cert_digest:
            return False
        if self.organization is not None and peer.organization != self.organization:
            return False
        if self.serial_number is not None and peer.serial_number != self.serial_number:
            return False
        return self.spiffe_id is None or peer.spiffe_id == self.spiffe_id


@dataclass(frozen=True)
class PeerIdentityTrustConfig:
    trusted_peers: tuple[TrustedPeer, ...]


def _peer(raw: Any, path: str) -> TrustedPeer:
    mapping(raw, path, optional=FIELDS)
    values: dict[str, str] = {}
    for name in FIELDS:
        if raw.get(name) is None:
            continue
        where = key(path, name)
        value = raw[name]
        if name == "cert_digest":
            if not isinstance(value, str) or not _DIGEST.fullmatch(value):
                raise ConfigError(where, "must be exactly 64 lowercase hex characters")
        else:
            if not isinstance(value, str) or not value.strip() or len(value.encode()) > MAX_FIELD_LEN:
                raise ConfigError(where, f"must be 1-{MAX_FIELD_LEN} non-blank characters")
            string(value, where, max_len=MAX_FIELD_LEN)
            if name == "spiffe_id":
                if not value.startswith("spiffe://") or value == "spiffe://":
                    raise ConfigError(where, "must be a spiffe:// URI naming a peer")
                if "*" in value:
                    raise ConfigError(where, "must not contain a wildcard; names compare in full")
        values[name] = value
    if not values:
        raise ConfigError(path, "must specify at least one match field (" + ", ".join(FIELDS) + ")")
    return TrustedPeer(**values)


def parse(raw: dict[str, Any], path: str) -> PeerIdentityTrustConfig:
    mapping(raw, path, required=("filter", "trusted_peers"))
    where = key(path, "trusted_peers")
    if isinstance(raw["trusted_peers"], list) and not raw["trusted_peers"]:
        raise ConfigError(where, "trusted_peers must not be empty")
    entries = sequence(raw["trusted_peers"], where, max_items=MAX_TRUSTED_PEERS, min_items=1)
    return PeerIdentityTrustConfig(tuple(_peer(entry, item(where, i)) for i, entry in enumerate(entries)))


class PeerIdentityTrustFilter:
    needs_body = False

    def __init__(self, config: PeerIdentityTrustConfig) -> None:
        self.trusted_peers = config.trusted_peers

    def on_request(self, ctx: RequestContext) -> Reject | None:
        peer = ctx.peer
        if not isinstance(peer, PeerIdentity):
            log.warning("peer identity trust: no peer identity; rejecting %s", kv(path=ctx.path))
            return FORBIDDEN
        if any(entry.admits(peer) for entry in self.trusted_peers):
            ctx.metadata["peer_identity_trust.cert_digest"] = peer.cert_digest
            return None
        log.warning("peer identity trust: peer not trusted; rejecting %s", kv(peer_digest=peer.cert_digest))
        return FORBIDDEN
