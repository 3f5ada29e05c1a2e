"""json_body_field: promote one top-level JSON body field to a request header.

An OpenAI-style body carries the model in ``model``; later filters route on a header, so this filter
copies the value there. Any client-supplied copy of the header is removed first, so a client cannot
pick a route the body does not ask for. Bodies that are not JSON objects pass through untouched. Values of
any length are promoted (the request body is bounded already), so the routing filter sees an oversized
value and answers it as one rather than as a request without a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from reference.gateway.context import NOT_JSON, Reject, RequestContext
from reference.gateway.filters.base import header_name
from reference.gateway.schema import key, mapping, string

TYPE = "json_body_field"


@dataclass(frozen=True)
class JsonBodyFieldConfig:
    field: str
    header: str


def parse(raw: dict[str, Any], path: str) -> JsonBodyFieldConfig:
    mapping(raw, path, required=("filter", "field", "header"))
    return JsonBodyFieldConfig(
        field=string(raw["field"], key(path, "field")),
        header=header_name(raw["header"], key(path, "header")),
    )


def header_value(value: Any) -> str | None:
    """The header text for a JSON value: strings verbatim, other values as compact JSON; None if unusable."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if not text:
        return None
    if any(ord(ch) < 0x20 and ch != "\t" or ord(ch) == 0x7F for ch in text):
        return None
    return text


class JsonBodyFieldFilter:
    needs_body = True

    def __init__(self, config: JsonBodyFieldConfig) -> None:
        self._field = config.field
        self._header = config.header

    def on_request(self, ctx: RequestContext) -> Reject | None:
        ctx.headers.popall(self._header, None)
        doc = ctx.json_body()
        if doc is NOT_JSON or not isinstance(doc, dict):
            return None
        value = header_value(doc.get(self._field))
        if value is not None:
            ctx.headers[self._header] = value
        return None
