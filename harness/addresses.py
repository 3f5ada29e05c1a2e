"""Loopback address blocks per run, xdist worker and site.

Linux routes all of 127.0.0.0/8 to `lo`, so each site gets its own /24-sized block
127.<run>.<worker*16+site>.<role> and components use fixed ports inside it. Runs, workers and sites
never collide; the run octet is chosen so the block's first address is free, and every address
handed out is checked by binding it.
"""

from __future__ import annotations

import os
import random
import socket
import sys
from dataclasses import dataclass, field

GATEWAY_PORT = 18080
ADMIN_PORT = 19901
BACKEND_PORT = 18000
#: A listening socket on 127.<run>.<worker*16>.254 at this port claims the run octet for one session.
CLAIM_PORT = 19999
CLAIM_ROLE = 254


def worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = "".join(ch for ch in worker if ch.isdigit())
    return int(digits or 0) % 16


def loopback_aliases_work() -> bool:
    """Linux answers on all of 127/8; elsewhere only 127.0.0.1 may exist."""
    return sys.platform.startswith("linux")


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def accepts(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a TCP connection to (host, port) is accepted now (it is closed at once)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class AddressPlan:
    """Hands out (host, port) pairs for one run in one worker."""

    seed: int | None = None
    run_octet: int = 0
    _next_role: dict[int, int] = field(default_factory=dict)
    _fallback_port: int = 0
    _claim: socket.socket | None = None

    def __post_init__(self) -> None:
        rng = random.Random(self.seed if self.seed is not None else os.getpid())
        start = rng.randrange(20, 250)
        self.run_octet = start
        if not loopback_aliases_work():
            return
        # Two sessions that drew the same octet would hand out the same addresses and race to bind them;
        # holding a listening socket in the block makes the octet this session's alone until it ends.
        for offset in range(230):
            octet = 20 + (start - 20 + offset) % 230
            claim = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                claim.bind((f"127.{octet}.{worker_index() * 16}.{CLAIM_ROLE}", CLAIM_PORT))
                claim.listen(1)
            except OSError:
                claim.close()
                continue
            self.run_octet, self._claim = octet, claim
            return
        raise RuntimeError("every loopback run block is claimed by another session")

    def close(self) -> None:
        """Give the run octet back (it is also released when the process exits)."""
        if self._claim is not None:
            self._claim.close()
            self._claim = None

    def allocate(self, site_index: int, port: int) -> tuple[str, int]:
        """A free address for one component of site `site_index` on `port`."""
        if not loopback_aliases_work():
            return "127.0.0.1", self._ephemeral()
        third = worker_index() * 16 + site_index % 16
        for _ in range(250):
            role = self._next_role.get(site_index, 1)
            self._next_role[site_index] = role % 250 + 1
            host = f"127.{self.run_octet}.{third}.{role}"
            if port_free(host, port):
                return host, port
        raise RuntimeError(f"no free loopback address for site {site_index} port {port}")

    def _ephemeral(self) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])


@dataclass
class SiteHostPlan:
    """Addresses when every site has a host of its own (a network namespace): all of a site's components
    share its address, each on a port of its own, handed out upwards from the port asked for."""

    hosts: tuple[str, ...]
    run_octet: int = 0
    _used: dict[int, set[int]] = field(default_factory=dict)

    def allocate(self, site_index: int, port: int) -> tuple[str, int]:
        used = self._used.setdefault(site_index, set())
        while port in used:
            port += 1
        used.add(port)
        return self.hosts[site_index], port

    def close(self) -> None:
        """Nothing to give back: the addresses disappear with their namespaces."""
