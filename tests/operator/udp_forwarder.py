"""A UDP forwarder on loopback standing for a NodePort NAT in front of a mesh member.

Datagrams sent to the forwarder's own port reach `target` from a socket kept per sender (as conntrack
keeps one translation per flow), and whatever `target` answers on that socket goes back to the sender
from the forwarder's port, so the sender sees the reply come from the address it sent to. It runs on a
thread of its own, so blocking tests and event-loop tests can both use it.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

from reference.operator.mesh.codec import Address

_MAX_DATAGRAM = 65535


class UdpForwarder:
    """`with UdpForwarder(host, target) as nat:` then send to `nat.address`; counts both directions."""

    def __init__(self, host: str, target: Address | None = None) -> None:
        self.host = host
        self.target = target
        self.inbound = 0  # datagrams forwarded to the target
        self.outbound = 0  # replies forwarded back to a sender
        self.senders: set[Address] = set()
        self._front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._front.bind((host, 0))
        self._front.setblocking(False)
        self.address: Address = (host, int(self._front.getsockname()[1]))
        self._flows: dict[Address, socket.socket] = {}
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._front, selectors.EVENT_READ, None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="udp-forwarder", daemon=True)

    def __enter__(self) -> UdpForwarder:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        for sock in [self._front, *self._flows.values()]:
            sock.close()
        self._selector.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.05):
                if key.data is None:
                    self._from_sender()
                else:
                    self._from_target(key.fileobj, key.data)  # type: ignore[arg-type]

    def _from_sender(self) -> None:
        while True:
            try:
                data, sender = self._front.recvfrom(_MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError, OSError):
                return
            if self.target is None:
                continue
            client: Address = (str(sender[0]), int(sender[1]))
            flow = self._flows.get(client) or self._open(client)
            with contextlib.suppress(OSError):
                flow.sendto(data, self.target)
                self.inbound += 1
                self.senders.add(client)

    def _open(self, client: Address) -> socket.socket:
        flow = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        flow.bind((self.host, 0))
        flow.setblocking(False)
        self._flows[client] = flow
        self._selector.register(flow, selectors.EVENT_READ, client)
        return flow

    def _from_target(self, flow: socket.socket, client: Address) -> None:
        while True:
            try:
                data, _ = flow.recvfrom(_MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError, OSError):
                return
            with contextlib.suppress(OSError):
                self._front.sendto(data, client)
                self.outbound += 1
