"""mcp: classify JSON-RPC MCP requests into filter metadata.

Sets ``mcp.method`` for every MCP request and, for ``tools/call`` and ``prompts/get``, ``mcp.name`` from
``params.name`` (``resources/read``: ``params.uri``) so routing filters can match tools without re-parsing
the body. What counts as invalid follows the public Praxis mcp filter: a body that is not JSON, not a
JSON-RPC 2.0 object (an ordinary chat request is one), without a string method, a response, or an
``id`` that is not a string, number or null; and a selector method without its selector. Invalid input
is rejected with 400 (``on_invalid: reject``, the default) or passes unclassified (``continue``). A
batch is always rejected. Method and name values with control characters or over 256 bytes are not
promoted.
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


SELECTORS = {TOOLS_CALL: "name", "prompts/get": "name", "resources/read": "uri"}
BATCH: Any = object()  # a JSON array: refused whatever on_invalid says


def classify(doc: Any) -> tuple[str, str | None] | None | Any:
    """(method, selector) for an MCP request, None for invalid input, BATCH for a batch."""
    if isinstance(doc, list):
        return BATCH
    if not isinstance(doc, dict) or doc.get("jsonrpc") != "2.0":
        return None
    if "id" in doc and (isinstance(doc["id"], bool) or not isinstance(doc["id"], str | int | float | type(None))):
        return None
    method = doc.get("method")
    if not isinstance(method, str) or "result" in doc or "error" in doc:
        return None
    selector = SELECTORS.get(method)
    if selector is None:
        return method, None
    params = doc.get("params")
    value = params.get(selector) if isinstance(params, dict) else None
    if not isinstance(value, str):
        return None
    return method, value


def _promotable(value: str) -> bool:
    return len(value.encode("utf-8", "surrogatepass")) <= MAX_METHOD_BYTES and not any(
        ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value)


class McpFilter:
    needs_body = True

    def __init__(self, config: McpConfig) -> None:
        self._reject = config.on_invalid == "reject"

    def on_request(self, ctx: RequestContext) -> Reject | None:
        if not ctx.body:  # nothing to classify (a GET): the public filter passes it through too
            return None
        doc = ctx.json_body()
        result = None if doc is NOT_JSON else classify(doc)
        if result is BATCH:
            return Reject(400, "MCP batch requests are not supported\n")
        if result is None:
            return Reject(400, "invalid MCP request\n") if self._reject else None
        method, name = result
        if _promotable(method):
            ctx.metadata[METHOD_KEY] = method
        if name is not None and _promotable(name):
            ctx.metadata[NAME_KEY] = name
        return None
