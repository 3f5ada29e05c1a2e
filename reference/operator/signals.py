"""The operator's signals endpoint: its site's EPP series, relayed raw to the gateways that route to it.

With `--signals-address` the operator serves `GET /v1/site/signals` over mutual TLS (a client certificate
signed by `--signals-client-ca` is required). Each request scrapes, for every InferenceProvider whose metrics
the operator scrapes (its `metricsConfig`: endpoint, path, poolName, timeout, TLS), what its EPP publishes
and answers the series a gateway's grid_site_route reads, as Prometheus text with one line per sample:

    llm_d_epp_average_running_requests{grid_site="site-b",grid_provider="site-b-pool"} 3 1796462025550

`grid_site` is this operator's site (its mesh site, or `--signals-site`), `grid_provider` the provider's
routing cluster (spec.clusterName), and the timestamp the scrape's time in milliseconds. Only the EPP's
running and waiting per endpoint, ready endpoints and flow-control queue (and the older inference_pool_*
names of the first three) are relayed, raw: the gateway concludes in-flight and saturation itself. A
provider whose endpoint cannot be scraped gives no rows; with poolName only that pool's series are read.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import httpx
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from reference.operator.core.model import ProviderSpec
from reference.operator.scrape import POOL_LABEL, targets_from_objects
from reference.operator.sources import Loaded

log = logging.getLogger("agn-operator.signals")

PATH = "/v1/site/signals"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The EPP's series a gateway reads, in the order of the answer, then their older names.
RELAYED: tuple[str, ...] = (
    "llm_d_epp_average_running_requests",
    "llm_d_epp_average_queue_size",
    "llm_d_epp_ready_endpoints",
    "llm_d_epp_flow_control_queue_size",
    "inference_pool_average_running_requests",
    "inference_pool_average_queue_size",
    "inference_pool_ready_pods",
)


@dataclass(frozen=True)
class SignalsSettings:
    """What `agn-operator run --signals-*` configures."""

    host: str
    port: int
    site: str
    context: ssl.SSLContext  # the server's certificate, requiring client certificates of the client CA


@dataclass(frozen=True)
class Source:
    """One provider's EPP: the cluster it is relayed as, and where and how its metrics are scraped."""

    cluster: str
    url: str
    pool: str | None
    timeout: float


def provider_label(provider: ProviderSpec) -> str:
    """The grid_provider of a provider's rows: the cluster gateways route its candidates to."""
    return provider.cluster


def sources(loaded: Loaded | None) -> list[Source]:
    """The EPPs to relay: every valid InferenceProvider that configures metrics, one per cluster (the first)."""
    if loaded is None:
        return []
    clusters = {provider.name: provider_label(provider) for provider in loaded.resources.providers}
    found: dict[str, Source] = {}
    for target in targets_from_objects(loaded.objects):
        cluster = clusters.get(target.provider)  # None: the resource was invalid and skipped
        if cluster is not None and cluster not in found:
            found[cluster] = Source(cluster, target.url, target.pool_name, target.timeout)
    return list(found.values())


def select(text: str, pool: str | None) -> dict[str, float]:
    """The relayed series of one metrics page: the first sample of each name (of `pool` when given)."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            wanted = sample.name in RELAYED and sample.name not in found
            if wanted and (pool is None or sample.labels.get(POOL_LABEL) == pool):
                found[sample.name] = float(sample.value)
    return found


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return floatToGoString(value)


def exposition(site: str, rows: Sequence[tuple[str, Mapping[str, float]]], timestamp_ms: int) -> str:
    """One line per relayed series of each (cluster, series) row, labelled with the site and the cluster."""
    lines: list[str] = []
    for cluster, values in rows:
        labels = f'grid_site="{_label(site)}",grid_provider="{_label(cluster)}"'
        lines.extend(f"{name}{{{labels}}} {_number(values[name])} {timestamp_ms}\n" for name in RELAYED
                     if name in values)
    return "".join(lines)


class SignalsServer:
    """Serves the signals endpoint from the reconcile loop's latest resources (`snapshot`)."""

    def __init__(self, site: str, snapshot: Callable[[], Loaded | None],
                 metrics_context: ssl.SSLContext | None = None) -> None:
        self.site = site
        self.snapshot = snapshot
        self._metrics_context = metrics_context
        self._client: httpx.AsyncClient | None = None
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int, context: ssl.SSLContext) -> tuple[str, int]:
        """Bind host:port (0: any free port) over mutual TLS; returns the bound address. OSError if it cannot."""
        verify = self._metrics_context or ssl.create_default_context()
        self._client = httpx.AsyncClient(verify=verify, follow_redirects=False, trust_env=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        try:
            site = web.TCPSite(self._runner, host, port, ssl_context=context, reuse_address=True)
            await site.start()
        except BaseException:
            await self.close()
            raise
        bound_host, bound_port = self._runner.addresses[0][:2]
        return str(bound_host), int(bound_port)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.path != PATH:
            return web.Response(status=404, text=f"no route {request.path} (the signals are at {PATH})\n")
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text=f"{PATH} answers GET only\n")
        relayed = sources(self.snapshot())
        results = await asyncio.gather(*(self._scrape(source) for source in relayed))
        stamp = time.time_ns() // 1_000_000
        rows = [(source.cluster, values) for source, values in zip(relayed, results, strict=True) if values is not None]
        body = exposition(self.site, rows, stamp).encode()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def _scrape(self, source: Source) -> dict[str, float] | None:
        assert self._client is not None
        try:
            response = await self._client.get(source.url, timeout=source.timeout)
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            return select(response.text, source.pool)
        except (httpx.HTTPError, ValueError, TypeError, IndexError) as exc:
            log.warning("signals: scraping %s (cluster %s) failed: %s", source.url, source.cluster, exc)
            return None
