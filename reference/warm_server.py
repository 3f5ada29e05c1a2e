"""The warm-start server (`python -m reference.warm_start serve SOCKET [--preload MODULE ...]`): imports the
preloaded modules once, then forks one child per start request that reference.warm_start's `run` sends.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import importlib
import json
import os
import runpy
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from reference.warm_protocol import EX_SOFTWARE, netns, read_line

_PR_SET_PDEATHSIG = 1


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


def exit_status(code: Any) -> int:
    """The process exit status ``sys.exit(code)`` gives (None: 0, an int: itself, else printed and 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


class WarmServer:
    """Accepts start requests on a Unix socket and forks one child per request; single-threaded, so
    forking never copies a lock another thread holds."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.children: dict[int, socket.socket] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        staging = f"{path}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        self.listener.bind(staging)
        os.chmod(staging, 0o600)
        self.listener.listen(64)
        os.replace(staging, path)  # the socket appears only once it is listening: its presence means ready

    def refusal(self, request: dict[str, Any], peer_uid: int, fds: list[int]) -> str | None:
        """Why this server cannot start the request's component as the requester would, or None."""
        if peer_uid != os.geteuid():
            return f"the requester runs as uid {peer_uid}, the warm-start server as {os.geteuid()}"
        if request.get("netns") != netns():
            return "the requester is in another network namespace"
        if request.get("python") != sys.executable:
            return f"the requester runs {request.get('python')}, the server {sys.executable}"
        if request.get("pythonpath", "") != os.environ.get("PYTHONPATH", ""):
            return "the requester's PYTHONPATH differs from the server's"
        if len(fds) != 3:
            return f"expected stdin, stdout and stderr, got {len(fds)} descriptors"
        argv = request.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            return "no module to run"
        return None

    def serve(self) -> int:
        """Serve until SIGTERM or SIGINT, then stop accepting and exit once every child has ended (their
        requesters are being stopped too; whoever stops the server kills it if they do not end)."""
        stopping = False

        def stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the wakeup fd
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        listening = True
        while listening or self.children:
            if stopping and listening:
                listening = False
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                self.listener.close()
            watched = [self.listener.fileno(), self._wake_r] if listening else [self._wake_r]
            readable, _, _ = select.select(watched, [], [], None if listening else 0.1)
            if self._wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
            self._reap()
            if listening and self.listener.fileno() in readable:
                self._accept()
        return 0

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                conn.close()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(10.0)
            message, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
            request = json.loads(read_line(conn, message))
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            reason = self.refusal(request, uid, fds)
            if reason is not None:
                _send(conn, {"refused": reason})
                conn.close()
                return
            conn.settimeout(None)
            sys.stdout.flush()
            sys.stderr.flush()
            server_pid = os.getpid()
            pid = os.fork()
            if pid == 0:
                self._become(request, fds, conn, server_pid)
            self.children[pid] = conn
            _send(conn, {"pid": pid})
        except (OSError, ValueError) as exc:
            _send(conn, {"refused": f"bad request: {exc}"})
            conn.close()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _become(self, request: dict[str, Any], fds: list[int], conn: socket.socket, server_pid: int) -> NoReturn:
        """In the child: take the requester's descriptors, environment and directory, run the module."""
        code = EX_SOFTWARE
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.listener.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
            for other in self.children.values():
                other.close()
            _die_with_parent()
            if os.getppid() != server_pid:  # the server died between fork and prctl
                os._exit(EX_SOFTWARE)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in set(fds) - {0, 1, 2}:  # the copies received: only stdin, stdout and stderr stay
                os.close(fd)
            _watch_requester(conn)
            os.chdir(request.get("cwd") or ".")
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
            module, *args = request["argv"]
            sys.argv = [module, *args]
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:
                code = exit_status(exc.code)
            except BaseException:  # noqa: BLE001 - as an interpreter would: traceback, status 1
                traceback.print_exc()
                code = 1
        finally:
            with contextlib.suppress(BaseException):
                atexit._run_exitfuncs()  # what a normal interpreter exit would run
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _watch_requester(conn: socket.socket) -> None:
    """Kill this child the moment the requester's end of the connection closes (the requester died)."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while conn.recv(4096):
                pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="warm-start-requester", daemon=True).start()


def serve(path: str, preload: Sequence[str]) -> int:
    for module in preload:
        importlib.import_module(module)
    return WarmServer(path).serve()




def main(args: Sequence[str]) -> int:
    """`serve SOCKET [--preload MODULE ...]` (reference.warm_start hands every command but `run` here)."""
    parser = argparse.ArgumentParser(prog="python -m reference.warm_start serve",
                                     description="Import modules once and fork a child per start request.")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("socket")
    parser.add_argument("--preload", action="append", default=[], metavar="MODULE")
    options = parser.parse_args(args)
    return serve(options.socket, options.preload)

