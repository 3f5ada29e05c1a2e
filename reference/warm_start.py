"""Warm starts: Python components forked from an interpreter that has already imported them.

A reference gateway spends about half a second of CPU importing aiohttp, prometheus_client,
cryptography and its own modules before it serves, and a conformance run starts a few hundred gateways.
The server imports those modules once; each start then asks it, over a Unix socket, to fork a child that
runs the component:

    python -m reference.warm_start serve SOCKET [--preload MODULE ...]
    python -m reference.warm_start run SOCKET -m MODULE [ARGS ...]

`run` behaves as ``python -m MODULE ARGS`` would in its place. Its stdin, stdout and stderr are passed to
the child (SCM_RIGHTS), which takes its environment and working directory too; SIGTERM, SIGINT, SIGHUP,
SIGQUIT, SIGUSR1 and SIGUSR2 sent to `run` are passed on; `run` exits with the child's status (or dies of
the child's signal). The child dies when `run` dies, even of SIGKILL (it watches the connection), and when
the server dies (parent-death signal). Where the server cannot serve this start (no socket, another user,
network namespace, interpreter or PYTHONPATH), `run` says so on stderr and execs ``python -m MODULE ARGS``
itself: a warm start is an optimisation, never a requirement.

This module holds `run` and imports only the few standard modules it needs, so each start costs its own
interpreter little more than Python's start-up; the server is reference.warm_server, imported by `serve`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING

from reference.warm_protocol import EX_SOFTWARE, netns, read_line

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

#: Signals `run` passes on to the child.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# ------------------------------------------------------------------------------------------ client


def _cold(module: str, args: Sequence[str], why: str) -> NoReturn:
    print(f"warm start unavailable ({why}): starting python -m {module}", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", module, *args])


def run(path: str, module: str, args: Sequence[str]) -> NoReturn:
    """Run ``python -m module args`` as a child of the server at `path`, else cold in this process."""
    request = {"argv": [module, *args], "env": dict(os.environ), "cwd": os.getcwd(), "netns": netns(),
               "python": sys.executable, "pythonpath": os.environ.get("PYTHONPATH", "")}
    child: list[int] = []  # the child's pid, once the server has said it
    pending: list[int] = []  # signals that came before it

    def forward(sig: int, _frame: Any) -> None:
        if not child:
            pending.append(sig)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child[0], sig)

    for sig in FORWARDED:  # from the start: a signal must not kill this process while its child lives
        signal.signal(sig, forward)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    reply: dict[str, Any] = {}
    try:
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        reply = json.loads(read_line(conn))
    except (OSError, ValueError) as exc:
        reply = {"refused": f"{path}: {exc}"}
    if "pid" not in reply:
        conn.close()
        if pending:  # asked to stop before anything started: stop as the cold process would have
            _die_of(pending[0])
        _cold(module, args, str(reply.get("refused", reply)))
    child.append(int(reply["pid"]))
    for early in pending:
        forward(early, None)
    try:
        code = int(json.loads(read_line(conn))["exit"])
    except (OSError, ValueError, KeyError) as exc:
        print(f"warm start: lost the server before the child's exit: {exc}", file=sys.stderr, flush=True)
        os._exit(EX_SOFTWARE)
    if code < 0:  # the child died of a signal: die of the same one
        _die_of(-code)
    os._exit(code)


def _die_of(sig: int) -> NoReturn:
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:  # parsed by hand: everything after the module belongs to it
        if len(args) < 4 or args[2] != "-m":
            print("usage: python -m reference.warm_start run SOCKET -m MODULE [ARGS ...]", file=sys.stderr)
            return 2
        run(args[1], args[3], args[4:])
    from reference.warm_server import main as serve_main  # the server's imports, only where it serves

    return serve_main(args)


if __name__ == "__main__":
    sys.exit(main())
