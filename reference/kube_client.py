"""The Kubernetes API client the reference's adapters share: configuration, one-line errors, list-watch.

`ListWatch` is the list-then-watch loop the operator's source and sink and overlay-sync's ConfigMap source
use: it keeps an in-memory copy of one collection, resumes watches from the last resourceVersion, re-lists
when the server answers 410 Gone, and backs off exponentially while the API server cannot be reached.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

#: Seconds a watch stays open before the server ends it and the client resumes from its resourceVersion.
WATCH_SECONDS = 300
CONNECT_SECONDS = 10.0
REQUEST_SECONDS = 30.0
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

log = logging.getLogger("agn-operator")


class KubeConfigError(ValueError):
    """No usable cluster configuration; the message says which option to give."""


def check_namespace(text: str) -> str:
    """A namespace name (DNS label, at most 63 characters); ValueError otherwise."""
    if len(text) > 63 or not _DNS_LABEL.match(text):
        raise ValueError(f"{text!r} is not a namespace name (lowercase letters, digits and '-', at most 63)")
    return text


def api_client(kubeconfig: Path | None = None, context: str | None = None) -> client.ApiClient:
    """A client from the kubeconfig (and context) when given, else the pod's in-cluster service account."""
    try:
        if kubeconfig is not None or context is not None:
            return config.new_client_from_config(
                config_file=str(kubeconfig) if kubeconfig is not None else None, context=context
            )
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except ConfigException as exc:
        where = f"--kubeconfig {kubeconfig}" if kubeconfig is not None else "in-cluster configuration"
        hint = "" if kubeconfig is not None or context is not None else "; outside a cluster pass --kubeconfig PATH"
        raise KubeConfigError(f"{where}: {exc}{hint}") from exc
    except (OSError, yaml.YAMLError, TypeError, KeyError) as exc:
        raise KubeConfigError(f"--kubeconfig {kubeconfig}: not a usable kubeconfig ({exc})") from exc


def api_error(exc: BaseException) -> str:
    """One line for an API failure: the HTTP status and the server's message when there is one."""
    if isinstance(exc, ApiException):
        message = ""
        with contextlib.suppress(ValueError, TypeError):
            body = json.loads(exc.body or "")
            message = str(body.get("message") or "") if isinstance(body, dict) else ""
        return f"HTTP {exc.status} {exc.reason or ''}".rstrip() + (f": {message}" if message else "")
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class _WatchFailed(Exception):
    """The server sent an ERROR event other than 410."""


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited watch events from a streamed (chunked) response."""
    pending = b""
    for chunk in response.stream(None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending


class ListWatch:
    """An in-memory copy of one API collection, kept current by list + watch on a background thread.

    `call` is a client list function with its path arguments bound (for example
    `functools.partial(CustomObjectsApi.list_cluster_custom_object, group, version, plural)`);
    `on_change` runs on the watch thread after every change of the copy.
    """

    def __init__(
        self,
        what: str,
        call: Callable[..., Any],
        on_change: Callable[[], None] | None = None,
        *,
        field_selector: str | None = None,
        watch_seconds: int = WATCH_SECONDS,
        backoff: tuple[float, float] = (0.5, 30.0),
        logger: logging.Logger = log,
    ) -> None:
        self.what = what
        self.call = call
        self.on_change = on_change
        self.field_selector = field_selector
        self.watch_seconds = watch_seconds
        self.backoff = backoff
        self.log = logger
        self.synced = threading.Event()
        self.error: str | None = None
        self.version = 0
        self.resource_version: str | None = None
        self._objects: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._active: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch {self.what}", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching: the open stream is shut down so the thread ends promptly."""
        self._stopping.set()
        active = self._active
        if active is not None:
            with contextlib.suppress(Exception):
                active.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)

    def snapshot(self) -> list[dict[str, Any]]:
        """The current objects, in key order (deep copies: callers may change them)."""
        with self._lock:
            return [copy.deepcopy(self._objects[key]) for key in sorted(self._objects)]

    def _selector(self) -> dict[str, Any]:
        return {"field_selector": self.field_selector} if self.field_selector else {}

    def _changed(self) -> None:
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    def _run(self) -> None:
        delay = self.backoff[0]
        while not self._stopping.is_set():
            try:
                resource_version = self._list()
                delay = self.backoff[0]
                while not self._stopping.is_set():
                    started = time.monotonic()
                    resource_version, events = self._watch(resource_version)
                    if not events and time.monotonic() - started < 1.0:
                        # A server that ends watches at once must not be hammered.
                        self._stopping.wait(self.backoff[0])
            except _Gone as exc:
                self.log.info("watch of %s expired (%s); listing again", self.what, exc)
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError, _WatchFailed) as exc:
                if self._stopping.is_set():
                    return
                self.error = api_error(exc)
                self.log.warning("list/watch of %s failed: %s; retrying in %.1fs", self.what, self.error, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, self.backoff[1])

    def _list(self) -> str:
        response = self.call(
            _preload_content=False, _request_timeout=(CONNECT_SECONDS, REQUEST_SECONDS), **self._selector()
        )
        doc = json.loads(response.data)
        items = doc.get("items") or []
        resource_version = str((doc.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            self._objects = {_key(item): item for item in items if isinstance(item, dict)}
            self.resource_version = resource_version
        self.error = None
        self.synced.set()
        self._changed()
        return resource_version

    def _watch(self, resource_version: str) -> tuple[str, int]:
        """Follow one watch stream to its end; returns the last resourceVersion seen and the event count."""
        response = self.call(
            watch=True,
            resource_version=resource_version or None,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_seconds,
            _preload_content=False,
            _request_timeout=(CONNECT_SECONDS, self.watch_seconds + REQUEST_SECONDS),
            **self._selector(),
        )
        self._active = response
        events = 0
        try:
            if self._stopping.is_set():
                return resource_version, events
            for line in _lines(response):
                if self._stopping.is_set():
                    break
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") if isinstance(event.get("object"), dict) else {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone(str(obj.get("message") or "410 Gone"))
                    raise _WatchFailed(f"watch error {obj.get('code')}: {obj.get('message')}")
                events += 1
                resource_version = str((obj.get("metadata") or {}).get("resourceVersion") or resource_version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    with self._lock:
                        if kind == "DELETED":
                            self._objects.pop(_key(obj), None)
                        else:
                            self._objects[_key(obj)] = obj
                        self.resource_version = resource_version
                    self._changed()
        finally:
            self._active = None
            with contextlib.suppress(Exception):
                response.release_conn()
        return resource_version, events


