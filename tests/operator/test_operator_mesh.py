"""Three `agn-operator run --mesh-*` processes gossiping over loopback UDP, and the mesh flags' validation.

A learns C's provider through B, keeps it out of its overlay until an admin pins C's gateway certificate
(checked against a real TLS listener standing in for C's provider gateway), renders it once the site is
Active, marks it stale when C is killed and drops it after staleCandidateTtlSeconds. A SIGTERM leaves the
mesh gracefully.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trustme
import yaml

from harness.process import ManagedProcess, Supervisor
from harness.resources import gateway_ref, grid_network, inference_provider
from harness.waiting import WaitTimeout, poll_until
from reference.operator.cli import main
from reference.operator.mesh.sites import API_VERSION, discovered_site_k8s_name
from reference.operator.sinks import DirSink

ROOT = Path(__file__).resolve().parents[2]
NET = "mesh-net"
HOSTS = {"site-a": "127.0.0.21", "site-b": "127.0.0.22", "site-c": "127.0.0.23"}
SWIM = ["--swim-probe-interval", "0.5", "--swim-probe-timeout", "0.2", "--swim-suspicion-mult", "3"]
DEADLINE = 25.0
T = TypeVar("T")


def free_udp_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def tls_listener(host: str) -> Iterator[tuple[str, str]]:
    """A TLS server on loopback that completes handshakes and hangs up; yields (address, certificate pin)."""
    leaf = trustme.CA().issue_cert("gateway.site-c.test")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    leaf.configure_cert(context)
    pin = hashlib.sha256(ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())).hexdigest()
    server = socket.create_server((host, 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2.0)
                context.wrap_socket(conn, server_side=True).close()

    thread = threading.Thread(target=serve, name="tls-listener", daemon=True)
    thread.start()
    try:
        yield f"{host}:{server.getsockname()[1]}", pin
    finally:
        stop.set()
        thread.join(5)
        server.close()


def write_site(manifests: Path, site: str) -> None:
    """A GridNetwork served by `site` (stale TTL 2 s) and one provider hosted there."""
    manifests.mkdir(parents=True, exist_ok=True)
    short = site.removeprefix("site-")
    docs = [
        grid_network(NET, [gateway_ref(site)], staleCandidateTtlSeconds=2),
        inference_provider(f"prov-{short}", NET, site=site, cluster=f"local-{short}", models=[f"model-{short}"]),
    ]
    (manifests / "grid.yaml").write_text(yaml.safe_dump_all(docs))


def pin_site(site: str, pin: str) -> dict[str, Any]:
    name = discovered_site_k8s_name(NET, site)
    spec = {"gridNetworkRef": NET, "trust": {"canonicalFingerprints": [pin]}}
    return {"apiVersion": API_VERSION, "kind": "GridSite", "metadata": {"name": name}, "spec": spec}


def read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def candidates(out: Path) -> list[dict[str, Any]] | None:
    """The overlay candidates A's gateway would load, or None before the first ConfigMap."""
    configmaps = sorted(out.glob("*.configmap.yaml"))
    doc = read_yaml(configmaps[0]) if configmaps else None
    if not isinstance(doc, dict):
        return None
    return list(json.loads(doc["data"]["routing-overlay.json"])["overlay"]["candidates"])


def model(out: Path, name: str) -> list[tuple[Any, ...]]:
    return [(c["site"], c["cluster"], c["fresh"]) for c in candidates(out) or [] if c["name"] == name]


def member_status(out: Path, name: str) -> str | None:
    doc = read_yaml(out / "mesh.state.yaml") or {}
    return next((m["status"] for m in doc.get("members") or [] if m["name"] == name), None)


def test_three_operators_gossip_gate_on_pins_and_age_out_a_dead_site(tmp_path: Path) -> None:
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    supervisor = Supervisor(tmp_path / "logs")
    procs: dict[str, ManagedProcess] = {}

    def wait(probe: Callable[[], T], done: Callable[[T], bool], what: str) -> T:
        try:
            return poll_until(probe, done, what=what, timeout=DEADLINE)
        except WaitTimeout as exc:
            logs = "\n".join(f"--- {n}\n{p.log_tail(25)}" for n, p in procs.items())
            raise AssertionError(f"{exc}\n{logs}") from None

    try:
        with tls_listener(HOSTS["site-c"]) as (gateway, pin):
            ports = {site: free_udp_port(host) for site, host in HOSTS.items()}
            seeds = {"site-a": "", "site-b": "site-a", "site-c": "site-b"}
            for site, host in HOSTS.items():
                write_site(tmp_path / site / "manifests", site)
                argv = [
                    sys.executable,
                    "-m",
                    "reference.operator",
                    "run",
                    "--manifests",
                    str(tmp_path / site / "manifests"),
                    "--out",
                    str(tmp_path / site / "out"),
                    "--poll",
                    "0.2",
                    "--mesh-site",
                    site,
                    "--mesh-bind",
                    f"{host}:{ports[site]}",
                    "--mesh-seeds",
                    f"{HOSTS[seeds[site]]}:{ports[seeds[site]]}" if seeds[site] else "",
                    *SWIM,
                ]
                if site == "site-c":
                    argv += ["--mesh-gateway", gateway, "--mesh-routing-cluster", "c-route"]
                procs[site] = supervisor.start(site, argv, env=env)
            out_a = tmp_path / "site-a" / "out"
            gridsite = out_a / f"{discovered_site_k8s_name(NET, 'site-c')}.gridsite.yaml"

            status = wait(
                lambda: read_yaml(out_a / "mesh.state.yaml") or {},
                lambda doc: (
                    {(r["site"], r["provider"]) for r in doc.get("records") or []}
                    >= {("site-a", "prov-a"), ("site-b", "prov-b"), ("site-c", "prov-c")}
                ),
                "A's merged view to hold every site's record",
            )
            c_record = next(r for r in status["records"] if r["site"] == "site-c")
            # prov-c declares clusterName local-c: its record names that, not the site's routing cluster
            assert (c_record["cluster"], c_record["writer"], c_record["models"]) == ("local-c", "site-c", ["model-c"])
            site_c = wait(
                lambda: read_yaml(gridsite) or {},
                lambda doc: (doc.get("status") or {}).get("reason") == "TrustMaterialMissing",
                "A's GridSite for C to wait for pins",
            )
            assert site_c["status"]["phase"] == "Connecting"
            assert site_c["spec"] == {"gridNetworkRef": NET, "gatewayEndpoint": {"address": gateway}}
            assert site_c["metadata"]["labels"]["grid.praxis.fast/auto-discovered"] == "true"
            assert model(out_a, "model-a") and model(out_a, "model-c") == [], "no candidate before the pin"

            (tmp_path / "site-a" / "manifests" / "pin.yaml").write_text(yaml.safe_dump(pin_site("site-c", pin)))
            wait(lambda: model(out_a, "model-c"), lambda rows: rows == [("site-c", "local-c", True)], "C rendered")
            wait(
                lambda: (read_yaml(gridsite) or {}).get("status") or {}, lambda s: s.get("phase") == "Active", "Active"
            )
            assert model(out_a, "model-b") == [], "B was never pinned"

            os.killpg(procs["site-c"].pid, signal.SIGKILL)
            wait(lambda: model(out_a, "model-c"), lambda rows: rows == [("site-c", "local-c", False)], "C stale")
            wait(lambda: model(out_a, "model-c"), lambda rows: rows == [], "C dropped after the stale TTL")
            reason = (read_yaml(gridsite) or {})["status"]
            assert reason["phase"] == "Active" and reason["reason"] in ("MemberSuspect", "MemberDead")

            assert supervisor.stop(procs.pop("site-b"), grace=10) == 0, "SIGTERM exits 0"
            wait(lambda: member_status(out_a, "site-b"), lambda s: s == "left", "B to be seen leaving")
            wait(lambda: member_status(out_a, "site-c"), lambda s: s == "dead", "C to be seen dead")
    finally:
        supervisor.stop_all()


# --- flag validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--mesh-bind", "127.0.0.1:0"], "--mesh-bind: needs --mesh-site"),
        (["--swim-probe-interval", "1"], "--swim-probe-interval: needs --mesh-site"),
        (["--mesh-site", "site-a"], "--mesh-bind: required"),
        (["--mesh-site", "a b", "--mesh-bind", "127.0.0.1:0"], "--mesh-site"),
        (["--mesh-site", "site-a", "--mesh-bind", "no-port"], "--mesh-bind"),
        (["--mesh-site", "site-a", "--mesh-bind", "127.0.0.1:70000"], "--mesh-bind"),
        (["--mesh-advertise", "127.0.0.1:7946"], "--mesh-advertise: needs --mesh-site"),
        (["--mesh-site", "site-a", "--mesh-bind", "0.0.0.0:0"], "--mesh-advertise: required when --mesh-bind"),
        (["--mesh-site", "site-a", "--mesh-bind", "[::]:7946"], "--mesh-advertise: required when --mesh-bind"),
        (["--mesh-advertise", "no-port"], "--mesh-advertise"),
        (["--mesh-advertise", "0.0.0.0:30946"], "--mesh-advertise"),
        (["--mesh-advertise", "127.0.0.1:0"], "--mesh-advertise"),
        (["--mesh-seeds", "127.0.0.1:0"], "--mesh-seeds"),
        (["--mesh-seeds", "127.0.0.1:7946,nonsense"], "--mesh-seeds"),
        (["--mesh-gateway", "gateway-without-port"], "--mesh-gateway"),
        (["--mesh-routing-cluster", ""], "--mesh-routing-cluster"),
        (["--mesh-client-cert", "cert.pem"], "--mesh-client-key"),
        (["--mesh-client-key", "key.pem"], "--mesh-client-cert"),
        (["--mesh-client-cert", "missing.pem", "--mesh-client-key", "missing.pem"], "--mesh-client-cert"),
        (["--swim-probe-interval", "0"], "--swim-probe-interval"),
        (["--swim-probe-interval", "-1"], "--swim-probe-interval"),
        (["--swim-probe-interval", "nan"], "--swim-probe-interval"),
        (["--swim-probe-interval", "soon"], "--swim-probe-interval"),
        (["--swim-probe-timeout", "0"], "--swim-probe-timeout"),
        (["--swim-probe-interval", "0.5", "--swim-probe-timeout", "0.5"], "--swim-probe-timeout"),
        (["--swim-suspicion-mult", "0"], "--swim-suspicion-mult"),
        (["--swim-suspicion-mult", "1.5"], "--swim-suspicion-mult"),
    ],
)
def test_bad_mesh_flags_exit_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    needs_site = flags[0] != "--mesh-site" and "needs --mesh-site" not in named
    site = ["--mesh-site", "site-a", "--mesh-bind", "127.0.0.1:0"] if needs_site else []
    argv = ["run", "--manifests", str(tmp_path), "--out", str(tmp_path / "out"), "--once", *site, *flags]
    with contextlib.chdir(tmp_path):
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert named in err, err


def test_busy_mesh_port_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        argv = ["run", "--manifests", str(tmp_path), "--out", str(tmp_path / "out"), "--once"]
        code = main([*argv, "--mesh-site", "site-a", "--mesh-bind", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == 2 and "--mesh-bind" in err and "cannot bind" in err, err


# --- dir sink files -----------------------------------------------------------------------------


def _gridsite(name: str, phase: str, probed: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GridSite",
        "metadata": {"name": name},
        "spec": {"gridNetworkRef": NET},
        "status": {"phase": phase, "reason": "R", "message": "m", "lastProbeTime": probed},
    }


def test_dir_sink_writes_gridsites_and_mesh_status_only_on_change(tmp_path: Path) -> None:
    sink = DirSink(tmp_path)
    (tmp_path / "old-site.gridsite.yaml").write_text("stale: true\n")
    assert sink.write_gridsites({"net-c": _gridsite("net-c", "Connecting", "t1")}) == ["net-c", "old-site"]
    path = tmp_path / "net-c.gridsite.yaml"
    inode = path.stat().st_ino
    assert not (tmp_path / "old-site.gridsite.yaml").exists()
    assert sink.write_gridsites({"net-c": _gridsite("net-c", "Connecting", "t2")}) == [], "probe time alone"
    assert path.stat().st_ino == inode
    assert sink.write_gridsites({"net-c": _gridsite("net-c", "Active", "t3")}) == ["net-c"]
    assert yaml.safe_load(path.read_text())["status"] == {
        "phase": "Active",
        "reason": "R",
        "message": "m",
        "lastProbeTime": "t3",
    }
    assert sink.write_gridsites({}) == ["net-c"] and not path.exists()
    document = {"site": "site-a", "address": "127.0.0.1:1", "members": [], "records": []}
    assert sink.write_mesh_status(document)
    assert not sink.write_mesh_status(dict(document))
    assert sink.write_mesh_status({**document, "members": [{"name": "site-b"}]})
    assert yaml.safe_load((tmp_path / "mesh.state.yaml").read_text())["members"] == [{"name": "site-b"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mesh.state.yaml"], "no temporary files left"
