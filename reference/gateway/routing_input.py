"""What a request asks intelligent_route for: a (kind, name) capability, nothing, or an invalid value.

MCP tool metadata takes precedence over the model header, so a client-supplied model name cannot
hijack structured tool routing. Other MCP methods do not route at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from reference.gateway.filters.mcp import METHOD_KEY, NAME_KEY, TOOLS_CALL

MAX_NAME_BYTES = 256
INFERENCE_MODEL = "inference_model"
MCP_TOOL = "mcp_tool"
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


class Invalid:
    """A routing value that is blank, oversized or has characters outside visible ASCII."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind


def valid_name(value: str) -> str | None:
    text = value.strip()
    if not text or len(text) > MAX_NAME_BYTES or not _VISIBLE_ASCII.fullmatch(text):
        return None
    return text


def extract(
    metadata: Mapping[str, Any], headers: Mapping[str, str], model_header: str
) -> tuple[str, str] | Invalid | None:
    """(kind, name) to look up, Invalid for a 400, or None when the request carries no routing source."""
    method = metadata.get(METHOD_KEY)
    if method is not None:
        if method != TOOLS_CALL:
            return None
        raw = metadata.get(NAME_KEY)
        name = valid_name(raw) if isinstance(raw, str) else None
        return (MCP_TOOL, name) if name is not None else Invalid(MCP_TOOL)
    value = headers.get(model_header)
    if value is None:
        return None
    name = valid_name(value)
    return (INFERENCE_MODEL, name) if name is not None else Invalid(INFERENCE_MODEL)
