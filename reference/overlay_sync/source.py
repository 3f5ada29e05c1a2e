"""Where overlay-sync reads the ConfigMap from.

`ConfigMapSource` is the seam: the file source below reads the ConfigMap object the operator's `dir` sink
writes; a Kubernetes API watch can implement the same two methods for in-cluster deployments.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from watchfiles import Change, awatch

OVERLAY_KEY = "routing-overlay.json"
LEGACY_KEY = "routing-config.json"
# libyaml when present: a 1 MiB ConfigMap parses in milliseconds instead of seconds.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A ConfigMap is at most 1 MiB in Kubernetes; this bound only stops a runaway file from being parsed.
MAX_CONFIGMAP_FILE_BYTES = 8 * 1024 * 1024


class SourceError(Exception):
    """The ConfigMap could not be read or does not hold the overlay key; the last good file stays."""


@dataclass(frozen=True)
class ConfigMapPayload:
    """The overlay bytes found in the ConfigMap and where they came from, for logs and status."""

    data: bytes
    key: str
    name: str | None
    namespace: str | None


class ConfigMapSource(Protocol):
    """A readable, watchable ConfigMap."""

    def describe(self) -> str:
        """Where the ConfigMap lives, for log lines."""
        ...

    def read(self) -> ConfigMapPayload:
        """The overlay bytes as they are now; raises SourceError when they cannot be had."""
        ...

    def changes(self, stop: asyncio.Event) -> AsyncIterator[None]:
        """Yield once per (debounced) change of the ConfigMap until `stop` is set."""
        ...


#: How often the file watcher looks for new events (ms): the delay it adds to every delivery. 10 was the
#: previous setting; 2 costs under 1% of a core while idle.
DEFAULT_WATCH_STEP_MS = 2


class FileConfigMapSource:
    """A ConfigMap object stored as a YAML file, watched through its parent directory."""

    def __init__(
        self,
        path: Path,
        key: str = OVERLAY_KEY,
        debounce_ms: int = 50,
        retry_seconds: float = 1.0,
        step_ms: int = DEFAULT_WATCH_STEP_MS,
    ) -> None:
        self.path = path
        self.key = key
        self.debounce_ms = debounce_ms
        self.retry_seconds = retry_seconds
        self.step_ms = step_ms

    def describe(self) -> str:
        return str(self.path)

    def read(self) -> ConfigMapPayload:
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read(MAX_CONFIGMAP_FILE_BYTES + 1)
        except OSError as exc:
            raise SourceError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        if len(raw) > MAX_CONFIGMAP_FILE_BYTES:
            raise SourceError(f"{self.path} is larger than {MAX_CONFIGMAP_FILE_BYTES} bytes")
        try:
            doc = yaml.load(raw, Loader=_Loader)  # _Loader is a safe loader
        except yaml.YAMLError as exc:
            raise SourceError(f"{self.path} is not YAML: {str(exc).splitlines()[0][:160]}") from None
        return payload_from_configmap(doc, self.key)

    async def changes(self, stop: asyncio.Event) -> AsyncIterator[None]:
        name = self.path.name
        parent = self.path.parent

        def relevant(_change: Change, path: str) -> bool:
            return Path(path).name == name

        resumed = False
        while not stop.is_set():
            if not parent.is_dir():
                resumed = True
                # Nothing to watch yet; look again shortly. The caller already reported the missing file.
                if await _wait(stop, self.retry_seconds):
                    return
                continue
            if resumed:
                # The file may have changed while nothing was watching; the caller reads once at start,
                # and what changes before the watcher is armed is picked up by the caller's resync.
                yield None
            resumed = True
            try:
                async for _changes in awatch(
                    parent,
                    watch_filter=relevant,
                    debounce=self.debounce_ms,
                    step=min(self.debounce_ms, self.step_ms),
                    stop_event=stop,
                    recursive=False,
                ):
                    yield None
            except (FileNotFoundError, RuntimeError, OSError):
                # The directory went away under the watcher; re-read, then watch it again when it is back.
                yield None
                if await _wait(stop, self.retry_seconds):
                    return


def payload_from_configmap(doc: Any, key: str) -> ConfigMapPayload:
    """Pick the overlay out of a ConfigMap object (data, else base64 binaryData; legacy key as fallback)."""
    if not isinstance(doc, dict):
        raise SourceError("ConfigMap file does not hold a mapping")
    kind = doc.get("kind")
    if kind is not None and kind != "ConfigMap":
        raise SourceError(f"kind is {kind!r}, expected ConfigMap")
    raw_metadata = doc.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    name = metadata.get("name") if isinstance(metadata.get("name"), str) else None
    namespace = metadata.get("namespace") if isinstance(metadata.get("namespace"), str) else None
    keys = [key] if key != OVERLAY_KEY else [OVERLAY_KEY, LEGACY_KEY]
    for candidate in keys:
        data = _lookup(doc, candidate)
        if data is not None:
            return ConfigMapPayload(data=data, key=candidate, name=name, namespace=namespace)
    raise SourceError(f"ConfigMap has no data key {key!r}")


def _lookup(doc: dict[str, Any], key: str) -> bytes | None:
    data = doc.get("data")
    if isinstance(data, dict) and key in data:
        value = data[key]
        if not isinstance(value, str):
            raise SourceError(f"data.{key} is not a string")
        return value.encode("utf-8", "surrogatepass")
    binary = doc.get("binaryData")
    if isinstance(binary, dict) and key in binary:
        value = binary[key]
        if not isinstance(value, str):
            raise SourceError(f"binaryData.{key} is not a base64 string")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise SourceError(f"binaryData.{key} is not valid base64") from None
    return None


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds`; True when `stop` was set."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True
