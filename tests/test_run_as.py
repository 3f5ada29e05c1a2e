"""Gateways that run as another user: descriptor values, the files that user gets, the process switch, the
root-refusal hint, and the reference gateways serving a two-site hop as nobody."""

from __future__ import annotations

import os
import pwd
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import contract
from harness.addresses import AddressPlan
from harness.backends.local import GatewayStartFailed, LocalBackend
from harness.gateway_config import CredentialRef, ProviderRoute, TrustedPeer
from harness.grid import Grid
from harness.impl import ImplDescriptor, parse_impl
from harness.pki import GridPKI
from harness.process import Supervisor
from harness.projection import project
from harness.run_as import RunAs, config_files, grant_gateway_files, parse_run_as, refuses_root
from harness.topology import load_topology
from harness.waiting import poll_until

REPO = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason=f"switching users needs root (running as uid {os.geteuid()})")
#: An unprivileged identity that is neither the gateway's user nor in its group.
STRANGER = (54321, 54321)
CREDENTIAL = CredentialRef("run-as-token", "grid-site-b", "token")


def _impl(gateway: dict[str, Any], features: tuple[str, ...] = ()) -> ImplDescriptor:
    return parse_impl({"implementation": {"organization": "o", "project": "p", "version": "1", "contact": []},
                       "gateway": gateway, "features": list(features)})


def _as(identity: tuple[int, int], *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(argv), user=identity[0], group=identity[1], extra_groups=[], capture_output=True,
                          cwd="/", timeout=30, check=False)


def _reads(identity: tuple[int, int], path: Path) -> bool:
    return _as(identity, "cat", str(path)).returncode == 0


def _lists(identity: tuple[int, int], path: Path) -> bool:
    return _as(identity, "ls", str(path)).returncode == 0


def _ids(pid: int) -> tuple[int, int, str]:
    """(real uid, real gid, supplementary groups) of a running process."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["Uid"].split()[0]), int(fields["Gid"].split()[0]), fields["Groups"].strip()


def _group_members(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat_fields[2]) == pgid and stat_fields[0] != "Z":
                found.append(int(entry.name))
    return found


@pytest.fixture
def nobody() -> RunAs:
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no user nobody")
    return parse_run_as("nobody")


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A run work directory (0700) below the system temp directory, which any user may pass."""
    path = Path(tempfile.mkdtemp(prefix="agn-run-as-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _python_for(user: RunAs) -> tuple[str, dict[str, str]] | None:
    """An interpreter `user` may run that imports the reference gateway: this one, else a system one of the
    same version with this environment's packages on PYTHONPATH (this one may live in root's home)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    paths = os.pathsep.join([str(REPO), *site.getsitepackages()])
    candidates: list[tuple[str, dict[str, str]]] = [(sys.executable, {})] + [(exe, {"PYTHONPATH": paths}) for exe in
                                           (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}")
                                           if exe != sys.executable and os.path.exists(exe)]
    for exe, env in candidates:
        try:
            probe = subprocess.run([exe, "-c", "import reference.gateway.cli"], user=user.uid, group=user.gid,
                                   extra_groups=[], cwd="/", env={**os.environ, **env}, capture_output=True,
                                   timeout=60, check=False)
        except OSError:
            continue
        if probe.returncode == 0:
            return exe, env
    return None


# ------------------------------------------------------------------------------------------ pure helpers


def test_config_files_sorts_public_and_private_files() -> None:
    text = """
listeners:
  - name: proxy
    tls:
      certificates: [{cert_path: /p/server.pem, key_path: /p/server.key}]
      client_ca: {ca_path: /p/ca.pem}
clusters:
  - name: hop
    tls: {ca: {ca_path: /p/ca.pem}, client_cert: {cert_path: /p/client.pem, key_path: /p/client.key}}
filter_chains:
  - filters:
      - filter: credential_inject
        credentials: [{name: t, file: /c/gw/t/token}, {name: u, env_var: X}]
      - filter: intelligent_route
        overlay_file: /w/overlay/routing-overlay.json
"""
    public, private = config_files(text)
    assert public == [Path("/p/server.pem"), Path("/p/ca.pem"), Path("/p/client.pem")]
    assert private == [Path("/p/server.key"), Path("/p/client.key"), Path("/c/gw/t/token")]
    assert config_files("listeners: [") == ([], [])


@pytest.mark.parametrize("line", [
    "error: refusing to run as root; set insecure_options.allow_root to override",
    "FATAL running as root is not allowed",
    "praxis: root user detected, exiting (insecure_options.allow_root=false)",
    "Will not run as uid 0",
])
def test_root_refusals_are_recognised(line: str) -> None:
    assert refuses_root(f"starting\n{line}\n")


@pytest.mark.parametrize("log", ["listening on 127.0.0.1:1\nbind: address in use",
                                 "root cluster missing\nconfig: refused by schema",  # not one line
                                 ""])
def test_other_failures_are_not_root_refusals(log: str) -> None:
    assert not refuses_root(log)


def test_run_as_applies_to_the_local_backend_of_a_root_harness(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    from types import SimpleNamespace

    from harness.backends.kube.backend import KubeBackend
    from harness.backends.local import LocalBackend
    from harness.topology import load_topology

    monkeypatch.setattr("harness.run_as.os.geteuid", lambda: 0)
    monkeypatch.setattr("harness.run_as.os.getegid", lambda: 0)
    user = parse_run_as("4242:4242")
    impl = SimpleNamespace(gateway=SimpleNamespace(run_as=user))

    def local(impl: object) -> LocalBackend:
        return LocalBackend(tmp_path, None, None, impl)  # type: ignore[arg-type]

    assert local(impl).gateway_user() == user
    kube = KubeBackend(tmp_path / "kube", load_topology("single-site"), impl)
    assert kube.gateway_user() is None  # pods: run_as is not applied
    assert local(SimpleNamespace(gateway=SimpleNamespace())).gateway_user() is None
    monkeypatch.setattr("harness.run_as.os.geteuid", lambda: 4242)
    assert local(impl).gateway_user() is None  # already that user


# ------------------------------------------------------------------------------------------ root refusal


_REFUSER = ["/bin/sh", "-c", "echo 'praxis: refusing to run as root (set insecure_options.allow_root)' >&2; exit 1",
            "fake-gateway", "{config}"]


def _start_fake(tmp_path: Path, command: list[str], monkeypatch: pytest.MonkeyPatch) -> GatewayStartFailed:
    if not IS_ROOT:  # the hint is about a harness running as root
        monkeypatch.setattr(os, "geteuid", lambda: 0)
    backend = LocalBackend(tmp_path, Supervisor(tmp_path / "logs"), AddressPlan(), _impl({"command": command}))
    workdir = tmp_path / "gateway-1"
    workdir.mkdir()
    try:
        with pytest.raises(GatewayStartFailed) as caught:
            backend.start_gateway("gw", "127.0.0.1:9", "127.0.0.1:9", workdir, "listeners: []\n", workdir)
    finally:
        backend.supervisor.stop_all()
        backend.plan.close()
    assert not backend.supervisor.processes
    return caught.value


def test_a_gateway_refusing_root_names_run_as(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failure = _start_fake(tmp_path, _REFUSER, monkeypatch)
    message = str(failure)
    assert failure.exit_code == 1
    assert "set `gateway.run_as` in the implementation descriptor (for example `run_as: nobody`)" in message
    assert message.index("gateway.run_as") < message.index("--- gateway log (tail) ---")
    assert "refusing to run as root" in failure.log_tail


def test_other_startup_failures_name_no_run_as(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    command = ["/bin/sh", "-c", "echo 'config: unknown key listeners' >&2; exit 2", "fake-gateway", "{config}"]
    failure = _start_fake(tmp_path, command, monkeypatch)
    assert failure.exit_code == 2 and "run_as" not in str(failure)


@needs_root
def test_a_command_the_user_cannot_run_fails_naming_the_user(run_dir: Path, nobody: RunAs) -> None:
    command = run_dir / "private" / "gateway"
    command.parent.mkdir(mode=0o700)
    command.write_text("#!/bin/sh\nexit 0\n")
    command.chmod(0o700)
    impl = _impl({"command": [str(command), "{config}"], "run_as": "nobody"})
    backend = LocalBackend(run_dir, Supervisor(run_dir / "logs"), AddressPlan(), impl)
    workdir = run_dir / "gateway-1"
    workdir.mkdir()
    try:
        with pytest.raises(GatewayStartFailed, match=r"could not be started as nobody \(uid \d+, gid \d+\): "
                                                     r".*Permission denied"):
            backend.start_gateway("gw", "127.0.0.1:9", "127.0.0.1:9", workdir, "listeners: []\n", workdir)
    finally:
        backend.supervisor.stop_all()
        backend.plan.close()
    assert not backend.supervisor.processes
    assert stat.S_IMODE(command.parent.stat().st_mode) == 0o700  # the command's own directory is not opened


# ------------------------------------------------------------------------------------------ processes


@needs_root
def test_a_process_runs_as_the_user_and_stops_with_its_group(tmp_path: Path, nobody: RunAs) -> None:
    supervisor = Supervisor(tmp_path / "logs")
    proc = supervisor.start("sleepers", ["/bin/sh", "-c", "sleep 300 & echo started; exec sleep 300"],
                            cwd=Path("/"), run_as=nobody)
    try:
        poll_until(proc.log_text, lambda text: "started" in text, what="the sleepers to start", timeout=10)
        assert _ids(proc.pid) == (nobody.uid, nobody.gid, "")
        members = poll_until(lambda: _group_members(proc.pid), lambda pids: len(pids) == 2,
                             what="two processes in the group", timeout=10)
        assert all(_ids(pid)[0] == nobody.uid for pid in members)
    finally:
        supervisor.stop_all()
    assert not proc.running() and proc.returncode is not None
    poll_until(lambda: _group_members(proc.pid), lambda pids: pids == [], what="the group to be gone", timeout=10)


@needs_root
def test_the_parent_death_signal_survives_the_switch(tmp_path: Path, nobody: RunAs) -> None:
    found = _python_for(nobody)
    if found is None:
        pytest.skip("no Python interpreter that nobody may run")
    exe, env = found
    script = ("import ctypes, os; v = ctypes.c_int(); ctypes.CDLL('libc.so.6').prctl(2, ctypes.byref(v)); "
              "print('ids', os.getuid(), os.getgid(), os.getgroups(), v.value)")
    supervisor = Supervisor(tmp_path / "logs")
    proc = supervisor.start("probe", [exe, "-c", script], env=env, cwd=Path("/"), run_as=nobody)
    try:
        assert proc.wait(30) == 0, proc.log_text()
    finally:
        supervisor.stop_all()
    assert f"ids {nobody.uid} {nobody.gid} [] 9" in proc.log_text()  # SIGKILL when the harness dies


@needs_root
def test_the_switch_command_execs_as_the_user(nobody: RunAs) -> None:
    """What runs behind `ip netns exec` in network namespaces."""
    from harness.run_as import switch_argv

    argv = switch_argv(nobody, ["/bin/sh", "-c", "echo $(id -u) $(id -g) $(id -G)"])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(nobody.uid), str(nobody.gid), str(nobody.gid)]
    missing = subprocess.run(switch_argv(nobody, ["/nonexistent/gateway"]), capture_output=True, text=True,
                             timeout=60, check=False, cwd=REPO)
    assert missing.returncode == 127 and "cannot run /nonexistent/gateway" in missing.stderr


# ------------------------------------------------------------------------------------------ file access


@needs_root
def test_the_gateway_user_gets_its_files_and_nothing_else(run_dir: Path, nobody: RunAs) -> None:
    me = (nobody.uid, nobody.gid)
    pki = GridPKI(run_dir / "pki")
    server = pki.server("gateway-1-provider", "127.0.0.1")
    other = pki.server("metrics-site-a", "127.0.0.1")
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "operator.log").write_text("operator log\n")
    workdir, sibling = run_dir / "gateway-1", run_dir / "gateway-2"
    for directory in (workdir, sibling):
        directory.mkdir()
        (directory / "praxis.yaml").write_text("listeners: []\n")
    credential = run_dir / "credentials" / "gateway-1" / "tok" / "token"
    foreign_credential = run_dir / "credentials" / "gateway-2" / "tok" / "token"
    for path in (credential, foreign_credential):
        path.parent.mkdir(parents=True)
        path.write_text("s3cret\n")
        path.chmod(0o600)
    overlay_dir = workdir / "overlay"
    project(overlay_dir, {"routing-overlay.json": b"{}"})

    grant_gateway_files(nobody, run_dir=run_dir, workdir=workdir, config=workdir / "praxis.yaml",
                        overlay_dir=overlay_dir, public=[server.cert, pki.ca_path, run_dir / "missing.pem"],
                        private=[server.key, credential])  # a missing file is the gateway's to report

    for path in (workdir / "praxis.yaml", overlay_dir / "routing-overlay.json", server.cert, pki.ca_path,
                 server.key, credential):
        assert _reads(me, path), path
    for path in (server.key, credential):
        st = path.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (nobody.uid, nobody.gid, 0o600), path
        assert not _reads(STRANGER, path), path
    for path in (other.key, sibling / "praxis.yaml", foreign_credential, run_dir / "logs" / "operator.log"):
        assert not _reads(me, path), path
    assert _lists(me, overlay_dir) and not _lists(me, run_dir) and not _lists(me, run_dir / "pki")
    assert not _reads(STRANGER, workdir / "praxis.yaml")
    assert stat.S_IMODE(run_dir.stat().st_mode) & 0o004 == 0  # searchable, never listable

    # its own work directory is writable to it, and what the harness put there stays the harness's
    assert _as(me, "touch", str(workdir / "scratch")).returncode == 0
    assert _as(me, "rm", "-f", str(workdir / "praxis.yaml")).returncode != 0
    assert _as(me, "mv", str(overlay_dir), str(workdir / "elsewhere")).returncode != 0

    # an overlay swapped in later (a new ..data directory) is readable too, whatever the umask
    old = os.umask(0o077)
    try:
        project(overlay_dir, {"routing-overlay.json": b'{"next": 1}'})
    finally:
        os.umask(old)
    assert _as(me, "cat", str(overlay_dir / "routing-overlay.json")).stdout == b'{"next": 1}'
    # and a key made later beside its own stays closed to it
    later = pki.server("metrics-site-b", "127.0.0.1")
    assert not _reads(me, later.key)


# ------------------------------------------------------------------------------------------ end to end


@needs_root
def test_reference_gateways_serve_a_hop_as_nobody(run_dir: Path, nobody: RunAs) -> None:
    found = _python_for(nobody)
    if found is None:
        pytest.skip(f"no Python interpreter that {nobody} may run imports the reference gateway "
                    f"({sys.executable} or a system python{sys.version_info.major}.{sys.version_info.minor})")
    exe, env = found
    python = "{python}" if exe == sys.executable else exe
    # warm-started as the reference descriptor does: the launcher runs as nobody too
    command = [python, "-m", "reference.warm_start", "run", "{launcher}", "-m", "reference.gateway", "-c", "{config}"]
    launcher = {"command": [python, "-m", "reference.warm_start", "serve", "{socket}",
                            "--preload", "reference.gateway.cli"], "env": env}
    impl = _impl({"command": command, "env": env, "run_as": "nobody", "launcher": launcher})
    assert impl.gateway.run_as == nobody
    plan = AddressPlan()
    backend = LocalBackend(run_dir, Supervisor(run_dir / "logs"), plan, impl)
    grid = Grid(load_topology("two-site"), backend, impl.features)
    try:
        grid.start()
        a, b = grid.site("site-a"), grid.site("site-b")
        model = "run-as-model"

        # a consumer gateway with an overlay, then a hot reload through a new ..data directory
        first = a.envelope([a.candidate("local-a", model)])
        edge = a.start_gateway("core", contract.encode(first))
        assert _ids(edge.proc.process.pid) == (nobody.uid, nobody.gid, "")
        assert "warm start unavailable" not in edge.proc.process.log_text(), edge.proc.process.log_text()
        launchers = [p for p in backend.supervisor.processes if p.name.startswith("gateway-launcher")]
        assert len(launchers) == 1 and _ids(launchers[0].pid) == (nobody.uid, nobody.gid, "")
        socket_dir = backend._launchers[None].parent
        edge.wait_serving(contract.revision_of(first), model)
        assert edge.request(model).status == 200
        second = a.envelope([a.candidate("local-a", model, stable_id="run-as-second")])
        assert edge.publish(second, model) == contract.revision_of(second)

        # a provider gateway with TLS files and a credential file, reached over mTLS by a hop consumer
        token = "agn-run-as-token-7c1e"
        route = ProviderRoute("run-as-cand", model, "model-b1", credential=CREDENTIAL)
        provider = b.start_provider_gateway(trusted_peers=[TrustedPeer(organization="ai-grid")], routes=[route],
                                            tokens={CREDENTIAL: token})
        assert _ids(provider.proc.process.pid)[0] == nobody.uid
        client = backend.pki.client("run-as-consumer")
        overlay = a.envelope([a.remote_candidate(provider, route)])
        hop = a.start_hop_consumer([provider], contract.encode(overlay), client)
        hop.wait_serving(contract.revision_of(overlay), model)
        reply = hop.request(model, headers={"authorization": "Bearer client"})
        assert reply.status == 200 and reply.forwarded_headers.get("authorization") == f"Bearer {token}"

        public, private = config_files(provider.proc.config_path.read_text())
        credential_file = grid.credentials_dir / provider.proc.config_path.parent.name / CREDENTIAL.name / "token"
        assert credential_file in private and any(p.suffix == ".key" for p in private) and public
        for path in private + config_files(hop.proc.config_path.read_text())[1]:
            st = path.stat()
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (nobody.uid, nobody.gid, 0o600), path
            assert not _reads(STRANGER, path), f"{path} must be readable by the gateway's user alone"
        for gateway in (edge, provider, hop):
            assert not _reads(STRANGER, gateway.proc.config_path)
        logs = sorted((run_dir / "logs").iterdir())
        assert logs and not any(_reads((nobody.uid, nobody.gid), log) for log in logs)

        pids = [gateway.proc.process.pid for gateway in (edge, provider, hop)]
        for gateway in (hop, provider, edge):
            assert (b if gateway is provider else a).stop_gateway(gateway) is not None
        for pid in pids:
            assert _group_members(pid) == [], f"gateway group {pid} left processes behind"
    finally:
        grid.close()
    assert not launchers[0].running() and not socket_dir.exists(), "the launcher or its socket directory was left"
