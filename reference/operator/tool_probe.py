"""Tool discovery: ask each AgentToolProvider's MCP endpoint which tools it advertises.

MCP over HTTP (Streamable HTTP, JSON answers): ``initialize``, the ``notifications/initialized``
notification, then ``tools/list`` (following ``nextCursor`` pages), each one POSTed JSON-RPC message;
an ``Mcp-Session-Id`` the server hands out on initialize is sent back on the later messages. A probe
that fails leaves what the provider's status already records in place: discovery refreshes the
advertised names, it does not erase them because a server was briefly unreachable.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any

import httpx

PROTOCOL_VERSION = "2025-03-26"
PROBE_SECONDS = 2.0
MAX_PAGES = 32
MAX_TOOLS = 1024
SESSION_HEADER = "Mcp-Session-Id"
_ids = itertools.count(1)


class ProbeError(Exception):
    """The endpoint did not answer a usable tools/list; the message says why (never a credential)."""


async def _call(client: httpx.AsyncClient, endpoint: str, message: dict[str, Any],
                headers: Mapping[str, str]) -> httpx.Response:
    try:
        response = await client.post(endpoint, json=message, headers={
            "Accept": "application/json, text/event-stream", **headers})
    except httpx.HTTPError as exc:
        raise ProbeError(f"{type(exc).__name__}: {exc}") from None
    if response.status_code >= 400:
        raise ProbeError(f"{message['method']} answered HTTP {response.status_code}")
    return response


def _result(response: httpx.Response, method: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise ProbeError(f"{method} answered no JSON") from None
    if not isinstance(body, dict) or "error" in body or not isinstance(body.get("result"), dict):
        raise ProbeError(f"{method} answered an error or no result")
    result: dict[str, Any] = body["result"]
    return result


async def probe(client: httpx.AsyncClient, endpoint: str) -> tuple[str, ...]:
    """The tool names the MCP server at `endpoint` advertises, in its order, without duplicates."""
    initialize = {"jsonrpc": "2.0", "id": next(_ids), "method": "initialize",
                  "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                             "clientInfo": {"name": "agn-operator", "version": "1"}}}
    response = await _call(client, endpoint, initialize, {})
    _result(response, "initialize")
    session = response.headers.get(SESSION_HEADER)
    headers = {SESSION_HEADER: session} if session else {}
    await _call(client, endpoint, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    names: dict[str, None] = {}
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = {"cursor": cursor} if cursor else {}
        result = _result(await _call(client, endpoint, {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/list",
                                                         "params": params}, headers), "tools/list")
        tools = result.get("tools")
        if not isinstance(tools, list):
            raise ProbeError("tools/list answered no tools list")
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str) and name.strip() and len(names) < MAX_TOOLS:
                names[name] = None
        cursor = result.get("nextCursor") if isinstance(result.get("nextCursor"), str) else None
        if not cursor:
            return tuple(names)
    raise ProbeError(f"tools/list did not end within {MAX_PAGES} pages")


async def probe_all(endpoints: Mapping[str, str]) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """Probe every provider's endpoint at once: (names by provider, failure by provider)."""
    found: dict[str, tuple[str, ...]] = {}
    failed: dict[str, str] = {}
    if not endpoints:
        return found, failed
    async with httpx.AsyncClient(timeout=PROBE_SECONDS, follow_redirects=False) as client:
        providers = list(endpoints)
        outcomes = await asyncio.gather(*(probe(client, endpoints[p]) for p in providers), return_exceptions=True)
    for provider, outcome in zip(providers, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, ProbeError):
                raise outcome
            failed[provider] = str(outcome)
        else:
            found[provider] = outcome
    return found, failed


__all__ = ["ProbeError", "probe", "probe_all"]
