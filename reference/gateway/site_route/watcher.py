"""Re-read the serving config when it changes: its status is looked at every POLL_SECS.

A change of modification time, size or inode (a ConfigMap update swaps a symlink) makes the file be
read; bytes that differ from the last ones read are parsed, and either handed to `on_config` or, when
unreadable or invalid, described to `on_error` while the last good config keeps serving.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from reference.gateway.schema import ConfigError
from reference.gateway.site_route.background import Background
from reference.gateway.site_route.serving_config import (
    ServingConfig,
    describe_error,
    parse_serving_bytes,
    read_serving_bytes,
)

POLL_SECS = 1.0


def signature(path: Path) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size, status.st_ino


class ServingWatcher(Background):
    def __init__(self, path: Path, data: bytes, on_config: Callable[[ServingConfig], None],
                 on_error: Callable[[str], None], poll_secs: float = POLL_SECS) -> None:
        self.path = path
        self._data: bytes | None = data
        self._signature = signature(path)
        self._on_config = on_config
        self._on_error = on_error
        self._poll_secs = poll_secs

    @property
    def task_name(self) -> str:
        return f"serving-config-watch:{self.path}"

    def check(self) -> str:
        """Look once: "unchanged", "loaded" or "rejected"."""
        current = signature(self.path)
        if current == self._signature:
            return "unchanged"
        self._signature = current
        try:
            data = read_serving_bytes(self.path)
            if data == self._data:
                return "unchanged"
            self._data = data
            config = parse_serving_bytes(data, self.path.parent)
        except (OSError, ConfigError) as exc:
            self._on_error(describe_error(self.path, exc))
            return "rejected"
        self._on_config(config)
        return "loaded"

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._poll_secs)
            self.check()
