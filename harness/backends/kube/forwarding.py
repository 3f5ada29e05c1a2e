"""How the harness reaches pod listeners from the host: `kubectl port-forward` on loopback."""

from __future__ import annotations

import re
from collections.abc import Sequence

from harness.backends.kube.handles import SiteCluster
from harness.backends.kube.names import NAMESPACE
from harness.backends.local import GatewayStartFailed
from harness.backends.runner import Runner
from harness.pki import GridPKI, ServerFiles
from harness.process import ManagedProcess, Supervisor
from harness.waiting import poll_until

_FORWARD_LINE = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")


class PortForwardPKI(GridPKI):
    """The run's CA; a certificate for a pod listener ("0.0.0.0") also names 127.0.0.1.

    The harness reaches pod listeners through loopback port-forwards and verifies them by that address;
    peers in the clusters verify the SNI name the certificate also carries.
    """

    def server(self, name: str, *hosts: str, uris: tuple[str, ...] = ()) -> ServerFiles:
        if "0.0.0.0" in hosts and "127.0.0.1" not in hosts:
            hosts = (*hosts, "127.0.0.1")
        return super().server(name, *hosts, uris=uris)


def port_forward(runner: Runner, supervisor: Supervisor, site: SiteCluster, target: str, ports: Sequence[int],
                 name: str) -> tuple[ManagedProcess, dict[int, int]]:
    """Start `kubectl port-forward` of `target` on loopback and wait for its mapping (remote -> local port);
    the forward is stopped again if it never says where it listens."""
    argv = ["kubectl", *site.kubectl_args, "--namespace", NAMESPACE, "port-forward", "--address",
            "127.0.0.1", target, *[f":{p}" for p in ports]]
    proc = runner.spawn(supervisor, f"port-forward-{name}", argv)

    def mapping() -> dict[int, int]:
        if not proc.running():
            raise GatewayStartFailed(f"port-forward to {target} exited with {proc.returncode}",
                                     proc.returncode, proc.log_tail())
        return {int(r): int(loc) for loc, r in _FORWARD_LINE.findall(proc.log_text())}

    try:
        found = poll_until(mapping, lambda m: all(p in m for p in ports), what=f"port-forward to {target}",
                           timeout=60, fatal=(GatewayStartFailed,))
    except BaseException:
        supervisor.stop(proc)
        raise
    return proc, found
