"""One-line `key=value` log records, so each sync attempt is one greppable line."""

from __future__ import annotations

import logging
import sys

from reference.gateway.logfmt import kv as gateway_kv


def kv(message: str, **fields: object) -> str:
    """`message key=value ...`, quoting values the same way the gateway's log lines do."""
    rest = gateway_kv(**fields)
    return f"{message} {rest}" if rest else message


def configure(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("agn.overlay_sync")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
