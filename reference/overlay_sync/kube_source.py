"""The ConfigMap read through the Kubernetes API: one named ConfigMap, listed then watched.

The watch (field selector `metadata.name=NAME`) keeps the latest version in memory, resumes from its
resourceVersion, lists again after 410 Gone and backs off while the API server cannot be reached; each
change wakes the syncer, which validates and delivers exactly as it does for the file source.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

from kubernetes import client

from reference.kube_client import WATCH_SECONDS, ListWatch
from reference.overlay_sync.source import OVERLAY_KEY, ConfigMapPayload, SourceError, payload_from_configmap

log = logging.getLogger("agn.overlay_sync")
#: How long the first read waits for the initial list before reporting a read error.
FIRST_LIST_SECONDS = 5.0


class KubeConfigMapSource:
    """One ConfigMap of a cluster as a `ConfigMapSource`; never reads anything but that ConfigMap."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        key: str = OVERLAY_KEY,
        *,
        watch_seconds: int = WATCH_SECONDS,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.key = key
        call = functools.partial(client.CoreV1Api(api).list_namespaced_config_map, namespace)
        self.watch = ListWatch(
            f"configmap {namespace}/{name}",
            call,
            self._changed,
            field_selector=f"metadata.name={name}",
            watch_seconds=watch_seconds,
            backoff=backoff,
            logger=log,
        )
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def describe(self) -> str:
        return f"configmap {self.namespace}/{self.name}"

    def read(self) -> ConfigMapPayload:
        if not self.watch.synced.wait(FIRST_LIST_SECONDS):
            problem = self.watch.error or "no answer yet"
            raise SourceError(f"cannot list {self.describe()}: {problem}")
        found = [o for o in self.watch.snapshot() if (o.get("metadata") or {}).get("name") == self.name]
        if not found:
            raise SourceError(f"{self.describe()} not found")
        return payload_from_configmap(found[0], self.key)

    def _changed(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing: nothing left to wake
                loop.call_soon_threadsafe(wake.set)

    async def changes(self, stop: asyncio.Event) -> AsyncIterator[None]:
        self._loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        self.watch.start()
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                waking = asyncio.create_task(wake.wait())
                await asyncio.wait({stopping, waking}, return_when=asyncio.FIRST_COMPLETED)
                waking.cancel()
                if stop.is_set():
                    return
                wake.clear()
                yield None
        finally:
            stopping.cancel()
            self._wake = None
            await asyncio.to_thread(self.watch.stop)
