"""The upstream HTTP/1.1 client against scripted raw-socket servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from reference.gateway.upstream_client import (
    EndpointPool,
    ResponseHead,
    UpstreamError,
    UpstreamTimeout,
    encode_request,
    exchange,
)

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length) if length else b""


@contextlib.asynccontextmanager
async def raw_server(script: Script) -> Any:
    connections: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        with contextlib.suppress(Exception):
            await script(reader, writer)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, connections
    finally:
        server.close()
        for writer in connections:
            writer.close()
        await server.wait_closed()


def keep_alive(responses: list[bytes], seen: list[bytes] | None = None) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for response in responses:
            head, body = await read_request(reader)
            if seen is not None:
                seen.append(head + body)
            writer.write(response)
            await writer.drain()
        await reader.read()  # hold the connection open until the client closes it

    return script


async def get(
    pool: EndpointPool, method: str = "GET", body: bytes = b"", read_timeout: float = 5.0
) -> ResponseHead:
    return await exchange(
        pool, method, "/p?q=1", [("X-Test", "1")], body, connect_timeout=2, read_timeout=read_timeout
    )


async def drain(head: ResponseHead) -> bytes:
    if head.body is not None:
        return head.body
    assert head.stream is not None
    out = bytearray()
    while chunk := await head.stream.read_chunk():
        out += chunk
    return bytes(out)


def test_encode_request_frames_the_body_and_drops_unsafe_lines() -> None:
    data = encode_request("POST", "/a?b=1", "h:1", [("X-A", "1"), ("X-Bad", "x\r\nInjected: 1")], b"xyz")
    assert data == b"POST /a?b=1 HTTP/1.1\r\nHost: h:1\r\nX-A: 1\r\nContent-Length: 3\r\n\r\nxyz"
    assert b"Content-Length" not in encode_request("GET", "/", "h:1", [], b"")


def test_content_length_body_and_connection_reuse() -> None:
    async def main() -> None:
        seen: list[bytes] = []
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Up: yes\r\n\r\nhello"
        async with raw_server(keep_alive([ok, ok, ok], seen)) as (port, connections):
            pool = EndpointPool("127.0.0.1", port)
            for _ in range(3):
                head = await get(pool, "POST", b'{"a":1}')
                assert (head.status, head.reason, head.body) == (200, "OK", b"hello")
                assert ("X-Up", "yes") in head.headers
            assert len(connections) == 1, "keep-alive connection is reused"
            assert pool.open_connections == 1
            assert seen[0].startswith(b"POST /p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:")
            assert seen[0].endswith(b'Content-Length: 7\r\n\r\n{"a":1}')
            pool.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nT: x\r\n\r\n",
            b"hello world",
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", b"ok"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
    ],
)
def test_body_framings(response: bytes, expected: bytes) -> None:
    async def main() -> None:
        async with raw_server(keep_alive([response, response])) as (port, connections):
            pool = EndpointPool("127.0.0.1", port)
            for _ in range(2):
                head = await get(pool)
                assert await drain(head) == expected
            assert len(connections) == 1
            pool.close()

    asyncio.run(main())


def test_close_delimited_body_is_streamed_and_not_reused() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart1-")
        await writer.drain()
        writer.write(b"part2")
        await writer.drain()

    async def main() -> None:
        async with raw_server(script) as (port, connections):
            pool = EndpointPool("127.0.0.1", port)
            for _ in range(2):
                head = await get(pool)
                assert head.stream is not None and head.length is None
                assert await drain(head) == b"part1-part2"
            assert len(connections) == 2
            assert pool.open_connections == 0
            pool.close()

    asyncio.run(main())


def test_large_bodies_stream_with_their_length() -> None:
    size = 3 * 1024 * 1024
    payload = bytes(range(256)) * (size // 256)
    response = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + payload

    async def main() -> None:
        async with raw_server(keep_alive([response, response])) as (port, connections):
            pool = EndpointPool("127.0.0.1", port)
            for _ in range(2):
                head = await get(pool)
                assert head.stream is not None and head.length == size
                assert await drain(head) == payload
            assert len(connections) == 1
            pool.close()

    asyncio.run(main())


def test_refused_connection_is_an_upstream_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def main() -> None:
        pool = EndpointPool("127.0.0.1", port)
        with pytest.raises(UpstreamError, match="connect failed") as info:
            await get(pool)
        assert not isinstance(info.value, UpstreamTimeout)
        assert pool.open_connections == 0

    asyncio.run(main())


def test_reset_before_reply_and_slow_reply() -> None:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.transport.abort()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async def main() -> None:
        async with raw_server(reset) as (port, _):
            pool = EndpointPool("127.0.0.1", port)
            with pytest.raises(UpstreamError) as info:
                await get(pool)
            assert not isinstance(info.value, UpstreamTimeout)
            assert pool.open_connections == 0
        async with raw_server(slow) as (port, _):
            pool = EndpointPool("127.0.0.1", port)
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(UpstreamTimeout):
                await get(pool, read_timeout=0.2)
            assert loop.time() - start < 2
            assert pool.open_connections == 0

    asyncio.run(main())


def test_malformed_responses_are_errors() -> None:
    async def main() -> None:
        for bad in (
            b"NOT HTTP\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nBroken header line\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        ):
            async with raw_server(keep_alive([bad])) as (port, _):
                pool = EndpointPool("127.0.0.1", port)
                with pytest.raises(UpstreamError):
                    await get(pool)

    asyncio.run(main())


def test_idle_connection_closed_by_upstream_is_retried_on_a_fresh_one() -> None:
    async def one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        # Close without reading the next request; the client still holds the connection as idle.
        await asyncio.sleep(0.05)

    async def main() -> None:
        async with raw_server(one_then_close) as (port, connections):
            pool = EndpointPool("127.0.0.1", port)
            assert (await get(pool)).body == b"ok"
            await asyncio.sleep(0.2)  # the server side is gone by now
            assert (await get(pool)).body == b"ok"
            assert len(connections) == 2
            pool.close()

    asyncio.run(main())


def test_connection_cap_queues_requests() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            await asyncio.sleep(0.05)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    async def main() -> None:
        async with raw_server(script) as (port, connections):
            pool = EndpointPool("127.0.0.1", port, max_connections=2)
            heads = await asyncio.gather(*(get(pool) for _ in range(6)))
            assert all(h.body == b"ok" for h in heads)
            assert len(connections) == 2
            pool.close()

    asyncio.run(main())
