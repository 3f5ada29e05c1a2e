"""Datagram transports for the membership protocol: the interface the core sends through, and UDP.

The core only ever calls `send(address, data)`; received datagrams are handed to a receiver callback.
That seam is what lets the same core run over real UDP sockets here and over the deterministic
in-memory network (`memnet`) in tests and benchmarks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol, cast

from reference.operator.mesh.codec import Address

Receiver = Callable[[bytes, Address], None]

log = logging.getLogger(__name__)


class Transport(Protocol):
    def send(self, address: Address, data: bytes) -> None:
        """Send one datagram, best effort: loss is normal and never raises."""
        ...


class UdpTransport(asyncio.DatagramProtocol):
    """An asyncio UDP endpoint bound to one host:port. Create it with `await UdpTransport.bind(...)`."""

    def __init__(self) -> None:
        self._transport: asyncio.DatagramTransport | None = None
        self._receiver: Receiver | None = None
        self.address: Address = ("", 0)
        self.send_errors = 0
        self.receiver_errors = 0
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @classmethod
    async def bind(cls, host: str, port: int) -> UdpTransport:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_datagram_endpoint(cls, local_addr=(host, port))
        return protocol

    def set_receiver(self, receiver: Receiver) -> None:
        self._receiver = receiver

    @property
    def closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    # asyncio.DatagramProtocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)
        sockname = transport.get_extra_info("sockname")
        self.address = (str(sockname[0]), int(sockname[1]))

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        if self._receiver is None:
            return
        try:
            self._receiver(data, (str(addr[0]), int(str(addr[1]))))
        except Exception:  # a receiver bug must not take the endpoint down
            self.receiver_errors += 1
            log.exception("membership receiver failed on a datagram from %s", addr)

    def error_received(self, exc: Exception) -> None:
        # ICMP errors (e.g. port unreachable after a peer stopped) are ordinary for a failure detector.
        self.send_errors += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if not self._lost.done():
            self._lost.set_result(None)

    def send(self, address: Address, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        try:
            self._transport.sendto(data, address)
        except OSError:
            self.send_errors += 1

    def close(self) -> None:
        """Start closing; the socket is released once the event loop runs (see `aclose`)."""
        if self._transport is not None:
            self._transport.close()

    async def aclose(self) -> None:
        """Close and wait until the socket is released, so the port is free when this returns."""
        if self._transport is None and not self._lost.done():
            return  # never connected: there is no socket to wait for
        self.close()
        await self._lost
