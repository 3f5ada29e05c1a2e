"""The harness's own machinery: polling, projection, addresses, processes, topology, config rendering."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness import contract
from harness.addresses import AddressPlan, port_free, worker_index
from harness.gateway_config import VARIANTS, render_gateway_config
from harness.process import Supervisor
from harness.projection import project
from harness.topology import TopologyError, load_topology, parse_topology
from harness.waiting import WaitTimeout, poll_until, wait_until_elapsed


def test_poll_until_returns_first_matching_observation() -> None:
    values = iter(range(100))
    assert poll_until(lambda: next(values), lambda v: v >= 3, what="three", timeout=5) == 3


def test_poll_until_timeout_names_what_and_last_seen() -> None:
    with pytest.raises(WaitTimeout, match=r"waited 0\.2s for the answer; last seen: 41"):
        poll_until(lambda: 41, lambda v: v == 42, what="the answer", timeout=0.2)


def test_poll_until_reports_probe_errors_as_observations() -> None:
    def broken() -> int:
        raise ConnectionError("refused")

    with pytest.raises(WaitTimeout, match="ConnectionError: refused"):
        poll_until(broken, lambda v: True, what="a connection", timeout=0.1)


def test_wait_until_elapsed_waits_at_least_the_time() -> None:
    start = time.monotonic()
    wait_until_elapsed(start, 0.15)
    assert time.monotonic() - start >= 0.15


def test_projection_swaps_data_symlink_atomically(tmp_path: Path) -> None:
    project(tmp_path, {"routing-overlay.json": b"one"})
    first_target = os.readlink(tmp_path / "..data")
    assert (tmp_path / "routing-overlay.json").read_bytes() == b"one"
    assert os.readlink(tmp_path / "routing-overlay.json") == "..data/routing-overlay.json"
    project(tmp_path, {"routing-overlay.json": b"two"})
    assert (tmp_path / "routing-overlay.json").read_bytes() == b"two"
    assert os.readlink(tmp_path / "..data") != first_target
    assert not (tmp_path / first_target).exists(), "the previous data directory is removed"
    assert not (tmp_path / "..data_tmp").exists()


def test_address_plan_hands_out_distinct_free_addresses() -> None:
    plan = AddressPlan(seed=7)
    seen = {plan.allocate(0, 18080) for _ in range(5)} | {plan.allocate(1, 18080) for _ in range(5)}
    assert len(seen) == 10
    for host, port in seen:
        assert host.startswith("127.") and port_free(host, port)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-site loopback blocks need Linux")
def test_address_plan_skips_an_address_in_use() -> None:
    plan = AddressPlan(seed=11)
    try:
        host = f"127.{plan.run_octet}.{worker_index() * 16 + 2}.1"  # the first address site 2 would get
        with socket.socket() as sock:
            sock.bind((host, 18123))
            sock.listen()
            other = plan.allocate(2, 18123)
        assert other == (f"127.{plan.run_octet}.{worker_index() * 16 + 2}.2", 18123)
    finally:
        plan.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-site loopback blocks need Linux")
def test_concurrent_sessions_never_share_a_run_block() -> None:
    """Two sessions that draw the same octet (same seed) still get blocks of their own."""
    first, second = AddressPlan(seed=11), AddressPlan(seed=11)
    try:
        assert first.run_octet != second.run_octet
    finally:
        first.close()
        second.close()
    again = AddressPlan(seed=11)
    try:
        assert again.run_octet == first.run_octet, "a closed session gives its block back"
    finally:
        again.close()


def test_supervisor_stops_process_group_and_frees_port(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = (
        "import socket, subprocess, sys, time\n"
        f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = supervisor.start("sleeper", [sys.executable, "-c", script])
    poll_until(proc.log_text, lambda text: "child" in text, what="the child pid", timeout=10)
    child_pid = int(proc.log_text().split()[1])
    assert not port_free("127.0.0.1", port)
    supervisor.stop_all()
    assert not proc.running()
    poll_until(lambda: _alive(child_pid), lambda alive: not alive, what="the grandchild to exit", timeout=5)
    assert port_free("127.0.0.1", port), "no port stays bound after stop"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return True


def test_bundled_topology_loads() -> None:
    topology = load_topology("single-site")
    site = topology.sites[0]
    assert topology.network and site.model_providers and site.provider("mgmt").role == "management"


def test_topology_errors_name_the_key() -> None:
    with pytest.raises(TopologyError, match=r"sites\[0\]\.providers\[0\]\.name is required"):
        parse_topology({"name": "t", "network": "n", "sites": [{"name": "a", "providers": [{}]}]}, "t.yaml")
    with pytest.raises(TopologyError, match="no-such-topology"):
        load_topology("no-such-topology")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_configs_use_only_the_keys_of_their_feature(variant: str) -> None:
    scope = contract.ScopeSpec("net", "gw", "ns", "site-a")
    text = render_gateway_config(
        VARIANTS[variant], listen="127.0.0.1:1", admin="127.0.0.1:2", overlay_file="/x/routing-overlay.json",
        scope=scope, clusters={"a": "127.0.0.1:3", "mgmt": "127.0.0.1:4"}, hop_clusters=["a"],
        management_cluster="mgmt", allowlist=["a"],
        static_candidates=[contract.candidate("m", "site-a", "a")],
    )
    config = yaml.safe_load(text)
    route = next(f for f in config["filter_chains"][0]["filters"] if f["filter"] == "intelligent_route")
    assert ("clusters" in route) == (variant == "allowlist")
    assert ("management_cluster" in route) == (variant == "management")
    assert ("skip_paths" in route) == (variant in ("skip", "management"))
    assert ("candidates" in route) == (variant == "static")
    assert ("expected_overlay_scope" in route) == (VARIANTS[variant].expected_scope and not VARIANTS[variant].static)
    cookie = route.get("session_affinity", {}).get("cookie")
    assert (cookie is not None) == (variant == "cookie")


def test_local_backend_gives_hop_backends_an_mtls_listener(tmp_path: Path) -> None:
    """Model backends (hop clusters) also listen for mTLS with the run's CA; the management one does not."""
    import httpx

    from harness.backends.local import LocalBackend
    from harness.pki import client_context, file_digest

    supervisor, plan = Supervisor(tmp_path / "logs"), AddressPlan()
    backend = LocalBackend(tmp_path, supervisor, plan, impl=None)
    try:
        providers = backend.start_providers(0, load_topology("single-site").sites[0])
        hop, mgmt = providers["provider-a"], providers["mgmt"]
        assert (mgmt.mtls_address, mgmt.sni) == (None, None)
        assert hop.mtls_address is not None and hop.sni == "provider-a.site-a.backend.grid.test"
        assert httpx.get(f"{hop.url}/admin/stats", timeout=5).json()["requests"] == 0  # admin stays plain
        client = backend.pki.client("consumer")
        with httpx.Client(verify=client_context(backend.pki.ca_path, client), timeout=5) as http:
            # verified by the SNI name the hop clusters use, not only by the listener's address
            answer = http.post(f"https://{hop.mtls_address}/v1/chat/completions", json={"model": "m"},
                               extensions={"sni_hostname": hop.sni}).json()
        assert answer["agn"]["peer"]["cert_digest"] == file_digest(client.cert) == client.digest
        with (httpx.Client(verify=client_context(backend.pki.ca_path), timeout=5) as anonymous,
              pytest.raises(httpx.TransportError)):
            anonymous.post(f"https://{hop.mtls_address}/v1/chat/completions", json={"model": "m"})
    finally:
        supervisor.stop_all()
        plan.close()
