"""HTTP/1.1 forwarding to the selected cluster over pooled keep-alive connections.

Method, path and query, body and end-to-end headers go upstream (Host becomes the endpoint);
status, end-to-end headers and body come back. Upstream failures become short plain-text answers:
refused/reset 502, timeout 504, a cluster without endpoints 503. Small bodies are relayed whole;
large, chunked or close-delimited ones are streamed.
"""

from __future__ import annotations

import logging

from aiohttp import web
from multidict import CIMultiDict

from reference.gateway.context import RequestContext
from reference.gateway.filters.load_balancer import Cluster
from reference.gateway.logfmt import kv
from reference.gateway.upstream_client import (
    EndpointPool,
    ResponseHead,
    UpstreamError,
    UpstreamTimeout,
    exchange,
)

log = logging.getLogger("agn.gateway.proxy")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_DROP_REQUEST = HOP_BY_HOP | {"host", "content-length", "expect"}
_DROP_RESPONSE = HOP_BY_HOP | {"content-length"}


def _connection_tokens(values: list[str]) -> set[str]:
    tokens: set[str] = set()
    for value in values:
        tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def request_headers(headers: CIMultiDict[str]) -> list[tuple[str, str]]:
    """End-to-end request headers: hop-by-hop ones (incl. those Connection names), Host, framing."""
    drop = _DROP_REQUEST
    if "Connection" in headers:
        drop = drop | _connection_tokens(headers.getall("Connection"))
    return [(k, v) for k, v in headers.items() if k.lower() not in drop]


def response_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    drop = _DROP_RESPONSE
    connection = [v for k, v in headers if k.lower() == "connection"]
    if connection:
        drop = drop | _connection_tokens(connection)
    return [(k, v) for k, v in headers if k.lower() not in drop]


def text_response(status: int, body: str) -> web.Response:
    return web.Response(status=status, text=body, content_type="text/plain")


class Forwarder:
    """Owns one connection pool per upstream endpoint for the whole process."""

    def __init__(self, max_response_bytes: int | None = None) -> None:
        self._pools: dict[tuple[str, int, float], EndpointPool] = {}
        self._max_response = max_response_bytes

    def _pool(self, endpoint: tuple[str, int], idle_secs: float) -> EndpointPool:
        pool_key = (endpoint[0], endpoint[1], idle_secs)
        pool = self._pools.get(pool_key)
        if pool is None:
            pool = self._pools[pool_key] = EndpointPool(endpoint[0], endpoint[1], idle_secs=idle_secs)
        return pool

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    async def forward(self, request: web.BaseRequest, ctx: RequestContext) -> web.StreamResponse:
        cluster: Cluster = ctx.upstream
        endpoint = cluster.next_endpoint()
        if endpoint is None:
            return text_response(503, "no endpoints available for the selected cluster\n")
        try:
            head = await exchange(
                self._pool(endpoint, cluster.idle_timeout),
                ctx.method,
                ctx.raw_path,
                request_headers(ctx.headers),
                ctx.body,
                connect_timeout=cluster.connect_timeout,
                read_timeout=cluster.read_timeout,
            )
        except UpstreamTimeout as exc:
            log.warning(
                "upstream timeout %s", kv(cluster=cluster.name, endpoint=_fmt(endpoint), error=str(exc))
            )
            return text_response(504, "upstream timed out\n")
        except UpstreamError as exc:
            log.warning(
                "upstream error %s", kv(cluster=cluster.name, endpoint=_fmt(endpoint), error=str(exc))
            )
            return text_response(502, "upstream connection failed\n")
        limit = self._max_response
        if limit is not None and head.length is not None and head.length > limit:
            if head.stream is not None:
                head.stream.abort()
            log.warning("upstream response too large %s", kv(cluster=cluster.name, length=head.length))
            return text_response(502, "upstream response too large\n")
        headers = response_headers(head.headers)
        if head.body is not None:
            return web.Response(
                status=head.status, reason=head.reason or None, body=head.body, headers=headers
            )
        return await self._stream(request, head, headers, cluster.name)

    async def _stream(
        self, request: web.BaseRequest, head: ResponseHead, headers: list[tuple[str, str]], cluster: str
    ) -> web.StreamResponse:
        conn = head.stream
        assert conn is not None
        response = web.StreamResponse(status=head.status, reason=head.reason or None, headers=headers)
        if head.length is not None:
            response.content_length = head.length
        limit = self._max_response
        sent = 0
        try:
            await response.prepare(request)
            while True:
                chunk = await conn.read_chunk()
                if not chunk:
                    break
                sent += len(chunk)
                if limit is not None and sent > limit:
                    conn.abort()
                    raise UpstreamError(f"response exceeds {limit} bytes")
                await response.write(chunk)
            await response.write_eof()
        except UpstreamError as exc:
            # The head went out already: cut the client connection so the truncation is visible.
            log.warning("upstream error mid-stream %s", kv(cluster=cluster, error=str(exc)))
            if request.transport is not None:
                request.transport.abort()
        except (ConnectionError, OSError):
            conn.abort()  # the client went away; the upstream exchange cannot be finished
        except BaseException:
            conn.abort()
            raise
        return response


def _fmt(endpoint: tuple[str, int]) -> str:
    host, port = endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
