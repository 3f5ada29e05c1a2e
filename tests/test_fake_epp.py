"""The fake backend's EPP-style load model (`epp`): slots taken by real concurrent requests, the four series
it publishes on /metrics, hand-set values, and the checks on its config (each refusal with an accepted twin)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.fakes import FakeBackend, RunningServer, RuntimeConfig, running
from harness.fakes.cli import build_parser, prepare
from harness.fakes.epp import HELD, READY, RUNNING, WAITING, EppConfig

DEADLINE = 15.0
POOL = (("name", "east-1"),)

Scenario = Callable[[RunningServer, httpx.AsyncClient], Awaitable[None]]


def run(scenario: Scenario, backend: FakeBackend | None = None) -> None:
    async def body() -> None:
        async with (
            running(backend or FakeBackend("east-1", "east"), "127.0.0.1", 0) as server,
            httpx.AsyncClient(base_url=server.base_url, timeout=20.0) as client,
        ):
            await scenario(server, client)

    asyncio.run(body())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def load(client: httpx.AsyncClient, pool: tuple[tuple[str, str], ...] = POOL) -> dict[str, float | None]:
    """The four EPP series of `pool` as /metrics publishes them now (None: not published)."""
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    found = samples(response.text)
    return {name: found.get((name, pool)) for name in (RUNNING, WAITING, READY, HELD)}


async def until(client: httpx.AsyncClient, expected: dict[str, float], what: str) -> None:
    """Poll /metrics until the EPP series read `expected` (a subset), failing with the last reading."""
    deadline = time.monotonic() + DEADLINE
    seen: dict[str, float | None] = {}
    while time.monotonic() < deadline:
        seen = await load(client)
        if all(seen[name] == value for name, value in expected.items()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"waited {DEADLINE}s for {what}: expected {expected}, last read {seen}")


async def configure(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/admin/config", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def chat(client: httpx.AsyncClient) -> asyncio.Task[httpx.Response]:
    return asyncio.ensure_future(client.post("/v1/chat/completions", json={"model": "m"}))


# ------------------------------------------------------------------------------------------- the load


def test_running_and_waiting_follow_concurrent_requests() -> None:
    """Six requests on 2 endpoints x 2 slots: four run and two wait (2 and 1 per endpoint), then the two run,
    then nothing; every request is answered."""
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        await configure(client, {"epp": {"endpoints": 2, "concurrency": 2, "service_ms": 1500}})
        await until(client, {RUNNING: 0, WAITING: 0, READY: 2, HELD: 0}, "an idle pool of two endpoints")
        requests = [chat(client) for _ in range(6)]
        await until(client, {RUNNING: 2, WAITING: 1, READY: 2}, "four running and two waiting")
        await until(client, {RUNNING: 1, WAITING: 0}, "the two that waited running")
        answers = await asyncio.gather(*requests)
        assert [a.status_code for a in answers] == [200] * 6
        assert await load(client) == {RUNNING: 0, WAITING: 0, READY: 2, HELD: 0}

    run(scenario)


def test_slots_are_taken_first_come_first_served() -> None:
    """One slot: the second request runs only after the first, the third after the second."""
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        await configure(client, {"epp": {"endpoints": 1, "concurrency": 1, "service_ms": 300}})
        finished: list[int] = []

        async def one(index: int) -> None:
            assert (await client.post("/v1/completions", json={"model": "m"})).status_code == 200
            finished.append(index)

        first = asyncio.ensure_future(one(0))
        await until(client, {RUNNING: 1}, "the first request running")
        second = asyncio.ensure_future(one(1))
        await until(client, {WAITING: 1}, "the second waiting")
        third = asyncio.ensure_future(one(2))
        await until(client, {WAITING: 2}, "the third waiting too")
        await asyncio.gather(first, second, third)
        assert finished == [0, 1, 2]

    run(scenario)


def test_no_ready_endpoint_answers_503_at_once_and_publishes_ready_0() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        await configure(client, {"epp": {"endpoints": 0, "service_ms": 60000}})
        started = time.monotonic()
        refused = await client.post("/v1/chat/completions", json={"model": "m"})
        assert refused.status_code == 503 and "no ready endpoint" in refused.text
        assert time.monotonic() - started < 5.0, "answered at once, not after service_ms"
        assert await load(client) == {RUNNING: 0, WAITING: 0, READY: 0, HELD: 0}
        # the twin: one ready endpoint serves
        await configure(client, {"epp": {"endpoints": 1, "service_ms": 0}})
        assert (await client.post("/v1/chat/completions", json={"model": "m"})).status_code == 200
        assert (await load(client))[READY] == 1

    run(scenario)


def test_waiting_requests_are_turned_away_when_the_endpoints_go() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        await configure(client, {"epp": {"endpoints": 1, "concurrency": 1, "service_ms": 1000}})
        first = chat(client)
        await until(client, {RUNNING: 1}, "the first request running")
        second = chat(client)
        await until(client, {WAITING: 1}, "the second waiting")
        await configure(client, {"epp": {"endpoints": 0, "concurrency": 1, "service_ms": 1000}})
        assert (await second).status_code == 503
        assert (await first).status_code == 200, "a running request finishes"

    run(scenario)


def test_set_overrides_any_subset_of_the_published_values() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        config = await configure(client, {"epp": {"endpoints": 3, "set": {"waiting": 7, "held": 2.5}}})
        assert config["epp"] == {"endpoints": 3, "concurrency": 4, "service_ms": 200.0,
                                 "set": {"waiting": 7.0, "held": 2.5}}
        assert await load(client) == {RUNNING: 0, WAITING: 7, READY: 3, HELD: 2.5}
        await configure(client, {"epp": {"endpoints": 3, "set": {"running": "NaN", "ready": 0}}})
        seen = await load(client)
        running_now = seen[RUNNING]
        assert running_now is not None and math.isnan(running_now)
        assert (seen[WAITING], seen[READY], seen[HELD]) == (0, 0, 0)
        # a hand-set ready of 0 publishes 0, but the model still has its three endpoints: requests are served
        assert (await client.post("/v1/completions", json={"model": "m"})).status_code == 200
        # set: null goes back to the measured values
        await configure(client, {"epp": {"endpoints": 3}})
        assert await load(client) == {RUNNING: 0, WAITING: 0, READY: 3, HELD: 0}

    run(scenario)


def test_series_replace_configured_samples_of_the_same_pool_only() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        other = {"name": "other-pool"}
        await configure(client, {"metrics": [{"name": WAITING, "labels": {"name": "east-1"}, "value": 9},
                                             {"name": WAITING, "labels": other, "value": 4}],
                                 "epp": {"endpoints": 2}})
        found = samples((await client.get("/metrics")).text)
        assert found[(WAITING, POOL)] == 0, "the load model's value, not the configured 9"
        assert found[(WAITING, (("name", "other-pool"),))] == 4
        assert found[(READY, POOL)] == 2

    run(scenario)


def test_series_carry_the_backends_pool_name() -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        assert await load(client, (("name", "llama-pool"),)) == {RUNNING: 0, WAITING: 0, READY: 4, HELD: 0}

    backend = FakeBackend("east-1", "east", RuntimeConfig(epp=EppConfig(endpoints=4)), pool="llama-pool")
    run(scenario, backend)


def test_without_epp_nothing_changes() -> None:
    """No `epp`: no EPP series, no slots (twenty requests at once are all in the model API together)."""
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        assert (await client.get("/admin/config")).json()["epp"] is None
        assert await load(client) == {RUNNING: None, WAITING: None, READY: None, HELD: None}
        await configure(client, {"hold": True})
        held = [chat(client) for _ in range(20)]
        deadline = time.monotonic() + DEADLINE
        while server.backend.requests < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert server.backend.requests == 20
        await configure(client, {"hold": False})
        assert [a.status_code for a in await asyncio.gather(*held)] == [200] * 20
        # turned on, then off again: the series go with it
        await configure(client, {"epp": {}})
        assert await load(client) == {RUNNING: 0, WAITING: 0, READY: 1, HELD: 0}
        assert (await configure(client, {"epp": None}))["epp"] is None
        assert await load(client) == {RUNNING: None, WAITING: None, READY: None, HELD: None}

    run(scenario)


# --------------------------------------------------------------------------------------------- checks


#: (refused epp value, what the message names, an accepted twin that differs in the one value)
BAD_EPP: list[tuple[str, Any, str, Any]] = [
    ("not an object", [], "epp: expected null or an object", {}),
    ("unknown key", {"pool": "x"}, "epp: unknown key 'pool'", {"endpoints": 1}),
    ("endpoints negative", {"endpoints": -1}, "epp.endpoints", {"endpoints": 0}),
    ("endpoints fraction", {"endpoints": 1.5}, "epp.endpoints", {"endpoints": 2}),
    ("endpoints bool", {"endpoints": True}, "epp.endpoints", {"endpoints": 1}),
    ("concurrency zero", {"concurrency": 0}, "epp.concurrency", {"concurrency": 1}),
    ("concurrency text", {"concurrency": "4"}, "epp.concurrency", {"concurrency": 4}),
    ("service negative", {"service_ms": -1}, "epp.service_ms", {"service_ms": 0}),
    ("service text", {"service_ms": "5"}, "epp.service_ms", {"service_ms": 5}),
    ("service too long", {"service_ms": 600001}, "epp.service_ms", {"service_ms": 600000}),
    ("set not an object", {"set": [1]}, "epp.set: expected null or an object", {"set": None}),
    ("set unknown key", {"set": {"queue": 1}}, "epp.set: unknown key 'queue'", {"set": {"waiting": 1}}),
    ("set value text", {"set": {"running": "1"}}, "epp.set.running", {"set": {"running": "+Inf"}}),
    ("set value bool", {"set": {"held": False}}, "epp.set.held", {"set": {"held": 0}}),
]


@pytest.mark.parametrize(("bad", "named", "twin"), [(b, n, t) for _, b, n, t in BAD_EPP],
                         ids=[label for label, _, _, _ in BAD_EPP])
def test_bad_epp_config_is_refused_naming_the_key_and_its_twin_accepted(bad: Any, named: str, twin: Any) -> None:
    async def scenario(server: RunningServer, client: httpx.AsyncClient) -> None:
        before = (await client.get("/admin/config")).json()
        refused = await client.post("/admin/config", json={"epp": bad, "latency_ms": 1})
        assert refused.status_code == 400 and named in refused.text, refused.text
        assert (await client.get("/admin/config")).json() == before, "a refused update changes nothing"
        accepted = await client.post("/admin/config", json={"epp": twin, "latency_ms": 1})
        assert accepted.status_code == 200, accepted.text
        assert accepted.json()["epp"] is not None and accepted.json()["latency_ms"] == 1

    run(scenario)


def test_cli_config_file_sets_epp_and_a_bad_one_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--name", "b1", "--site", "s", "--listen", "127.0.0.1:0", "--pool", "llama"]
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"epp": {"endpoints": 2, "concurrency": 3, "service_ms": 50}}))
    bad.write_text(json.dumps({"epp": {"endpoints": 2, "concurrency": 0}}))
    prepared = prepare([*base, "--config", str(good)], build_parser())
    assert prepared.backend.config.epp == EppConfig(endpoints=2, concurrency=3, service_ms=50.0)
    assert prepared.backend.pool == "llama"
    with pytest.raises(SystemExit) as exited:
        prepare([*base, "--config", str(bad)], build_parser())
    assert exited.value.code == 2
    assert "epp.concurrency" in capsys.readouterr().err
