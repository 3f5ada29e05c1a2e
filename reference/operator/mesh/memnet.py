"""A deterministic in-memory datagram network with loss and partition controls.

Datagrams are queued with a delivery time (send time plus a fixed latency) and handed over only when
the owner of the clock calls `deliver_due()`, so nothing is re-entrant and a run is a pure function of
the seed. Links can be cut one at a time or by partitioning the members into groups, and a loss rate
drops datagrams at random (from the seeded generator). Every accepted send is reported to taps, which
is how tests count retransmissions and how benchmarks count gossip bytes.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reference.operator.mesh.codec import Address
from reference.operator.mesh.transport import Receiver

Tap = Callable[[Address, Address, bytes], None]


@dataclass
class MemoryTransport:
    """One member's endpoint on a `MemoryNetwork`; what the core is given as its transport."""

    network: MemoryNetwork
    address: Address

    def send(self, address: Address, data: bytes) -> None:
        self.network.send(self.address, address, data)


class MemoryNetwork:
    def __init__(self, now: Callable[[], float], *, latency: float = 0.0005, seed: int = 0) -> None:
        self._now = now
        self.latency = latency
        self.loss = 0.0
        self._rng = random.Random(seed)
        self._receivers: dict[Address, Receiver] = {}
        self._queue: list[tuple[float, int, Address, Address, bytes]] = []
        self._counter = 0
        self._blocked: set[tuple[Address, Address]] = set()
        self._groups: dict[Address, int] | None = None
        self.taps: list[Tap] = []
        self.sent = 0
        self.dropped = 0
        self.delivered = 0

    def attach(self, address: Address, receiver: Receiver) -> MemoryTransport:
        if address in self._receivers:
            raise ValueError(f"address {address} is already attached")
        self._receivers[address] = receiver
        return MemoryTransport(self, address)

    def detach(self, address: Address) -> None:
        """Take an endpoint off the network, as if its process stopped: datagrams to it vanish."""
        self._receivers.pop(address, None)

    def block(self, a: Address, b: Address, *, both_ways: bool = True) -> None:
        self._blocked.add((a, b))
        if both_ways:
            self._blocked.add((b, a))

    def unblock(self, a: Address, b: Address, *, both_ways: bool = True) -> None:
        self._blocked.discard((a, b))
        if both_ways:
            self._blocked.discard((b, a))

    def partition(self, *groups: Iterable[Address]) -> None:
        """Only members of the same group can reach each other; unlisted addresses are isolated."""
        self._groups = {address: index for index, group in enumerate(groups) for address in group}

    def heal(self) -> None:
        """Remove the partition and every blocked link (the loss rate is left as it is)."""
        self._groups = None
        self._blocked.clear()

    def reachable(self, source: Address, destination: Address) -> bool:
        if (source, destination) in self._blocked:
            return False
        if self._groups is not None:
            group = self._groups.get(source)
            return group is not None and group == self._groups.get(destination)
        return True

    def send(self, source: Address, destination: Address, data: bytes) -> None:
        self.sent += 1
        for tap in self.taps:
            tap(source, destination, data)
        if not self.reachable(source, destination) or (self.loss > 0 and self._rng.random() < self.loss):
            self.dropped += 1
            return
        self._counter += 1
        heapq.heappush(self._queue, (self._now() + self.latency, self._counter, source, destination, bytes(data)))

    def next_delivery(self) -> float | None:
        return self._queue[0][0] if self._queue else None

    def deliver_due(self) -> int:
        """Deliver every queued datagram whose time has come (including ones sent while delivering
        with zero latency); returns how many were delivered."""
        count = 0
        now = self._now()
        while self._queue and self._queue[0][0] <= now:
            _, _, source, destination, data = heapq.heappop(self._queue)
            receiver = self._receivers.get(destination)
            if receiver is None:
                self.dropped += 1
                continue
            self.delivered += 1
            count += 1
            receiver(data, source)
        return count
