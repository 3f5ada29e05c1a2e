"""What the warm-start client (reference.warm_start) and server (reference.warm_server) both speak: one JSON
line each way on a Unix socket, the request carrying the requester's network namespace."""

from __future__ import annotations

import os
import socket

MAX_MESSAGE = 1 << 20
#: Exit status of a child whose Python code could not even be set up (EX_SOFTWARE).
EX_SOFTWARE = 70


def netns() -> int:
    """The inode of this process's network namespace (0 where /proc cannot say)."""
    try:
        return os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return 0


def read_line(conn: socket.socket, first: bytes = b"") -> bytes:
    data = first
    while not data.endswith(b"\n"):
        if len(data) > MAX_MESSAGE:
            raise ValueError("message too long")
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed before the end of the message")
        data += chunk
    return data
