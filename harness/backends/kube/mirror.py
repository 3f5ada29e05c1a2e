"""Copies the overlays suites write locally into the gateway pods' overlay directories, byte for byte, and
takes a pod's overlay file away when the local one is removed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from harness.backends.kube.handles import SiteCluster
from harness.backends.kube.names import OVERLAY_KEY
from harness.backends.runner import CommandFailed

if TYPE_CHECKING:
    from harness.backends.kube.backend import KubeBackend


class OverlayMirror:
    """Copies each mirrored gateway's local overlay file, byte for byte, into its pod's overlay directory."""

    def __init__(self, backend: KubeBackend, interval: float = 0.05) -> None:
        self.backend = backend
        self.interval = interval
        self._watched: dict[Path, tuple[SiteCluster, str, bytes | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, site: SiteCluster, kname: str, overlay_dir: Path, current: bytes | None) -> None:
        with self._lock:
            self._watched[overlay_dir] = (site, kname, current)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="overlay-mirror", daemon=True)
            self._thread.start()

    def forget(self, overlay_dir: Path) -> None:
        with self._lock:
            self._watched.pop(overlay_dir, None)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def sync_once(self) -> None:
        with self._lock:
            items = list(self._watched.items())
        for overlay_dir, (site, kname, last) in items:
            visible = overlay_dir / OVERLAY_KEY
            try:
                data: bytes | None = visible.read_bytes()
            except OSError:
                # taken away (a suite's remove_overlay): the pod's visible name goes too; a file that is only
                # unreadable for a moment (between a rename and its link) is left to the next tick
                if visible.is_symlink() or visible.exists():
                    continue
                data = None
            if data == last:
                continue
            if data is None:
                self.backend.remove_pod_overlay(site, kname)
            else:
                self.backend.write_pod_overlay(site, kname, data)
            with self._lock:
                if overlay_dir in self._watched:
                    self._watched[overlay_dir] = (site, kname, data)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync_once()
            except CommandFailed:
                continue  # retried on the next tick; the suite's wait reports what the gateway serves
