"""One-line log events: ``event key=value ...`` with values quoted when they need it.

Values are quoted JSON-style when they contain spaces, quotes or control characters, so a log line
can never be split or forged by data that came from a file or a request path.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

LEVELS = ("debug", "info", "warning", "error")


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if not text or any(ch in text for ch in ' "=\\') or not text.isprintable():
        return json.dumps(text)
    return text


def kv(**fields: Any) -> str:
    return " ".join(f"{name}={_value(value)}" for name, value in fields.items() if value is not None)


def configure(level: str) -> None:
    """Send the gateway's logs to stderr, one line per event."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("agn.gateway")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # aiohttp logs unexpected handler errors itself; keep them on the same stream
    aiohttp_log = logging.getLogger("aiohttp")
    aiohttp_log.handlers[:] = [handler]
    aiohttp_log.setLevel(logging.WARNING if level != "debug" else logging.INFO)
    aiohttp_log.propagate = False
