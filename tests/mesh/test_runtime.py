"""The mesh runtime over real UDP on loopback, with a real TLS listener standing in for a site's gateway."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, TypeVar

import pytest
import trustme

from harness.resources import gateway_ref, grid_network, inference_provider
from reference.operator.core import FixedClock, Resources, render
from reference.operator.mesh.announce import Announcement, decode_announcement, encode_announcement
from reference.operator.mesh.codec import Address
from reference.operator.mesh.runner import UdpMember
from reference.operator.mesh.runtime import MeshRuntime, MeshSettings
from reference.operator.mesh.sites import API_VERSION
from reference.operator.mesh.swim import SwimConfig

NET, OTHER, SOLO = "grid", "other", "solo"
FAST = SwimConfig(probe_interval=0.2, probe_timeout=0.1, suspicion_mult=2)
DEADLINE = 15.0
T = TypeVar("T")


async def eventually(probe: Callable[[], T], done: Callable[[T], bool], what: str, timeout: float = DEADLINE) -> T:
    """Poll `probe` until `done` holds; on timeout say what was last seen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        seen = probe()
        if done(seen):
            return seen
        if loop.time() >= deadline:
            raise AssertionError(f"waited {timeout}s for {what}; last seen: {seen!r}")
        await asyncio.sleep(0.02)


def objects_for(site: str, networks: dict[str, dict[str, Any]], providers: dict[str, str]) -> list[dict[str, Any]]:
    """GridNetworks (name -> extra spec) served by `site`, and providers (name -> network) hosted there."""
    out = [grid_network(name, [gateway_ref(site)], **extra) for name, extra in networks.items()]
    for name, network in providers.items():
        out.append(inference_provider(name, network, site=site, cluster=f"{name}-local", models=[f"model-{name}"]))
    return out


def pin_site(name: str, network: str, pins: list[str], address: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"gridNetworkRef": network, "trust": {"canonicalFingerprints": pins}}
    if address:
        spec["gatewayEndpoint"] = {"address": address}
    return {"apiVersion": API_VERSION, "kind": "GridSite", "metadata": {"name": name}, "spec": spec}


def feed(runtime: MeshRuntime, objects: list[dict[str, Any]]) -> Resources:
    resources = Resources.from_objects(objects)
    runtime.update_local(resources, objects, [])
    return resources


def candidates(runtime: MeshRuntime, objects: list[dict[str, Any]], network: str = NET) -> list[tuple[Any, ...]]:
    """What the operator would render for `network`: (model, site, cluster, fresh) per candidate."""
    resources = Resources.from_objects(objects)
    resources = replace(resources, sites=runtime.site_specs(resources.sites))
    for rendered in render(resources, [], runtime.remote_records(), FixedClock()):
        if rendered.network == network:
            overlay = rendered.envelope["overlay"]["candidates"]
            return sorted((c["name"], c["site"], c["cluster"], c["fresh"]) for c in overlay)
    raise AssertionError(f"no overlay rendered for {network}")


@asynccontextmanager
async def tls_gateway(ca: trustme.CA) -> AsyncIterator[tuple[str, str]]:
    """A TLS listener on loopback; yields its address and the pin of its certificate."""
    leaf = ca.issue_cert("gateway.site-c.test")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    leaf.configure_cert(context)
    der = ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())

    async def hang_up(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0, ssl=context)
    try:
        port = server.sockets[0].getsockname()[1]
        yield f"127.0.0.1:{port}", hashlib.sha256(der).hexdigest()
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def mesh(*configs: tuple[str, str | None, str | None, str | None]) -> AsyncIterator[dict[str, MeshRuntime]]:
    """Start runtimes in order; each (site, seed site, gateway, routing cluster). Always closed."""
    started: dict[str, MeshRuntime] = {}
    try:
        for site, seed, gateway, cluster in configs:
            seeds: tuple[Address, ...] = (started[seed].address,) if seed else ()
            settings = MeshSettings(
                site=site,
                bind=("127.0.0.1", 0),
                seeds=seeds,
                gateway=gateway,
                routing_cluster=cluster,
                swim=FAST,
                probe_timeout=2.0,
                probe_every=0.2,
            )
            runtime = MeshRuntime(settings)
            await runtime.start()
            started[site] = runtime
        yield started
    finally:
        for runtime in started.values():
            await runtime.close(leave=False)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_records_travel_and_a_pinned_site_becomes_eligible(ca: trustme.CA) -> None:
    asyncio.run(_gossip_scenario(ca))


async def _gossip_scenario(ca: trustme.CA) -> None:
    async with (
        tls_gateway(ca) as (gateway, pin),
        mesh(
            ("site-a", None, None, None), ("site-b", "site-a", None, None), ("site-c", "site-b", gateway, "c-route")
        ) as sites,
    ):
        a, b, c = sites["site-a"], sites["site-b"], sites["site-c"]
        a_objects = objects_for("site-a", {NET: {"staleCandidateTtlSeconds": 2}, SOLO: {}}, {"pa": NET})
        feed(a, a_objects)
        feed(b, objects_for("site-b", {NET: {}}, {"pb": NET}))
        feed(c, objects_for("site-c", {NET: {}, OTHER: {}}, {"pc": NET, "pc-other": OTHER}))

        # C's records reach A, and B's own announcement carries them (relayed state, not only C's payload).
        def relayed_by_b() -> set[tuple[str, str, str]]:
            payload = a.member.node.payload("site-b") if a.member else None
            return {r.key for r in decode_announcement(payload[1]).records} if payload else set()

        await eventually(relayed_by_b, lambda keys: (NET, "site-c", "pc") in keys, "B to relay C's record to A")
        await eventually(
            lambda: sorted((r.network, r.site, r.name) for r in a.remote_records()),
            lambda seen: seen == [(NET, "site-b", "pb"), (NET, "site-c", "pc")],
            "A's remote records: B's and C's in grid only",
        )
        # A's own record comes back inside B's view; it is never merged or rendered.
        await eventually(relayed_by_b, lambda keys: (NET, "site-a", "pa") in keys, "B to echo A's record")
        assert all(r.site != "site-a" for r in a.store.others())
        assert all(r.site != "site-a" for r in a.remote_records())
        # C's record in a network A does not have is stored (to relay) but never rendered.
        assert any(r.network == OTHER for r in a.store.others())
        assert {r.network for r in a.remote_records()} == {NET}

        site_c = await eventually(
            lambda: a.sites.get("grid-site-c"),
            lambda s: s is not None and s.reason == "TrustMaterialMissing",
            "C's GridSite to wait for pins",
        )
        assert site_c is not None and site_c.phase == "Connecting"
        assert set(a.sites) == {"grid-site-b", "grid-site-c"}, "one GridSite per shared local network"
        assert a.sites["grid-site-b"].phase == "Discovered", "B announces no gateway"
        assert [x for x in candidates(a, a_objects) if x[1] != "site-a"] == []

        wrong = [*a_objects, pin_site("grid-site-c", NET, ["0" * 64])]
        feed(a, wrong)
        await eventually(lambda: a.sites["grid-site-c"].reason, lambda r: r == "PinMismatch", "a pin mismatch")
        assert a.sites["grid-site-c"].phase == "Connecting"
        assert [x for x in candidates(a, wrong) if x[1] == "site-c"] == []

        pinned = [*a_objects, pin_site("grid-site-c", NET, [pin])]
        feed(a, pinned)
        await eventually(lambda: a.sites["grid-site-c"].phase, lambda p: p == "Active", "C to become Active")
        assert ("model-pc", "site-c", "pc-local", True) in candidates(a, pinned)
        assert candidates(a, pinned, SOLO) == []
        gridsite = a.gridsite_objects()["grid-site-c"]
        assert gridsite["spec"]["trust"]["canonicalFingerprints"] == [pin]
        assert gridsite["status"]["phase"] == "Active" and gridsite["status"]["lastProbeTime"]
        assert gridsite["metadata"]["labels"]["grid.praxis.fast/auto-discovered"] == "true"

        # C stops without leaving: its site stays Active, its records degrade and age, then leave by TTL.
        version = a.version
        await c.close(leave=False)
        await eventually(
            lambda: a.sites["grid-site-c"].reason, lambda r: r in ("MemberSuspect", "MemberDead"), "C suspected"
        )
        assert a.sites["grid-site-c"].phase == "Active" and a.version > version
        await eventually(
            lambda: candidates(a, pinned), lambda seen: ("model-pc", "site-c", "pc-local", False) in seen, "fresh false"
        )
        await eventually(
            lambda: [r for r in a.remote_records() if r.site == "site-c"],
            lambda rs: bool(rs) and all(r.phase == "Degraded" and r.age_secs >= 2 for r in rs),
            "C's records to age past the TTL",
        )
        assert all(x[1] != "site-c" for x in candidates(a, pinned))
        members = {m["name"]: m for m in a.status_document()["members"]}
        assert members["site-c"]["status"] in ("suspect", "dead") and members["site-c"]["ageSecs"] >= 2


def test_a_site_that_leaves_is_excluded_at_once(ca: trustme.CA) -> None:
    asyncio.run(_leave_scenario(ca))


async def _leave_scenario(ca: trustme.CA) -> None:
    async with (
        tls_gateway(ca) as (gateway, pin),
        mesh(("site-a", None, None, None), ("site-c", "site-a", gateway, None)) as sites,
    ):
        a, c = sites["site-a"], sites["site-c"]
        a_objects = [*objects_for("site-a", {NET: {}}, {}), pin_site("grid-site-c", NET, [pin])]
        feed(a, a_objects)
        feed(c, objects_for("site-c", {NET: {}}, {"pc": NET}))
        await eventually(
            lambda: candidates(a, a_objects),
            lambda seen: ("model-pc", "site-c", "pc-local", True) in seen,
            "C rendered",
        )
        await c.close(leave=True)
        await eventually(lambda: a.sites["grid-site-c"].phase, lambda p: p == "Left", "C to be Left")
        assert a.sites["grid-site-c"].reason == "MemberLeft"
        assert candidates(a, a_objects) == []


def test_bad_announcements_are_ignored() -> None:
    asyncio.run(_bad_payload_scenario())


async def _bad_payload_scenario() -> None:
    async with mesh(("site-a", None, None, None)) as sites:
        a = sites["site-a"]
        feed(a, objects_for("site-a", {NET: {}}, {}))
        rogue = await UdpMember.start("site-x", "127.0.0.1", seeds=[a.address], config=FAST)
        liar = await UdpMember.start("site-y", "127.0.0.1", seeds=[a.address], config=FAST)
        try:
            rogue.node.set_local_payload(b"\x78\x9cnot really zlib")
            # a valid announcement, but for a site other than the member that sends it
            liar.node.set_local_payload(encode_announcement(Announcement("site-z", None, (NET,))))
            await eventually(lambda: a.rejected_announcements, lambda n: n >= 2, "both payloads to be rejected")
            assert sorted(m.name for m in a.members()) == ["site-x", "site-y"]
            assert a.sites == {} and a.store.others() == []
            assert a.member is not None and a.member.transport.receiver_errors == 0
        finally:
            await rogue.close(leave=False)
            await liar.close(leave=False)


def test_a_seed_that_starts_late_is_still_joined() -> None:
    asyncio.run(_late_seed_scenario())


async def _late_seed_scenario() -> None:
    """B seeds on A before A listens, C joins through B; the group still becomes one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        a_address: Address = ("127.0.0.1", probe.getsockname()[1])
    started: list[MeshRuntime] = []
    try:
        b = MeshRuntime(MeshSettings("site-b", ("127.0.0.1", 0), seeds=(a_address,), swim=FAST))
        await b.start()
        started.append(b)
        c = MeshRuntime(MeshSettings("site-c", ("127.0.0.1", 0), seeds=(b.address,), swim=FAST))
        await c.start()
        started.append(c)
        await eventually(lambda: [m.name for m in b.members()], lambda names: names == ["site-c"], "B and C")
        a = MeshRuntime(MeshSettings("site-a", a_address, swim=FAST))
        await a.start()
        started.append(a)
        await eventually(
            lambda: sorted((m.name, m.status) for m in a.members()),
            lambda seen: seen == [("site-b", "alive"), ("site-c", "alive")],
            "A, which has no seeds, to be found by B",
        )
    finally:
        for runtime in started:
            await runtime.close(leave=False)
