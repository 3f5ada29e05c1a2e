"""Discovered GridSites, trust policy and the eligibility lifecycle of discovered sites.

A remote site's providers may enter a routing overlay only while its GridSite is Active. Active is
granted only after two checks against the site's gateway: the SHA-256 fingerprint of the certificate it
presents matches the configured trust policy, and a TCP connection to it succeeds. Membership alone, or
reachability alone, never makes a site eligible. The lifecycle itself is a pure function of the current
phase and what was observed; the checks are small async functions that callers may replace in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reference.operator.core.site_names import discovered_site_k8s_name

PENDING = "Pending"
DISCOVERED = "Discovered"
CONNECTING = "Connecting"
ACTIVE = "Active"
UNREACHABLE = "Unreachable"
LEFT = "Left"
PHASES = (PENDING, DISCOVERED, CONNECTING, ACTIVE, UNREACHABLE, LEFT)

ALIVE = "alive"
SUSPECT = "suspect"
DEAD = "dead"
MEMBER_LEFT = "left"
MEMBER_STATES = (ALIVE, SUSPECT, DEAD, MEMBER_LEFT)

MAX_PINS = 2
FINGERPRINT_HEX_LEN = 64
MAX_MESSAGE = 256
DEFAULT_TIMEOUT = 2.0

API_VERSION = "grid.praxis.fast/v1alpha1"
LABEL_NETWORK = "grid.praxis.fast/network"
LABEL_DISCOVERED = "grid.praxis.fast/auto-discovered"


# --- naming (the rule itself lives in the pure core) ----------------------------------------------


def discovered_site_resource(network: str, site: str, gateway_address: str | None = None) -> dict[str, Any]:
    """A GridSite object for a site seen alive in membership, starting in phase Discovered."""
    spec: dict[str, Any] = {"gridNetworkRef": network}
    if gateway_address:
        spec["gatewayEndpoint"] = {"address": gateway_address}
    return {
        "apiVersion": API_VERSION,
        "kind": "GridSite",
        "metadata": {
            "name": discovered_site_k8s_name(network, site),
            "labels": {LABEL_NETWORK: label_value(network), LABEL_DISCOVERED: "true"},
        },
        "spec": spec,
        "status": {"phase": DISCOVERED},
    }


def label_value(value: str) -> str:
    """A name as a label value (at most 63 characters of a restricted alphabet), as the labels carry it."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-" for c in value)[:63].strip("-_.")


# --- trust policy -------------------------------------------------------------------------------

TRUST_MISSING = "TrustMaterialMissing"
TRUST_INVALID = "TrustMaterialInvalid"


class TrustPolicyError(ValueError):
    """Trust material that cannot be used; `reason` is TrustMaterialMissing or TrustMaterialInvalid."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def parse_pins(raw: object) -> tuple[str, ...]:
    """Validate `trust.canonicalFingerprints`: one or two distinct 64-character lowercase hex strings.

    Absent pins are reported apart from malformed ones so an incomplete bootstrap is distinguishable from
    a wrong configuration; both fail closed.
    """
    if raw is None:
        raise TrustPolicyError(TRUST_MISSING, "no canonical fingerprints configured")
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise TrustPolicyError(TRUST_INVALID, "canonicalFingerprints must be a list")
    if not raw:
        raise TrustPolicyError(TRUST_INVALID, "canonicalFingerprints must not be empty")
    if len(raw) > MAX_PINS:
        raise TrustPolicyError(TRUST_INVALID, f"canonicalFingerprints has {len(raw)} entries, maximum is {MAX_PINS}")
    pins = []
    for index, pin in enumerate(raw):
        if not isinstance(pin, str) or len(pin) != FINGERPRINT_HEX_LEN:
            size = len(pin) if isinstance(pin, str) else type(pin).__name__
            detail = f"canonicalFingerprints[{index}]: must be 64 hex characters, got {size}"
            raise TrustPolicyError(TRUST_INVALID, detail)
        if any(c not in "0123456789abcdef" for c in pin):
            raise TrustPolicyError(TRUST_INVALID, f"canonicalFingerprints[{index}]: must be lowercase hex")
        if pin in pins:
            raise TrustPolicyError(TRUST_INVALID, f"canonicalFingerprints[{index}]: duplicate fingerprint")
        pins.append(pin)
    return tuple(pins)


def pins_from_resource(obj: Mapping[str, Any]) -> object:
    """The raw `spec.trust.canonicalFingerprints` of a GridSite object, None when absent."""
    spec = obj.get("spec")
    trust = spec.get("trust") if isinstance(spec, Mapping) else None
    return trust.get("canonicalFingerprints") if isinstance(trust, Mapping) else None


def certificate_fingerprint(der: bytes) -> str:
    """The canonical fingerprint: lowercase hex SHA-256 of the leaf certificate's DER bytes."""
    return hashlib.sha256(der).hexdigest()


# --- gateway checks -----------------------------------------------------------------------------

VERIFIED = "Verified"
ADDRESS_MISSING = "AddressMissing"
ADDRESS_INVALID = "AddressInvalid"
CONNECT_TIMEOUT = "ConnectTimeout"
CONNECTION_FAILED = "ConnectionFailed"
HANDSHAKE_TIMEOUT = "HandshakeTimeout"
TLS_ERROR = "TlsProtocolError"
PIN_MISMATCH = "PinMismatch"

CONNECTIVITY_FAILURES = frozenset({ADDRESS_MISSING, ADDRESS_INVALID, CONNECT_TIMEOUT, CONNECTION_FAILED})
TRUST_FAILURES = frozenset({TRUST_MISSING, TRUST_INVALID, HANDSHAKE_TIMEOUT, TLS_ERROR, PIN_MISMATCH})


@dataclass(frozen=True)
class ProbeResult:
    """What one check of a site's gateway found; `outcome` is one of the reason constants above."""

    outcome: str
    message: str
    fingerprint: str | None = None


CertFetcher = Callable[[str, int, float], Awaitable[bytes]]
Connector = Callable[[str, int, float], Awaitable[None]]


def split_address(address: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` into its parts; ValueError names what is wrong."""
    host, sep, port_text = address.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"gateway address {address!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"gateway address {address!r}: IPv6 hosts must be bracketed")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"gateway address {address!r}: port must be 1..65535")
    return host, int(port_text)


async def tcp_connect(host: str, port: int, timeout: float) -> None:
    """Open and close a TCP connection; raises TimeoutError or OSError when the gateway is unreachable."""
    _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


def client_context(
    cafile: str | None = None, certfile: str | None = None, keyfile: str | None = None
) -> ssl.SSLContext:
    """A TLS client context for fetching a peer certificate.

    Without a CA the chain is not verified here: the pin on the leaf is the trust decision. With a CA the
    chain and server name are verified as well. A client certificate lets the fetch pass a gateway that
    demands mutual TLS before finishing the handshake.
    """
    if cafile is None:  # nothing to verify against, so the system trust store is not loaded (tens of ms)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    if certfile is not None:
        context.load_cert_chain(certfile, keyfile)
    return context


async def fetch_peer_certificate(
    host: str,
    port: int,
    timeout: float,
    *,
    server_name: str | None = None,
    context: ssl.SSLContext | None = None,
) -> bytes:
    """The DER bytes of the leaf certificate the gateway presents in a TLS handshake."""
    context = context or client_context()
    hostname = server_name or (host if context.check_hostname else None)
    _, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=context, server_hostname=hostname), timeout
    )
    try:
        sslobj = writer.get_extra_info("ssl_object")
        der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    if not der:
        raise ssl.SSLError("peer presented no certificate")
    return bytes(der)


async def check_gateway(
    address: str | None,
    pins: object,
    *,
    fetch: CertFetcher = fetch_peer_certificate,
    connect: Connector = tcp_connect,
    timeout: float = DEFAULT_TIMEOUT,
) -> ProbeResult:
    """Check a site's gateway against its trust policy; never raises.

    Trust material is validated before any connection is made, so missing or malformed pins fail closed
    without touching the network.
    """
    if not address or not address.strip():
        return ProbeResult(ADDRESS_MISSING, "no gateway address known")
    try:
        host, port = split_address(address)
    except ValueError as error:
        return ProbeResult(ADDRESS_INVALID, str(error))
    try:
        accepted = parse_pins(pins)
    except TrustPolicyError as error:
        return ProbeResult(error.reason, error.message)
    try:
        await connect(host, port, timeout)
    except TimeoutError:
        return ProbeResult(CONNECT_TIMEOUT, f"TCP connect to {address} timed out after {timeout:g}s")
    except OSError as error:
        return ProbeResult(CONNECTION_FAILED, f"TCP connect to {address} failed: {_describe(error)}")
    try:
        der = await fetch(host, port, timeout)
    except TimeoutError:
        return ProbeResult(HANDSHAKE_TIMEOUT, f"TLS handshake with {address} timed out")
    except ssl.SSLError as error:
        return ProbeResult(TLS_ERROR, f"TLS handshake with {address} failed: {_describe(error)}")
    except OSError as error:
        return ProbeResult(CONNECTION_FAILED, f"TLS connection to {address} failed: {_describe(error)}")
    fingerprint = certificate_fingerprint(der)
    if fingerprint not in accepted:
        return ProbeResult(
            PIN_MISMATCH, f"gateway certificate {fingerprint[:12]} matches no pinned fingerprint", fingerprint
        )
    return ProbeResult(VERIFIED, f"gateway certificate {fingerprint[:12]} matches the trust policy", fingerprint)


# --- lifecycle ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteObservation:
    """What the operator knows about a site this reconcile.

    `member` is the site's membership state (alive, suspect, dead, left) or None when membership has not
    seen it. `probe` is the result of `check_gateway` when one was run.
    """

    member: str | None = None
    gateway_address: str | None = None
    probe: ProbeResult | None = None


@dataclass(frozen=True)
class Transition:
    phase: str
    reason: str
    message: str


def _member_state(member: object) -> str | None:
    """Accept plain strings or enums whose value (or name) is the state, in any case."""
    if member is None:
        return None
    raw = getattr(member, "value", None)
    text = raw if isinstance(raw, str) else getattr(member, "name", member)
    state = str(text).lower()
    if state not in MEMBER_STATES:
        raise ValueError(f"member state {member!r} is not one of {list(MEMBER_STATES)}")
    return state


def _probe_transition(current: str, probe: ProbeResult | None) -> Transition:
    """A probe verdict for a site past discovery: only a verified gateway makes it Active."""
    if probe is None:
        probe = ProbeResult(ADDRESS_MISSING, "gateway not checked")
    if probe.outcome == VERIFIED:
        return Transition(ACTIVE, "TlsVerified", probe.message)
    if probe.outcome in CONNECTIVITY_FAILURES:
        return Transition(UNREACHABLE if current == ACTIVE else current, probe.outcome, probe.message)
    reason = probe.outcome if probe.outcome in TRUST_FAILURES else TLS_ERROR
    return Transition(CONNECTING, reason, probe.message)


def _trust_revoked(probe: ProbeResult | None) -> bool:
    """A probe that failed on trust rather than on reachability: the pins no longer admit the gateway."""
    return probe is not None and probe.outcome != VERIFIED and probe.outcome not in CONNECTIVITY_FAILURES


def next_phase(current: str | None, observation: SiteObservation) -> Transition:
    """One step of the GridSite lifecycle.

    Pending -> Discovered once the member is alive; Discovered -> Connecting once a gateway address is
    known; Connecting/Unreachable -> Active only on a verified probe; a trust failure holds or demotes to
    Connecting; a connectivity failure turns Active into Unreachable. A member that left makes the site
    Left, and a Left site that is alive again is rediscovered.

    A suspect or dead member keeps an Active site Active (reason MemberSuspect or MemberDead): its records
    are then rendered as degraded (`fresh: false`) and leave the overlay once the network's stale
    candidate TTL has passed, instead of vanishing on the first missed probe. A trust failure still
    demotes it, since revoked pins must take effect at once. On any other phase a suspect or dead member
    makes the site Unreachable.
    """
    phase = current or PENDING
    if phase not in PHASES:
        raise ValueError(f"phase {current!r} is not one of {list(PHASES)}")
    member = _member_state(observation.member)
    if member == MEMBER_LEFT:
        return Transition(LEFT, "MemberLeft", _bounded("site has left the grid"))
    if phase == LEFT:
        if member == ALIVE:
            return Transition(DISCOVERED, "Rejoined", _bounded("site rejoined the grid"))
        return Transition(LEFT, "Left", _bounded("site has left the grid"))
    if member in (SUSPECT, DEAD):
        if phase == ACTIVE and not _trust_revoked(observation.probe):
            reason = "MemberSuspect" if member == SUSPECT else "MemberDead"
            detail = f"membership reports the site {member}; its candidates are degraded until the stale candidate TTL"
            return Transition(ACTIVE, reason, _bounded(detail))
        if phase == ACTIVE and observation.probe is not None:
            revoked = _probe_transition(phase, observation.probe)
            return Transition(revoked.phase, revoked.reason, _bounded(revoked.message))
        return Transition(UNREACHABLE, "MemberUnreachable", _bounded(f"membership reports the site {member}"))
    if phase == PENDING:
        if member == ALIVE:
            return Transition(DISCOVERED, "MemberAlive", _bounded("site seen alive in membership"))
        return Transition(PENDING, "AwaitingDiscovery", _bounded("waiting for membership to see the site"))
    if phase == DISCOVERED:
        if observation.gateway_address and observation.gateway_address.strip():
            return Transition(CONNECTING, "GatewayAddressKnown", _bounded("gateway address known; verifying trust"))
        return Transition(DISCOVERED, "GatewayAddressMissing", _bounded("gateway address not yet known"))
    transition = _probe_transition(phase, observation.probe)
    return Transition(transition.phase, transition.reason, _bounded(transition.message))


def settle(current: str | None, observation: SiteObservation) -> Transition:
    """Apply `next_phase` until the phase stops changing, so one reconcile can go Pending -> Active.

    The lifecycle has no cycles under a fixed observation, so this ends within a handful of steps.
    """
    transition = next_phase(current, observation)
    for _ in range(len(PHASES)):
        following = next_phase(transition.phase, observation)
        if following.phase == transition.phase:
            return following
        transition = following
    return transition


def _describe(error: BaseException) -> str:
    """A short cause for a status message: the TLS reason, the OS error text, or the exception type."""
    text = getattr(error, "reason", None) or getattr(error, "strerror", None) or str(error)
    return str(text) if text else type(error).__name__


def _bounded(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"
