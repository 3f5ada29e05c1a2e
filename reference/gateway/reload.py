"""Overlay hot reload: watch the overlay's directory, debounce, re-read, validate, swap.

Kubernetes projects a ConfigMap as ``routing-overlay.json -> ..data/routing-overlay.json`` and
publishes a new version by atomically replacing the ``..data`` symlink, so the file's *directory* is
watched, not the file. Filesystem events are the only trigger. Each attempt ends in one result:
accepted (swapped), unchanged (same semantic revision, no swap), rejected or read_error (the
last-known-good snapshot keeps serving).

The configured debounce still separates the first event of a burst from the swap; what can run inside
that window does: the file is read and validated as soon as the event arrives, and when the debounce
ends it is read once more and the prepared snapshot is swapped in only if the bytes are the same (else
they are validated again), so a long validation no longer adds to the reload delay. The watcher polls
for events every few milliseconds (`AGN_GATEWAY_WATCH_STEP_MS`, default 10), so the debounce starts at most
one step after the filesystem event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import watchfiles

from reference.gateway.filters.intelligent_route import IntelligentRouteFilter
from reference.gateway.logfmt import kv
from reference.gateway.metrics import GatewayMetrics
from reference.gateway.snapshot import Snapshot
from reference.gateway.snapshot_store import build_snapshot, read_bounded
from reference.overlay import OverlayRejected

log = logging.getLogger("agn.gateway.reload")

#: How often the watcher looks for new filesystem events (ms): the latency it adds before the debounce. Each
#: look costs CPU whether or not anything changed: an idle gateway spends about 3.5 ms of CPU per second on it
#: at 10 ms and 8.5 at 2 ms, and a run of the suites keeps dozens of gateways waiting.
WATCH_STEP_ENV = "AGN_GATEWAY_WATCH_STEP_MS"
DEFAULT_WATCH_STEP_MS = 10
#: The watcher groups a burst of events for at most this long (ms) before reporting it.
WATCH_DEBOUNCE_MS = 50


def watch_step_ms(environ: Mapping[str, str] = os.environ) -> int:
    """The watcher step from the environment (1..1000 ms), the default when unset or not a number."""
    try:
        value = int(environ.get(WATCH_STEP_ENV, ""))
    except ValueError:
        return DEFAULT_WATCH_STEP_MS
    return min(max(value, 1), 1000)


@dataclass(frozen=True)
class _Prepared:
    """The outcome of reading and validating the overlay bytes `data` ahead of the swap."""

    data: bytes
    snapshot: Snapshot | None = None
    rejected: OverlayRejected | None = None


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
        self._step_ms = watch_step_ms()

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
                    debounce=WATCH_DEBOUNCE_MS,
                    step=self._step_ms,
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
        loop = asyncio.get_running_loop()
        while True:
            await self._dirty.wait()
            began = loop.time()
            # read and validate inside the debounce window instead of after it
            prepared = await self._prepare() if self.debounce > 0 else None
            remaining = self.debounce - (loop.time() - began)
            if remaining > 0:
                await asyncio.sleep(remaining)
            self._dirty.clear()
            await self.reload(prepared)

    async def _prepare(self) -> _Prepared | None:
        """The file's bytes and their validation now; None when it cannot be read (the reload reports it)."""
        try:
            data = await asyncio.to_thread(read_bounded, self.path)
        except OSError:
            return None
        try:
            snapshot = await asyncio.to_thread(build_snapshot, data, self._scope, self._clusters)
        except OverlayRejected as exc:
            return _Prepared(data, rejected=exc)
        return _Prepared(data, snapshot=snapshot)

    async def _catch_up(self) -> None:
        """Reload only if the bytes on disk differ from what is serving (no metric for a no-op)."""
        try:
            data = await asyncio.to_thread(read_bounded, self.path)
            fresh = await asyncio.to_thread(build_snapshot, data, self._scope, self._clusters)
        except (OSError, OverlayRejected):
            return
        if fresh.semantic_key != self.route.store.current.semantic_key:
            await self.reload()

    async def reload(self, prepared: _Prepared | None = None) -> str:
        """One reload attempt; returns its result. The file is always read again; a `prepared` validation
        of the very same bytes is used instead of validating them twice."""
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
                if prepared is not None and prepared.data == data:
                    if prepared.rejected is not None:
                        raise prepared.rejected
                    assert prepared.snapshot is not None
                    snapshot = prepared.snapshot
                else:
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
