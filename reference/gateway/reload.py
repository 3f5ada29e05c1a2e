"""Overlay hot reload: watch the overlay's directory, debounce, re-read, validate, swap.

Kubernetes projects a ConfigMap as ``routing-overlay.json -> ..data/routing-overlay.json`` and
publishes a new version by atomically replacing the ``..data`` symlink, so the file's *directory* is
watched, not the file. Filesystem events are the only trigger. Each attempt ends in one result:
accepted (swapped), unchanged (same semantic revision, no swap), rejected or read_error (the
last-known-good snapshot keeps serving).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import watchfiles

from reference.gateway.filters.intelligent_route import IntelligentRouteFilter
from reference.gateway.logfmt import kv
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.snapshot import Snapshot
from reference.gateway.snapshot_store import build_snapshot, read_bounded
from reference.overlay import OverlayRejected

log = logging.getLogger("agn.gateway.reload")


def load_cold_start(
    path: Path, expected_scope: Mapping[str, str] | None, allowed_clusters: Iterable[str] | None
) -> Snapshot:
    """The first snapshot; raises OSError or OverlayRejected, which fail startup."""
    return build_snapshot(read_bounded(path), expected_scope, allowed_clusters)


class OverlayReloader:
    """Drives reload attempts for one intelligent_route instance in overlay mode."""

    def __init__(self, route: IntelligentRouteFilter, metrics: GatewayMetrics) -> None:
        config = route.config
        assert config.overlay_file is not None
        self.route = route
        self.metrics = metrics
        self.path = config.overlay_file
        self.debounce = config.debounce_ms / 1000
        self._scope = config.expected_scope
        self._clusters = config.clusters
        self._stop = asyncio.Event()
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Register the watch, then re-read once in case the file changed since the cold start."""
        self._tasks.append(asyncio.create_task(self._watch(), name=f"overlay-watch:{self.path}"))
        for _ in range(2):
            await asyncio.sleep(0)  # lets the watcher register before the authoritative re-read
        self._tasks.append(asyncio.create_task(self._debounce_loop(), name=f"overlay-reload:{self.path}"))
        await self._catch_up()

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def _watch(self) -> None:
        directory = self.path.parent
        while not self._stop.is_set():
            try:
                async for _changes in watchfiles.awatch(
                    directory,
                    watch_filter=None,
                    recursive=False,
                    debounce=50,
                    step=10,
                    stop_event=self._stop,  # type: ignore[arg-type]
                ):
                    self._dirty.set()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the directory vanished or the watch failed: report, retry later
                log.error("overlay watch failed %s", kv(path=str(directory), error=str(exc)))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=1.0)

    async def _debounce_loop(self) -> None:
        while True:
            await self._dirty.wait()
            if self.debounce > 0:
                await asyncio.sleep(self.debounce)
            self._dirty.clear()
            await self.reload()

    async def _catch_up(self) -> None:
        """Reload only if the bytes on disk differ from what is serving (no metric for a no-op)."""
        try:
            data = await asyncio.to_thread(read_bounded, self.path)
            fresh = await asyncio.to_thread(build_snapshot, data, self._scope, self._clusters)
        except (OSError, OverlayRejected):
            return
        if fresh.semantic_key != self.route.store.current.semantic_key:
            await self.reload()

    async def reload(self) -> str:
        """One reload attempt; returns its result."""
        async with self._lock:
            store = self.route.store
            retained = store.current.revision or store.current.semantic_key
            try:
                data = await asyncio.to_thread(read_bounded, self.path)
            except OSError as exc:
                self.metrics.reload("read_error")
                log.error(
                    "overlay reload read_error %s",
                    kv(path=str(self.path), error=exc.strerror or str(exc), retained_revision=retained),
                )
                return "read_error"
            try:
                snapshot = await asyncio.to_thread(build_snapshot, data, self._scope, self._clusters)
            except OverlayRejected as exc:
                self.metrics.reload("rejected")
                log.warning(
                    "overlay reload rejected %s",
                    kv(path=str(self.path), reason=exc.reason, detail=exc.detail, retained_revision=retained),
                )
                return "rejected"
            result = store.replace(snapshot)
            self.metrics.reload(result.result)
            log.info(
                "overlay reload %s %s",
                result.result,
                kv(
                    path=str(self.path),
                    format=snapshot.format,
                    serving_revision=store.current.revision or store.current.semantic_key,
                    previous_revision=retained,
                    candidates=store.current.candidate_count,
                    local_site=store.current.local_site,
                ),
            )
            return result.result
