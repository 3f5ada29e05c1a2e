"""GridSite naming, trust policy, gateway checks over real loopback TLS, and the lifecycle transitions."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trustme

from reference.operator.core.model import site_from_resource
from reference.operator.mesh import sites
from reference.operator.mesh.sites import (
    ACTIVE,
    CONNECTING,
    DISCOVERED,
    LEFT,
    PENDING,
    UNREACHABLE,
    ProbeResult,
    SiteObservation,
    Transition,
    check_gateway,
    discovered_site_k8s_name,
    next_phase,
    parse_pins,
    settle,
)

PIN_A = "a" * 64
PIN_B = "0123456789abcdef" * 4


# --- naming -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("network", "site", "expected"),
    [
        ("grid", "site-c", "grid-site-c"),
        ("Grid_Net", "Site.C", "grid-net-site-c"),
        ("--edge--", "__north__", "edge-north"),
        ("", "site-c", "site-c"),
        ("grid", "***", "grid"),
        ("", "", "discovered-site"),
        ("!!", "??", "discovered-site"),
        ("grid", "sïte", "grid-s-te"),
        ("a b", "c\td", "a-b-c-d"),
    ],
)
def test_discovered_site_name_rule(network: str, site: str, expected: str) -> None:
    assert discovered_site_k8s_name(network, site) == expected


def test_discovered_site_name_is_cut_at_253_characters() -> None:
    name = discovered_site_k8s_name("n" * 200, "s" * 200)
    assert len(name) == 253
    assert name == ("n" * 200 + "-" + "s" * 200)[:253]


def test_discovered_site_names_differ_per_network() -> None:
    assert discovered_site_k8s_name("prod", "c") != discovered_site_k8s_name("staging", "c")


def test_discovered_site_resource_parses_as_a_grid_site() -> None:
    obj = sites.discovered_site_resource("grid", "Site C", "127.0.0.1:8443")
    spec = site_from_resource(obj)
    assert (spec.name, spec.network, spec.phase) == ("grid-site-c", "grid", DISCOVERED)
    assert obj["spec"]["gatewayEndpoint"] == {"address": "127.0.0.1:8443"}
    assert spec.labels[sites.LABEL_DISCOVERED] == "true"


# --- trust policy -------------------------------------------------------------------------------


@pytest.mark.parametrize("pins", [[PIN_A], [PIN_A, PIN_B], (PIN_B,)])
def test_one_or_two_canonical_pins_accepted(pins: list[str]) -> None:
    assert parse_pins(pins) == tuple(pins)


@pytest.mark.parametrize(
    ("pins", "reason", "fragment"),
    [
        (None, sites.TRUST_MISSING, "no canonical fingerprints"),
        ([], sites.TRUST_INVALID, "must not be empty"),
        ([PIN_A, PIN_B, "b" * 64], sites.TRUST_INVALID, "maximum is 2"),
        (["A" * 64], sites.TRUST_INVALID, "lowercase hex"),
        (["g" * 64], sites.TRUST_INVALID, "lowercase hex"),
        (["a" * 63], sites.TRUST_INVALID, "got 63"),
        ([":".join(["aa"] * 32)], sites.TRUST_INVALID, "got 95"),
        ([PIN_A, PIN_A], sites.TRUST_INVALID, "duplicate"),
        ([42], sites.TRUST_INVALID, "got int"),
        (PIN_A, sites.TRUST_INVALID, "must be a list"),
        ({"pin": PIN_A}, sites.TRUST_INVALID, "must be a list"),
    ],
)
def test_bad_trust_material_fails_closed_with_reason(pins: object, reason: str, fragment: str) -> None:
    with pytest.raises(sites.TrustPolicyError) as caught:
        parse_pins(pins)
    assert caught.value.reason == reason
    assert fragment in caught.value.message


def test_pins_read_from_grid_site_resource() -> None:
    obj = {"spec": {"gridNetworkRef": "g", "trust": {"canonicalFingerprints": [PIN_A]}}}
    assert sites.pins_from_resource(obj) == [PIN_A]
    assert sites.pins_from_resource({"spec": {"gridNetworkRef": "g"}}) is None


def test_certificate_fingerprint_is_sha256_of_der() -> None:
    assert sites.certificate_fingerprint(b"der") == hashlib.sha256(b"der").hexdigest()


@pytest.mark.parametrize(
    ("address", "expected"),
    [("127.0.0.1:8443", ("127.0.0.1", 8443)), ("[::1]:9", ("::1", 9)), ("gw.example:1", ("gw.example", 1))],
)
def test_split_address(address: str, expected: tuple[str, int]) -> None:
    assert sites.split_address(address) == expected


@pytest.mark.parametrize("address", ["127.0.0.1", ":80", "host:0", "host:65536", "host:x", "::1:80"])
def test_split_address_rejects(address: str) -> None:
    with pytest.raises(ValueError, match="gateway address"):
        sites.split_address(address)


# --- real loopback gateways ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def leaf_der(cert: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read and say nothing until the client goes away."""
    try:
        while await reader.read(4096):
            pass
    except (OSError, ssl.SSLError):
        pass
    finally:
        writer.close()


@asynccontextmanager
async def serve(handler: Handler = _hold, context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def server_context(ca: trustme.CA, leaf: trustme.LeafCert, *, require_client: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    leaf.configure_cert(context)
    if require_client:
        context.verify_mode = ssl.CERT_REQUIRED
        ca.configure_trust(context)
    return context


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_verified_when_gateway_certificate_matches_a_pin(ca: trustme.CA) -> None:
    leaf = ca.issue_cert("gw.site-c.grid.internal")
    expected = hashlib.sha256(leaf_der(leaf)).hexdigest()

    async def run() -> ProbeResult:
        async with serve(context=server_context(ca, leaf)) as port:
            return await check_gateway(f"127.0.0.1:{port}", [PIN_A, expected], timeout=5)

    result = asyncio.run(run())
    assert (result.outcome, result.fingerprint) == (sites.VERIFIED, expected), result.message


def test_pin_mismatch_reports_the_presented_fingerprint(ca: trustme.CA) -> None:
    leaf = ca.issue_cert("gw.site-c.grid.internal")
    other = ca.issue_cert("gw.site-c.grid.internal")

    async def run() -> ProbeResult:
        async with serve(context=server_context(ca, leaf)) as port:
            return await check_gateway(f"127.0.0.1:{port}", [sites.certificate_fingerprint(leaf_der(other))], timeout=5)

    result = asyncio.run(run())
    assert result.outcome == sites.PIN_MISMATCH
    assert result.fingerprint == sites.certificate_fingerprint(leaf_der(leaf))


def test_fetch_with_ca_and_client_certificate_from_a_mutual_tls_gateway(ca: trustme.CA, tmp_path: Path) -> None:
    leaf = ca.issue_cert("gw.site-c.grid.internal")
    client = ca.issue_cert("site-a.grid.internal")
    ca_file, client_file = tmp_path / "ca.pem", tmp_path / "client.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    client.private_key_and_cert_chain_pem.write_to_path(str(client_file))
    context = sites.client_context(cafile=str(ca_file), certfile=str(client_file))
    fetch = functools.partial(sites.fetch_peer_certificate, server_name="gw.site-c.grid.internal", context=context)

    async def run() -> ProbeResult:
        async with serve(context=server_context(ca, leaf, require_client=True)) as port:
            return await check_gateway(
                f"127.0.0.1:{port}", [sites.certificate_fingerprint(leaf_der(leaf))], fetch=fetch, timeout=5
            )

    assert asyncio.run(run()).outcome == sites.VERIFIED


def test_ca_verification_rejects_a_wrong_server_name(ca: trustme.CA, tmp_path: Path) -> None:
    leaf = ca.issue_cert("gw.site-c.grid.internal")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = sites.client_context(cafile=str(ca_file))
    fetch = functools.partial(sites.fetch_peer_certificate, server_name="gw.other.grid.internal", context=context)

    async def run() -> ProbeResult:
        async with serve(context=server_context(ca, leaf)) as port:
            return await check_gateway(
                f"127.0.0.1:{port}", [sites.certificate_fingerprint(leaf_der(leaf))], fetch=fetch, timeout=5
            )

    result = asyncio.run(run())
    assert result.outcome == sites.TLS_ERROR, result.message


def test_closed_port_is_a_connectivity_failure() -> None:
    result = asyncio.run(check_gateway(f"127.0.0.1:{closed_port()}", [PIN_A], timeout=5))
    assert result.outcome == sites.CONNECTION_FAILED, result.message


def test_plain_tcp_gateway_never_verifies() -> None:
    async def reply_plaintext(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def run() -> ProbeResult:
        async with serve(reply_plaintext) as port:
            return await check_gateway(f"127.0.0.1:{port}", [PIN_A], timeout=5)

    result = asyncio.run(run())
    assert result.outcome in (sites.TLS_ERROR, sites.CONNECTION_FAILED), result.message
    assert result.fingerprint is None


def test_silent_gateway_times_out_in_the_handshake() -> None:
    async def run() -> ProbeResult:
        async with serve() as port:
            return await check_gateway(f"127.0.0.1:{port}", [PIN_A], timeout=0.3)

    result = asyncio.run(run())
    assert result.outcome == sites.HANDSHAKE_TIMEOUT, result.message


def test_trust_material_checked_before_any_connection() -> None:
    calls: list[tuple[str, int]] = []

    async def connect(host: str, port: int, timeout: float) -> None:
        calls.append((host, port))

    async def fetch(host: str, port: int, timeout: float) -> bytes:
        calls.append((host, port))
        return b""

    for pins, reason in ((None, sites.TRUST_MISSING), (["bad"], sites.TRUST_INVALID)):
        result = asyncio.run(check_gateway("127.0.0.1:1", pins, fetch=fetch, connect=connect))
        assert result.outcome == reason
    assert calls == []


@pytest.mark.parametrize(
    ("address", "outcome"),
    [(None, sites.ADDRESS_MISSING), ("  ", sites.ADDRESS_MISSING), ("nope", sites.ADDRESS_INVALID)],
)
def test_address_problems(address: str | None, outcome: str) -> None:
    assert asyncio.run(check_gateway(address, [PIN_A])).outcome == outcome


def test_injected_checks_map_failures() -> None:
    der = b"certificate"
    pin = sites.certificate_fingerprint(der)

    def probe(connect_error: BaseException | None = None, fetch_error: BaseException | None = None) -> str:
        async def connect(host: str, port: int, timeout: float) -> None:
            if connect_error is not None:
                raise connect_error

        async def fetch(host: str, port: int, timeout: float) -> bytes:
            if fetch_error is not None:
                raise fetch_error
            return der

        return asyncio.run(check_gateway("127.0.0.1:9", [pin], fetch=fetch, connect=connect)).outcome

    assert probe() == sites.VERIFIED
    assert probe(connect_error=TimeoutError()) == sites.CONNECT_TIMEOUT
    assert probe(connect_error=ConnectionRefusedError()) == sites.CONNECTION_FAILED
    assert probe(fetch_error=TimeoutError()) == sites.HANDSHAKE_TIMEOUT
    assert probe(fetch_error=ssl.SSLError("bad")) == sites.TLS_ERROR
    assert probe(fetch_error=ConnectionResetError()) == sites.CONNECTION_FAILED


def test_tcp_connect_against_real_listener_and_closed_port() -> None:
    async def run() -> None:
        async with serve() as port:
            await sites.tcp_connect("127.0.0.1", port, 5)
        with pytest.raises(OSError):
            await sites.tcp_connect("127.0.0.1", closed_port(), 5)

    asyncio.run(run())


# --- lifecycle ----------------------------------------------------------------------------------

OK = ProbeResult(sites.VERIFIED, "ok", PIN_A)
MISMATCH = ProbeResult(sites.PIN_MISMATCH, "mismatch", PIN_B)
MISSING = ProbeResult(sites.TRUST_MISSING, "no pins")
REFUSED = ProbeResult(sites.CONNECTION_FAILED, "refused")
ADDR = "127.0.0.1:8443"


def phase(current: str | None, **observed: object) -> str:
    return next_phase(current, SiteObservation(**observed)).phase  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("current", "observed", "expected", "reason"),
    [
        (None, {}, PENDING, "AwaitingDiscovery"),
        (PENDING, {}, PENDING, "AwaitingDiscovery"),
        (PENDING, {"member": "alive"}, DISCOVERED, "MemberAlive"),
        (PENDING, {"member": "alive", "gateway_address": ADDR, "probe": OK}, DISCOVERED, "MemberAlive"),
        (DISCOVERED, {"member": "alive"}, DISCOVERED, "GatewayAddressMissing"),
        (DISCOVERED, {"member": "alive", "gateway_address": ADDR}, CONNECTING, "GatewayAddressKnown"),
        (CONNECTING, {"member": "alive", "gateway_address": ADDR}, CONNECTING, "AddressMissing"),
        (CONNECTING, {"member": "alive", "gateway_address": ADDR, "probe": OK}, ACTIVE, "TlsVerified"),
        (CONNECTING, {"member": "alive", "gateway_address": ADDR, "probe": MISMATCH}, CONNECTING, "PinMismatch"),
        (
            CONNECTING,
            {"member": "alive", "gateway_address": ADDR, "probe": MISSING},
            CONNECTING,
            "TrustMaterialMissing",
        ),
        (CONNECTING, {"member": "alive", "gateway_address": ADDR, "probe": REFUSED}, CONNECTING, "ConnectionFailed"),
        (ACTIVE, {"member": "alive", "gateway_address": ADDR, "probe": OK}, ACTIVE, "TlsVerified"),
        (ACTIVE, {"member": "alive", "gateway_address": ADDR, "probe": REFUSED}, UNREACHABLE, "ConnectionFailed"),
        (ACTIVE, {"member": "alive", "gateway_address": ADDR, "probe": MISMATCH}, CONNECTING, "PinMismatch"),
        (UNREACHABLE, {"member": "alive", "gateway_address": ADDR, "probe": OK}, ACTIVE, "TlsVerified"),
        (UNREACHABLE, {"member": "alive", "gateway_address": ADDR, "probe": REFUSED}, UNREACHABLE, "ConnectionFailed"),
        (ACTIVE, {"member": "suspect", "probe": OK}, ACTIVE, "MemberSuspect"),
        (ACTIVE, {"member": "dead"}, ACTIVE, "MemberDead"),
        (ACTIVE, {"member": "dead", "gateway_address": ADDR, "probe": REFUSED}, ACTIVE, "MemberDead"),
        (ACTIVE, {"member": "suspect", "gateway_address": ADDR, "probe": MISMATCH}, CONNECTING, "PinMismatch"),
        (CONNECTING, {"member": "dead"}, UNREACHABLE, "MemberUnreachable"),
        (CONNECTING, {"member": "suspect", "probe": OK}, UNREACHABLE, "MemberUnreachable"),
        (DISCOVERED, {"member": "suspect"}, UNREACHABLE, "MemberUnreachable"),
        (UNREACHABLE, {"member": "dead", "probe": OK}, UNREACHABLE, "MemberUnreachable"),
        (ACTIVE, {"member": "left"}, LEFT, "MemberLeft"),
        (PENDING, {"member": "left"}, LEFT, "MemberLeft"),
        (LEFT, {}, LEFT, "Left"),
        (LEFT, {"member": "dead"}, LEFT, "Left"),
        (LEFT, {"member": "alive", "probe": OK}, DISCOVERED, "Rejoined"),
        (ACTIVE, {"gateway_address": ADDR, "probe": OK}, ACTIVE, "TlsVerified"),
    ],
)
def test_transition(current: str | None, observed: dict[str, object], expected: str, reason: str) -> None:
    result = next_phase(current, SiteObservation(**observed))  # type: ignore[arg-type]
    assert (result.phase, result.reason) == (expected, reason)
    assert result.message and len(result.message) <= sites.MAX_MESSAGE


def test_active_only_through_a_verified_probe() -> None:
    """No observation without a Verified probe leads into Active from any other phase."""
    probes = [None, MISMATCH, MISSING, REFUSED, ProbeResult(sites.TLS_ERROR, "x"), ProbeResult("Surprise", "x")]
    for current in sites.PHASES:
        if current == ACTIVE:
            continue
        for member in (None, *sites.MEMBER_STATES):
            for probe in probes:
                observed = SiteObservation(member=member, gateway_address=ADDR, probe=probe)
                assert next_phase(current, observed).phase != ACTIVE, (current, member, probe)
                assert settle(current, observed).phase != ACTIVE, (current, member, probe)


def test_failed_member_keeps_an_active_site_active_until_the_stale_ttl() -> None:
    """Suspect or dead on Active stays Active so the records age out as degraded; the message says so."""
    for member, reason in (("suspect", "MemberSuspect"), ("dead", "MemberDead")):
        result = settle(ACTIVE, SiteObservation(member=member, gateway_address=ADDR, probe=OK))
        assert (result.phase, result.reason) == (ACTIVE, reason)
        assert member in result.message and "degraded" in result.message and "TTL" in result.message
    assert settle(ACTIVE, SiteObservation(member="dead", gateway_address=ADDR, probe=MISMATCH)).phase == UNREACHABLE
    back = settle(ACTIVE, SiteObservation(member="alive", gateway_address=ADDR, probe=OK))
    assert (back.phase, back.reason) == (ACTIVE, "TlsVerified")


def test_unknown_probe_outcome_is_a_trust_failure() -> None:
    assert phase(ACTIVE, member="alive", probe=ProbeResult("Surprise", "x")) == CONNECTING


def test_settle_reaches_active_in_one_reconcile() -> None:
    observed = SiteObservation(member="alive", gateway_address=ADDR, probe=OK)
    assert settle(PENDING, observed) == Transition(ACTIVE, "TlsVerified", "ok")
    assert settle(LEFT, observed).phase == ACTIVE
    assert settle(PENDING, SiteObservation(member="alive", gateway_address=ADDR, probe=MISMATCH)).phase == CONNECTING
    assert settle(PENDING, SiteObservation(member="alive")).phase == DISCOVERED


def test_member_states_accept_enums_and_reject_unknown_values() -> None:
    import enum

    class Status(enum.Enum):
        ALIVE = "Alive"
        SUSPECT = "Suspect"

    assert phase(PENDING, member=Status.ALIVE) == DISCOVERED
    assert phase(ACTIVE, member=Status.SUSPECT) == ACTIVE
    assert phase(CONNECTING, member=Status.SUSPECT) == UNREACHABLE
    with pytest.raises(ValueError, match="member state"):
        next_phase(ACTIVE, SiteObservation(member="zombie"))
    with pytest.raises(ValueError, match="phase"):
        next_phase("Ready", SiteObservation())
