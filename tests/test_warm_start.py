"""reference.warm_start: a component forked from a warm server behaves as ``python -m MODULE`` would.

Every test runs real processes: the server, `run` clients, and a small module that reports what it sees
(argv, working directory, environment, parent) and then exits, waits for a signal, or kills itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.waiting import poll_until
from reference import warm_protocol, warm_server

REPO = Path(__file__).resolve().parents[1]

PROBE = '''
import json, os, signal, sys, time
mode = sys.argv[1] if len(sys.argv) > 1 else "exit"
if mode == "wait":  # before the report: the test signals as soon as it has read it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
                  "ppid": os.getppid(), "pid": os.getpid()}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if mode == "wait":
    time.sleep(60)
elif mode == "die":
    os.kill(os.getpid(), signal.SIGABRT)
elif mode == "raise":
    raise RuntimeError("probe failed")
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
'''


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    (tmp_path / "warm_probe.py").write_text(PROBE)
    return tmp_path


def _env(probe_dir: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(probe_dir), str(REPO)]), **extra}


@pytest.fixture
def server(probe_dir: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    path = probe_dir / "warm.sock"
    proc = subprocess.Popen([sys.executable, "-m", "reference.warm_start", "serve", str(path),
                             "--preload", "json"], env=_env(probe_dir), cwd=probe_dir)
    try:
        poll_until(lambda: path.exists() or proc.poll() is not None, bool, what="the warm server's socket",
                   timeout=20)
        assert proc.poll() is None, f"the warm server exited with {proc.returncode}"
        yield proc, path
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _client(path: Path, probe_dir: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "reference.warm_start", "run", str(path), "-m", "warm_probe", *args],
                            env=_env(probe_dir, **env), cwd=probe_dir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _report(out: bytes) -> dict[str, object]:
    return json.loads(out.decode().splitlines()[0])


def _waiting(path: Path, probe_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A client whose child has started and waits for SIGTERM (exit 7), and the child's pid."""
    client = _client(path, probe_dir, "wait")
    assert client.stdout is not None
    return client, int(str(_report(client.stdout.readline())["pid"]))


def test_a_warm_child_sees_what_a_cold_process_sees(server: tuple[subprocess.Popen[bytes], Path],
                                                    probe_dir: Path) -> None:
    proc, path = server
    warm = _client(path, probe_dir, "exit", "3", PROBE="warm")
    out, err = warm.communicate(timeout=30)
    cold = subprocess.run([sys.executable, "-m", "warm_probe", "exit", "3"], env=_env(probe_dir, PROBE="warm"),
                          cwd=probe_dir, capture_output=True, timeout=30, check=False)
    assert warm.returncode == cold.returncode == 3, (warm.returncode, cold.returncode, err)
    seen, expected = _report(out), _report(cold.stdout)
    assert seen["ppid"] == proc.pid, f"not forked from the server: {seen}"
    for key in ("argv", "cwd", "probe"):
        assert seen[key] == expected[key], (key, seen, expected)
    assert err.decode() == cold.stderr.decode() == "to stderr\n"


def test_an_exception_exits_1_with_its_traceback(server: tuple[subprocess.Popen[bytes], Path],
                                                 probe_dir: Path) -> None:
    _, path = server
    client = _client(path, probe_dir, "raise")
    _, err = client.communicate(timeout=30)
    assert client.returncode == 1 and "RuntimeError: probe failed" in err.decode(), err


def test_sigterm_reaches_the_child_and_its_status_comes_back(server: tuple[subprocess.Popen[bytes], Path],
                                                             probe_dir: Path) -> None:
    _, path = server
    client, _ = _waiting(path, probe_dir)
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == 7


def test_a_child_killed_by_a_signal_takes_the_client_with_it(server: tuple[subprocess.Popen[bytes], Path],
                                                             probe_dir: Path) -> None:
    _, path = server
    client = _client(path, probe_dir, "die")
    client.communicate(timeout=30)
    assert client.returncode == -signal.SIGABRT


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def test_killing_the_client_kills_the_child(server: tuple[subprocess.Popen[bytes], Path], probe_dir: Path) -> None:
    _, path = server
    client, child = _waiting(path, probe_dir)
    assert _alive(child)
    client.kill()
    client.wait(timeout=10)
    poll_until(lambda: _alive(child), lambda alive: not alive, what=f"child {child} to die with its client",
               timeout=10)


def test_a_refused_start_runs_cold_and_says_why(server: tuple[subprocess.Popen[bytes], Path],
                                                probe_dir: Path) -> None:
    proc, path = server
    client = subprocess.Popen([sys.executable, "-m", "reference.warm_start", "run", str(path), "-m", "warm_probe",
                               "exit", "4"], env={**_env(probe_dir), "PYTHONPATH": f"{probe_dir}{os.pathsep}{REPO}"
                                                                                  f"{os.pathsep}/nonexistent"},
                              cwd=probe_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = client.communicate(timeout=30)
    assert client.returncode == 4, err
    assert "PYTHONPATH differs" in err.decode() and _report(out)["ppid"] != proc.pid, (out, err)
    twin = _client(path, probe_dir, "exit", "4")  # the same start with the server's PYTHONPATH is warm
    out, err = twin.communicate(timeout=30)
    assert twin.returncode == 4 and _report(out)["ppid"] == proc.pid and b"warm start" not in err, err


def test_no_server_runs_cold(probe_dir: Path) -> None:
    client = _client(probe_dir / "absent.sock", probe_dir, "exit", "5")
    out, err = client.communicate(timeout=30)
    assert client.returncode == 5 and _report(out)["ppid"] == os.getpid(), (out, err)
    assert "warm start unavailable" in err.decode(), err


def test_the_server_refuses_what_it_cannot_start_as_asked(tmp_path: Path) -> None:
    server = warm_server.WarmServer(str(tmp_path / "s.sock"))
    try:
        good = {"argv": ["m"], "netns": warm_protocol.netns(), "python": sys.executable,
                "pythonpath": os.environ.get("PYTHONPATH", "")}
        assert server.refusal(good, os.geteuid(), [0, 1, 2]) is None
        assert "uid" in str(server.refusal(good, os.geteuid() + 1, [0, 1, 2]))
        assert "network namespace" in str(server.refusal({**good, "netns": -1}, os.geteuid(), [0, 1, 2]))
        assert "runs /other/python" in str(server.refusal({**good, "python": "/other/python"}, os.geteuid(), [0, 1, 2]))
        assert "descriptors" in str(server.refusal(good, os.geteuid(), [0]))
        assert "no module" in str(server.refusal({**good, "argv": []}, os.geteuid(), [0, 1, 2]))
    finally:
        server.listener.close()


def test_sigterm_stops_the_server_after_its_children(server: tuple[subprocess.Popen[bytes], Path],
                                                     probe_dir: Path) -> None:
    proc, path = server
    client, _ = _waiting(path, probe_dir)
    proc.send_signal(signal.SIGTERM)
    poll_until(path.exists, lambda exists: not exists, what="the socket to go", timeout=10)
    started = time.monotonic()
    assert proc.poll() is None, "the server left before its child ended"
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == 7
    assert proc.wait(timeout=10) == 0, f"server still up {time.monotonic() - started:.1f}s after its last child"
