"""mcp: classify JSON-RPC MCP requests into filter metadata.

Sets ``mcp.method`` for every MCP request and, for ``tools/call``, ``mcp.name`` from ``params.name`` so
routing filters can match tools without re-parsing the body. Bodies that are not JSON-RPC 2.0 pass
through untouched. A body that claims JSON-RPC 2.0 but is malformed is rejected with 400, or passes
unclassified when ``on_invalid: continue``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference.gateway.context import NOT_JSON, Reject, RequestContext
from reference.gateway.schema import ConfigError, key, mapping

TYPE = "mcp"
ON_INVALID = ("continue", "reject")
METHOD_KEY = "mcp.method"
NAME_KEY = "mcp.name"
TOOLS_CALL = "tools/call"
MAX_METHOD_BYTES = 256


@dataclass(frozen=True)
class McpConfig:
    on_invalid: str = "reject"


def parse(raw: dict[str, Any], path: str) -> McpConfig:
    mapping(raw, path, required=("filter",), optional=("on_invalid",))
    value = raw.get("on_invalid", "reject")
    if value not in ON_INVALID:
        raise ConfigError(key(path, "on_invalid"), f"must be one of {', '.join(ON_INVALID)}")
    return McpConfig(on_invalid=value)


def classify(doc: Any) -> tuple[str, str | None] | None | bool:
    """(method, tool name) for an MCP request, None for non-MCP bodies, False for malformed MCP."""
    if not isinstance(doc, dict) or doc.get("jsonrpc") != "2.0":
        return None
    method = doc.get("method")
    if not isinstance(method, str) or not method or len(method) > MAX_METHOD_BYTES:
        return False
    if method != TOOLS_CALL:
        return method, None
    params = doc.get("params")
    if not isinstance(params, dict):
        return False
    name = params.get("name")
    if name is not None and not isinstance(name, str):
        return False
    return method, name


class McpFilter:
    needs_body = True

    def __init__(self, config: McpConfig) -> None:
        self._reject = config.on_invalid == "reject"

    def on_request(self, ctx: RequestContext) -> Reject | None:
        doc = ctx.json_body()
        if doc is NOT_JSON:
            return None
        result = classify(doc)
        if result is None:
            return None
        if result is False:
            return Reject(400, "invalid MCP request\n") if self._reject else None
        assert isinstance(result, tuple)
        method, name = result
        ctx.metadata[METHOD_KEY] = method
        if name is not None:
            ctx.metadata[NAME_KEY] = name
        return None
