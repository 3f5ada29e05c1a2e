"""What every request filter provides to the pipeline."""

from __future__ import annotations

import re
from typing import Protocol

from reference.gateway.context import Reject, RequestContext
from reference.gateway.schema import ConfigError, string

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class Filter(Protocol):
    """A synchronous request-phase step; returning a Reject answers the client and stops the pipeline."""

    def on_request(self, ctx: RequestContext) -> Reject | None: ...


def header_name(value: object, path: str) -> str:
    """An HTTP field name (RFC 9110 token)."""
    text = string(value, path)
    if not _TOKEN.fullmatch(text):
        raise ConfigError(path, f"must be a valid HTTP header name, got {text!r}")
    return text
