"""The processes a benchmark starts: a fake backend and the reference gateway, on ephemeral ports.

Both print their bound addresses on stdout, which the Supervisor captures to a log file; the
address is read from there with a deadline. After a run every port the processes bound is checked
to be free again.
"""

from __future__ import annotations

import re
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.core import ROOT, child_env
from bench.overlays import KIND, MODEL, SCOPE
from harness import contract
from harness.gateway_config import VARIANTS, render_gateway_config
from harness.process import ManagedProcess, Supervisor
from harness.projection import project

OVERLAY_FILE = "routing-overlay.json"
BACKEND_NAME = "bench-backend"
BACKEND_CLUSTER = "bench-cluster"
START_TIMEOUT_S = 30.0


class StartFailed(RuntimeError):
    """A process exited or never announced its address; carries its log tail."""


@dataclass
class Running:
    """A started service: its process, the addresses it announced and every port it bound."""

    process: ManagedProcess
    addresses: dict[str, str] = field(default_factory=dict)

    def ports(self) -> list[tuple[str, int]]:
        out = []
        for address in self.addresses.values():
            host, _, port = address.rpartition(":")
            out.append((host.strip("[]"), int(port)))
        return out


def wait_for_lines(proc: ManagedProcess, patterns: dict[str, str], timeout: float) -> dict[str, str]:
    """Poll the process log until every pattern has matched; returns each pattern's first group."""
    deadline = time.monotonic() + timeout
    compiled = {key: re.compile(pattern, re.MULTILINE) for key, pattern in patterns.items()}
    while True:
        text = proc.log_text()
        found = {key: m.group(1) for key, rx in compiled.items() if (m := rx.search(text)) is not None}
        if len(found) == len(compiled):
            return found
        if not proc.running():
            raise StartFailed(f"{proc.name} exited with {proc.returncode}:\n{proc.log_tail()}")
        if time.monotonic() >= deadline:
            raise StartFailed(f"{proc.name} did not announce {sorted(set(compiled) - set(found))} "
                              f"within {timeout:.0f}s:\n{proc.log_tail()}")
        time.sleep(0.02)


def start_backend(supervisor: Supervisor) -> Running:
    argv = [sys.executable, "-m", "harness.fakes.cli", "--name", BACKEND_NAME, "--site", SCOPE.local_site,
            "--listen", "127.0.0.1:0"]
    proc = supervisor.start("bench-fake-backend", argv, env=child_env(), cwd=ROOT)
    found = wait_for_lines(proc, {"listen": r"^LISTENING (\S+)$"}, START_TIMEOUT_S)
    return Running(proc, found)


def start_gateway(supervisor: Supervisor, workdir: Path, backend_address: str) -> Running:
    """The reference gateway in overlay mode with one deterministic candidate on the backend."""
    overlay_dir = workdir / "overlay"
    doc = contract.envelope([contract.candidate(MODEL, SCOPE.local_site, BACKEND_CLUSTER, kind=KIND)], SCOPE,
                            selection_mode="deterministic")
    project(overlay_dir, {OVERLAY_FILE: contract.encode(doc)})
    config = render_gateway_config(
        VARIANTS["core"], listen="127.0.0.1:0", admin="127.0.0.1:0",
        overlay_file=str(overlay_dir / OVERLAY_FILE), scope=SCOPE,
        clusters={BACKEND_CLUSTER: backend_address}, hop_clusters=(), management_cluster=None,
    )
    config_path = workdir / "praxis.yaml"
    config_path.write_text(config)
    argv = [sys.executable, "-m", "reference.gateway.cli", "-c", str(config_path)]
    proc = supervisor.start("bench-gateway", argv, env=child_env(), cwd=ROOT)
    found = wait_for_lines(proc, {"listen": r"^LISTENING \S+ (\S+)$", "admin": r"^ADMIN (\S+)$"},
                           START_TIMEOUT_S)
    return Running(proc, found)


def check_routes(url: str) -> str:
    """One request through `url`; returns the backend that answered, or raises with what was seen."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}
    resp = httpx.post(url, json=body, timeout=10.0)
    backend = resp.headers.get("x-agn-backend")
    if resp.status_code != 200 or backend != BACKEND_NAME:
        raise RuntimeError(f"{url} answered {resp.status_code} backend={backend} body={resp.text[:200]!r}")
    return backend


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (connections in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def wait_ports_free(ports: list[tuple[str, int]], timeout: float = 10.0) -> list[tuple[str, int]]:
    """Wait until every port is free; returns the ones still bound at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        busy = [p for p in ports if not port_free(*p)]
        if not busy or time.monotonic() >= deadline:
            return busy
        time.sleep(0.05)
