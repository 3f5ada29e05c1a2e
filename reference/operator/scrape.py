"""Provider metrics scraping: Prometheus text in, `MetricSample` values for the rendering core out.

Each InferenceProvider with a `metricsConfig` is scraped once per reconcile. A failed scrape may be
bridged by the last good sample for `staleMetricsSeconds`; after that a plaintext endpoint simply gives
no sample (neutral scores), while a TLS-configured endpoint yields an unhealthy sample so the provider
fails closed. Every sample handed to the core carries a revision that is never reused for a different
observation, so stabilized admission counts each scrape at most once.
"""

from __future__ import annotations

import asyncio
import math
import re
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from reference.operator.core.model import Clock, MetricSample

SIGNALS = ("queueDepth", "kvCacheUtilization", "healthy")
DEFAULT_TIMEOUT = 2.0
#: Plaintext endpoints are scraped over kept-alive connections for this long between reconciles (a new client
#: and connection per scrape cost milliseconds on the route-change path). TLS endpoints get a new connection
#: on every scrape, so a rotated certificate is verified at the next scrape.
PLAINTEXT_KEEPALIVE_S = 5.0
DEFAULT_PATH = "/metrics"
POOL_LABEL = "name"
_DURATION = re.compile(r"^([1-9][0-9]*)(s|ms)$")


class ScrapeError(Exception):
    """A scrape that produced no usable text: transport failure, HTTP error status or unparsable body."""


def parse_duration(text: str, key: str = "duration") -> float:
    """'2s' or '500ms' as seconds; anything else raises ValueError naming `key`."""
    match = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{key}: {text!r} is not a duration like '2s' or '500ms'")
    value = int(match.group(1))
    return value / 1000.0 if match.group(2) == "ms" else float(value)


def uses_tls(obj: Mapping[str, Any]) -> bool:
    """Effective metrics TLS: a `metricsConfig.tls` override or the provider's own `spec.tls`."""
    spec = obj.get("spec") or {}
    config = spec.get("metricsConfig") or {}
    return isinstance(config.get("tls"), Mapping) or isinstance(spec.get("tls"), Mapping)


@dataclass(frozen=True)
class ScrapeTarget:
    """What to scrape for one provider, taken from its `spec.metricsConfig`."""

    provider: str
    url: str
    timeout: float = DEFAULT_TIMEOUT
    pool_name: str | None = None
    signal_names: Mapping[str, str] = field(default_factory=dict)
    stale_seconds: float | None = None
    tls: bool = False

    @classmethod
    def from_resource(cls, obj: Mapping[str, Any]) -> ScrapeTarget | None:
        """None when the provider has no metricsConfig or no endpoint to scrape."""
        spec = obj.get("spec") or {}
        config = spec.get("metricsConfig")
        if not isinstance(config, Mapping):
            return None
        base = config.get("endpoint") or config.get("metricsEndpoint") or spec.get("endpoint")
        if not isinstance(base, str) or not base:
            return None
        path = config.get("path") or DEFAULT_PATH
        timeout = config.get("timeout")
        stale = config.get("staleMetricsSeconds")
        names = config.get("signalNames") or {}
        tls = uses_tls(obj)
        url = base.rstrip("/") + str(path)
        if tls and url.startswith("http://"):
            url = "https://" + url[len("http://") :]  # configured TLS is never downgraded to plaintext
        return cls(
            provider=str((obj.get("metadata") or {}).get("name")),
            url=url,
            timeout=parse_duration(timeout, "spec.metricsConfig.timeout") if timeout else DEFAULT_TIMEOUT,
            pool_name=config.get("poolName") or None,
            signal_names={str(k): str(v) for k, v in names.items() if k in SIGNALS},
            stale_seconds=float(stale) if stale else None,
            tls=tls,
        )


def targets_from_objects(objects: Iterable[Mapping[str, Any]]) -> list[ScrapeTarget]:
    """Scrape targets of every InferenceProvider object that configures metrics."""
    out = []
    for obj in objects:
        if obj.get("kind") == "InferenceProvider":
            target = ScrapeTarget.from_resource(obj)
            if target is not None:
                out.append(target)
    return out


def extract(text: str, target: ScrapeTarget) -> dict[str, float]:
    """Mapped signal values from Prometheus text, pool-filtered; NaN and infinities are left out.

    Raises ScrapeError when the text is not valid exposition format.
    """
    wanted = {metric: signal for signal, metric in target.signal_names.items()}
    found: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                signal = wanted.get(sample.name)
                if signal is None or signal in found:
                    continue
                if target.pool_name is not None and sample.labels.get(POOL_LABEL) != target.pool_name:
                    continue
                value = float(sample.value)
                if math.isfinite(value):
                    found[signal] = value
    except (ValueError, TypeError, IndexError) as exc:
        raise ScrapeError(f"unparsable metrics text: {exc}") from exc
    return found


@dataclass
class _Cache:
    sample: MetricSample
    good_until: float | None


class Scraper:
    """Scrapes targets concurrently and keeps the last good sample per provider."""

    def __init__(self, clock: Clock, ssl_context: ssl.SSLContext | None = None) -> None:
        self._clock = clock
        self._ssl = ssl_context
        self._revision = 0
        self._cache: dict[str, _Cache] = {}
        self._plain: httpx.AsyncClient | None = None
        self._plain_loop: asyncio.AbstractEventLoop | None = None
        self.last_errors: dict[str, str] = {}

    def _next_revision(self) -> int:
        self._revision += 1
        return self._revision

    async def fetch(self, client: httpx.AsyncClient, target: ScrapeTarget) -> str:
        try:
            response = await client.get(target.url, timeout=target.timeout)
        except httpx.HTTPError as exc:
            raise ScrapeError(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise ScrapeError(f"HTTP {response.status_code}")
        return response.text

    async def scrape_one(self, client: httpx.AsyncClient, target: ScrapeTarget) -> MetricSample | None:
        try:
            values = extract(await self.fetch(client, target), target)
        except ScrapeError as exc:
            self.last_errors[target.provider] = str(exc)
            return self._on_failure(target)
        self.last_errors.pop(target.provider, None)
        now = self._clock.now()
        healthy = values.get("healthy")
        sample = MetricSample(
            provider=target.provider,
            revision=self._next_revision(),
            observed_at=now,
            queue_depth=values.get("queueDepth"),
            kv_cache_utilization=values.get("kvCacheUtilization"),
            healthy=healthy is None or healthy > 0,
        )
        good_until = now + target.stale_seconds if target.stale_seconds else None
        self._cache[target.provider] = _Cache(sample, good_until)
        return replace(sample, expires_at=good_until)

    def _on_failure(self, target: ScrapeTarget) -> MetricSample | None:
        now = self._clock.now()
        cached = self._cache.get(target.provider)
        if cached is not None and cached.good_until is not None and now <= cached.good_until:
            # The same revision again: the core sees a reused sample, not a new observation.
            return replace(cached.sample, expires_at=cached.good_until)
        self._cache.pop(target.provider, None)
        if not target.tls:
            return None
        return MetricSample(provider=target.provider, revision=self._next_revision(), observed_at=now, healthy=False)

    async def scrape(self, targets: Iterable[ScrapeTarget]) -> list[MetricSample]:
        """One sample (or none) per target; targets are scraped concurrently."""
        targets = list(targets)
        known = {t.provider for t in targets}
        for name in [n for n in self._cache if n not in known]:
            del self._cache[name]
        for name in [n for n in self.last_errors if n not in known]:
            del self.last_errors[name]  # a deleted provider is not failing, it is gone
        if not targets:
            return []
        plain = [t for t in targets if t.url.startswith("http://")]
        secure = [t for t in targets if not t.url.startswith("http://")]
        loop = asyncio.get_running_loop()
        if self._plain_loop is not loop:
            self._plain = None  # connections belong to the event loop that opened them
        if self._plain is None and plain:
            self._plain_loop = loop
            limits = httpx.Limits(keepalive_expiry=PLAINTEXT_KEEPALIVE_S)
            # verify=False: this client only ever fetches http:// targets and follows no redirect, so loading
            # the trust store for it (tens of milliseconds per operator) would buy nothing
            self._plain = httpx.AsyncClient(verify=False, follow_redirects=False, trust_env=False, limits=limits)
        by_target: dict[int, MetricSample | None] = {}

        async def scrape_plain() -> None:
            if plain and self._plain is not None:
                results = await asyncio.gather(*(self.scrape_one(self._plain, t) for t in plain))
                by_target.update((id(t), r) for t, r in zip(plain, results, strict=True))

        async def scrape_secure() -> None:
            if not secure:
                return
            if self._ssl is None:
                self._ssl = ssl.create_default_context()  # loading the trust store once, not per reconcile
            async with httpx.AsyncClient(verify=self._ssl, follow_redirects=False, trust_env=False) as client:
                results = await asyncio.gather(*(self.scrape_one(client, t) for t in secure))
            by_target.update((id(t), r) for t, r in zip(secure, results, strict=True))

        await asyncio.gather(scrape_plain(), scrape_secure())
        return [sample for t in targets if (sample := by_target.get(id(t))) is not None]

    async def aclose(self) -> None:
        """Close the kept-alive plaintext connections."""
        if self._plain is not None:
            await self._plain.aclose()
            self._plain = None
