"""The fake backend's MCP server: the tools/list answer an operator's tool discovery probes.

MCP over HTTP (the Streamable HTTP transport, JSON answers only): POST one JSON-RPC message to the
endpoint. ``initialize`` answers the server's capabilities, ``tools/list`` the configured tool names,
notifications (no id) are accepted with 202, anything else is a JSON-RPC error. A list of names is all a
discovery probe can be judged on; the schemas are minimal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

PATH = "/mcp"
PROTOCOL_VERSION = "2025-03-26"
METHOD_NOT_FOUND = -32601
INVALID_REQUEST = -32600
PARSE_ERROR = -32700


def answer(body: bytes, tools: Sequence[str], server: str) -> tuple[int, dict[str, Any] | None]:
    """(HTTP status, JSON-RPC response or None for an accepted notification) for one POSTed message."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return 400, _error(None, PARSE_ERROR, "body is not JSON")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        return 400, _error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 request")
    if "id" not in message:
        return 202, None
    method, request_id = message["method"], message["id"]
    if method == "initialize":
        return 200, _result(request_id, {"protocolVersion": PROTOCOL_VERSION, "capabilities": {"tools": {}},
                                         "serverInfo": {"name": server, "version": "1"}})
    if method == "tools/list":
        listed = [{"name": name, "description": f"fake tool {name}", "inputSchema": {"type": "object"}}
                  for name in tools]
        return 200, _result(request_id, {"tools": listed})
    if method == "ping":
        return 200, _result(request_id, {})
    return 200, _error(request_id, METHOD_NOT_FOUND, f"method {method} is not served here")


def _result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
