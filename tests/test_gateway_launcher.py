"""The descriptor's `gateway.launcher` on the local backend: started before the first gateway, a clear
failure naming it when it does not come up, and nothing left behind."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from harness.addresses import AddressPlan
from harness.backends.local import GatewayStartFailed, LocalBackend
from harness.impl import parse_impl
from harness.process import Supervisor

REPO = Path(__file__).resolve().parents[1]
WARM = [sys.executable, "-m", "reference.warm_start", "serve", "{socket}"]
GATEWAY_EXITS = ["/bin/sh", "-c", "echo gateway says no >&2; exit 2", "gw", "{config}", "{launcher}"]


def _start(tmp_path: Path, launcher: list[str]) -> tuple[GatewayStartFailed, LocalBackend]:
    impl = parse_impl({"implementation": {"organization": "o", "project": "p", "version": "1", "contact": []},
                       "gateway": {"command": GATEWAY_EXITS, "startup_timeout_s": 2,
                                   "launcher": {"command": launcher, "env": {"PYTHONPATH": str(REPO)}}}})
    backend = LocalBackend(tmp_path, Supervisor(tmp_path / "logs"), AddressPlan(), impl)
    workdir = tmp_path / "gateway-1"
    workdir.mkdir(parents=True)
    try:
        with pytest.raises(GatewayStartFailed) as caught:
            backend.start_gateway("gw", "127.0.0.1:9", "127.0.0.1:9", workdir, "listeners: []\n", workdir)
        sockets: Any = dict(backend._launchers)
    finally:
        backend.supervisor.stop_all()
        backend.plan.close()
    assert not backend.supervisor.processes
    assert all(not path.parent.exists() for path in sockets.values()), f"socket directories left: {sockets}"
    return caught.value, backend


@pytest.mark.parametrize(("launcher", "said"), [
    (["/bin/sh", "-c", "echo launcher broke >&2; exit 3", "warm", "{socket}"], "exited with 3"),
    (["/bin/sh", "-c", "exec sleep 60", "warm", "{socket}"], "waited"),
], ids=["exits", "never-listens"])
def test_a_launcher_that_does_not_come_up_fails_naming_it(tmp_path: Path, launcher: list[str], said: str) -> None:
    failure, _ = _start(tmp_path, launcher)
    assert str(failure).startswith("gateway.launcher did not come up") and said in str(failure), str(failure)
    if said.startswith("exited"):
        assert "launcher broke" in failure.log_tail
    # the twin: a launcher that listens is started, and the failure is the gateway's own
    working, _ = _start(tmp_path / "twin", WARM)
    assert "gateway.launcher" not in str(working) and "gateway says no" in working.log_tail, str(working)
