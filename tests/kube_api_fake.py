"""A recording HTTP server speaking the slice of the Kubernetes API the adapters use, on 127.0.0.1.

It serves, for the grid CRDs (cluster-scoped) and ConfigMaps:
- GET list endpoints with a list resourceVersion, `fieldSelector=metadata.name=...`;
- GET `?watch=1` streams of newline-delimited JSON events (chunked), resumed from `resourceVersion`,
  ended after `timeoutSeconds`, and an `ERROR` event with code 410 when that version is too old;
- GET of one ConfigMap or grid object and of a grid object's `/status`;
- PATCH `application/apply-patch+yaml` of a ConfigMap or a grid object (server-side apply; `fieldManager`
  required). Each manager's applied configuration is kept and the object is their merge, the latest
  applier winning conflicts (`force`), so fields applied by another manager (or written before the
  first apply) stay, and fields a manager stops applying go away; `status` in an apply body is ignored,
  as it is for a resource with a status subresource;
- PATCH `application/merge-patch+json` of a grid object's `/status`;
- DELETE of a grid object.
Everything else answers 404 (and is recorded, so a test can prove it was never asked). Every request is
recorded with method, path, query, content type and body. The server runs its own event loop on a
thread, so blocking clients and the test's own loop can both use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

GROUP = "grid.praxis.fast"
VERSION = "v1alpha1"
CRD_PLURALS = {
    "gridnetworks": "GridNetwork",
    "inferenceproviders": "InferenceProvider",
    "gridsites": "GridSite",
    "agenttoolproviders": "AgentToolProvider",
}
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
#: The manager owning what was written by other means before the first apply (as a real server names it).
BEFORE_FIRST_APPLY = "before-first-apply"
_SERVER_METADATA = ("uid", "creationTimestamp", "resourceVersion", "generation", "managedFields")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    body: Any

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("1", "true")


@dataclass
class _Event:
    resource_version: int
    collection: str
    type: str
    obj: dict[str, Any]


@dataclass
class _State:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    #: Per object, each field manager's last applied configuration, in the order they first applied.
    applied: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = field(default_factory=dict)
    events: list[_Event] = field(default_factory=list)
    resource_version: int = 100
    compacted: int = 0


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def deep_merge(target: Any, overlay: Any) -> Any:
    """`overlay` over `target`: maps merge key by key, anything else (lists too) is replaced."""
    if not (isinstance(target, dict) and isinstance(overlay, dict)):
        return copy.deepcopy(overlay)
    out = copy.deepcopy(target)
    for key, value in overlay.items():
        out[key] = deep_merge(out.get(key), value)
    return out


def _configuration(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as a manager's configuration: without status and the server's bookkeeping."""
    out = {key: copy.deepcopy(value) for key, value in obj.items() if key != "status"}
    out["metadata"] = {k: v for k, v in (out.get("metadata") or {}).items() if k not in _SERVER_METADATA}
    return out


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


class FakeKubeApi:
    """Start with `with FakeKubeApi() as api:`; `api.url`, `api.requests`, `api.put(...)`, `api.expire()`."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._state = _State()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._changed: asyncio.Condition | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-kube-api", daemon=True)
        self._runner: web.AppRunner | None = None
        self._failures: list[tuple[int, str | None]] = []
        self._closing = False
        self.url = ""

    # --- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> FakeKubeApi:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _shutdown(self) -> None:
        """End open watch streams cleanly, then stop serving."""
        assert self._changed is not None and self._runner is not None
        async with self._changed:
            self._closing = True
            self._changed.notify_all()
        await self._runner.cleanup()
        current = asyncio.current_task()
        leftovers = [task for task in asyncio.all_tasks() if task is not current]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    async def _start(self) -> str:
        self._changed = asyncio.Condition()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = site._server.sockets[0].getsockname()[:2]  # type: ignore[union-attr]
        return f"http://{host}:{port}"

    def kubeconfig(self, path: Path, context: str = "fake") -> Path:
        """Write a kubeconfig pointing at this server (token auth, plain HTTP on loopback)."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "test-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "tester"}}],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        return path

    # --- state, from the test ------------------------------------------------------------------------

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (as kubectl apply would), emitting ADDED or MODIFIED."""
        collection, namespace, name = self._locate(obj)
        with self._lock:
            self._state.applied.pop((collection, namespace, name), None)  # a replace owns every field anew
        return self._call(lambda: self._store(collection, namespace, name, copy.deepcopy(obj), spec_change=True))

    def apply(self, obj: dict[str, Any], manager: str) -> dict[str, Any]:
        """Server-side apply `obj` as `manager` (with force), as a PATCH from that manager would."""
        collection, namespace, name = self._locate(obj)
        return self._call(lambda: self._apply(collection, namespace, name, copy.deepcopy(obj), manager))

    def delete(self, obj: dict[str, Any]) -> None:
        collection, namespace, name = self._locate(obj)
        self._call(lambda: self._remove(collection, namespace, name))

    def get(self, collection: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            found = self._state.objects.get((collection, namespace, name))
            return copy.deepcopy(found) if found else None

    def items(self, collection: str) -> list[dict[str, Any]]:
        """Every stored object of a collection, in name order (what a list would return)."""
        with self._lock:
            found = [obj for (c, _ns, _n), obj in sorted(self._state.objects.items()) if c == collection]
            return copy.deepcopy(found)

    def expire(self) -> None:
        """Compact history: open watches get an ERROR 410 event, and resuming from older versions fails."""
        self._call(self._compact)

    def fail_next(self, *statuses: int, path: str | None = None) -> None:
        """Answer the next requests (to `path` when given, else to any path) with these statuses, in order."""
        with self._lock:
            self._failures.extend((status, path) for status in statuses)

    def calls(self, *, watch: bool | None = False, method: str | None = None) -> list[Request]:
        """Recorded requests (watches excluded by default), optionally of one method."""
        with self._lock:
            recorded = list(self.requests)
        return [r for r in recorded if (watch is None or r.watch == watch) and (method is None or r.method == method)]

    def _call(self, action: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return await action()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    @staticmethod
    def _locate(obj: dict[str, Any]) -> tuple[str, str, str]:
        metadata = obj["metadata"]
        if obj["kind"] == "ConfigMap":
            return "configmaps", metadata["namespace"], metadata["name"]
        plural = {kind: plural for plural, kind in CRD_PLURALS.items()}[obj["kind"]]
        return plural, "", metadata["name"]

    async def _store(
        self, collection: str, namespace: str, name: str, obj: dict[str, Any], spec_change: bool
    ) -> dict[str, Any]:
        assert self._changed is not None
        async with self._changed:
            with self._lock:
                key = (collection, namespace, name)
                old = self._state.objects.get(key)
                metadata = obj.setdefault("metadata", {})
                if old is not None:
                    for kept in ("uid", "creationTimestamp"):
                        metadata[kept] = old["metadata"][kept]
                    generation = old["metadata"].get("generation", 1)
                    if collection in CRD_PLURALS:
                        metadata["generation"] = generation + (
                            1 if spec_change and old.get("spec") != obj.get("spec") else 0
                        )
                    comparable = {**old, "metadata": {**old["metadata"], "resourceVersion": None}}
                    if comparable == {**obj, "metadata": {**metadata, "resourceVersion": None}}:
                        return copy.deepcopy(old)  # a no-op write changes nothing, as on a real server
                else:
                    metadata["uid"] = f"uid-{collection}-{name}"
                    metadata["creationTimestamp"] = "2026-01-01T00:00:00Z"
                    if collection in CRD_PLURALS:
                        metadata["generation"] = 1
                self._state.resource_version += 1
                metadata["resourceVersion"] = str(self._state.resource_version)
                self._state.objects[key] = obj
                self._state.events.append(
                    _Event(self._state.resource_version, collection, "MODIFIED" if old else "ADDED", copy.deepcopy(obj))
                )
            self._changed.notify_all()
        return copy.deepcopy(obj)

    async def _apply(
        self, collection: str, namespace: str, name: str, body: dict[str, Any], manager: str
    ) -> dict[str, Any]:
        """Merge every manager's configuration, this manager's last; the stored status stays."""
        key = (collection, namespace, name)
        with self._lock:
            current = self._state.objects.get(key)
            configurations = self._state.applied.get(key)
            if configurations is None:
                configurations = {BEFORE_FIRST_APPLY: _configuration(current)} if current is not None else {}
            configurations = {m: c for m, c in configurations.items() if m != manager}
            configurations[manager] = _configuration(body)
            self._state.applied[key] = configurations
        merged: dict[str, Any] = {}
        for config in configurations.values():
            merged = deep_merge(merged, config)
        merged["metadata"]["managedFields"] = [
            {"manager": m, "operation": "Update" if m == BEFORE_FIRST_APPLY else "Apply", "fieldsType": "FieldsV1"}
            for m in configurations
        ]
        if current is not None and "status" in current:
            merged["status"] = copy.deepcopy(current["status"])
        return await self._store(collection, namespace, name, merged, spec_change=True)

    async def _remove(self, collection: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert self._changed is not None
        async with self._changed:
            with self._lock:
                self._state.applied.pop((collection, namespace, name), None)
                old = self._state.objects.pop((collection, namespace, name), None)
                if old is None:
                    return None
                self._state.resource_version += 1
                old["metadata"]["resourceVersion"] = str(self._state.resource_version)
                self._state.events.append(_Event(self._state.resource_version, collection, "DELETED", old))
            self._changed.notify_all()
        return copy.deepcopy(old)

    async def _compact(self) -> None:
        assert self._changed is not None
        async with self._changed:
            with self._lock:
                self._state.resource_version += 1
                self._state.compacted = self._state.resource_version
                self._state.events.clear()
            self._changed.notify_all()

    # --- HTTP ----------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        content_type = request.headers.get("Content-Type")
        body: Any = None
        if raw:
            try:
                body = yaml.safe_load(raw.decode())
            except (UnicodeDecodeError, yaml.YAMLError):
                body = raw.decode(errors="replace")
        recorded = Request(request.method, request.path, dict(request.query), content_type, body)
        with self._lock:
            self.requests.append(recorded)
            failure = None
            for index, (status, path) in enumerate(self._failures):
                if path is None or path == request.path:
                    failure = status
                    del self._failures[index]
                    break
        if failure is not None:
            return web.json_response(_status(failure, "InternalError", "injected failure"), status=failure)
        if request.headers.get("Authorization") != "Bearer test-token":
            return web.json_response(_status(401, "Unauthorized", "no token"), status=401)
        route = self._route(request.path)
        if route is None:
            return web.json_response(_status(404, "NotFound", f"no route for {request.path}"), status=404)
        collection, namespace, name, sub = route
        if request.method == "GET" and name is None:
            if recorded.watch:
                return await self._watch(request, collection, namespace)
            return self._list(collection, namespace, recorded.query)
        if request.method == "GET" and name is not None:
            found = self.get(collection, name, namespace)
            if found is None:
                return web.json_response(_status(404, "NotFound", f'{collection} "{name}" not found'), status=404)
            return web.json_response(found)
        if request.method == "PATCH" and name is not None:
            return await self._patch(recorded, collection, namespace, name, sub)
        if request.method == "DELETE" and name is not None and sub is None and collection in CRD_PLURALS:
            gone = await self._remove(collection, namespace, name)
            if gone is None:
                return web.json_response(_status(404, "NotFound", f'{collection} "{name}" not found'), status=404)
            return web.json_response(gone)
        return web.json_response(_status(405, "MethodNotAllowed", request.method), status=405)

    @staticmethod
    def _route(path: str) -> tuple[str, str, str | None, str | None] | None:
        parts = path.strip("/").split("/")
        if parts[:3] == ["apis", GROUP, VERSION] and len(parts) in (4, 5, 6) and parts[3] in CRD_PLURALS:
            name = parts[4] if len(parts) > 4 else None
            sub = parts[5] if len(parts) > 5 else None
            if sub not in (None, "status"):
                return None
            return parts[3], "", name, sub
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) in (5, 6) and parts[4] == "configmaps":
            return "configmaps", parts[3], parts[5] if len(parts) > 5 else None, None
        return None

    def _matching(self, collection: str, namespace: str, query: dict[str, str], obj: dict[str, Any]) -> bool:
        selector = query.get("fieldSelector")
        if selector and not selector.startswith("metadata.name="):
            raise web.HTTPBadRequest(text=f"unsupported field selector {selector}")
        if selector and obj["metadata"]["name"] != selector.partition("=")[2]:
            return False
        return not namespace or obj["metadata"].get("namespace") == namespace

    def _list(self, collection: str, namespace: str, query: dict[str, str]) -> web.Response:
        with self._lock:
            items = [
                copy.deepcopy(obj)
                for (c, _ns, _n), obj in sorted(self._state.objects.items())
                if c == collection and self._matching(collection, namespace, query, obj)
            ]
            version = str(self._state.resource_version)
        kind = "ConfigMapList" if collection == "configmaps" else f"{CRD_PLURALS[collection]}List"
        if collection == "configmaps":
            for item in items:  # core list items carry no kind/apiVersion
                item.pop("kind", None)
                item.pop("apiVersion", None)
        return web.json_response(
            {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": version}, "items": items}
        )

    async def _watch(self, request: web.Request, collection: str, namespace: str) -> web.StreamResponse:
        assert self._changed is not None
        query = dict(request.query)
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 1800)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        async def send(event: dict[str, Any]) -> None:
            await response.write(json.dumps(event).encode() + b"\n")

        try:
            while True:
                async with self._changed:
                    with self._lock:
                        if since < self._state.compacted:
                            gone = _status(410, "Expired", f"too old resource version: {since}")
                            pending: list[_Event] | None = None
                        else:
                            pending = [
                                e
                                for e in self._state.events
                                if e.resource_version > since
                                and e.collection == collection
                                and self._matching(collection, namespace, query, e.obj)
                            ]
                            since = max([since, *(e.resource_version for e in self._state.events)])
                    if pending == []:
                        remaining = deadline - loop.time()
                        if remaining <= 0 or self._closing:
                            break
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._changed.wait(), timeout=remaining)
                        continue
                if pending is None:
                    await send({"type": "ERROR", "object": gone})
                    break
                for event in pending:
                    await send({"type": event.type, "object": event.obj})
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away
        return response

    async def _patch(
        self, recorded: Request, collection: str, namespace: str, name: str, sub: str | None
    ) -> web.Response:
        body = recorded.body
        if not isinstance(body, dict):
            return web.json_response(_status(400, "BadRequest", "patch body is not an object"), status=400)
        if sub is None:
            if recorded.content_type != APPLY:
                return web.json_response(_status(415, "UnsupportedMediaType", str(recorded.content_type)), status=415)
            manager = recorded.query.get("fieldManager")
            if not manager:
                return web.json_response(_status(400, "BadRequest", "fieldManager is required for apply"), status=400)
            metadata = body.get("metadata") or {}
            if (metadata.get("name"), metadata.get("namespace") or "") != (name, namespace):
                return web.json_response(_status(400, "BadRequest", "name/namespace differ from the URL"), status=400)
            expected = "ConfigMap" if collection == "configmaps" else CRD_PLURALS[collection]
            if body.get("kind") != expected or not body.get("apiVersion"):
                problem = _status(400, "BadRequest", f"apply needs kind {expected} and an apiVersion")
                return web.json_response(problem, status=400)
            return web.json_response(await self._apply(collection, namespace, name, copy.deepcopy(body), manager))
        if collection in CRD_PLURALS and sub == "status":
            if recorded.content_type != MERGE:
                return web.json_response(_status(415, "UnsupportedMediaType", str(recorded.content_type)), status=415)
            current = self.get(collection, name)
            if current is None:
                return web.json_response(_status(404, "NotFound", f'{collection} "{name}" not found'), status=404)
            updated = {**current, "status": merge_patch(current.get("status"), body.get("status"))}
            return web.json_response(await self._store(collection, namespace, name, updated, False))
        return web.json_response(
            _status(405, "MethodNotAllowed", "only applies and status merge patches"), status=405
        )


@contextlib.contextmanager
def fake_kube_api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as api:
        yield api
