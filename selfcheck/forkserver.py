"""Judged pytest sessions started by forking an interpreter that has already imported the suite.

A judge runs one pytest session per breakage, well over a hundred of them. Each used to start a fresh
interpreter that imported pytest, the harness (aiohttp, httpx, numpy, cryptography) and the suite
modules again: about a second of CPU per session before the first test ran. The server below does that
once: it collects the suite package in-process (so the suite modules are imported through pytest's
assertion rewriting, exactly as a session would import them), then forks one child per requested
session. Each child is a session of its own, as the subprocess was: its own process group, stdout and
stderr in a file, stdin closed, ``pytest.main`` with the same arguments, its exit code as pytest's.

Protocol (JSON lines): the client writes ``{"label", "argv", "output"}`` to the server's stdin; the server
answers ``{"ready": true}`` once warmed, ``{"label", "pid"}`` when a session started and ``{"label",
"exit"}`` when it ended. The server exits when its stdin closes, killing any session still running, and
dies with the client (parent-death signal), its sessions with it.

Run as ``python -m selfcheck.forkserver PACKAGE [PYTEST ARGS...]`` from the repository root.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

READY_TIMEOUT_S = 120.0


# ------------------------------------------------------------------------------------------ server


def _child(argv: list[str], output: str, protocol: IO[str]) -> None:
    """In the forked child: become a session of its own and run pytest; never returns."""
    code = 70  # EX_SOFTWARE, should pytest itself blow up
    try:
        os.setsid()
        from harness.process import _die_with_parent

        _die_with_parent()
        protocol.close()
        log = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        import pytest

        code = int(pytest.main(argv))
    except BaseException as exc:  # noqa: BLE001 - reported in the session's output, then the exit code says it
        with contextlib.suppress(Exception):
            print(f"forked session failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
            atexit._run_exitfuncs()  # what a normal interpreter exit would run (the harness's cleanup hooks)
        os._exit(code)


def _warm(package: str, pytest_args: Sequence[str]) -> None:
    """Import the suite the way a session does: collect it, with its output sent to stderr."""
    import pytest

    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *pytest_args, "--pyargs", package])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise SystemExit(f"collecting {package} to warm the fork server failed with {code}")


def serve(package: str, pytest_args: Sequence[str]) -> int:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever pytest or the suite print goes to stderr, never into the protocol
    _warm(package, pytest_args)  # first: the project's modules must be imported through assertion rewriting
    from harness.process import _die_with_parent

    _die_with_parent()
    # What the warm-up left stays for every session: frozen, the sessions' collections (pytest runs two full
    # ones as each ends) skip it instead of walking it again, and leave its pages shared with the server.
    gc.collect()
    gc.freeze()

    def say(message: Mapping[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    say({"ready": True})
    children: dict[int, str] = {}
    pending = ""
    stdin = sys.stdin.fileno()
    open_input = True
    while open_input or children:
        readable, _, _ = select.select([stdin] if open_input else [], [], [], 0.02)
        if readable:
            chunk = os.read(stdin, 65536).decode()
            if not chunk:
                open_input = False
                for pid in children:  # the client is gone: nothing may outlive it
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
            pending += chunk
            while "\n" in pending:
                line, pending = pending.split("\n", 1)
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(list(request["argv"]), str(request["output"]), protocol)
                children[pid] = request["label"]
                say({"label": request["label"], "pid": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            label = children.pop(pid, None)
            if label is not None:
                say({"label": label, "exit": os.waitstatus_to_exitcode(status)})
    return 0


# ------------------------------------------------------------------------------------------ client


class ForkServer:
    """The judge's side: start the server, start sessions through it, wait for their exit codes."""

    def __init__(self, package: str, pytest_args: Sequence[str], cwd: Path, env: Mapping[str, str],
                 log: Path) -> None:
        self._log = open(log, "ab")  # noqa: SIM115 - closed in close()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "selfcheck.forkserver", package, *pytest_args], cwd=cwd, env=dict(env),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        self._write_lock = threading.Lock()
        self._changed = threading.Condition()  # guards the reports below; notified on each new one
        self._pids: dict[str, int] = {}
        self._exits: dict[str, int] = {}
        self._ready = False
        self._gone = False
        self._log_path = log
        self._reader = threading.Thread(target=self._read, name="forkserver-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            message = json.loads(raw)
            with self._changed:
                if message.get("ready"):
                    self._ready = True
                elif "pid" in message:
                    self._pids[message["label"]] = int(message["pid"])
                elif "exit" in message:
                    self._exits[message["label"]] = int(message["exit"])
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()

    def _await(self, what: str, done: Any, timeout: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: done() or self._gone, timeout=timeout):
                raise TimeoutError(f"the fork server did not report {what} within {timeout:.0f}s")
            if not done():
                raise RuntimeError(f"the fork server ended before reporting {what}; its log "
                                   f"({self._log_path}) ends with:\n{self._tail()}")

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-30:])
        return ""

    def start(self, label: str, argv: Sequence[str], output: Path) -> int:
        """Start a session; returns its pid (also its process group)."""
        self._await("that it is ready", lambda: self._ready, READY_TIMEOUT_S)
        request = json.dumps({"label": label, "argv": list(argv), "output": str(output)}) + "\n"
        assert self._proc.stdin is not None
        with self._write_lock:
            self._proc.stdin.write(request.encode())
            self._proc.stdin.flush()
        self._await(f"the start of {label}", lambda: label in self._pids, 60.0)
        return self._pids[label]

    def wait(self, label: str, timeout: float) -> int | None:
        """The session's exit code, or None if it is still running after `timeout` seconds."""
        try:
            self._await(f"the end of {label}", lambda: label in self._exits, timeout)
        except TimeoutError:
            return None
        return self._exits[label]

    def close(self) -> None:
        """Close the server's input (it kills what still runs and exits); kill it if it lingers."""
        with contextlib.suppress(OSError, ValueError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)
        self._reader.join(timeout=10)
        self._log.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], sys.argv[2:]))
