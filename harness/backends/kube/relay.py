"""A TCP relay on loopback to a gateway's NodePort, for gateways whose TLS handshakes may be refused.

`kubectl port-forward` exits ("lost connection to pod") when the pod side of one forwarded connection
breaks, which is what a provider gateway does to a client certificate it refuses. A test that is refused
and then sends the twin request would find nothing listening. The relay carries each connection on its
own socket to the node's address and the Service's NodePort (the path other clusters' pods use), so a
refused handshake ends that connection only. Clients keep connecting to 127.0.0.1, the address the
gateway's server certificate names.
"""

from __future__ import annotations

import contextlib
import socket
import threading

_CHUNK = 65536


class TcpRelay:
    """Accepts on 127.0.0.1 and pipes each connection, both ways, to (host, port) until either side closes."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 10.0) -> None:
        self.upstream = (host, port)
        self.connect_timeout = connect_timeout
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name=f"relay-{host}:{port}", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=self.connect_timeout)
        except OSError:
            client.close()  # the client sees the connection end, as it would at a dead NodePort
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
        done = threading.Thread(target=self._pipe, args=(upstream, client), daemon=True)
        done.start()
        self._pipe(client, upstream)
        done.join()
        for sock in (client, upstream):
            with self._lock:
                self._open.discard(sock)
            sock.close()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        """Copy until `source` ends, then pass the end on (half-close), or drop both on a reset."""
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting and end every open connection; the port is released when this returns."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)
        with self._lock:
            open_now = list(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
