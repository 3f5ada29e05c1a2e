"""HTTP/1.1 forwarding to the selected cluster over pooled keep-alive connections.

Method, path and query, body and end-to-end headers go upstream (Host becomes the endpoint);
status, end-to-end headers and body come back. Upstream failures become short plain-text answers:
refused/reset 502, timeout 504, a cluster without endpoints 503. Bodies up to 1 MiB with a known
length are relayed whole; larger, chunked or close-delimited ones are streamed.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from reference.gateway.context import RequestContext
from reference.gateway.filters.load_balancer import Cluster
from reference.gateway.logfmt import kv

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
_WHOLE_BODY = 1024 * 1024  # bodies up to this size are relayed whole; larger ones stream


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
    """Forwards through one shared aiohttp client session: pooled keep-alive connections per endpoint."""

    def __init__(self, max_response_bytes: int | None = None, max_connections: int = 512) -> None:
        self._max_response = max_response_bytes
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self, idle_secs: float) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, limit_per_host=0, keepalive_timeout=idle_secs, ttl_dns_cache=300
            )
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent", "Accept-Encoding")
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(self, request: web.BaseRequest, ctx: RequestContext) -> web.StreamResponse:
        cluster: Cluster = ctx.upstream
        endpoint = cluster.next_endpoint()
        if endpoint is None:
            return text_response(503, "no endpoints available for the selected cluster\n")
        tls = getattr(cluster, "ssl", None)
        url = URL.build(scheme="https" if tls is not None else "http", host=endpoint[0], port=endpoint[1],
                        encoded=True).join(URL(ctx.raw_path, encoded=True))
        timeout = aiohttp.ClientTimeout(sock_connect=cluster.connect_timeout, sock_read=cluster.read_timeout)
        extra: dict[str, Any] = {}
        if tls is not None:
            extra["ssl"] = tls
            if cluster.sni is not None:
                extra["server_hostname"] = cluster.sni
        try:
            upstream = await self._client(cluster.idle_timeout).request(
                ctx.method, url, headers=request_headers(ctx.headers), data=ctx.body or None,
                timeout=timeout, allow_redirects=False, **extra,
            )
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            log.warning("upstream timeout %s", kv(cluster=cluster.name, endpoint=_fmt(endpoint), error=str(exc)))
            return text_response(504, "upstream timed out\n")
        except (aiohttp.ClientError, OSError) as exc:
            log.warning("upstream error %s", kv(cluster=cluster.name, endpoint=_fmt(endpoint), error=str(exc)))
            return text_response(502, "upstream connection failed\n")
        async with upstream:
            limit = self._max_response
            length = upstream.content_length
            if limit is not None and length is not None and length > limit:
                log.warning("upstream response too large %s", kv(cluster=cluster.name, length=length))
                return text_response(502, "upstream response too large\n")
            headers = response_headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in upstream.raw_headers])
            added = getattr(ctx, "response_headers", None)
            if added:
                names = {name.lower() for name, _ in added}
                headers = [(k, v) for k, v in headers if k.lower() not in names] + list(added)
            if length is not None and length <= _WHOLE_BODY:
                try:
                    body = await upstream.read()
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    log.warning("upstream error reading body %s", kv(cluster=cluster.name, error=str(exc)))
                    return text_response(504 if isinstance(exc, TimeoutError) else 502, "upstream body failed\n")
                return web.Response(status=upstream.status, reason=upstream.reason or None, body=body,
                                    headers=headers)
            return await self._stream(request, upstream, headers, cluster.name)

    async def _stream(
        self, request: web.BaseRequest, upstream: aiohttp.ClientResponse, headers: list[tuple[str, str]],
        cluster: str,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason or None, headers=headers)
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        limit = self._max_response
        sent = 0
        try:
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                sent += len(chunk)
                if limit is not None and sent > limit:
                    raise aiohttp.ClientPayloadError(f"response exceeds {limit} bytes")
                await response.write(chunk)
            await response.write_eof()
        except (TimeoutError, aiohttp.ClientError) as exc:
            # The head went out already: cut the client connection so the truncation is visible.
            log.warning("upstream error mid-stream %s", kv(cluster=cluster, error=str(exc)))
            upstream.close()
            if request.transport is not None:
                request.transport.abort()
        except (ConnectionError, OSError):
            upstream.close()  # the client went away; the upstream exchange cannot be finished
        return response


def _fmt(endpoint: tuple[str, int]) -> str:
    host, port = endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
