"""Metrics scraping: Prometheus text parsing, pool and signal mapping, the stale cache, TLS fail-closed,
against the real fake EPP backend process and small loopback servers for malformed or slow endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from aiohttp import web
from operator_support import fake_backend

from reference.operator.core import FixedClock
from reference.operator.scrape import ScrapeError, Scraper, ScrapeTarget, extract, parse_duration, targets_from_objects

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "manifests" / "examples" / "valid" / "inferenceprovider-queue-aware.yaml"
QUEUE = "inference_pool_average_queue_size"
KV = "inference_pool_average_kv_cache_utilization"
NAMES = {"queueDepth": QUEUE, "kvCacheUtilization": KV, "healthy": "inference_pool_ready_pods"}


def set_metrics(base: str, metrics: list[dict[str, Any]]) -> None:
    response = httpx.post(f"{base}/admin/config", json={"metrics": metrics}, trust_env=False)
    assert response.status_code == 200, response.text


def target(url: str, **kw: Any) -> ScrapeTarget:
    defaults: dict[str, Any] = {"provider": "p1", "url": url, "timeout": 2.0, "pool_name": "p1", "signal_names": NAMES}
    defaults.update(kw)
    return ScrapeTarget(**defaults)


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


@contextlib.asynccontextmanager
async def text_server(body: str, hang: bool = False, status: int = 200) -> AsyncIterator[str]:
    """A loopback endpoint serving fixed text; `hang` holds every answer until the server stops."""
    released = asyncio.Event()

    async def handler(_: web.Request) -> web.Response:
        if hang:
            await released.wait()
        return web.Response(status=status, text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        released.set()
        await runner.cleanup()


# --- pure parsing -----------------------------------------------------------------------------------


def test_parse_duration_accepts_seconds_and_milliseconds() -> None:
    assert parse_duration("2s") == 2.0
    assert parse_duration("500ms") == 0.5


@pytest.mark.parametrize("bad", ["0s", "1.5s", "2m", "", "s"])
def test_parse_duration_rejects_other_forms(bad: str) -> None:
    with pytest.raises(ValueError, match="timeout"):
        parse_duration(bad, "timeout")


def test_extract_selects_pool_and_maps_signals() -> None:
    text = (
        f'{QUEUE}{{name="other"}} 99\n{QUEUE}{{name="p1"}} 7\n{KV}{{name="p1"}} 0.25\nunrelated_metric{{name="p1"}} 5\n'
    )
    assert extract(text, target("x")) == {"queueDepth": 7.0, "kvCacheUtilization": 0.25}


def test_extract_without_pool_takes_the_first_sample() -> None:
    text = f'{QUEUE}{{name="a"}} 3\n{QUEUE}{{name="b"}} 4\n'
    assert extract(text, target("x", pool_name=None)) == {"queueDepth": 3.0}


def test_extract_drops_nan_and_infinities() -> None:
    text = f'{QUEUE}{{name="p1"}} NaN\n{KV}{{name="p1"}} +Inf\ninference_pool_ready_pods{{name="p1"}} 1\n'
    assert extract(text, target("x")) == {"healthy": 1.0}


def test_extract_ignores_unmapped_signals() -> None:
    text = f'{QUEUE}{{name="p1"}} 3\n{KV}{{name="p1"}} 0.9\n'
    assert extract(text, target("x", signal_names={"kvCacheUtilization": KV})) == {"kvCacheUtilization": 0.9}


def test_extract_rejects_malformed_text() -> None:
    with pytest.raises(ScrapeError):
        extract("this is { not prometheus\n", target("x"))


def test_target_from_example_resource() -> None:
    import yaml

    obj = yaml.safe_load(EXAMPLE.read_text())
    (found,) = targets_from_objects([obj])
    assert found.url == "https://metrics.example.svc:9090/metrics"  # TLS configured: never plaintext
    assert (found.timeout, found.pool_name, found.stale_seconds, found.tls) == (0.5, "example-pool", 30.0, True)
    assert found.signal_names["queueDepth"] == QUEUE


def test_provider_tls_applies_to_metrics() -> None:
    obj = {
        "kind": "InferenceProvider",
        "metadata": {"name": "p"},
        "spec": {"endpoint": "http://h:1", "tls": {}, "metricsConfig": {"endpoint": "http://m:2"}},
    }
    (found,) = targets_from_objects([obj])
    assert (found.url, found.tls) == ("https://m:2/metrics", True)


def test_target_defaults_to_provider_endpoint() -> None:
    obj = {
        "kind": "InferenceProvider",
        "metadata": {"name": "p"},
        "spec": {"endpoint": "http://127.0.0.1:9/", "metricsConfig": {"signalNames": {"queueDepth": "q"}}},
    }
    (found,) = targets_from_objects([obj, {"kind": "InferenceProvider", "metadata": {"name": "n"}, "spec": {}}])
    assert (found.url, found.timeout, found.tls) == ("http://127.0.0.1:9/metrics", 2.0, False)


# --- live scraping ------------------------------------------------------------------------------------


def test_scrapes_fake_backend_and_follows_changes() -> None:
    clock = FixedClock()
    scraper = Scraper(clock)
    with fake_backend("p1") as base:
        tgt = target(f"{base}/metrics")
        (first,) = asyncio.run(scraper.scrape([tgt]))
        assert (first.queue_depth, first.kv_cache_utilization, first.healthy) == (0.0, 0.0, True)
        set_metrics(
            base,
            [
                {"name": QUEUE, "labels": {"name": "p1"}, "value": 12},
                {"name": KV, "labels": {"name": "p1"}, "value": 0.75},
                {"name": "inference_pool_ready_pods", "labels": {"name": "p1"}, "value": 0},
            ],
        )
        clock.advance(1)
        (second,) = asyncio.run(scraper.scrape([tgt]))
    assert (second.queue_depth, second.kv_cache_utilization, second.healthy) == (12.0, 0.75, False)
    assert second.revision > first.revision
    assert second.observed_at == 1.0


def test_plaintext_failure_gives_no_sample() -> None:
    scraper = Scraper(FixedClock())
    assert asyncio.run(scraper.scrape([target(closed_port_url())])) == []
    assert "p1" in scraper.last_errors


def test_tls_failure_without_cache_fails_closed_with_fresh_revisions() -> None:
    scraper = Scraper(FixedClock())
    tgt = target(closed_port_url().replace("http://", "https://"), tls=True)
    (one,) = asyncio.run(scraper.scrape([tgt]))
    (two,) = asyncio.run(scraper.scrape([tgt]))
    assert (one.healthy, two.healthy) == (False, False)
    assert two.revision > one.revision


def test_stale_cache_bridges_failures_then_expires() -> None:
    clock = FixedClock()
    scraper = Scraper(clock)
    with fake_backend("p1") as base:
        set_metrics(base, [{"name": QUEUE, "labels": {"name": "p1"}, "value": 5}])
        good_tgt = target(f"{base}/metrics", stale_seconds=30.0, tls=True)
        (good,) = asyncio.run(scraper.scrape([good_tgt]))
    assert good.expires_at == 30.0
    dead = target(closed_port_url(), stale_seconds=30.0, tls=True)
    clock.advance(20)
    (cached,) = asyncio.run(scraper.scrape([dead]))
    assert (cached.revision, cached.queue_depth, cached.expires_at) == (good.revision, 5.0, 30.0)
    clock.advance(11)
    (closed,) = asyncio.run(scraper.scrape([dead]))
    assert closed.healthy is False and closed.revision > good.revision
    plain = target(closed_port_url(), stale_seconds=30.0)
    assert asyncio.run(scraper.scrape([plain])) == []


def test_without_stale_window_a_failure_drops_the_sample() -> None:
    scraper = Scraper(FixedClock())

    async def body() -> list[Any]:
        async with text_server(f'{QUEUE}{{name="p1"}} 3\n') as url:
            await scraper.scrape([target(url)])
        return await scraper.scrape([target(url)])

    assert asyncio.run(body()) == []


def test_per_provider_timeout_is_enforced() -> None:
    scraper = Scraper(FixedClock())

    async def body() -> tuple[list[Any], float]:
        async with text_server(f'{QUEUE}{{name="p1"}} 3\n', hang=True) as url:
            start = time.monotonic()
            samples = await scraper.scrape([target(url, timeout=0.2)])
            return samples, time.monotonic() - start

    samples, elapsed = asyncio.run(body())
    assert samples == [] and elapsed < 3.0, (samples, elapsed)
    assert "Timeout" in scraper.last_errors["p1"]


@pytest.mark.parametrize(("body", "status"), [("ok 1\n", 500), ("garbage { here\n", 200)])
def test_http_errors_and_bad_text_count_as_failures(body: str, status: int) -> None:
    scraper = Scraper(FixedClock())

    async def run() -> list[Any]:
        async with text_server(body, status=status) as url:
            return await scraper.scrape([target(url, tls=True)])

    (sample,) = asyncio.run(run())
    assert sample.healthy is False


def test_nan_values_from_a_live_endpoint_are_absent() -> None:
    scraper = Scraper(FixedClock())

    async def run() -> list[Any]:
        async with text_server(f'{QUEUE}{{name="p1"}} NaN\n{KV}{{name="p1"}} 0.5\n') as url:
            return await scraper.scrape([target(url)])

    (sample,) = asyncio.run(run())
    assert (sample.queue_depth, sample.kv_cache_utilization, sample.healthy) == (None, 0.5, True)


@contextlib.asynccontextmanager
async def tls_server(body: str, server_context: ssl.SSLContext) -> AsyncIterator[str]:
    async def handler(_: web.Request) -> web.Response:
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}/metrics"
    finally:
        await runner.cleanup()


def test_tls_metrics_verified_with_the_configured_ca() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    trusted, untrusted = Scraper(FixedClock(), client_context), Scraper(FixedClock())

    async def run() -> tuple[list[Any], list[Any]]:
        async with tls_server(f'{QUEUE}{{name="p1"}} 4\n', server_context) as url:
            tgt = target(url, tls=True)
            return await trusted.scrape([tgt]), await untrusted.scrape([tgt])

    (good,), (closed,) = asyncio.run(run())
    assert (good.queue_depth, good.healthy) == (4.0, True)
    assert closed.healthy is False, "an unverifiable TLS endpoint must fail closed"
