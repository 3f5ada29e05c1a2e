"""One sync attempt: read the ConfigMap, validate the overlay, deliver it or keep the last good file.

Outcomes:
- `accepted`: a new valid revision was written into the target directory;
- `unchanged`: the ConfigMap holds the revision already being served, nothing was written;
- `rejected`: the overlay failed validation (the reason is one of `reference.overlay.REASONS`); the last
  good file keeps serving;
- `read_error`: the ConfigMap is missing, unreadable or lacks the overlay key; the last good file stays;
- `write_error`: a valid revision could not be written into the target directory (full or read-only
  volume); the previous file stays and the next attempt tries again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference.files import current_bytes, project
from reference.overlay import Overlay, OverlayRejected, parse_overlay
from reference.overlay_sync.logfmt import kv
from reference.overlay_sync.metrics import OUTCOMES, SyncMetrics
from reference.overlay_sync.source import ConfigMapSource, SourceError

__all__ = ["OUTCOMES", "OverlaySyncer", "SyncResult"]

log = logging.getLogger("agn.overlay_sync")


@dataclass(frozen=True)
class SyncResult:
    outcome: str
    revision: str | None = None
    generation: int | None = None
    reason: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class _Delivered:
    identity: str  # the revision, or a hash of the bytes for payloads without one
    revision: str | None
    generation: int | None
    size: int


class OverlaySyncer:
    """Holds what has been delivered and turns each ConfigMap observation into one outcome."""

    def __init__(
        self,
        source: ConfigMapSource,
        target_dir: Path,
        file_name: str = "routing-overlay.json",
        expected_scope: Mapping[str, str] | None = None,
        metrics: SyncMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.target_dir = target_dir
        self.file_name = file_name
        self.expected_scope = dict(expected_scope) if expected_scope else None
        self.metrics = metrics or SyncMetrics()
        self.clock = clock
        self._lock = threading.Lock()
        self._delivered: _Delivered | None = None
        self.last: SyncResult | None = None

    # --- state for readiness ----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._delivered is not None

    def status(self) -> dict[str, Any]:
        """What /ready reports: the serving revision and the last attempt."""
        delivered = self._delivered
        last = self.last
        out: dict[str, Any] = {
            "ready": delivered is not None,
            "revision": delivered.revision if delivered else None,
            "generation": delivered.generation if delivered else None,
            "last_outcome": last.outcome if last else None,
            "last_reason": last.reason if last else None,
            "last_detail": last.detail if last else None,
        }
        if delivered is None:
            if last is None:
                out["reason"] = "no sync attempt yet"
            else:
                out["reason"] = f"no revision delivered yet; last attempt {last.outcome}: {last.detail or ''}".strip()
        return out

    # --- restore ----------------------------------------------------------------------------------

    def restore(self) -> bool:
        """Adopt a valid overlay already in the target (a restarted sidecar keeps serving); True if adopted."""
        data = current_bytes(self.target_dir, self.file_name)
        if data is None:
            return False
        try:
            overlay = parse_overlay(data, expected_scope=self.expected_scope, allowed_clusters=None)
        except OverlayRejected as exc:
            log.info(kv("restore skipped", target=self._target(), reason=exc.reason, detail=exc.detail))
            return False
        with self._lock:
            self._set_delivered(_identity(overlay, data), overlay, data)
        log.info(kv("restored", target=self._target(), revision=overlay.revision))
        return True

    # --- sync -------------------------------------------------------------------------------------

    def sync_once(self) -> SyncResult:
        """Run one attempt; never raises for bad input, and logs exactly one line."""
        with self._lock:
            result = self._attempt()
            self.last = result
            self.metrics.syncs.labels(outcome=result.outcome).inc()
            if result.outcome == "rejected" and result.reason:
                self.metrics.rejections.labels(reason=result.reason).inc()
                self.metrics.validation_failures.labels(reason=result.reason).inc()
            if result.outcome in ("accepted", "unchanged"):
                self.metrics.last_success.set(self.clock())
                self.metrics.degraded.set(0)
            elif self._delivered is not None:
                self.metrics.degraded.set(1)
        level = logging.INFO if result.outcome in ("accepted", "unchanged") else logging.WARNING
        log.log(
            level,
            kv(
                "sync",
                outcome=result.outcome,
                revision=result.revision,
                generation=result.generation,
                reason=result.reason,
                source=self.source.describe(),
                detail=result.detail,
            ),
        )
        return result

    def _attempt(self) -> SyncResult:
        try:
            payload = self.source.read()
        except SourceError as exc:
            return SyncResult("read_error", reason="read_error", detail=str(exc))
        data = payload.data
        try:
            overlay = parse_overlay(data, expected_scope=self.expected_scope, allowed_clusters=None)
        except OverlayRejected as exc:
            return SyncResult("rejected", reason=exc.reason, detail=exc.detail)
        identity = _identity(overlay, data)
        delivered = self._delivered
        on_disk = current_bytes(self.target_dir, self.file_name)
        if delivered is not None and delivered.identity == identity and on_disk is not None:
            return SyncResult("unchanged", revision=overlay.revision, generation=overlay.source_generation)
        try:
            project(self.target_dir, self.file_name, data)
        except OSError as exc:
            detail = f"cannot write into {self.target_dir}: {exc.strerror or exc}"
            return SyncResult("write_error", revision=overlay.revision, detail=detail)
        self._set_delivered(identity, overlay, data)
        self.metrics.last_write.set(self.clock())
        return SyncResult("accepted", revision=overlay.revision, generation=overlay.source_generation)

    def _set_delivered(self, identity: str, overlay: Overlay, data: bytes) -> None:
        self._delivered = _Delivered(identity, overlay.revision, overlay.source_generation, len(data))
        self.metrics.ready.set(1)
        self.metrics.generation.set(overlay.source_generation or 0)
        self.metrics.payload_bytes.set(len(data))

    def _target(self) -> str:
        return str(self.target_dir / self.file_name)


def _identity(overlay: Overlay, data: bytes) -> str:
    if overlay.revision is not None:
        return overlay.revision
    return "bytes:" + hashlib.sha256(data).hexdigest()
