"""Fake provider backend: an echo model server and an EPP-style metrics exporter in one aiohttp app.

Suites route traffic through gateways to these backends and read back who answered: every response
names the backend and its site in `x-agn-backend` / `x-agn-site`, and model API bodies echo the request
as the backend saw it (method, path, query, headers, body size) and, on the mutually authenticated
listener, the client certificate the backend verified (`agn.peer`). The runtime config (metric samples,
latency, forced error status, models, and a slow or failing /metrics exporter) changes over
`/admin/config` so suites can steer scoring and admission without restarting anything. Metric samples may
be non-finite ("NaN", "+Inf", "-Inf" in JSON) so scrapers can be tested against such exporters. The `epp`
key adds a load model (harness.fakes.epp): model API requests take slots and /metrics publishes the EPP's
running, waiting, ready-endpoint and flow-control series of the backend's pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import logging
import math
import re
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.samples import Sample

from harness.fakes import epp as epp_load
from harness.fakes import mcp
from harness.fakes.epp import EppConfig

__all__ = [
    "ConfigError",
    "EppConfig",
    "FakeBackend",
    "MAX_BODY_BYTES",
    "MetricSample",
    "NON_FINITE_VALUES",
    "RunningServer",
    "RuntimeConfig",
    "default_metrics",
    "mtls_context",
    "parse_config_update",
    "peer_identity",
    "running",
    "start_server",
]

log = logging.getLogger("agn.fake_backend")

MAX_BODY_BYTES = 8 * 1024 * 1024
MODEL_API_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
DEFAULT_MODELS = ("agn-fake-model",)
REQUESTS_COUNTER = "agn_fake_requests"  # exposed as agn_fake_requests_total
CONFIG_KEYS = ("metrics", "latency_ms", "error_status", "models", "metrics_error_status", "metrics_latency_ms",
               "mcp_tools", "hold", "epp")
MAX_LATENCY_MS = 600_000.0
# JSON has no non-finite numbers, so these strings stand for them in /admin/config (both directions).
NON_FINITE_VALUES: Mapping[str, float] = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_RESERVED_METRIC_NAMES = frozenset(
    {REQUESTS_COUNTER, f"{REQUESTS_COUNTER}_total", f"{REQUESTS_COUNTER}_created"}
)


class ConfigError(ValueError):
    """A runtime config value is invalid; the message names the offending key."""


@dataclass(frozen=True)
class MetricSample:
    """One gauge sample exposed on /metrics."""

    name: str
    labels: Mapping[str, str]
    value: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "labels": dict(self.labels), "value": _value_to_json(self.value)}


def _value_to_json(value: float) -> float | str:
    """A sample value as strict JSON: finite numbers as they are, non-finite ones as their config string."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


@dataclass
class RuntimeConfig:
    """What the backend exposes and how its model API behaves; replaced field by field at runtime."""

    metrics: list[MetricSample] = field(default_factory=list)
    latency_ms: float = 0.0
    error_status: int | None = None
    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    metrics_error_status: int | None = None  # /metrics answers this instead of the exposition
    metrics_latency_ms: float = 0.0  # /metrics answers after this delay (a slow exporter)
    mcp_tools: list[str] | None = None  # POST /mcp serves MCP with these tools (None: no MCP server)
    hold: bool = False  # model API requests wait (up to MAX_LATENCY_MS) until this is set false again
    epp: EppConfig | None = None  # the EPP-style load model (harness.fakes.epp); None: requests take no slot

    def to_json(self) -> dict[str, Any]:
        return {
            "metrics": [sample.to_json() for sample in self.metrics],
            "latency_ms": self.latency_ms,
            "error_status": self.error_status,
            "models": list(self.models),
            "metrics_error_status": self.metrics_error_status,
            "metrics_latency_ms": self.metrics_latency_ms,
            "mcp_tools": None if self.mcp_tools is None else list(self.mcp_tools),
            "hold": self.hold,
            "epp": None if self.epp is None else self.epp.to_json(_value_to_json),
        }

    def updated(self, update: Mapping[str, Any]) -> RuntimeConfig:
        """A copy with the fields of a validated update (see `parse_config_update`) replaced."""
        fresh = copy.deepcopy(self)
        for key, value in update.items():
            setattr(fresh, key, value)
        return fresh


def default_metrics(pool: str) -> list[MetricSample]:
    """The EPP pool signals a scraper expects by default: idle queue, empty KV cache, one ready pod."""
    labels = {"name": pool}
    return [
        MetricSample("inference_pool_average_queue_size", labels, 0.0),
        MetricSample("inference_pool_average_kv_cache_utilization", labels, 0.0),
        MetricSample("inference_pool_ready_pods", labels, 1.0),
    ]


# ------------------------------------------------------------------------------------------ validation


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite_number(value: object, where: str) -> float:
    if not _is_number(value):
        raise ConfigError(f"{where}: expected a number, got {json.dumps(value)}")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    return number


def _sample_value(value: object, where: str) -> float:
    """A finite JSON number, or one of the strings that stand for NaN and the infinities."""
    if isinstance(value, str):
        if value in NON_FINITE_VALUES:
            return NON_FINITE_VALUES[value]
    elif _is_number(value) and math.isfinite(float(value)):  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    allowed = ", ".join(json.dumps(name) for name in NON_FINITE_VALUES)
    shown = json.dumps(value) if not _is_number(value) else repr(value)
    raise ConfigError(f"{where}: expected a number or one of {allowed}, got {shown}")


def _parse_metrics(value: object) -> list[MetricSample]:
    if not isinstance(value, list):
        raise ConfigError(f"metrics: expected a list of samples, got {type(value).__name__}")
    samples: list[MetricSample] = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for index, item in enumerate(value):
        where = f"metrics[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: expected an object with name, labels, value")
        unknown = sorted(set(item) - {"name", "labels", "value"})
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (allowed: name, labels, value)")
        if "name" not in item or "value" not in item:
            missing = "name" if "name" not in item else "value"
            raise ConfigError(f"{where}.{missing}: missing")
        name = item["name"]
        if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
            raise ConfigError(f"{where}.name: {json.dumps(name)} is not a valid Prometheus metric name")
        if name in _RESERVED_METRIC_NAMES:
            raise ConfigError(f"{where}.name: {name!r} is reserved for the request counter")
        labels = item.get("labels", {})
        if not isinstance(labels, dict):
            raise ConfigError(f"{where}.labels: expected an object of label name to string value")
        for label, label_value in labels.items():
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ConfigError(f"{where}.labels: {label!r} is not a valid Prometheus label name")
            if not isinstance(label_value, str):
                raise ConfigError(f"{where}.labels.{label}: expected a string, got {json.dumps(label_value)}")
        number = _sample_value(item["value"], f"{where}.value")
        identity = (name, tuple(sorted(labels.items())))
        if identity in seen:
            raise ConfigError(f"{where}: duplicate sample {name}{dict(labels)}")
        seen.add(identity)
        samples.append(MetricSample(name, dict(labels), number))
    return samples


def _parse_models(value: object) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"models: expected a list of strings, got {type(value).__name__}")
    for index, model in enumerate(value):
        if not isinstance(model, str) or not model:
            raise ConfigError(f"models[{index}]: expected a non-empty string, got {json.dumps(model)}")
    return list(value)


def _status(key: str) -> Callable[[object], int | None]:
    def parse(value: object) -> int | None:
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 400 <= value <= 599:
            shown = json.dumps(value, allow_nan=True)
            raise ConfigError(f"{key}: expected null or an integer 400..599, got {shown}")
        return value

    return parse


def _latency(key: str) -> Callable[[object], float]:
    def parse(value: object) -> float:
        latency = _finite_number(value, key)
        if not 0.0 <= latency <= MAX_LATENCY_MS:
            raise ConfigError(f"{key}: expected 0..{MAX_LATENCY_MS:g}, got {value!r}")
        return latency

    return parse


def _parse_hold(value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"hold: expected true or false, got {value!r}")
    return value


def _parse_mcp_tools(value: object) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"mcp_tools: expected null or a list of non-empty strings, got {value!r}")
    return list(value)


def _parse_epp(value: object) -> EppConfig | None:
    try:
        return epp_load.parse_epp(value, _sample_value)
    except epp_load.EppConfigError as exc:
        raise ConfigError(str(exc)) from None


_PARSERS: Mapping[str, Callable[[object], Any]] = {
    "metrics": _parse_metrics,
    "latency_ms": _latency("latency_ms"),
    "error_status": _status("error_status"),
    "models": _parse_models,
    "metrics_error_status": _status("metrics_error_status"),
    "metrics_latency_ms": _latency("metrics_latency_ms"),
    "mcp_tools": _parse_mcp_tools,
    "hold": _parse_hold,
    "epp": _parse_epp,
}


def parse_config_update(document: object) -> dict[str, Any]:
    """Validate a whole config update and return the typed fields; raise ConfigError before any change."""
    if not isinstance(document, dict):
        raise ConfigError(f"config: expected a JSON object, got {type(document).__name__}")
    unknown = sorted(set(document) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} (allowed: {', '.join(CONFIG_KEYS)})")
    return {key: _PARSERS[key](value) for key, value in document.items()}


# --------------------------------------------------------------------------------------------- metrics


class _BackendCollector:
    """Prometheus collector over the live runtime config and the request counter."""

    def __init__(self, backend: FakeBackend) -> None:
        self._backend = backend

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        samples = [(s.name, dict(s.labels), s.value) for s in self._backend.config.metrics]
        load = self._backend.epp_series()
        if load:  # the load model's series replace configured samples of the same name and pool
            pool = {"name": self._backend.pool}
            samples = [s for s in samples if s[0] not in load or s[1] != pool]
            samples += [(name, pool, value) for name, value in load.items()]
        for name, labels, value in samples:
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, f"Fake EPP signal {name}")
            # Samples of one family may carry different label sets, so they are added directly.
            family.samples.append(Sample(name, labels, value))
        yield from families.values()
        counter = CounterMetricFamily(REQUESTS_COUNTER, "Model API requests served by this fake backend")
        counter.add_metric([], self._backend.requests)
        yield counter

    def describe(self) -> Iterable[Metric]:
        return []  # families change at runtime; do not let the registry pin names at registration


# --------------------------------------------------------------------------------------------- backend


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message.rstrip("\n") + "\n", content_type="text/plain")


class FakeBackend:
    """One provider's fake model server and metrics exporter."""

    def __init__(self, name: str, site: str, config: RuntimeConfig | None = None, pool: str | None = None) -> None:
        self.name = name
        self.site = site
        self.pool = pool or name  # the name label of the load model's series (and of default_metrics)
        self.config = config if config is not None else RuntimeConfig(metrics=default_metrics(self.pool))
        self.requests = 0
        self.metrics_requests = 0  # GET and HEAD /metrics: who scrapes the exporter, and how often
        self.mcp_requests = 0  # tools/list calls on /mcp: whether and how often an operator probes
        self._released = asyncio.Event()  # set while no hold is configured: held requests go on
        self._released.set()
        self._slots = epp_load.Slots()
        self._slots.configure(self._capacity())
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_BackendCollector(self))  # type: ignore[arg-type]

    def _capacity(self) -> int | None:
        return None if self.config.epp is None else self.config.epp.slots

    def epp_series(self) -> dict[str, float]:
        """The load model's four series by metric name (empty without `epp`)."""
        if self.config.epp is None:
            return {}
        return epp_load.series(self.config.epp, self._slots)

    # ----------------------------------------------------------------------------------------- app

    def build_app(self) -> web.Application:
        """The aiohttp application; one catch-all route so every method and path is answered here."""
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._errors])
        app.on_response_prepare.append(self._identify)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    async def _identify(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        response.headers["x-agn-backend"] = self.name
        response.headers["x-agn-site"] = self.site

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except web.HTTPRequestEntityTooLarge:
            return _text(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        except web.HTTPException as exc:
            return _text(exc.status, exc.reason)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("fake backend %s failed on %s %s", self.name, request.method, request.path)
            return _text(500, "internal error in fake backend")

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path, method = request.path, request.method
        if path == "/metrics":
            if method not in ("GET", "HEAD"):
                return _text(405, "/metrics answers GET only")
            self.metrics_requests += 1
            return await self._metrics()
        if path == "/admin" or path.startswith("/admin/"):
            return await self._admin(request)
        if method == "POST" and path in MODEL_API_PATHS:
            return await self._model_api(request)
        if method == "POST" and path == mcp.PATH and self.config.mcp_tools is not None:
            return await self._mcp(request)
        body = await self._read_body(request)
        if body is None:
            return _text(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        if method == "GET" and path == "/v1/models":
            return web.json_response(self._models_body(request, body))
        return web.json_response(self._echo_body(request, body, "agn.echo"))

    # ------------------------------------------------------------------------------------ model API

    async def _read_body(self, request: web.Request) -> bytes | None:
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return None
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            return None

    async def _model_api(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_body(request)
        if body is None:
            return _text(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        config = self.config
        self.requests += 1
        if config.epp is not None:
            if not await self._slots.acquire():
                return _text(503, f"fake backend {self.name} has no ready endpoint (epp.endpoints is 0)")
            try:  # running for service_ms of the config in force when the slot came
                service_ms = self.config.epp.service_ms if self.config.epp is not None else 0.0
                if service_ms > 0:
                    await asyncio.sleep(service_ms / 1000.0)
            finally:
                self._slots.release()
        if config.latency_ms > 0:
            await asyncio.sleep(config.latency_ms / 1000.0)
        if config.hold:  # held until the test releases it: a request in flight for exactly as long as needed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), MAX_LATENCY_MS / 1000.0)
        if config.error_status is not None:
            return _text(config.error_status, f"fake backend {self.name} answers {config.error_status} as configured")
        kind = "chat.completion" if request.path == "/v1/chat/completions" else "text_completion"
        return web.json_response(self._echo_body(request, body, kind))

    async def _mcp(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_body(request)
        if body is None:
            return _text(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        status, message = mcp.answer(body, self.config.mcp_tools or [], self.name)
        if message is not None and "result" in message and "tools" in message["result"]:
            self.mcp_requests += 1
        return web.Response(status=status) if message is None else web.json_response(message, status=status)

    def _request_echo(self, request: web.Request, body: bytes) -> dict[str, Any]:
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        listener, peer = _connection_identity(request)
        return {
            "backend": self.name,
            "site": self.site,
            "listener": listener,
            "peer": peer,
            "request": {
                "method": request.method,
                "path": request.path,
                "query": request.query_string,
                "headers": headers,
                "body_bytes": len(body),
            },
        }

    def _echo_body(self, request: web.Request, body: bytes, kind: str) -> dict[str, Any]:
        content = f"served by {self.name} at {self.site}"
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
        if kind == "text_completion":
            choice["text"] = content
        else:
            choice["message"] = {"role": "assistant", "content": content}
        answer: dict[str, Any] = {
            "id": f"agn-fake-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
        }
        model = _requested_model(body)
        if model is not None:
            answer["model"] = model
        answer["choices"] = [choice]
        answer["usage"] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        answer["agn"] = self._request_echo(request, body)
        return answer

    def _models_body(self, request: web.Request, body: bytes) -> dict[str, Any]:
        created = int(time.time())
        models = [{"id": m, "object": "model", "created": created, "owned_by": self.name} for m in self.config.models]
        return {
            "object": "list",
            "data": models,
            "agn": self._request_echo(request, body),
        }

    # -------------------------------------------------------------------------------------- metrics

    async def _metrics(self) -> web.Response:
        config = self.config
        if config.metrics_latency_ms > 0:
            await asyncio.sleep(config.metrics_latency_ms / 1000.0)
        if config.metrics_error_status is not None:
            status = config.metrics_error_status
            return _text(status, f"fake backend {self.name} /metrics answers {status} as configured")
        response = web.Response(body=generate_latest(self.registry))
        response.headers["Content-Type"] = CONTENT_TYPE_PLAIN_0_0_4  # the format generate_latest writes
        return response

    # ---------------------------------------------------------------------------------------- admin

    async def _admin(self, request: web.Request) -> web.StreamResponse:
        route = (request.method, request.path)
        if route == ("GET", "/admin/config"):
            return web.json_response(self.config.to_json())
        if route == ("POST", "/admin/config"):
            return await self._admin_set_config(request)
        if route == ("GET", "/admin/stats"):
            return web.json_response(self._stats())
        if route == ("POST", "/admin/reset-stats"):
            self.requests = self.metrics_requests = self.mcp_requests = 0
            return web.json_response(self._stats())
        known = {"/admin/config": "GET, POST", "/admin/stats": "GET", "/admin/reset-stats": "POST"}
        if request.path in known:
            return _text(405, f"{request.path} answers {known[request.path]}")
        return _text(404, f"no admin route {request.path}")

    def _stats(self) -> dict[str, int]:
        return {"requests": self.requests, "metrics_requests": self.metrics_requests,
                "mcp_requests": self.mcp_requests}

    async def _admin_set_config(self, request: web.Request) -> web.StreamResponse:
        raw = await self._read_body(request)
        if raw is None:
            return _text(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        try:
            document = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return _text(400, f"config body is not valid JSON: {exc}")
        try:
            update = parse_config_update(document)
        except ConfigError as exc:
            return _text(400, str(exc))
        self.config = self.config.updated(update)
        self._slots.configure(self._capacity())
        if self.config.hold:
            if self._released.is_set():
                self._released = asyncio.Event()
        else:
            self._released.set()
        log.info("fake backend %s config updated: %s", self.name, sorted(update))
        return web.json_response(self.config.to_json())



def peer_identity(der: bytes) -> dict[str, Any]:
    """What the echo reports of a verified client certificate: its DER digest and subject."""
    digest = hashlib.sha256(der).hexdigest()
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return {"cert_digest": digest, "organization": None, "common_name": None}

    def first(oid: x509.ObjectIdentifier) -> str | None:
        values = cert.subject.get_attributes_for_oid(oid)
        if not values:
            return None
        value = values[0].value
        return value if isinstance(value, str) else value.decode("utf-8", "replace")

    return {"cert_digest": digest, "organization": first(NameOID.ORGANIZATION_NAME),
            "common_name": first(NameOID.COMMON_NAME)}


def _connection_identity(request: web.Request) -> tuple[str, dict[str, Any] | None]:
    """("plain" | "tls" | "mtls", the verified client certificate or None) of the request's connection."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return "plain", None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return "tls", None
    return "mtls", peer_identity(der)


def _requested_model(body: bytes) -> str | None:
    if not body:
        return None
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(document, dict) and isinstance(document.get("model"), str):
        return str(document["model"])
    return None


# ---------------------------------------------------------------------------------------------- server


@dataclass
class RunningServer:
    """A fake backend bound to a listening address (and, optionally, a mutually authenticated one)."""

    backend: FakeBackend
    runner: web.AppRunner
    host: str
    port: int
    scheme: str = "http"  # "https" when served with an SSL context
    mtls_host: str | None = None
    mtls_port: int | None = None

    @property
    def address(self) -> str:
        """host:port, with brackets around an IPv6 host."""
        return _join(self.host, self.port)

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.address}"

    @property
    def mtls_address(self) -> str | None:
        """host:port of the listener that requires a client certificate, if there is one."""
        if self.mtls_host is None or self.mtls_port is None:
            return None
        return _join(self.mtls_host, self.mtls_port)

    @property
    def mtls_url(self) -> str | None:
        address = self.mtls_address
        return f"https://{address}" if address is not None else None

    async def close(self) -> None:
        await self.runner.cleanup()


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def mtls_context(cert: str | Path, key: str | Path, client_ca: str | Path) -> ssl.SSLContext:
    """A server context that requires a client certificate signed by `client_ca`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(cafile=str(client_ca))
    context.verify_mode = ssl.CERT_REQUIRED
    return context


async def _bind(runner: web.AppRunner, host: str, port: int,
                ssl_context: ssl.SSLContext | None) -> tuple[str, int]:
    known = len(runner.addresses)
    site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context)
    await site.start()
    added = runner.addresses[known:]
    if not added:
        raise OSError(f"no listening socket for {host}:{port}")
    bound_host, bound_port = added[0][:2]
    return str(bound_host), int(bound_port)


async def start_server(backend: FakeBackend, host: str, port: int, shutdown_timeout: float = 2.0,
                       ssl_context: ssl.SSLContext | None = None, *,
                       mtls: tuple[str, int, ssl.SSLContext] | None = None) -> RunningServer:
    """Bind the backend to host:port (port 0 picks a free one) and report the bound address.

    With ``ssl_context`` the same routes are served over HTTPS only. ``mtls`` (host, port, a context from
    `mtls_context`) adds a second listener serving the same routes to clients with a verified certificate;
    it is bound first, so once the main address answers both do.
    """
    runner = web.AppRunner(backend.build_app(), access_log=None, handle_signals=False,
                           shutdown_timeout=shutdown_timeout)
    await runner.setup()
    mtls_host: str | None = None
    mtls_port: int | None = None
    try:
        if mtls is not None:
            if mtls[2].verify_mode != ssl.CERT_REQUIRED:
                raise ValueError("the mTLS listener's context must require client certificates")
            mtls_host, mtls_port = await _bind(runner, mtls[0], mtls[1], mtls[2])
        bound_host, bound_port = await _bind(runner, host, port, ssl_context)
    except BaseException:
        await runner.cleanup()
        raise
    scheme = "https" if ssl_context is not None else "http"
    return RunningServer(backend, runner, bound_host, bound_port, scheme, mtls_host, mtls_port)


@asynccontextmanager
async def running(backend: FakeBackend, host: str = "127.0.0.1", port: int = 0,
                  ssl_context: ssl.SSLContext | None = None, *,
                  mtls: tuple[str, int, ssl.SSLContext] | None = None) -> AsyncIterator[RunningServer]:
    """Serve ``backend`` for the duration of the block; the ports are released on exit."""
    server = await start_server(backend, host, port, ssl_context=ssl_context, mtls=mtls)
    try:
        yield server
    finally:
        await server.close()
