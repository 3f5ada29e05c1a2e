"""provider_route: map an edge-selected candidate to a provider-local cluster, exactly and fail closed.

This runs on the provider gateway after downstream mTLS and peer_identity_trust. It is not a second
routing engine: it reads the candidate, hop request id and optional overlay revision that the consumer
gateway's intelligent_route set (``x-ai-routing-*``), checks candidate, model and path against its own
table, selects the table's cluster and publishes the route's credential reference for
credential_inject. Whatever the outcome, no ``x-ai-routing-*`` field, no client Authorization and no
client copy of a provider-owned ``x-ai-provider-*`` field reaches the backend; the provider sets its own
``x-ai-provider-request-id``, ``x-ai-provider-attribution`` and (when the edge sent a revision)
``x-ai-provider-routing-revision``.

Answers: missing or unknown candidate, missing hop request id or malformed revision 403; missing or
invalid model 400; model or path not in the candidate's route 404.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from reference.gateway import hop_headers
from reference.gateway.context import Reject, RequestContext
from reference.gateway.filters.base import header_name
from reference.gateway.schema import ConfigError, boolean, item, key, mapping, sequence
from reference.overlay import Credential

TYPE = "provider_route"
DEFAULT_MODEL_HEADER = "X-Model"
RESERVED_HEADER_PREFIXES = ("x-praxis-", "x-mcp-")
MAX_ROUTES = 1024
MAX_PATHS = 64
MAX_VALUE_LEN = 256
STRATEGY_BEARER_TOKEN = "bearer_token"

PROVIDER_REQUEST_ID = "x-ai-provider-request-id"
PROVIDER_REVISION = "x-ai-provider-routing-revision"
PROVIDER_ATTRIBUTION = "x-ai-provider-attribution"
DEMO_ATTRIBUTION_RESPONSE = "x-ai-demo-provider-gateway"
AUTHORIZATION = "Authorization"

NS = "provider_route."
CREDENTIAL_NS = "intelligent_route.credential."
CREDENTIAL_KEYS = tuple(CREDENTIAL_NS + f for f in ("strategy", "name", "namespace", "key"))

FORBIDDEN = Reject(403, "forbidden\n")
BAD_MODEL = Reject(400, "missing or invalid model\n")
NOT_FOUND = Reject(404, "no provider route for the requested model and path\n")
_REVISION = re.compile(r"[0-9a-f]{64}")
_VISIBLE = re.compile(r"[\t\x20-\x7e]*")


@dataclass(frozen=True)
class ProviderRoute:
    candidate_id: str
    cluster: str
    model: str
    paths: frozenset[str]
    credential: Credential | None
    path: str


@dataclass(frozen=True)
class ProviderRouteConfig:
    provider_id: str
    model_header: str
    routes: dict[str, ProviderRoute]
    emit_demo_attribution: bool = False

    @property
    def reported(self) -> tuple[tuple[str, str], ...]:
        """(config path, cluster) for every cluster this filter may select."""
        return tuple((key(r.path, "cluster"), r.cluster) for r in self.routes.values())


def _value(raw: Any, path: str) -> str:
    if not isinstance(raw, str) or not raw.strip() or len(raw.encode("utf-8", "surrogatepass")) > MAX_VALUE_LEN:
        raise ConfigError(path, f"must be non-blank and at most {MAX_VALUE_LEN} bytes")
    return raw


def _model_header(raw: Any, path: str) -> str:
    text = header_name(raw, path)
    if text.lower().startswith(RESERVED_HEADER_PREFIXES):
        prefixes = ", ".join(RESERVED_HEADER_PREFIXES)
        raise ConfigError(path, f"must not use a reserved internal header prefix ({prefixes})")
    return text


def _credential(raw: Any, path: str) -> Credential:
    mapping(raw, path, required=("strategy", "secretRef"))
    strategy = _value(raw["strategy"], key(path, "strategy"))
    if strategy != STRATEGY_BEARER_TOKEN:
        raise ConfigError(key(path, "strategy"), f"unsupported credential strategy {strategy!r} (bearer_token)")
    ref_path = key(path, "secretRef")
    ref = mapping(raw["secretRef"], ref_path, required=("name", "namespace", "key"))
    return Credential(
        strategy=strategy,
        name=_value(ref["name"], key(ref_path, "name")),
        namespace=_value(ref["namespace"], key(ref_path, "namespace")),
        key=_value(ref["key"], key(ref_path, "key")),
    )


def _route(raw: Any, path: str) -> ProviderRoute:
    mapping(raw, path, required=("candidate_id", "cluster", "model", "paths"), optional=("credential",))
    paths_path = key(path, "paths")
    entries = raw["paths"]
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_PATHS:
        raise ConfigError(paths_path, f"paths must contain 1-{MAX_PATHS} entries")
    paths: list[str] = []
    for index, entry in enumerate(sequence(entries, paths_path, max_items=MAX_PATHS, min_items=1)):
        where = item(paths_path, index)
        if not isinstance(entry, str) or not entry.startswith("/") or len(entry.encode()) > MAX_VALUE_LEN:
            raise ConfigError(where, f"paths must be absolute and at most {MAX_VALUE_LEN} bytes")
        if not _VISIBLE.fullmatch(entry) or any(ch.isspace() for ch in entry):
            raise ConfigError(where, "paths must be visible ASCII without whitespace")
        if entry in paths:
            raise ConfigError(where, f"duplicate path {entry!r}")
        paths.append(entry)
    credential = None
    if raw.get("credential") is not None:
        credential = _credential(raw["credential"], key(path, "credential"))
    return ProviderRoute(
        candidate_id=_value(raw["candidate_id"], key(path, "candidate_id")),
        cluster=_value(raw["cluster"], key(path, "cluster")),
        model=_value(raw["model"], key(path, "model")),
        paths=frozenset(paths),
        credential=credential,
        path=path,
    )


def parse(raw: dict[str, Any], path: str) -> ProviderRouteConfig:
    mapping(
        raw, path, required=("filter", "provider_id", "routes"), optional=("model_header", "emit_demo_attribution")
    )
    provider_id = _value(raw["provider_id"], key(path, "provider_id"))
    if not _VISIBLE.fullmatch(provider_id):
        raise ConfigError(key(path, "provider_id"), "must be a valid header value (visible ASCII)")
    model_header = _model_header(raw.get("model_header", DEFAULT_MODEL_HEADER), key(path, "model_header"))
    routes_path = key(path, "routes")
    entries = raw["routes"]
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ROUTES:
        raise ConfigError(routes_path, f"routes must contain 1-{MAX_ROUTES} entries")
    routes: dict[str, ProviderRoute] = {}
    for index, entry in enumerate(entries):
        route = _route(entry, item(routes_path, index))
        if route.candidate_id in routes:
            raise ConfigError(
                key(item(routes_path, index), "candidate_id"), f"duplicate candidate_id {route.candidate_id!r}"
            )
        routes[route.candidate_id] = route
    demo = boolean(raw.get("emit_demo_attribution", False), key(path, "emit_demo_attribution"))
    return ProviderRouteConfig(provider_id, model_header, routes, demo)


def _header(ctx: RequestContext, name: str) -> str | None:
    """A present, non-blank, bounded, visible-ASCII header value (the first one), else None."""
    value = ctx.headers.get(name)
    if value is None or not value.strip() or len(value) > MAX_VALUE_LEN or not _VISIBLE.fullmatch(value):
        return None
    return value


def _strip(ctx: RequestContext) -> None:
    hop_headers.strip(ctx.headers)
    for name in (PROVIDER_REQUEST_ID, PROVIDER_REVISION, PROVIDER_ATTRIBUTION, AUTHORIZATION):
        ctx.headers.popall(name, None)


class ProviderRouteFilter:
    needs_body = False

    def __init__(self, config: ProviderRouteConfig) -> None:
        self.config = config
        self._routes = config.routes
        self._model_header = config.model_header

    def on_request(self, ctx: RequestContext) -> Reject | None:
        candidate_id = _header(ctx, hop_headers.CANDIDATE)
        request_id = _header(ctx, hop_headers.REQUEST_ID)
        revision = ctx.headers.get(hop_headers.REVISION)
        model = _header(ctx, self._model_header)
        _strip(ctx)
        if candidate_id is None or request_id is None:
            return FORBIDDEN
        if revision is not None and not _REVISION.fullmatch(revision):
            return FORBIDDEN
        if model is None:
            return BAD_MODEL
        route = self._routes.get(candidate_id)
        if route is None:
            return FORBIDDEN
        if model != route.model or ctx.raw_path.partition("?")[0] not in route.paths:
            return NOT_FOUND
        ctx.cluster = route.cluster
        md = ctx.metadata
        md[NS + "candidate_id"] = candidate_id
        md[NS + "cluster"] = route.cluster
        md[NS + "model"] = model
        md[NS + "provider_id"] = self.config.provider_id
        md[NS + "request_id"] = request_id
        if revision is not None:
            md[NS + "overlay_revision"] = revision
        for name in CREDENTIAL_KEYS:
            md.pop(name, None)
        credential = route.credential
        if credential is not None:
            md[CREDENTIAL_NS + "strategy"] = credential.strategy
            md[CREDENTIAL_NS + "name"] = credential.name
            md[CREDENTIAL_NS + "namespace"] = credential.namespace
            md[CREDENTIAL_NS + "key"] = credential.key
        headers = ctx.headers
        headers[PROVIDER_REQUEST_ID] = request_id
        headers[PROVIDER_ATTRIBUTION] = self.config.provider_id
        if revision is not None:
            headers[PROVIDER_REVISION] = revision
        if self.config.emit_demo_attribution:
            ctx.response_headers.append((DEMO_ATTRIBUTION_RESPONSE, self.config.provider_id))
        return None
