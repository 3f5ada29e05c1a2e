"""Network-namespace fabrics: naming and addressing everywhere; real namespaces, traffic and cuts as root."""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import netns
from harness.netns import (
    FABRIC_BLOCK,
    IFNAME_MAX,
    MAX_SITES,
    NAMESPACE_PREFIX,
    Fabric,
    FabricError,
    NetnsUnavailable,
    choose_subnet,
    cleanup_stale,
    fabric_names,
    list_namespaces,
    parse_netns_list,
    parse_routes,
    run_ip,
    stale_owner,
)
from harness.waiting import poll_until

REASON = netns.netns_unavailable()
needs_netns = pytest.mark.skipif(REASON is not None, reason=f"network namespaces unavailable: {REASON}")

ROOT = Path(__file__).resolve().parents[1]
PY = [sys.executable, "-I", "-S"]

# Echo server: TCP and UDP on the same ephemeral port of the given address; prints the port when ready.
ECHO_SERVER = r"""
import socket, sys, threading
host = sys.argv[1]
tcp = socket.socket(); tcp.bind((host, 0)); tcp.listen(16)
port = tcp.getsockname()[1]
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind((host, port))
def serve_udp():
    while True:
        data, peer = udp.recvfrom(2048)
        udp.sendto(b"udp:" + data, peer)
def serve_conn(conn):
    with conn:
        data = conn.recv(2048)
        conn.sendall(b"tcp:" + data)
threading.Thread(target=serve_udp, daemon=True).start()
print(port, flush=True)
while True:
    conn, _ = tcp.accept()
    threading.Thread(target=serve_conn, args=(conn,), daemon=True).start()
"""

# One request to an echo server; prints the reply or the error, exit status 0 only on a correct echo.
ECHO_CLIENT = r"""
import socket, sys
proto, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
payload = b"ping"
try:
    if proto == "tcp":
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(payload); reply = s.recv(2048)
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1.0); s.sendto(payload, (host, port)); reply = s.recv(2048)
except OSError as exc:
    print(f"error {type(exc).__name__}: {exc}"); sys.exit(1)
print(reply.decode()); sys.exit(0 if reply == proto.encode() + b":" + payload else 1)
"""


# --- pure helpers: run everywhere ---------------------------------------------------------------------


def test_names_fit_interface_limit_and_carry_owner_pid() -> None:
    names = fabric_names("mesh/partition tests!", 4_194_304, 7, MAX_SITES)
    for name in names.interfaces():
        assert len(name) <= IFNAME_MAX, name
    assert len(set(names.interfaces())) == len(names.interfaces())
    assert len(set(names.namespaces())) == MAX_SITES + 1
    for namespace in names.namespaces():
        assert namespace.startswith(f"{NAMESPACE_PREFIX}4194304-")
        assert stale_owner(namespace) == 4_194_304
        assert "/" not in namespace and " " not in namespace


def test_names_differ_per_tag_pid_and_serial() -> None:
    roots = {fabric_names(tag, pid, serial, 2).root_if
             for tag in ("a", "b") for pid in (100, 101) for serial in (0, 1)}
    assert len(roots) == 8
    assert fabric_names("a", 100, 0, 2) == fabric_names("a", 100, 0, 2)


@pytest.mark.parametrize("sites", [0, -1, MAX_SITES + 1])
def test_names_reject_bad_site_counts(sites: int) -> None:
    with pytest.raises(ValueError, match="sites"):
        fabric_names("x", 1, 0, sites)


def test_stale_owner_ignores_foreign_namespaces() -> None:
    assert stale_owner("agnc-123-abcdef-hub") == 123
    assert stale_owner("agnc-probe") is None
    assert stale_owner("cni-1234-5678") is None
    assert stale_owner("xagnc-12-a") is None


def test_parse_netns_list_handles_ids() -> None:
    assert parse_netns_list("b (id: 1)\na\n\n") == ["b", "a"]
    assert parse_netns_list("") == []


ROUTES = """\
default via 192.0.2.1 dev eth0
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
198.18.4.0/24 dev agcaaaaaar proto kernel scope link src 198.18.4.1
198.18.7.0/24 proto static
\tnexthop via 192.0.2.5 dev eth0 weight 1
unreachable 198.19.0.0/16
local 127.0.0.1 dev lo table local proto kernel scope host src 127.0.0.1
broadcast 198.18.4.255 dev agcaaaaaar table local proto kernel scope link src 198.18.4.1
"""


def test_parse_routes_skips_default_and_excluded_device() -> None:
    nets = {str(net) for net in parse_routes(ROUTES)}
    assert nets == {"192.0.2.0/24", "198.18.4.0/24", "198.18.7.0/24", "198.19.0.0/16", "127.0.0.1/32",
                    "198.18.4.255/32"}
    assert {str(net) for net in parse_routes(ROUTES, exclude_dev="agcaaaaaar")} == {
        "192.0.2.0/24", "198.18.7.0/24", "198.19.0.0/16", "127.0.0.1/32"}


def test_choose_subnet_avoids_routed_blocks() -> None:
    routed = parse_routes(ROUTES)
    seen = set()
    for seed in range(200):
        subnet = choose_subnet(routed, str(seed))
        assert subnet.prefixlen == 24 and subnet.subnet_of(FABRIC_BLOCK)
        assert not any(subnet.overlaps(net) for net in routed), subnet
        seen.add(subnet)
    assert all(subnet.subnet_of(ipaddress.IPv4Network("198.18.0.0/16")) for subnet in seen)
    assert len(seen) > 50  # seeds spread concurrent runs over the block
    assert choose_subnet(routed, "same") == choose_subnet(routed, "same")
    first = choose_subnet(routed, "same")
    assert choose_subnet(routed, "same", avoid=[first]) != first


def test_choose_subnet_refuses_when_block_is_routed() -> None:
    with pytest.raises(FabricError, match="already routed"):
        choose_subnet([ipaddress.IPv4Network("198.16.0.0/12")], "x")


def test_fabric_error_names_command_and_stderr() -> None:
    err = FabricError(["ip", "-n", "x", "-batch", "-"], "Error: bad thing\n", 2, stdin="link set lo up\n")
    assert "ip -n x -batch -" in str(err) and "Error: bad thing" in str(err) and "exit 2" in str(err)
    assert "link set lo up" in str(err)
    assert err.stderr == "Error: bad thing"


def test_unavailable_reason_is_one_line_and_cached() -> None:
    assert REASON is None or (REASON and "\n" not in REASON)
    assert netns.netns_unavailable() is REASON


def test_unavailable_names_missing_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.sys, "platform", "linux")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000, raising=False)
    assert netns.netns_unavailable.__wrapped__() == "network namespaces need root (running as uid 1000)"
    monkeypatch.setattr(netns.sys, "platform", "darwin")
    assert netns.netns_unavailable.__wrapped__() == "network namespaces need Linux (this is darwin)"


def test_create_refuses_with_reason_when_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    reason = "network namespaces need root (running as uid 1000)"
    monkeypatch.setattr(netns, "netns_unavailable", lambda: reason)

    def no_ip(*args: object, **kwargs: object) -> str:
        raise AssertionError(f"ip must not run when namespaces are unavailable: {args}")

    monkeypatch.setattr(netns, "run_ip", no_ip)
    with pytest.raises(NetnsUnavailable) as caught:
        Fabric.create("mesh", 3)
    assert caught.value.reason == reason and str(caught.value) == reason
    assert isinstance(caught.value, FabricError)


# --- real namespaces ----------------------------------------------------------------------------------


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first stdout line of `proc`, waiting at most `timeout`; fail with its stderr if it exits."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if sel.select(left):
                line = proc.stdout.readline()
                if line:
                    return line.strip()
                break
    proc.kill()
    _, err = proc.communicate(timeout=5)
    raise AssertionError(f"server did not report a port within {timeout}s (exit {proc.returncode}): {err}")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=3)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("netns")
    paths = {"server": base / "echo_server.py", "client": base / "echo_client.py"}
    paths["server"].write_text(ECHO_SERVER)
    paths["client"].write_text(ECHO_CLIENT)
    return paths


@pytest.fixture(scope="module")
def fabric() -> Iterator[Fabric]:
    if REASON is not None:
        pytest.skip(f"network namespaces unavailable: {REASON}")
    fab = Fabric.create("netns-tests", 3)
    try:
        yield fab
    finally:
        fab.close()


@pytest.fixture(scope="module")
def servers(fabric: Fabric, scripts: dict[str, Path]) -> Iterator[dict[str, tuple[str, int]]]:
    """An echo server in each site and one in the root namespace: name -> (address, port)."""
    procs: list[subprocess.Popen[str]] = []
    found: dict[str, tuple[str, int]] = {}
    try:
        for name, prefix, host in [("root", [], fabric.root_address)] + [
            (f"s{i}", fabric.exec_prefix(i), fabric.site_address(i)) for i in range(fabric.sites)
        ]:
            proc = subprocess.Popen([*prefix, *PY, str(scripts["server"]), host], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            procs.append(proc)
            found[name] = (host, int(_read_line(proc, 5.0)))
        yield found
    finally:
        for proc in procs:
            _stop(proc)


def from_site(fabric: Fabric, scripts: dict[str, Path], site: int, proto: str,
              target: tuple[str, int]) -> tuple[bool, str]:
    """Run one echo request from inside `site`: (echo came back correctly, what the client printed)."""
    done = subprocess.run([*fabric.exec_prefix(site), *PY, str(scripts["client"]), proto, target[0],
                           str(target[1])], capture_output=True, text=True, timeout=10)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def from_root(proto: str, target: tuple[str, int]) -> tuple[bool, str]:
    try:
        if proto == "tcp":
            with socket.create_connection(target, timeout=1.0) as sock:
                sock.sendall(b"ping")
                reply = sock.recv(2048)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(1.0)
                sock.sendto(b"ping", target)
                reply = sock.recv(2048)
    except OSError as exc:
        return False, f"error {type(exc).__name__}: {exc}"
    return reply == proto.encode() + b":ping", reply.decode(errors="replace")


@needs_netns
def test_fabric_layout(fabric: Fabric) -> None:
    assert fabric.subnet.prefixlen == 24 and fabric.subnet.subnet_of(FABRIC_BLOCK)
    assert fabric.root_address == str(fabric.subnet.network_address + 1)
    assert [fabric.site_address(i) for i in range(3)] == [str(fabric.subnet.network_address + 10 + i)
                                                          for i in range(3)]
    names = set(list_namespaces())
    assert {fabric.namespace(i) for i in range(3)} | {fabric.names.hub} <= names
    assert fabric.exec_prefix(2) == ["ip", "netns", "exec", fabric.namespace(2)]
    for bad in (3, -1):
        with pytest.raises(IndexError):
            fabric.site_address(bad)
    # Only the fabric's own root link routes its /24 in the root namespace.
    routes = run_ip(["-4", "route", "show", "table", "all"])
    assert any(net.overlaps(fabric.subnet) for net in parse_routes(routes))
    assert not any(net.overlaps(fabric.subnet) for net in parse_routes(routes, exclude_dev=fabric.root_interface))
    site_links = run_ip(["-o", "addr", "show", "dev", "eth0"], netns=fabric.namespace(1))
    assert f"{fabric.site_address(1)}/24" in site_links


@needs_netns
@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_site_server_answers_other_site_and_root(
        fabric: Fabric, scripts: dict[str, Path], servers: dict[str, tuple[str, int]], proto: str) -> None:
    ok, said = from_site(fabric, scripts, 1, proto, servers["s0"])
    assert ok, f"site 1 -> site 0 over {proto}: {said}"
    assert said == f"{proto}:ping"
    ok, said = from_root(proto, servers["s0"])
    assert ok, f"root -> site 0 over {proto}: {said}"
    ok, said = from_site(fabric, scripts, 2, proto, servers["root"])
    assert ok, f"site 2 -> root over {proto}: {said}"


@needs_netns
def test_partition_cuts_both_ways_and_heal_restores(
        fabric: Fabric, scripts: dict[str, Path], servers: dict[str, tuple[str, int]]) -> None:
    assert from_site(fabric, scripts, 2, "tcp", servers["s0"])[0], "0<->2 must work before the cut"
    try:
        fabric.partition({0}, [2])
        assert fabric.cuts == {frozenset({0, 2})}
        for site, target in ((2, "s0"), (0, "s2")):
            for proto in ("tcp", "udp"):
                started = time.monotonic()
                ok, said = from_site(fabric, scripts, site, proto, servers[target])
                assert not ok and said.startswith("error"), f"{site} -> {target} over {proto} got through: {said}"
                assert time.monotonic() - started < 5.0, f"{site} -> {target} took too long to fail"
        for site, target in ((1, "s0"), (0, "s1"), (1, "s2"), (2, "s1")):
            ok, said = from_site(fabric, scripts, site, "tcp", servers[target])
            assert ok, f"site {site} -> {target} must survive the 0|2 cut: {said}"
        for target in ("s0", "s2"):
            ok, said = from_root("tcp", servers[target])
            assert ok, f"root -> {target} must survive the cut: {said}"
        ok, said = from_site(fabric, scripts, 2, "tcp", servers["root"])
        assert ok, f"site 2 -> root must survive the cut: {said}"

        fabric.heal()
        assert fabric.cuts == set()
        for site, target in ((2, "s0"), (0, "s2")):
            poll_until(functools.partial(from_site, fabric, scripts, site, "tcp", servers[target]),
                       lambda result: result[0], what=f"site {site} -> {target} after heal", timeout=5.0)
        assert run_ip(["route", "show", "type", "prohibit"], netns=fabric.namespace(0)).strip() == ""
    finally:
        fabric.heal()


@needs_netns
def test_partition_rejects_overlap_and_heal_without_cuts_is_harmless(fabric: Fabric) -> None:
    with pytest.raises(ValueError, match="both sides"):
        fabric.partition({0, 1}, {1, 2})
    with pytest.raises(IndexError):
        fabric.partition({0}, {7})
    assert fabric.cuts == set()
    fabric.heal()
    assert fabric.cuts == set()


@needs_netns
def test_ip_failures_raise_fabric_error_with_stderr() -> None:
    with pytest.raises(FabricError) as caught:
        run_ip(["link", "del", "agcnosuchdev0"])
    assert caught.value.command == ["ip", "link", "del", "agcnosuchdev0"]
    assert "Cannot find device" in caught.value.stderr
    assert run_ip(["link", "del", "agcnosuchdev0"], missing_ok=True) == ""


def _leftovers(names: netns.FabricNames) -> tuple[set[str], bool]:
    """Which of a fabric's namespaces still exist, and whether its root link does."""
    present = set(names.namespaces()) & set(list_namespaces())
    links = run_ip(["-o", "link", "show"])
    return present, f" {names.root_if}:" in links or f" {names.root_if}@" in links


@needs_netns
def test_close_kills_processes_and_leaves_nothing() -> None:
    fab = Fabric.create("close", 2)
    proc = subprocess.Popen([*fab.exec_prefix(1), *PY, "-c", "import time; time.sleep(60)"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        poll_until(lambda: netns.namespace_pids(fab.namespace(1)), lambda pids: proc.pid in pids,
                   what="the sleeper to be inside site 1", timeout=5.0)
        assert _leftovers(fab.names) == (set(fab.names.namespaces()), True)
        fab.close()
        assert proc.wait(timeout=5) is not None
        assert _leftovers(fab.names) == (set(), False)
        fab.close()  # idempotent
        assert fab.closed
        with pytest.raises(FabricError, match="closed"):
            fab.partition({0}, {1})
    finally:
        _stop(proc)
        fab.close()


CHILD = """
import json, os, sys
from harness.netns import Fabric
fab = Fabric.create("child", 2)
n = fab.names
print(json.dumps({"hub": n.hub, "sites": n.sites, "root_if": n.root_if}), flush=True)
sys.stdin.readline()
sys.exit(0)
"""


def _child_with_fabric() -> tuple[subprocess.Popen[str], netns.FabricNames]:
    """A child process that has built a fabric and waits for a line on stdin before exiting normally."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        data = json.loads(_read_line(proc, 10.0))
    except BaseException:
        _stop(proc)
        raise
    names = netns.FabricNames(hub=data["hub"], sites=tuple(data["sites"]), bridge="", root_if=data["root_if"],
                              hub_root_if="", hub_site_ifs=())
    return proc, names


def _remove_by_hand(names: netns.FabricNames) -> None:
    run_ip(["link", "del", names.root_if], missing_ok=True)
    for namespace in names.namespaces():
        run_ip(["netns", "del", namespace], missing_ok=True)


@needs_netns
def test_exit_without_close_cleans_up_through_atexit() -> None:
    proc, names = _child_with_fabric()
    try:
        assert _leftovers(names) == (set(names.namespaces()), True)
        assert proc.stdin is not None
        proc.stdin.write("exit\n")
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
        assert _leftovers(names) == (set(), False)
    finally:
        _stop(proc)
        _remove_by_hand(names)


@needs_netns
def test_cleanup_stale_removes_fabric_of_killed_owner() -> None:
    proc, names = _child_with_fabric()
    try:
        assert _leftovers(names) == (set(names.namespaces()), True)
        proc.kill()  # no atexit: the fabric outlives its owner
        proc.wait(timeout=5)
        cleanup_stale()  # (a parallel worker creating a fabric may sweep it first; the end state is the same)
        assert _leftovers(names)[0] == set()
        # The hub's end of the root link goes when the kernel frees the hub, which happens asynchronously.
        poll_until(lambda: _leftovers(names), lambda left: left == (set(), False),
                   what="the dead owner's root link to disappear", timeout=5.0)
    finally:
        _stop(proc)
        _remove_by_hand(names)


@needs_netns
def test_cleanup_stale_only_touches_dead_owners() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    dead = f"{NAMESPACE_PREFIX}{pid_max + 1}-fake00-s0"  # a pid above pid_max can never be running
    alive = f"{NAMESPACE_PREFIX}{os.getppid()}-fake00-s0"
    foreign = "agnctest-other"
    created: list[str] = []
    try:
        for name in (dead, alive, foreign):
            run_ip(["netns", "add", name])
            created.append(name)
        removed = cleanup_stale()
        assert alive not in removed and foreign not in removed
        assert all(stale_owner(name) is not None for name in removed)
        present = set(list_namespaces())
        assert dead not in present and alive in present and foreign in present
    finally:
        for name in created:
            run_ip(["netns", "del", name], missing_ok=True)
