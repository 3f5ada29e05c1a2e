"""Named breakages of the reference overlay-sync, each a monkeypatch of one behaviour the producer suite
judges under the overlaySync feature (suites/producer/test_overlay_sync.py).

Each reproduces a mistake a real sidecar could make: delivering what it did not validate, rewriting the
serving file in place, dropping the last good file when it refuses an update, claiming readiness before
it serves anything, reading the ConfigMap once. selfcheck/sync_launch.py applies one and starts the
reference overlay-sync; selfcheck/operator_targets.py says which tests each must fail.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from reference.overlay import OverlayRejected, canonical_digest
from reference.overlay_sync import sync
from reference.overlay_sync.sync import OverlaySyncer, SyncResult
from selfcheck.registry import Breakage, patch, registrar, wrap

__all__ = ["BREAKAGES"]

BREAKAGES: dict[str, Breakage] = {}
breakage = registrar(BREAKAGES)

_DIGEST_REASONS = ("digest_mismatch", "revision_digest_mismatch")
Parse = Callable[..., Any]


def _parse_with(fix: Callable[[Parse, bytes, dict[str, Any]], Any]) -> None:
    original: Parse = sync.parse_overlay
    patch(sync, "parse_overlay", lambda data, **kwargs: fix(original, data, kwargs))


@breakage("sync-digest-unchecked", "overlay-sync delivers an envelope whose content digest does not match")
def _digest_unchecked() -> None:
    def reseal(data: bytes) -> bytes:
        doc = json.loads(data)
        value = canonical_digest(doc["overlay"])
        doc["revision"]["value"] = doc["content_digest"]["value"] = value
        return json.dumps(doc).encode("utf-8")

    def fix(original: Parse, data: bytes, kwargs: dict[str, Any]) -> Any:
        try:
            return original(data, **kwargs)
        except OverlayRejected as exc:
            if exc.reason not in _DIGEST_REASONS:
                raise
            return original(reseal(data), **kwargs)  # judged as if sealed; the original bytes are delivered

    _parse_with(fix)


@breakage("sync-scope-unchecked", "overlay-sync delivers envelopes scoped to another gateway")
def _scope_unchecked() -> None:
    _parse_with(lambda original, data, kwargs: original(data, **{**kwargs, "expected_scope": None}))


@breakage("sync-in-place-write", "overlay-sync truncates and rewrites the serving file instead of replacing it")
def _in_place_write() -> None:
    def write(target_dir: Path, file_name: str, data: bytes) -> Path:
        target_dir.mkdir(parents=True, exist_ok=True)
        path = target_dir / file_name
        with open(path, "r+b" if path.exists() else "wb") as handle:
            handle.truncate(0)
            for start in range(0, len(data), 4096):
                handle.write(data[start:start + 4096])
                handle.flush()
        return target_dir

    patch(sync, "project", write)


@breakage("sync-deletes-on-reject", "overlay-sync removes the serving file when it refuses an update")
def _deletes_on_reject() -> None:
    def attempt(original: Callable[[OverlaySyncer], SyncResult], self: OverlaySyncer) -> SyncResult:
        result = original(self)
        if result.outcome == "rejected":
            (self.target_dir / self.file_name).unlink(missing_ok=True)
            self._delivered = None
        return result

    wrap(OverlaySyncer, "_attempt", attempt)


@breakage("sync-ready-at-start", "overlay-sync reports ready before it has delivered anything")
def _ready_at_start() -> None:
    def status(original: Callable[[OverlaySyncer], Mapping[str, Any]], self: OverlaySyncer) -> dict[str, Any]:
        return {**original(self), "ready": True}

    wrap(OverlaySyncer, "status", status)


@breakage("sync-first-only", "overlay-sync delivers the first revision and ignores every later change")
def _first_only() -> None:
    def attempt(original: Callable[[OverlaySyncer], SyncResult], self: OverlaySyncer) -> SyncResult:
        if self._delivered is not None:
            return SyncResult("unchanged", revision=self._delivered.revision)
        return original(self)

    wrap(OverlaySyncer, "_attempt", attempt)


@breakage("sync-healthy-after-refusal", "overlay-sync reports itself healthy (not degraded) while it serves the last "
          "good file after refusing an update")
def _healthy_after_refusal() -> None:
    def sync_once(original: Callable[[OverlaySyncer], SyncResult], self: OverlaySyncer) -> SyncResult:
        result = original(self)
        self.metrics.degraded.set(0)
        return result

    wrap(OverlaySyncer, "sync_once", sync_once)
