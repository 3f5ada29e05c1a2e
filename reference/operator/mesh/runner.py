"""Run one SWIM member over real UDP on the asyncio event loop, with the process clock."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterable

from reference.operator.core.model import SystemClock
from reference.operator.mesh.codec import Address
from reference.operator.mesh.swim import LOCAL, SwimConfig, SwimNode
from reference.operator.mesh.transport import UdpTransport

# Upper bound on one sleep, so a clock step or a late datagram never stalls the timers for long.
_MAX_SLEEP = 0.5


class UdpMember:
    """A started member: `node` is the protocol state, `address` the address it announces to peers.

    That is the bound UDP address unless another one was given to advertise: behind a NAT (a NodePort, a
    load balancer) peers must be told where to send, which is not where the socket listens.
    """

    def __init__(self, node: SwimNode, transport: UdpTransport) -> None:
        self.node = node
        self.transport = transport
        self._clock = SystemClock()
        self._task: asyncio.Task[None] | None = None

    @property
    def address(self) -> Address:
        """What peers know this member by and send to."""
        return self.node.address

    @property
    def bound(self) -> Address:
        """The local socket address (differs from `address` when another one is advertised)."""
        return self.transport.address

    @classmethod
    async def start(
        cls,
        name: str,
        host: str,
        port: int = 0,
        *,
        seeds: Iterable[Address] = (),
        config: SwimConfig = LOCAL,
        rng: random.Random | None = None,
        advertise: Address | None = None,
    ) -> UdpMember:
        """Bind host:port (0 picks a free port), start the member and join through `seeds`.

        `advertise` is the address announced to peers as this member's own (default: the bound one).
        """
        transport = await UdpTransport.bind(host, port)
        announced = advertise if advertise is not None else transport.address
        node = SwimNode(name, announced, transport, SystemClock(), config, seeds=seeds, rng=rng)
        transport.set_receiver(node.receive)
        member = cls(node, transport)
        node.start()
        member._task = asyncio.create_task(member._run(), name=f"swim-{name}")
        return member

    async def _run(self) -> None:
        while True:
            self.node.tick()
            delay = self.node.next_deadline() - self._clock.now()
            await asyncio.sleep(min(max(delay, 0.0), _MAX_SLEEP))

    async def close(self, *, leave: bool = True) -> None:
        """Optionally announce leaving, stop the timers and release the socket."""
        if leave and not self.transport.closed:
            self.node.leave()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.transport.aclose()
