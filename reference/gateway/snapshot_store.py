"""The serving-snapshot slot of one intelligent_route instance and its replace-if-changed rule.

Readers take `store.current` once per request and keep that object, so a swap never changes a
decision that is already under way. A swap is one reference assignment, atomic in the event loop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from reference.gateway.snapshot import Snapshot
from reference.overlay import MAX_OVERLAY_BYTES, parse_overlay


@dataclass(frozen=True)
class ReplaceResult:
    result: str  # "accepted" or "unchanged"
    previous: str | None
    serving: str | None


def read_bounded(path: Path, limit: int = MAX_OVERLAY_BYTES) -> bytes:
    """Read at most limit+1 bytes, so an oversized file is detected without reading all of it."""
    with open(path, "rb") as handle:
        return handle.read(limit + 1)


def build_snapshot(
    data: bytes, expected_scope: Mapping[str, str] | None, allowed_clusters: Iterable[str] | None
) -> Snapshot:
    """Validate overlay bytes into a snapshot; raises OverlayRejected."""
    overlay = parse_overlay(data, expected_scope, allowed_clusters)
    key = overlay.revision if overlay.format == "envelope" and overlay.revision else _bytes_key(data)
    return Snapshot(overlay, key)


def _bytes_key(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class SnapshotStore:
    def __init__(self, initial: Snapshot) -> None:
        self.current = initial

    def replace(self, candidate: Snapshot) -> ReplaceResult:
        """Swap in `candidate` unless it carries the same semantic revision as the serving one."""
        previous = self.current
        if candidate.semantic_key == previous.semantic_key and candidate.format == previous.format:
            return ReplaceResult("unchanged", previous.revision, previous.revision)
        self.current = candidate
        return ReplaceResult("accepted", previous.revision, candidate.revision)
