"""HTTP/1.1 forwarding to the selected cluster over one pooled client session per process.

Method, path and query, body and end-to-end headers go upstream; status, end-to-end headers and body
come back. Upstream failures become short plain-text answers: refused/reset 502, timeout 504, a
cluster without endpoints 503. Small bodies are relayed whole; large or unsized ones are streamed.
"""

from __future__ import annotations

import logging

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
WHOLE_BODY_LIMIT = 1024 * 1024
POOL_LIMIT = 1024
POOL_LIMIT_PER_HOST = 512
KEEPALIVE_SECS = 30.0


def make_session() -> aiohttp.ClientSession:
    """The process-wide upstream session: keep-alive pool, no cookie jar, bytes passed through as-is."""
    connector = aiohttp.TCPConnector(
        limit=POOL_LIMIT,
        limit_per_host=POOL_LIMIT_PER_HOST,
        keepalive_timeout=KEEPALIVE_SECS,
        ttl_dns_cache=300,
    )
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        timeout=aiohttp.ClientTimeout(total=None, connect=5, sock_read=300),
    )


def _connection_tokens(headers: CIMultiDict[str]) -> set[str]:
    tokens: set[str] = set()
    for value in headers.getall("Connection", ()):
        tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def request_headers(headers: CIMultiDict[str]) -> CIMultiDict[str]:
    """End-to-end request headers: hop-by-hop ones, Host and framing headers removed."""
    drop = _DROP_REQUEST | _connection_tokens(headers) if "Connection" in headers else _DROP_REQUEST
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in drop)


def response_headers(headers: CIMultiDict[str]) -> CIMultiDict[str]:
    drop = _DROP_RESPONSE | _connection_tokens(headers) if "Connection" in headers else _DROP_RESPONSE
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in drop)


def text_response(status: int, body: str) -> web.Response:
    return web.Response(status=status, text=body, content_type="text/plain")


class Forwarder:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def forward(self, request: web.BaseRequest, ctx: RequestContext) -> web.StreamResponse:
        cluster: Cluster = ctx.upstream
        base = cluster.next_base()
        if base is None:
            return text_response(503, "no endpoints available for the selected cluster\n")
        url = URL(base + ctx.raw_path, encoded=True)
        try:
            async with self.session.request(
                ctx.method,
                url,
                headers=request_headers(ctx.headers),
                data=ctx.body or None,
                allow_redirects=False,
                timeout=cluster.timeout,
            ) as upstream:
                headers = response_headers(upstream.headers)  # type: ignore[arg-type]
                length = upstream.content_length
                if length is not None and length <= WHOLE_BODY_LIMIT:
                    body = await upstream.read()
                    return web.Response(
                        status=upstream.status, reason=upstream.reason, body=body, headers=headers
                    )
                return await self._stream(request, upstream, headers, cluster.name)
        except TimeoutError:
            log.warning("upstream timeout %s", kv(cluster=cluster.name, endpoint=base))
            return text_response(504, "upstream timed out\n")
        except (aiohttp.ClientError, OSError) as exc:
            log.warning(
                "upstream error %s", kv(cluster=cluster.name, endpoint=base, error=type(exc).__name__)
            )
            return text_response(502, "upstream connection failed\n")

    async def _stream(
        self,
        request: web.BaseRequest,
        upstream: aiohttp.ClientResponse,
        headers: CIMultiDict[str],
        cluster: str,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            # Headers are gone already: cut the client connection so the truncation is visible.
            log.warning("upstream error mid-stream %s", kv(cluster=cluster, error=type(exc).__name__))
            if request.transport is not None:
                request.transport.abort()
            return response
        await response.write_eof()
        return response
