"""A lean HTTP/1.1 client for upstream hops: keep-alive pools per endpoint, bounded, with timeouts.

The proxy's hot path is one request/response exchange with an upstream it already has a connection
to, and a general-purpose client spends most of a small request's CPU on features a proxy does not
use (cookies, redirects, auth, tracing, URL rebuilding). This client writes the request head in one
buffer and parses the response with a small state machine: Content-Length, chunked and
close-delimited bodies, no body for HEAD/1xx/204/304. Small bodies are returned whole; larger or
unsized ones are exposed as a stream with flow control (reading pauses while the client is slower).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Iterable

MAX_HEAD_BYTES = 64 * 1024
WHOLE_BODY_LIMIT = 1024 * 1024
STREAM_HIGH_WATER = 1024 * 1024
DEFAULT_IDLE_SECS = 30.0
DEFAULT_MAX_IDLE = 256
DEFAULT_MAX_CONNECTIONS = 1024


def _now() -> float:
    return asyncio.get_running_loop().time()


class UpstreamError(Exception):
    """The exchange failed before a complete response head arrived (or mid-body when streaming)."""


class UpstreamTimeout(UpstreamError):
    pass


class ResponseHead:
    __slots__ = ("status", "reason", "headers", "body", "length", "stream")

    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]]) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body: bytes | None = None  # set when the whole body was buffered
        self.length: int | None = None  # declared Content-Length, when there is one
        self.stream: _Connection | None = None  # set when the body must be read with read_chunk()


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILERS, _UNTIL_CLOSE, _DONE = range(8)


class _Connection(asyncio.Protocol):
    """One upstream connection; carries at most one exchange at a time."""

    def __init__(self, pool: EndpointPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buf = bytearray()
        self._state = _DONE
        self._head_waiter: asyncio.Future[ResponseHead] | None = None
        self._head: ResponseHead | None = None
        self._no_body = False
        self._remaining = 0
        self._body = bytearray()
        self._streaming = False
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._chunk_waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._reusable = True
        self._got_bytes = False
        self._error: Exception | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._read_timeout = 0.0
        self._deadline = 0.0
        self.counted = True  # holds one of the pool's connection slots

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        if self._state == _UNTIL_CLOSE:
            self._finish()
            return
        if self._state != _DONE:
            self._fail(UpstreamError("connection closed by upstream"))

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        if self._state == _DONE:
            self._reusable = False  # bytes nobody asked for: never reuse this connection
            self._close()
            return
        self._buf += data
        if self._timer is not None:
            self._deadline = _now() + self._read_timeout
        try:
            self._parse()
        except UpstreamError as exc:
            self._fail(exc)

    # --- exchange ---------------------------------------------------------------------------

    def send(self, data: bytes, head_request: bool, read_timeout: float) -> asyncio.Future[ResponseHead]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._head_waiter = loop.create_future()
        self._state = _HEAD
        self._head = None
        self._no_body = head_request
        self._streaming = False
        self._reusable = True
        self._got_bytes = False
        self._error = None
        self._read_timeout = read_timeout
        self._arm_timer()
        self.transport.write(data)
        return self._head_waiter

    async def read_chunk(self) -> bytes:
        """The next piece of a streamed body; b"" at its end. Raises UpstreamError on failure.

        The consumer must read until b"" or call abort(); only then is the connection reusable.
        """
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._state == _DONE:
                self._streaming = False
                self._release()
                return b""
            self._chunk_waiter = asyncio.get_running_loop().create_future()
            await self._chunk_waiter
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered < STREAM_HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
            if self._state != _DONE:
                self._arm_timer()
        return chunk

    def abort(self) -> None:
        """Give up on the current exchange (the client went away); the connection is discarded."""
        self._cancel_timer()
        self._reusable = False
        self._state = _DONE
        self._chunks.clear()
        self._close()
        self.pool.discard(self)

    # --- parsing ----------------------------------------------------------------------------

    def _parse(self) -> None:
        while True:
            state = self._state
            buf = self._buf
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD_BYTES:
                        raise UpstreamError("response head too large")
                    return
                head = bytes(buf[:end])
                del buf[: end + 4]
                if not self._start_body(head):
                    continue  # an interim 1xx response; the real head follows
            elif state == _LENGTH:
                if not buf:
                    return
                take = min(len(buf), self._remaining)
                self._deliver(bytes(buf[:take]))
                del buf[:take]
                self._remaining -= take
                if self._remaining == 0:
                    self._finish()
                    return
            elif state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 4096:
                        raise UpstreamError("malformed chunk size")
                    return
                line = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                try:
                    size = int(line, 16)
                except ValueError:
                    raise UpstreamError("malformed chunk size") from None
                if size < 0:
                    raise UpstreamError("malformed chunk size")
                if size == 0:
                    self._state = _TRAILERS
                else:
                    self._remaining = size
                    self._state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                if not buf:
                    return
                take = min(len(buf), self._remaining)
                self._deliver(bytes(buf[:take]))
                del buf[:take]
                self._remaining -= take
                if self._remaining == 0:
                    self._state = _CHUNK_CRLF
            elif state == _CHUNK_CRLF:
                if len(buf) < 2:
                    return
                if buf[:2] != b"\r\n":
                    raise UpstreamError("malformed chunk terminator")
                del buf[:2]
                self._state = _CHUNK_SIZE
            elif state == _TRAILERS:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD_BYTES:
                        raise UpstreamError("trailers too large")
                    return
                del buf[: end + 2]
                if end == 0:
                    self._finish()
                    return
            elif state == _UNTIL_CLOSE:
                if buf:
                    self._deliver(bytes(buf))
                    buf.clear()
                return
            else:
                return

    def _start_body(self, raw: bytes) -> bool:
        lines = raw.decode("utf-8", "surrogateescape").split("\r\n")
        parts = lines[0].split(" ", 2)
        code = parts[1] if len(parts) > 1 else ""
        if not parts[0].startswith("HTTP/1.") or not (code.isascii() and code.isdigit()):
            raise UpstreamError("malformed status line")
        status = int(parts[1])
        if 100 <= status < 200 and status != 101:
            return False
        reason = parts[2] if len(parts) > 2 else ""
        headers: list[tuple[str, str]] = []
        length: int | None = None
        chunked = False
        keep_alive = parts[0] == "HTTP/1.1"
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name[-1] in " \t" or name[0] in " \t":
                raise UpstreamError("malformed header line")
            value = value.strip(" \t")
            lowered = name.lower()
            if lowered == "content-length":
                if not (value.isascii() and value.isdigit()) or (length is not None and length != int(value)):
                    raise UpstreamError("invalid content-length")
                length = int(value)
            elif lowered == "transfer-encoding":
                chunked = value.lower().split(",")[-1].strip() == "chunked"
            elif lowered == "connection":
                tokens = {t.strip() for t in value.lower().split(",")}
                if "close" in tokens:
                    keep_alive = False
                elif "keep-alive" in tokens:
                    keep_alive = True
            headers.append((name, value))
        head = ResponseHead(status, reason, headers)
        self._head = head
        self._reusable = keep_alive
        if status == 101:
            self._reusable = False
        if self._no_body or status in (101, 204, 304):
            self._state = _DONE
            head.body = b""
            self._resolve_head()
            self._release()
            return True
        if chunked:
            self._state = _CHUNK_SIZE
            self._begin_stream()
        elif length is not None:
            head.length = length
            self._remaining = length
            if length == 0:
                head.body = b""
                self._state = _DONE
                self._resolve_head()
                self._release()
                return True
            self._state = _LENGTH
            if length > WHOLE_BODY_LIMIT:
                self._begin_stream()
            else:
                self._body = bytearray()
        else:
            self._state = _UNTIL_CLOSE
            self._reusable = False
            self._begin_stream()
        return True

    def _begin_stream(self) -> None:
        self._streaming = True
        self._chunks.clear()
        self._buffered = 0
        assert self._head is not None
        self._head.stream = self
        self._resolve_head()

    def _deliver(self, data: bytes) -> None:
        if not self._streaming:
            self._body += data
            return
        self._chunks.append(data)
        self._buffered += len(data)
        self._wake()
        if not self._paused and self._buffered > STREAM_HIGH_WATER and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
            self._cancel_timer()  # a slow client is not an upstream timeout

    def _finish(self) -> None:
        self._state = _DONE
        self._cancel_timer()
        if self._streaming:
            self._wake()  # released when the consumer reads the end
            return
        assert self._head is not None
        self._head.body = bytes(self._body)
        self._body = bytearray()
        self._resolve_head()
        self._release()

    def _release(self) -> None:
        if self._buf:
            self._reusable = False
        if self._reusable and not self.closed:
            self._cancel_timer()
            self.pool.give_back(self)
        else:
            self._close()
            self.pool.discard(self)

    def _resolve_head(self) -> None:
        waiter = self._head_waiter
        if waiter is not None and not waiter.done():
            assert self._head is not None
            waiter.set_result(self._head)

    def _fail(self, exc: Exception) -> None:
        self._cancel_timer()
        self._state = _DONE
        self._error = exc
        waiter = self._head_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self._wake()
        self._reusable = False
        self._close()
        self.pool.discard(self)

    def _wake(self) -> None:
        waiter = self._chunk_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._chunk_waiter = None

    def _arm_timer(self) -> None:
        """Start the read-inactivity timer; data arrival only moves the deadline (no re-scheduling)."""
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self._read_timeout
        self._timer = loop.call_at(self._deadline, self._on_timeout)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timeout(self) -> None:
        self._timer = None
        if self._state == _DONE:
            return
        loop = asyncio.get_running_loop()
        if self._deadline > loop.time():
            self._timer = loop.call_at(self._deadline, self._on_timeout)  # data arrived meanwhile
            return
        self._fail(UpstreamTimeout("upstream read timed out"))

    def _close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    @property
    def reused_without_reply(self) -> bool:
        return not self._got_bytes


class EndpointPool:
    """Idle keep-alive connections to one host:port, most recently used first, and a connection cap."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_idle: int = DEFAULT_MAX_IDLE,
        idle_secs: float = DEFAULT_IDLE_SECS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host = host
        self.port = port
        self.host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._idle: collections.deque[_Connection] = collections.deque()
        self._max_idle = max_idle
        self._idle_secs = idle_secs
        self._clock = clock
        self._open = 0
        self._max = max_connections
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False

    @property
    def open_connections(self) -> int:
        return self._open

    def give_back(self, conn: _Connection) -> None:
        if self._closed or len(self._idle) >= self._max_idle:
            conn._close()
            self.discard(conn)
            return
        conn.idle_since = self._clock()
        self._idle.append(conn)
        self._wake_one()

    def discard(self, conn: _Connection) -> None:
        """Release the connection's slot (once) after it was closed or found unusable."""
        if conn.counted:
            conn.counted = False
            self._open -= 1
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def acquire(self, connect_timeout: float) -> tuple[_Connection, bool]:
        """A connection to use now, and whether it came from the idle pool."""
        now = self._clock()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < self._idle_secs:
                return conn, True
            conn._close()
            self.discard(conn)
        while self._open >= self._max:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
            if self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn, True
                self.discard(conn)
        self._open += 1
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port), connect_timeout
            )
        except TimeoutError:
            self._open -= 1
            self._wake_one()
            raise UpstreamTimeout("connect timed out") from None
        except OSError as exc:
            self._open -= 1
            self._wake_one()
            raise UpstreamError(f"connect failed: {exc.strerror or type(exc).__name__}") from None
        return conn, False

    def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop()._close()


def encode_request(
    method: str, target: str, host: str, headers: Iterable[tuple[str, str]], body: bytes
) -> bytes:
    """The request head and body as one buffer; header lines with CR or LF are dropped."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            continue
        lines.append(f"{name}: {value}")
    if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS", "TRACE"):
        lines.append(f"Content-Length: {len(body)}")
    head = "\r\n".join(lines) + "\r\n\r\n"
    return head.encode("utf-8", "surrogateescape") + body


async def exchange(
    pool: EndpointPool,
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    *,
    connect_timeout: float,
    read_timeout: float,
) -> ResponseHead:
    """Send one request and wait for its response head (and whole body when small).

    A pooled connection that the upstream closed while idle fails before any reply byte; that case is
    retried once on a fresh connection, since the upstream never saw the request.
    """
    data = encode_request(method, target, pool.host_header, headers, body)
    for attempt in (0, 1):
        conn, reused = await pool.acquire(connect_timeout)
        try:
            return await conn.send(data, method == "HEAD", read_timeout)
        except UpstreamTimeout:
            raise
        except UpstreamError:
            if attempt == 0 and reused and conn.reused_without_reply:
                continue
            raise
        except asyncio.CancelledError:
            conn.abort()
            raise
    raise UpstreamError("unreachable")
