"""One-shot HTTP requests the harness makes over and over (readiness probes, /metrics scrapes).

``httpx.get`` builds a new client for every call, and with it an SSL context that loads the system's
certificate store: about 50 ms of CPU even for a plain-HTTP URL. A run polls readiness and scrapes
metrics hundreds of times, so the harness used to spend more CPU on certificate stores than on judging.
`get` sends each request on a fresh connection, exactly as ``httpx.get`` does, through one shared client
whose trust store is loaded once per process.
"""

from __future__ import annotations

import functools
import ssl

import httpx

__all__ = ["default_tls", "get"]

# No connection is kept alive: a probe must see the process listening now, not a pooled socket to an
# earlier process on the same port.
_ONE_SHOT = httpx.Limits(max_keepalive_connections=0)


@functools.cache
def default_tls() -> ssl.SSLContext:
    """The system trust store as an SSL context, loaded once (what ``verify=True`` would load each time)."""
    return ssl.create_default_context()


@functools.cache
def _client() -> httpx.Client:
    return httpx.Client(verify=default_tls(), limits=_ONE_SHOT)


def get(url: str, *, timeout: float, verify: ssl.SSLContext | None = None) -> httpx.Response:
    """GET `url` on a new connection; `verify` is the trust for an HTTPS URL (default: the system store)."""
    if verify is None:
        return _client().get(url, timeout=timeout)
    with httpx.Client(verify=verify, limits=_ONE_SHOT) as client:
        return client.get(url, timeout=timeout)
