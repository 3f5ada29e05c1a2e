"""The operator's reconcile loop: source -> scrape -> render -> sink, whenever a trigger fires.

`Operator` runs the same loop for the `dir` and the `kubernetes` source and sink: the periodic metrics
refresh, resource changes and the force-refresh annotation trigger a reconcile (reference.operator.triggers),
each configured metrics endpoint is scraped, every network is rendered, and the sinks publish what changed.
With the mesh it also announces this site's providers and renders the eligible remote ones.

The `dir` source is also watched for filesystem events (`watch_step_ms` > 0), so a resource change such as
a new force-refresh annotation starts a reconcile within milliseconds, as the watch event of a Kubernetes
API server does, rather than at the next poll; polling stays as the fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import watchfiles

from reference.operator import tool_probe
from reference.operator.core.admission import AdmissionMemory
from reference.operator.core.model import Clock, Resources
from reference.operator.core.render import Rendered, render
from reference.operator.mesh.runtime import MeshRuntime
from reference.operator.scrape import Scraper, targets_from_objects
from reference.operator.sinks import DirSink, MeshOutputs, OverlaySink
from reference.operator.sources import DirSource, Loaded, resource_files
from reference.operator.triggers import Triggers, fingerprint, force_tokens, refresh_interval

log = logging.getLogger("agn-operator")

#: How often the resource-directory watcher looks for events (ms); 0 turns the watch off (polling only). Each
#: look costs CPU whether or not anything changed (about 3.5 ms of CPU per second at 10 ms, 8.5 at 2 ms).
DEFAULT_WATCH_STEP_MS = 10


class ResourceSource(Protocol):
    """Where the loop reads grid resources from; `fingerprint` changes whenever `load` may differ."""

    def ready(self) -> bool: ...

    def fingerprint(self) -> str: ...

    def load(self) -> Loaded: ...


class WatchedDir(DirSource):
    """The `dir` source for the loop: always ready, fingerprinted by its files' names, times and contents."""

    def ready(self) -> bool:
        return True

    def fingerprint(self) -> str:
        return fingerprint(resource_files(self.directory))


class Operator:
    """The reconcile loop: source -> scrape -> render -> sink, whenever a trigger fires."""

    def __init__(
        self,
        source: ResourceSource,
        sink: OverlaySink,
        clock: Clock,
        poll: float = 0.5,
        ssl_context: ssl.SSLContext | None = None,
        mesh: MeshRuntime | None = None,
        watch_step_ms: int = 0,
    ) -> None:
        self.source = source
        self.watch_step_ms = watch_step_ms
        self._wake = asyncio.Event()
        self.sink = sink
        self.clock = clock
        self.poll = poll
        self.scraper = Scraper(clock, ssl_context)
        self.triggers = Triggers(clock)
        self.memory = AdmissionMemory()
        self.mesh = mesh
        self._mesh_seen: int | None = None
        self._mesh_error: str | None = None
        self._loaded: tuple[str, Loaded] | None = None
        self._reported: tuple[str, ...] = ()
        if mesh is not None and not isinstance(sink, MeshOutputs):
            log.info("mesh: this sink stores no mesh outputs; GridSite phases are used for rendering only")

    @classmethod
    def for_directories(
        cls,
        manifests: Path,
        out: Path,
        clock: Clock,
        poll: float = 0.5,
        ssl_context: ssl.SSLContext | None = None,
        mesh: MeshRuntime | None = None,
        watch_step_ms: int = DEFAULT_WATCH_STEP_MS,
    ) -> Operator:
        """The loop over a resource directory, writing into an output directory."""
        return cls(WatchedDir(manifests), DirSink(out), clock, poll, ssl_context, mesh, watch_step_ms)

    def snapshot(self) -> Loaded | None:
        """The resources the loop last read (None before its first look)."""
        return None if self._loaded is None else self._loaded[1]

    def observe(self) -> tuple[str, Loaded]:
        current = self.source.fingerprint()
        if self._loaded is None or self._loaded[0] != current:
            loaded = self.source.load()
            reported = tuple(str(issue) for issue in loaded.issues)
            if reported != self._reported:
                for line in reported:
                    log.error("skipped invalid resource: %s", line)
            self._reported = reported
            self._loaded = (current, loaded)
        return self._loaded

    async def reconcile(self, loaded: Loaded) -> bool:
        """Scrape, render and publish once; False when rendering failed (status records why)."""
        samples = await self.scraper.scrape(targets_from_objects(loaded.objects))
        for provider, problem in sorted(self.scraper.last_errors.items()):
            log.warning("metrics scrape of %s failed: %s", provider, problem)
        error: str | None = None
        rendered: list[Rendered] = []
        resources, remote = await self.discover_tools(loaded.resources), []
        if self.mesh is not None:
            self.mesh.update_local(loaded.resources, loaded.objects, samples)
            remote = self.mesh.remote_records()
            resources = replace(resources, sites=self.mesh.site_specs(resources.sites))
            self._mesh_seen = self.mesh.version
        try:
            rendered = render(resources, samples, remote, self.clock, self.memory)
        except Exception as exc:  # a bad policy must not stop the loop; status says why
            error = f"{type(exc).__name__}: {exc}"
            log.error("render failed: %s", error)
        # Sinks block on I/O (files, API calls): off the event loop, which also runs the mesh's timers.
        await asyncio.to_thread(self.sink.publish, loaded.resources.networks, rendered, self.clock.wall(), error)
        await self.write_mesh_outputs()
        return error is None

    async def discover_tools(self, resources: Resources) -> Resources:
        """Probe every AgentToolProvider's MCP endpoint; the tools found replace what its status listed (and
        are recorded there), a failed probe leaves the status as it was."""
        endpoints = {t.name: t.endpoint for t in resources.tool_providers if t.endpoint}
        found, failed = await tool_probe.probe_all(endpoints)
        for name, problem in sorted(failed.items()):
            log.warning("tool discovery of %s failed: %s", name, problem)
        if not found:
            return resources

        def record() -> None:
            for name, tools in sorted(found.items()):
                try:
                    self.sink.write_tool_status(name, tools)
                except OSError as exc:
                    log.warning("recording the tools of %s failed: %s", name, exc)

        await asyncio.to_thread(record)
        providers = tuple(replace(t, discovered_tools=found[t.name]) if t.name in found else t
                          for t in resources.tool_providers)
        return replace(resources, tool_providers=providers)

    async def write_mesh_outputs(self) -> None:
        """Discovered GridSites and the mesh status into the sink; the sink writes only what changed."""
        if self.mesh is None or not isinstance(self.sink, MeshOutputs):
            return
        sink = self.sink
        objects, document, networks = self.mesh.gridsite_objects(), self.mesh.status_document(), self.mesh.networks

        def write() -> None:
            sink.write_gridsites(objects, networks)
            sink.write_mesh_status(document)

        try:
            await asyncio.to_thread(write)
        except OSError as exc:
            message = str(exc)
            if message != self._mesh_error:  # a failure repeated every pass is logged once
                log.warning("writing the mesh outputs failed: %s", message)
            self._mesh_error = message
        else:
            if self._mesh_error is not None:
                log.info("mesh outputs written again")
            self._mesh_error = None

    def _mesh_due(self) -> bool:
        """A mesh change since the last render (none before the first render: that one is `initial`)."""
        return self.mesh is not None and self._mesh_seen is not None and self.mesh.version != self._mesh_seen

    async def _watch_dir(self, directory: Path, stop: asyncio.Event) -> None:
        """Set the wake event on every filesystem event under `directory`; polling covers any gap."""
        failed = False
        while not stop.is_set():
            try:
                async for _changes in watchfiles.awatch(
                    directory, watch_filter=None, debounce=50, step=self.watch_step_ms,
                    stop_event=stop,  # type: ignore[arg-type]
                ):
                    self._wake.set()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the directory vanished or cannot be watched: poll until it can
                if not failed:
                    log.warning("watching %s failed (polling every %gs): %s", directory, self.poll, exc)
                failed = True
                self._wake.set()
                await self._wait(stop, max(self.poll, 1.0))

    def _start_watch(self, stop: asyncio.Event) -> asyncio.Task[None] | None:
        if self.watch_step_ms <= 0 or not isinstance(self.source, WatchedDir):
            return None
        return asyncio.create_task(self._watch_dir(self.source.directory, stop), name="operator-watch")

    async def _wait(self, stop: asyncio.Event, timeout: float) -> None:
        """Sleep up to `timeout`, waking early on stop, a resource-directory event or a mesh change."""
        events = [stop, self._wake] if self.mesh is None else [stop, self._wake, self.mesh.changed]
        waiters = [asyncio.ensure_future(event.wait()) for event in events]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def run(self, stop: asyncio.Event, once: bool = False) -> int:
        watcher = None if once else self._start_watch(stop)
        try:
            return await self._run(stop, once)
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watcher
            await self.scraper.aclose()

    async def _run(self, stop: asyncio.Event, once: bool) -> int:
        while not stop.is_set():
            self._wake.clear()  # cleared before looking, so an event from now on wakes the wait
            if self.mesh is not None:
                self.mesh.changed.clear()  # cleared before looking, so a change from now on wakes the wait
            if not self.source.ready():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.poll)
                continue
            current, loaded = self.observe()
            tokens = force_tokens(loaded.objects)
            interval = refresh_interval(loaded.objects)
            reasons = self.triggers.due(interval, current, tokens)
            if self._mesh_due():
                reasons.append("mesh")
            if reasons:
                log.info("reconcile (%s)", ", ".join(reasons))
                ok = await self.reconcile(loaded)
                self.triggers.ran(current, tokens)
                if once:
                    return 0 if ok else 1
            else:
                await self.write_mesh_outputs()
            wait = min(self.poll, self.triggers.wait_time(interval))
            await self._wait(stop, max(wait, 0.01))
        return 0
