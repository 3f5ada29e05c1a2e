"""`--mesh-advertise`: a member announces an address other than the one it binds (a NodePort in front).

Two real UDP members on loopback: site-a binds one port but advertises a forwarder's port (standing for a
node port NAT that forwards both ways); site-b only ever learns site-a by the advertised address, and
both see each other alive, with every probe of site-a answered through the forwarder.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from reference.operator.cli import InputError, _mesh_settings, build_parser
from reference.operator.mesh.runner import UdpMember
from reference.operator.mesh.runtime import MeshRuntime, MeshSettings, format_address
from reference.operator.mesh.swim import ALIVE, SwimConfig
from tests.operator.udp_forwarder import UdpForwarder

FAST = SwimConfig(probe_interval=0.2, probe_timeout=0.1, gossip_interval=0.02, push_pull_interval=1.0)
HOST_A, HOST_NAT, HOST_B = "127.0.0.51", "127.0.0.52", "127.0.0.53"
DEADLINE = 15.0


async def until(what: str, check: Callable[[], Any]) -> Any:
    end = time.monotonic() + DEADLINE
    seen: Any = None
    while time.monotonic() < end:
        seen = check()
        if seen:
            return seen
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}; last saw {seen!r}")


def test_members_behind_a_forwarded_address_become_alive_to_each_other() -> None:
    async def body() -> None:
        with UdpForwarder(HOST_NAT) as nat:
            a = MeshRuntime(MeshSettings(site="site-a", bind=(HOST_A, 0), advertise=nat.address, swim=FAST))
            await a.start()
            nat.target = a.bound
            b = await UdpMember.start("site-b", HOST_B, 0, seeds=[nat.address], config=FAST)
            try:
                assert a.address == nat.address and a.bound[0] == HOST_A and a.bound != nat.address

                def views() -> tuple[Any, Any]:
                    assert a.member is not None
                    return b.node.member("site-a"), a.member.node.member("site-b")

                await until(
                    "each member alive to the other",
                    lambda: all(view is not None and view.status == ALIVE for view in views()),
                )
                # site-b's probes go to the advertised address only: they must be answered through the forwarder
                # (site-b has no other member to probe; the last probe may still be in flight).
                stats = b.node.stats
                await until(
                    "three of site-b's probes of site-a answered", lambda: stats.probes - stats.probes_failed >= 4
                )
                assert nat.outbound >= 3, "the answers came back through the forwarder"
                seen_by_b, seen_by_a = views()
                assert (seen_by_b.status, seen_by_b.address) == (ALIVE, nat.address)
                assert (seen_by_a.status, seen_by_a.address) == (ALIVE, b.address)
                assert all(view.address != a.bound for view in b.node.members()), "site-b never learned the bind"
                assert nat.senders == {b.address}, "site-b reached site-a only through the forwarder"
                document = a.status_document()
                assert document["address"] == format_address(nat.address)
                assert {(m["name"], m["address"], m["status"]) for m in document["members"]} == {
                    ("site-b", format_address(b.address), ALIVE)
                }
            finally:
                await b.close(leave=False)
                await a.close(leave=False)

    asyncio.run(asyncio.wait_for(body(), 30.0))


def test_without_advertise_the_bound_address_is_announced() -> None:
    async def body() -> None:
        a = MeshRuntime(MeshSettings(site="site-a", bind=(HOST_A, 0), swim=FAST))
        await a.start()
        try:
            assert a.address == a.bound and a.bound[1] != 0
            assert a.status_document()["address"] == format_address(a.bound)
        finally:
            await a.close(leave=False)

    asyncio.run(body())


def _settings(*flags: str) -> MeshSettings | None:
    return _mesh_settings(build_parser().parse_args(["run", "--mesh-site", "site-a", *flags]))


def test_advertise_flag_is_resolved_and_defaults_to_none() -> None:
    settings = _settings("--mesh-bind", "0.0.0.0:7946", "--mesh-advertise", "localhost:30946")
    assert settings is not None
    assert (settings.bind, settings.advertise) == (("0.0.0.0", 7946), ("127.0.0.1", 30946))
    plain = _settings("--mesh-bind", "127.0.0.1:0")
    assert plain is not None and plain.advertise is None
    same = _settings("--mesh-bind", "127.0.0.1:7946", "--mesh-advertise", "127.0.0.1:7946")
    assert same is not None and same.advertise == ("127.0.0.1", 7946)
    six = _settings("--mesh-bind", "[::]:7946", "--mesh-advertise", "[::1]:30946")
    assert six is not None and six.advertise == ("::1", 30946)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mesh-bind", "0.0.0.0:7946"], "--mesh-advertise: required when --mesh-bind is a wildcard"),
        (["--mesh-bind", "[::]:0"], "--mesh-advertise: required when --mesh-bind is a wildcard"),
        (["--mesh-bind", "0.0.0.0:7946", "--mesh-advertise", "0.0.0.0:30946"], "--mesh-advertise: '0.0.0.0:30946'"),
        (["--mesh-bind", "[::]:7946", "--mesh-advertise", "[::]:30946"], "is a wildcard address"),
        (["--mesh-bind", "0.0.0.0:7946", "--mesh-advertise", "10.0.0.1"], "is not host:port"),
        (["--mesh-bind", "0.0.0.0:7946", "--mesh-advertise", "10.0.0.1:0"], "--mesh-advertise"),
        (["--mesh-bind", "0.0.0.0:7946", "--mesh-advertise", ":30946"], "--mesh-advertise"),
        (["--mesh-bind", "127.0.0.1:0", "--mesh-advertise", "[::1]:30946"], "--mesh-advertise: cannot resolve"),
    ],
)
def test_bad_advertise_is_an_input_error_naming_the_flag(flags: list[str], message: str) -> None:
    with pytest.raises(InputError, match="^--mesh-advertise") as caught:
        _settings(*flags)
    assert message in str(caught.value)
