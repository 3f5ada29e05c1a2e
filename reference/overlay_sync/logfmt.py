"""One-line `key=value` log records, quoted only when needed, so each sync attempt is one greppable line."""

from __future__ import annotations

import logging
import sys


def kv(message: str, **fields: object) -> str:
    parts = [message]
    for key, value in fields.items():
        if value is None:
            continue
        text = str(value)
        if not text or any(ch in text for ch in ' "=\n\t'):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts)


def configure(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("agn.overlay_sync")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
