"""When to reconcile: the periodic metrics refresh, resource changes, and the force-refresh annotation.

The decision is a pure function of the clock and of what the caller observed (a fingerprint of the source
directory, the annotation values), so the loop can be tested without sleeping.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference.operator.core.model import Clock
from reference.operator.scrape import uses_tls

FORCE_REFRESH = "grid.praxis.fast/force-refresh"
DEFAULT_INTERVAL = 300.0
TLS_CAP = 60.0
_INTERVAL = re.compile(r"^([1-9][0-9]*)(s|ms)$")


def parse_interval(text: str) -> float:
    """'10s' or '1500ms' (at least one second) as seconds; anything else raises ValueError."""
    match = _INTERVAL.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"metricsRefreshInterval: {text!r} is not whole seconds ('10s') or milliseconds ('1500ms')")
    value = int(match.group(1)) / (1000.0 if match.group(2) == "ms" else 1.0)
    if value < 1.0:
        raise ValueError(f"metricsRefreshInterval: {text!r} is shorter than one second")
    return value


def refresh_interval(objects: Iterable[Mapping[str, Any]]) -> float:
    """The shortest network interval (300 s when unset), capped at 60 s when any metrics endpoint uses TLS."""
    objects = list(objects)
    intervals = []
    tls = False
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj.get("kind") == "GridNetwork" and spec.get("metricsRefreshInterval") is not None:
            intervals.append(parse_interval(spec["metricsRefreshInterval"]))
        if obj.get("kind") == "InferenceProvider" and isinstance(spec.get("metricsConfig"), Mapping):
            tls = tls or uses_tls(obj)
    interval = min(intervals) if intervals else DEFAULT_INTERVAL
    return min(interval, TLS_CAP) if tls else interval


def fingerprint(paths: Iterable[Path]) -> str:
    """A digest over names, mtimes, sizes and contents: any edit, addition or removal changes it."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        try:
            stat = path.stat()
            content = path.read_bytes()
        except OSError:
            continue
        digest.update(f"{path}\0{stat.st_mtime_ns}\0{stat.st_size}\0".encode())
        digest.update(hashlib.sha256(content).digest())
    return digest.hexdigest()


#: Fields that change on every write without changing what the operator renders from.
VOLATILE_METADATA = ("resourceVersion", "managedFields")


def objects_fingerprint(objects: Iterable[Mapping[str, Any]], own_status: frozenset[str] = frozenset()) -> str:
    """A digest over resource objects as an API server returns them: any change the render could see.

    `metadata.resourceVersion` and `managedFields` are left out, and so is the `status` of the kinds in
    `own_status` (the operator's own writes), so publishing status does not trigger another reconcile.
    """
    digest = hashlib.sha256()
    canonical = []
    for obj in objects:
        metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in VOLATILE_METADATA}
        skip = {"metadata", "status"} if obj.get("kind") in own_status else {"metadata"}
        kept = {k: v for k, v in obj.items() if k not in skip}
        canonical.append(json.dumps({**kept, "metadata": metadata}, sort_keys=True, default=str))
    for text in sorted(canonical):
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def force_tokens(objects: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The force-refresh annotation value of every resource that carries it, keyed by kind/name."""
    tokens = {}
    for obj in objects:
        metadata = obj.get("metadata") or {}
        value = (metadata.get("annotations") or {}).get(FORCE_REFRESH)
        if value is not None:
            tokens[f"{obj.get('kind')}/{metadata.get('name')}"] = str(value)
    return tokens


@dataclass
class Triggers:
    """Remembers what the last reconcile saw; `due` says why the next one should run, if at all."""

    clock: Clock
    last_run: float | None = None
    last_fingerprint: str | None = None
    last_tokens: dict[str, str] = field(default_factory=dict)

    def due(self, interval: float, current_fingerprint: str, tokens: Mapping[str, str]) -> list[str]:
        """Reasons to reconcile now: initial, force-refresh, resources, periodic (empty when none)."""
        if self.last_run is None:
            return ["initial"]
        reasons = []
        if any(self.last_tokens.get(key) != value for key, value in tokens.items()):
            reasons.append("force-refresh")
        if current_fingerprint != self.last_fingerprint:
            reasons.append("resources")
        if self.clock.now() - self.last_run >= interval:
            reasons.append("periodic")
        return reasons

    def ran(self, current_fingerprint: str, tokens: Mapping[str, str]) -> None:
        """Record a reconcile that has just finished looking at this state."""
        self.last_run = self.clock.now()
        self.last_fingerprint = current_fingerprint
        self.last_tokens = dict(tokens)

    def wait_time(self, interval: float) -> float:
        """Seconds until the periodic trigger fires (0 when it is already due)."""
        if self.last_run is None:
            return 0.0
        return max(0.0, self.last_run + interval - self.clock.now())
