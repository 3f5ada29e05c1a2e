"""The fork server the judges start their sessions from: exit codes, output, stopping, and no leftovers."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from selfcheck import judge
from selfcheck.forkserver import ForkServer

SESSION = '''
import os, pathlib, threading

def test_passes():
    assert True

def test_fails():
    assert 1 + 1 == 3, "arithmetic"

def test_waits():
    pathlib.Path(os.environ["FORK_TEST_PID_FILE"]).write_text(str(os.getpid()))
    threading.Event().wait(120)
'''


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ForkServer]:
    running = ForkServer("selfcheck", ("-p", "no:xdist"), judge.ROOT,
                         {**judge.env(), "FORK_TEST_PID_FILE": str(tmp_path / "pid")}, tmp_path / "server.log")
    try:
        yield running
    finally:
        running.close()


def _session(tmp_path: Path, server: ForkServer, label: str, test: str) -> tuple[int, Path]:
    (tmp_path / "test_session.py").write_text(SESSION)
    output = tmp_path / f"{label}.txt"
    pid = server.start(label, [str(tmp_path / "test_session.py"), "-q", "-p", "no:cacheprovider",
                               "-p", "no:xdist", "-k", test], output)
    return pid, output


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_session_reports_pytest_exit_code_and_output(tmp_path: Path, server: ForkServer) -> None:
    _, passed = _session(tmp_path, server, "passes", "test_passes")
    assert server.wait("passes", 60) == int(pytest.ExitCode.OK), passed.read_text()
    _, failed = _session(tmp_path, server, "fails", "test_fails")
    assert server.wait("fails", 60) == int(pytest.ExitCode.TESTS_FAILED)
    text = failed.read_text()
    assert "arithmetic" in text and "assert (1 + 1) == 3" in text, text  # assertion rewriting, as in a subprocess


def test_an_overrunning_session_is_stopped_with_its_group(tmp_path: Path, server: ForkServer) -> None:
    pid, _ = _session(tmp_path, server, "waits", "test_waits")
    assert server.wait("waits", 1.0) is None
    assert os.getpgid(pid) == pid  # a process group of its own, as the subprocess had
    judge._stop_session(pid, lambda grace: server.wait("waits", grace) is not None)
    assert server.wait("waits", 5.0) == int(pytest.ExitCode.INTERRUPTED)


def test_closing_the_server_ends_every_session(tmp_path: Path, server: ForkServer) -> None:
    _session(tmp_path, server, "waits", "test_waits")
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    session = int((tmp_path / "pid").read_text())
    server.close()
    assert _gone(session), f"session {session} outlived the server"
    with pytest.raises(ProcessLookupError):
        os.killpg(session, signal.SIGKILL)
