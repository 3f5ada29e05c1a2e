"""What one grid_site_route runs beside the request path: the pollers, the serving-config watcher, the
store, and the refresh that turns samples into the snapshot requests read.

Everything here runs on the event loop. Each poll result is ingested, then every (site, cluster) of
the serving config is assessed again and a new immutable snapshot is swapped in; gauges and the
shedding log lines follow each refresh. Poll failures are logged when a peer's state changes, not on
every poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reference.gateway.logfmt import kv
from reference.gateway.site_route import availability, shedding, signals, snapshot
from reference.gateway.site_route.pollers import Poller, new_session
from reference.gateway.site_route.route_metrics import SiteRouteMetrics
from reference.gateway.site_route.serving_config import ServingCandidate, ServingConfig, ServingPeer
from reference.gateway.site_route.settings import GridSiteRouteConfig
from reference.gateway.site_route.signals_store import Key, SignalsStore
from reference.gateway.site_route.snapshot import RouteSnapshot
from reference.gateway.site_route.watcher import ServingWatcher

log = logging.getLogger("agn.gateway.site_route")


class SiteRouteRuntime:
    def __init__(self, config: GridSiteRouteConfig, serving_path: Path, serving_bytes: bytes,
                 serving: ServingConfig, declared: frozenset[str], metrics: SiteRouteMetrics,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = config.availability
        self.serving_path = serving_path
        self.declared = declared
        self.metrics = metrics
        self.clock = clock
        self.snapshot = RouteSnapshot()
        self.store = SignalsStore(serving.window_secs, self.settings)
        self.serving = serving
        self.candidates: tuple[ServingCandidate, ...] = ()
        self.keys: tuple[Key, ...] = ()
        self.shed_retry_after = shedding.retry_after_secs(self.settings.room_after_ms)
        self.unready_retry_after = 1
        self._pollers: dict[str, Poller] = {}
        self._retired: set[asyncio.Task[None]] = set()  # pollers of peers the serving config changed
        self._failing: dict[str, str] = {}  # peer site -> the failure last logged
        self._session: Any = None
        self._started = False
        self.watcher = ServingWatcher(serving_path, serving_bytes, self._reloaded, self._rejected)
        self.apply(serving)

    # ------------------------------------------------------------------ serving config

    def apply(self, serving: ServingConfig) -> None:
        """Serve `serving`: its candidates whose cluster is declared, its peers polled."""
        accepted = []
        for c in serving.candidates:
            if c.cluster in self.declared:
                accepted.append(c)
            else:
                log.warning("serving candidate skipped %s", kv(
                    path=str(self.serving_path), kind=c.kind, name=c.name, site=c.site, cluster=c.cluster,
                    reason="cluster not declared by a load_balancer after grid_site_route"))
        previous = set(self.keys)
        self.serving = serving
        self.candidates = tuple(accepted)
        self.keys = tuple(dict.fromkeys((c.site, c.cluster) for c in accepted))
        self.store.window_secs = serving.window_secs
        self.store.retain(self.keys)
        self.metrics.forget_sites(previous - set(self.keys))
        dropped = set(self.snapshot.models) - set(snapshot.model_sites(self.candidates))
        self.metrics.forget_models(dropped)
        intervals = [p.interval_ms for p in serving.peers]
        self.unready_retry_after = shedding.retry_after_secs(max(intervals, default=1000))
        if self._started:
            self._sync_pollers()
        self.refresh()
        log.info("serving config loaded %s", kv(
            path=str(self.serving_path), local_site=serving.local_site, candidates=len(accepted),
            skipped=len(serving.candidates) - len(accepted), peers=len(serving.peers)))

    def _reloaded(self, serving: ServingConfig) -> None:
        self.apply(serving)

    def _rejected(self, reason: str) -> None:
        log.warning("serving config rejected %s", kv(path=str(self.serving_path), error=reason,
                                                      retained="last good serving config"))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._session = new_session()
        self._started = True
        self._sync_pollers()
        self.watcher.start()

    async def stop(self) -> None:
        self._started = False
        await self.watcher.stop()
        for poller in list(self._pollers.values()):
            await poller.stop()
        self._pollers.clear()
        for task in list(self._retired):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._retired.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _sync_pollers(self) -> None:
        wanted = {peer.site: peer for peer in self.serving.peers}
        for site, poller in list(self._pollers.items()):
            if wanted.get(site) != poller.peer:
                if poller.task is not None:
                    poller.task.cancel()
                    self._retired.add(poller.task)
                    poller.task.add_done_callback(self._retired.discard)
                del self._pollers[site]
                self._failing.pop(site, None)
        for site, peer in wanted.items():
            if site not in self._pollers:
                poller = self._pollers[site] = Poller(peer, self._session, self.on_poll)
                poller.start()

    # ------------------------------------------------------------------ polls and refreshes

    def on_poll(self, peer: ServingPeer, result: str, body: str | None, error: str | None) -> None:
        now = self.clock()
        if result == "ok" and body is not None:
            try:
                by_cluster = signals.parse_signals(body, peer.site)
            except signals.SignalsError as exc:
                result, error = "parse_error", str(exc)
            else:
                for cluster, samples in by_cluster.items():
                    key = (peer.site, cluster)
                    if key in self.keys:
                        self.store.ingest(key, samples, now)
        self.metrics.polled(peer.site, result)
        self._log_poll(peer, result, error)
        self.refresh(now)

    def _log_poll(self, peer: ServingPeer, result: str, error: str | None) -> None:
        site = peer.site
        if result == "ok":
            if self._failing.pop(site, None) is not None:
                log.info("signals poll recovered %s", kv(site=site, addr=peer.url))
            return
        state = f"{result}: {error}"
        if self._failing.get(site) != state:
            self._failing[site] = state
            log.warning("signals poll failing %s", kv(site=site, addr=peer.url, result=result, error=error))

    def refresh(self, now: float | None = None) -> RouteSnapshot:
        """Assess every (site, cluster) at `now`, then swap in the snapshot built from them."""
        now = self.clock() if now is None else now
        self.store.prune(now)
        views = []
        for site, cluster in self.keys:
            key = (site, cluster)
            view, learned = availability.assess(site, cluster, self.store.learned.get(key), self.store.history(key),
                                                now, self.settings, self.serving.load_window_ms)
            if learned is not None:
                self.store.learned[key] = learned
            views.append(view)
        weighted = {(v.site, v.cluster): v for v in availability.with_weights(views, self.settings.explore_floor)}
        previous = self.snapshot.shedding
        fresh = snapshot.build_snapshot(self.candidates, weighted, previous, self.settings)
        for model in sorted(fresh.shedding - previous):
            log.warning("shedding engaged %s", kv(model=model, sites=len(fresh.models[model].ready)))
        for model in sorted(previous - fresh.shedding):
            log.info("shedding released %s", kv(model=model))
        for (site, cluster), view in weighted.items():
            self.metrics.site_gauges(site, cluster, dict(availability.gauge_values(view)))
        for model in fresh.models:
            self.metrics.set_shedding(model, model in fresh.shedding)
        self.snapshot = fresh
        return fresh
