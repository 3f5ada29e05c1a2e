"""Per-request state the filters of one pipeline share."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from multidict import CIMultiDict

NOT_JSON: Any = object()  # sentinel for bodies that are not a JSON document
_UNPARSED: Any = object()


class Reject(NamedTuple):
    """A filter's decision to answer the client itself with a short body (plain text unless it says
    otherwise) and any extra response headers."""

    status: int
    body: str
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "text/plain"


class RequestContext:
    """What a request looks like to filters: headers to forward, body, chosen cluster, metadata.

    `headers` is the mutable copy that will be forwarded upstream, so a filter that sets or removes a
    header here changes what the upstream sees. `metadata` is in-process only and never forwarded.
    `peer` is the downstream mTLS identity on a TLS listener that verified a client certificate.
    """

    __slots__ = (
        "method", "path", "raw_path", "headers", "body", "cluster", "upstream", "metadata", "peer",
        "response_headers", "_json",
    )

    def __init__(self, method: str, path: str, raw_path: str, headers: CIMultiDict[str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.raw_path = raw_path
        self.headers = headers
        self.body = body
        self.cluster: str | None = None
        self.upstream: Any = None
        self.metadata: dict[str, Any] = {}
        self.peer: Any = None  # the verified TLS client identity (reference.gateway.tls.PeerIdentity), if any
        self.response_headers: list[tuple[str, str]] = []  # set on the upstream's response to the client
        self._json: Any = _UNPARSED

    def json_body(self) -> Any:
        """The body parsed as JSON once per request, or NOT_JSON."""
        if self._json is _UNPARSED:
            parsed: Any = NOT_JSON
            if self.body:
                try:
                    parsed = json.loads(self.body)
                except (ValueError, RecursionError):
                    parsed = NOT_JSON
            self._json = parsed
        return self._json
