"""A discrete-event simulation of a SWIM group on the in-memory network, driven by a fake clock.

Time jumps straight to the next datagram delivery or member deadline, so minutes of protocol time
run in milliseconds and a run is fully determined by its seed. Tests use it to check timing bounds
exactly; benchmarks use it to measure gossip traffic for a given group size.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from reference.operator.core.model import FixedClock
from reference.operator.mesh.codec import Address
from reference.operator.mesh.memnet import MemoryNetwork
from reference.operator.mesh.swim import LOCAL, SwimConfig, SwimNode

# Safety valve against a member whose deadline never moves forward.
_MAX_EVENTS_PER_RUN = 5_000_000


class Simulation:
    def __init__(self, config: SwimConfig = LOCAL, *, seed: int = 0, latency: float = 0.0005) -> None:
        self.config = config
        self.clock = FixedClock()
        self.network = MemoryNetwork(self.clock.now, latency=latency, seed=seed)
        self._rng = random.Random(seed)
        self.nodes: dict[str, SwimNode] = {}
        self._running: dict[str, SwimNode] = {}

    @staticmethod
    def address_of(name: str) -> Address:
        """Simulated members get a symbolic address that is never resolved or used on a real network."""
        return (f"{name}.sim", 7946)

    @property
    def now(self) -> float:
        return self.clock.now()

    def add(self, name: str, seeds: Sequence[str] = (), *, config: SwimConfig | None = None) -> SwimNode:
        """Create, attach and start a member that joins through the named seeds."""
        address = self.address_of(name)
        holder: list[SwimNode] = []
        transport = self.network.attach(address, lambda data, source: holder[0].receive(data, source))
        node = SwimNode(
            name,
            address,
            transport,
            self.clock,
            config or self.config,
            seeds=[self.address_of(seed) for seed in seeds],
            rng=random.Random(self._rng.getrandbits(64)),
        )
        holder.append(node)
        self.nodes[name] = node
        self._running[name] = node
        node.start()
        return node

    def stop(self, name: str, *, leave: bool = False) -> None:
        """Stop a member abruptly (a crash), or gracefully with `leave=True`."""
        node = self._running.pop(name)
        if leave:
            node.leave()
        self.network.detach(node.address)

    def running(self) -> list[SwimNode]:
        return list(self._running.values())

    def run_for(self, seconds: float) -> None:
        self.run_until(lambda: False, seconds)

    def run_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Advance until `predicate()` holds (checked after every event) or `timeout` seconds pass."""
        end = self.clock.now() + timeout
        for _ in range(_MAX_EVENTS_PER_RUN):
            if predicate():
                return True
            upcoming = [node.next_deadline() for node in self._running.values()]
            delivery = self.network.next_delivery()
            if delivery is not None:
                upcoming.append(delivery)
            at = min(upcoming, default=math.inf)
            if at > end:
                self.clock.seconds = end
                return predicate()
            self.clock.seconds = max(self.clock.seconds, at)
            self.network.deliver_due()
            now = self.clock.now()
            for node in list(self._running.values()):
                if node.next_deadline() <= now:
                    node.tick()
        raise RuntimeError("simulation did not settle; a member deadline is not advancing")
