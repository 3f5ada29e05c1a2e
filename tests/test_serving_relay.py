"""The harness's signals relay (harness.serving.relay): real fake backends, a real relay process, and clients
presenting (or not) a grid certificate over mutual TLS. Every refusal has its accepted twin."""

from __future__ import annotations

import json
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.fakes.epp import HELD, LEGACY_NAMES, READY, RUNNING, WAITING
from harness.pki import ClientFiles, GridPKI, client_context
from harness.process import Supervisor
from harness.serving.relay import PATH, RelayProcess, RelaySource, main, relay_text, select, server_name, start_relay
from harness.waiting import poll_until

SITE = "site-b"
HOST = "127.0.0.1"


@dataclass
class World:
    pki: GridPKI
    supervisor: Supervisor
    backends: dict[str, str]  # fake backend name -> host:port of its plain listener
    relay: RelayProcess
    client: ClientFiles


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _fakes(supervisor: Supervisor, workdir: Path, names: list[str]) -> dict[str, str]:
    """The fake backends `names`, served by one group process; their plain addresses once they answer."""
    ready = {name: workdir / f"{name}.address" for name in names}
    listing = workdir / "fakes.json"
    listing.write_text(json.dumps([["--name", name, "--site", SITE, "--listen", f"{HOST}:0", "--ready-file",
                                    str(ready[name])] for name in names]))
    process = supervisor.start("fakes", [sys.executable, "-m", "harness.fakes.group", str(listing)])

    def addresses() -> dict[str, str] | None:
        assert process.running(), process.log_tail()
        if not all(path.exists() for path in ready.values()):
            return None
        return {name: path.read_text().strip() for name, path in ready.items()}

    found = poll_until(addresses, lambda seen: seen is not None, what="the fake backends to listen", timeout=20)
    assert found is not None
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("relay")
    supervisor = Supervisor(workdir / "logs")
    try:
        pki = GridPKI(workdir / "pki")
        backends = _fakes(supervisor, workdir, ["b1", "b2"])
        files = pki.server("signals-site-b", HOST, server_name(SITE))
        sources = [RelaySource("site-b-pool", backends["b1"]), RelaySource("site-b-other", backends["b2"], "b2"),
                   RelaySource("site-b-down", f"{HOST}:{_closed_port()}")]
        relay = start_relay(supervisor, name="relay-site-b", site=SITE, listen=f"{HOST}:0", sources=sources,
                            cert=files.cert, key=files.key, client_ca=pki.ca_path)
        yield World(pki, supervisor, backends, relay, pki.client("gateway-a"))
    finally:
        supervisor.stop_all()


def admin(world: World, backend: str, body: dict[str, Any]) -> None:
    response = httpx.post(f"http://{world.backends[backend]}/admin/config", json=body, trust_env=False)
    assert response.status_code == 200, response.text


def verify(world: World, client: ClientFiles | None) -> ssl.SSLContext:
    return client_context(world.pki.ca_path, client)


def fetch(world: World, client: ClientFiles | None = None) -> httpx.Response:
    with httpx.Client(verify=verify(world, client or world.client), timeout=10.0, trust_env=False) as http:
        return http.get(world.relay.signals_url)


Rows = dict[tuple[str, str], tuple[float, float | None]]


def rows(text: str) -> Rows:
    """(series, grid_provider) -> (value, timestamp in seconds), checking every line's labels."""
    found: Rows = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert set(sample.labels) == {"grid_site", "grid_provider"}, sample
            assert sample.labels["grid_site"] == SITE, sample
            key = (sample.name, sample.labels["grid_provider"])
            assert key not in found, f"{key} twice"
            stamp = sample.timestamp
            found[key] = (sample.value, None if stamp is None else float(stamp))
    return found


def values(found: Rows, cluster: str) -> dict[str, float]:
    return {name: value for (name, provider), (value, _) in found.items() if provider == cluster}


# ------------------------------------------------------------------------------------------- answers


def test_relays_the_epp_series_raw_with_site_provider_and_time(world: World) -> None:
    admin(world, "b1", {"epp": {"endpoints": 2, "concurrency": 4, "service_ms": 0}})
    before = time.time()
    response = fetch(world)
    after = time.time()
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = response.text.splitlines()
    assert all(line.count(" ") == 2 and not line.startswith("#") for line in lines), response.text
    found = rows(response.text)
    stamps = {stamp for _value, stamp in found.values()}
    assert len(stamps) == 1, f"one scrape time for the whole answer: {stamps}"
    stamp = stamps.pop()
    assert stamp is not None and before - 0.001 <= stamp <= after + 0.001, (before, stamp, after)
    # b1: the load model's four series, and the older names its default samples publish; nothing else
    assert values(found, "site-b-pool") == {RUNNING: 0, WAITING: 0, READY: 2, HELD: 0,
                                            LEGACY_NAMES[WAITING]: 0, LEGACY_NAMES[READY]: 1}
    assert '{grid_site="site-b",grid_provider="site-b-pool"} 2 ' in response.text, "whole numbers as the EPP writes"
    # b2 has no load model: only its default samples of the older names; the closed port gives no rows
    assert values(found, "site-b-other") == {LEGACY_NAMES[WAITING]: 0, LEGACY_NAMES[READY]: 1}
    assert values(found, "site-b-down") == {}


def test_values_follow_the_backends_set_and_its_pool(world: World) -> None:
    admin(world, "b1", {"epp": {"endpoints": 3, "set": {"running": 2.5, "waiting": 1, "held": 4}}})
    assert values(rows(fetch(world).text), "site-b-pool") == {
        RUNNING: 2.5, WAITING: 1, READY: 3, HELD: 4, LEGACY_NAMES[WAITING]: 0, LEGACY_NAMES[READY]: 1}
    admin(world, "b1", {"epp": {"endpoints": 3, "set": {"running": 0.5, "ready": 0}}})
    assert values(rows(fetch(world).text), "site-b-pool")[RUNNING] == 0.5
    assert values(rows(fetch(world).text), "site-b-pool")[READY] == 0
    # site-b-other relays pool b2 only: another pool's series on the same backend are not its
    admin(world, "b2", {"metrics": [{"name": WAITING, "labels": {"name": "elsewhere"}, "value": 9},
                                    {"name": WAITING, "labels": {"name": "b2"}, "value": 6}]})
    assert values(rows(fetch(world).text), "site-b-other") == {WAITING: 6}


def test_every_source_failing_answers_502_and_one_answering_200(tmp_path: Path, world: World) -> None:
    files = world.pki.server("signals-down", HOST, server_name("site-d"))
    down = start_relay(world.supervisor, name="relay-down", site="site-d", listen=f"{HOST}:0",
                       sources=[RelaySource("c", f"{HOST}:{_closed_port()}")], cert=files.cert, key=files.key,
                       client_ca=world.pki.ca_path)
    try:
        with httpx.Client(verify=verify(world, world.client), timeout=10.0, trust_env=False) as http:
            assert http.get(down.signals_url).status_code == 502
            assert http.get(world.relay.signals_url).status_code == 200  # the twin: one source answers
    finally:
        down.stop()


def test_other_paths_and_methods(world: World) -> None:
    with httpx.Client(verify=verify(world, world.client), timeout=10.0, trust_env=False) as http:
        assert http.get(f"{world.relay.url}/metrics").status_code == 404
        assert http.post(world.relay.signals_url).status_code == 405
        assert http.get(f"{world.relay.url}{PATH}").status_code == 200


# ------------------------------------------------------------------------------------------- who may ask


def _refused_in_tls(world: World, client: ClientFiles | None) -> bool:
    try:
        fetch_with(world, client)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
        return True
    return False


def fetch_with(world: World, client: ClientFiles | None) -> httpx.Response:
    with httpx.Client(verify=verify(world, client), timeout=10.0, trust_env=False) as http:
        return http.get(world.relay.signals_url)


def test_a_client_without_a_certificate_is_refused_and_with_one_answered(world: World) -> None:
    assert _refused_in_tls(world, None), "no client certificate: the handshake fails"
    assert fetch_with(world, world.client).status_code == 200


def test_a_certificate_of_another_ca_is_refused_and_the_grids_answered(world: World) -> None:
    assert _refused_in_tls(world, world.pki.foreign_client("relay-intruder"))
    assert fetch_with(world, world.pki.client("relay-grid-peer")).status_code == 200


def test_a_certificate_of_another_organization_is_refused_and_the_grids_answered(world: World) -> None:
    refused = fetch_with(world, world.pki.wrong_organization_client("relay-other-org"))
    assert refused.status_code == 403 and "organization" in refused.text, refused.text
    assert fetch_with(world, world.pki.unlisted_client("relay-same-org")).status_code == 200


# ------------------------------------------------------------------------------------------- the process


def test_stop_frees_the_port(world: World) -> None:
    files = world.pki.server("signals-short", HOST, server_name("site-s"))
    relay = start_relay(world.supervisor, name="relay-short", site="site-s", listen=f"{HOST}:0",
                        sources=[RelaySource("c", world.backends["b1"])], cert=files.cert, key=files.key,
                        client_ca=world.pki.ca_path)
    host, port = relay.address.rsplit(":", 1)
    assert relay.stop() == 0, "SIGTERM stops it cleanly"
    with socket.socket() as sock:
        sock.bind((host, int(port)))  # nothing holds the port any more


def test_a_relay_that_cannot_listen_raises_with_its_log(world: World) -> None:
    files = world.pki.server("signals-busy", HOST)
    with pytest.raises(RuntimeError, match="cannot listen"):
        start_relay(world.supervisor, name="relay-busy", site="site-x", listen=world.relay.address,
                    sources=[RelaySource("c", world.backends["b1"])], cert=files.cert, key=files.key,
                    client_ca=world.pki.ca_path)


@pytest.mark.parametrize(("change", "named"), [
    ({"--source": "no-equals-sign"}, "--source"),
    ({"--source": "c=127.0.0.1"}, "--source"),
    ({"--source": "c=127.0.0.1:0"}, "--source"),
    ({"--listen": "nowhere"}, "--listen"),
    ({"--scrape-timeout": "0"}, "--scrape-timeout"),
    ({"--cert": "/nonexistent.pem"}, "--cert"),
])
def test_bad_arguments_exit_2_naming_the_option(world: World, capsys: pytest.CaptureFixture[str],
                                                change: dict[str, str], named: str) -> None:
    files = world.pki.server("signals-args", HOST)
    options = {"--site": SITE, "--listen": f"{HOST}:0", "--cert": str(files.cert), "--key": str(files.key),
               "--client-ca": str(world.pki.ca_path), "--source": "c=127.0.0.1:1", **change}
    with pytest.raises(SystemExit) as exited:
        main([item for pair in options.items() for item in pair])
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_a_cluster_is_relayed_once(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    files = world.pki.server("signals-twice", HOST)
    argv = ["--site", SITE, "--listen", f"{HOST}:0", "--cert", str(files.cert), "--key", str(files.key),
            "--client-ca", str(world.pki.ca_path), "--source", "c=127.0.0.1:1", "--source", "c=127.0.0.1:2"]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and "repeated: c" in capsys.readouterr().err


def test_an_operators_conclusions_are_relayed_after_the_epp_series() -> None:
    """A pool's grid_provider_* samples go out beside its EPP series (so the serving suite can show a gateway
    ignores them); other names are not relayed."""
    page = ('# TYPE llm_d_epp_average_running_requests gauge\nllm_d_epp_average_running_requests{name="p"} 2\n'
            '# TYPE grid_provider_in_flight gauge\ngrid_provider_in_flight{name="p"} 64\n'
            '# TYPE other_series gauge\nother_series{name="p"} 5\n')
    values = select(page, "p")
    assert values == {"llm_d_epp_average_running_requests": 2.0, "grid_provider_in_flight": 64.0}
    assert relay_text("site-b", [("site-b-pool", values)], 1000).splitlines() == [
        'llm_d_epp_average_running_requests{grid_site="site-b",grid_provider="site-b-pool"} 2 1000',
        'grid_provider_in_flight{grid_site="site-b",grid_provider="site-b-pool"} 64 1000']
