"""The operator's signals endpoint: the raw EPP series it relays to the gateways that route to its site.

A gateway choosing sites by measured availability concludes in-flight and saturation from series the site's
operator relays from its EPP (routing guide 7b). The operator under test serves them at GET /v1/site/signals
over mutual TLS (the descriptor's operator.signals_args), as Prometheus text labelled with its site
(grid_site) and the provider's cluster (grid_provider). The suite's fake backend is the EPP: its load model
publishes the pool's series, set by hand here, and the operator must relay them as published.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import resources
from harness.addresses import accepts
from harness.fakes.epp import HELD, LEGACY_NAMES, READY, RUNNING, SERIES, WAITING
from harness.pki import client_context
from harness.producer_support import Scenario
from harness.timeouts import timeouts
from harness.waiting import poll_until

INPUTS = ("routing-guide#7b-measured-site-availability: \"Every input is a raw series the site's operator relays "
          "from its EPP: running and waiting per endpoint, ready endpoints, and what flow control holds.\"")
PATH = "/v1/site/signals"
RELAYED = frozenset({*SERIES.values(), *LEGACY_NAMES.values()})
#: The fake backend whose load model is the EPP here; its pool is named after it.
EPP_BACKEND = "provider-a"

Rows = dict[tuple[str, str], tuple[float, float]]


@pytest.fixture
def endpoint(scenario: Scenario) -> Any:
    """Where the operator under test serves its signals (the local backend starts it with signals_args), once
    it accepts connections: a test run right after the operator started must not take a port that is not
    bound yet for a refusal."""
    served = getattr(scenario.site.grid.backend, "operator_signals", {}).get(scenario.site.index)
    if served is None:
        pytest.skip("unsupported feature: signalsRelay (this backend does not start the operator with "
                    "operator.signals_args)")
    host, _, port = served.address.rpartition(":")

    def unbound(_: bool) -> str:
        return f"no connection accepted; the operator logged:\n{scenario.control.process.log_tail(20)}"

    poll_until(lambda: accepts(host, int(port), timeouts().request), bool, timeout=timeouts().reconcile,
               what=f"the operator's signals endpoint {served.address}", describe=unbound)
    return served


@pytest.fixture
def epp(scenario: Scenario) -> Iterator[str]:
    """The EPP backend's base URL; its load model is removed again when the test ends."""
    url = scenario.site.backend(EPP_BACKEND).url
    try:
        yield url
    finally:
        httpx.post(f"{url}/admin/config", json={"epp": None}, timeout=timeouts().request, trust_env=False)


def set_epp(url: str, config: dict[str, Any]) -> None:
    response = httpx.post(f"{url}/admin/config", json={"epp": config}, timeout=timeouts().request, trust_env=False)
    assert response.status_code == 200, response.text


def verify(scenario: Scenario, certificate: bool) -> ssl.SSLContext:
    pki = scenario.site.grid.backend.pki
    client = pki.client(f"{scenario.tag}-signals-{'peer' if certificate else 'anonymous'}") if certificate else None
    return client_context(pki.ca_path, client)


def fetch(url: str, context: ssl.SSLContext) -> httpx.Response:
    """GET over TLS, verifying the operator's certificate (issued for its address) against the run's CA."""
    with httpx.Client(verify=context, timeout=timeouts().request, trust_env=False) as http:
        return http.get(url)


def parse(text: str, site: str) -> Rows:
    """(series, grid_provider) -> (value, timestamp in seconds) of every row, checking what each row must carry."""
    found: Rows = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert sample.name in RELAYED, f"only the EPP's raw series are relayed, not {sample.name}"
            assert sample.labels.get("grid_site") == site, f"grid_site must be the operator's site: {sample}"
            assert "grid_provider" in sample.labels, f"no grid_provider: {sample}"
            assert sample.timestamp is not None, f"every row carries its time: {sample}"
            found[(sample.name, sample.labels["grid_provider"])] = (sample.value, float(sample.timestamp))
    return found


def of(rows: Rows, cluster: str) -> dict[str, float]:
    return {name: value for (name, provider), (value, _) in rows.items() if provider == cluster}


@pytest.mark.conformance(id="PROD-SIGNALS-RELAY", profile="producer", level="extended", feature="signalsRelay",
                         spec=INPUTS, statements=["RG-AVAIL-INPUTS"])
def test_operator_relays_its_providers_epp_series_raw(scenario: Scenario, endpoint: Any, epp: str) -> None:
    """The operator relays the EPP series of its provider's pool as the EPP publishes them, raw, labelled with
    its site and the provider's cluster, stamped with their time, and a change on the EPP reaches the relay.

    Fails if a series is missing or concluded (an in-flight for running, waiting left out), if the rows name
    another site or the provider's name instead of its cluster, if the values stay as first read, or if series
    other than the EPP's are relayed.
    """
    set_epp(epp, {"endpoints": 2, "set": {"running": 3, "waiting": 1.5, "held": 4}})
    cluster = scenario.name("signals-pool")
    scenario.network()
    scenario.apply(resources.inference_provider(
        scenario.name("p"), scenario.net, site=scenario.local, cluster=cluster, models=(scenario.model,),
        metrics=resources.metrics_config(epp, EPP_BACKEND)))
    url, site = f"https://{endpoint.address}{PATH}", endpoint.site
    context = verify(scenario, certificate=True)

    def relayed() -> Rows:
        response = fetch(url, context)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain"), response.headers
        return parse(response.text, site)

    started = time.time()
    rows = poll_until(relayed, lambda seen: bool(of(seen, cluster)), timeout=timeouts().reconcile,
                      what=f"rows of cluster {cluster} on the operator's signals endpoint",
                      describe=lambda seen: f"clusters {sorted({p for _, p in seen})}")
    primary = {name: value for name, value in of(rows, cluster).items() if name in SERIES.values()}
    assert primary == {RUNNING: 3, WAITING: 1.5, READY: 2, HELD: 4}, (
        f"the EPP publishes running 3 and waiting 1.5 per endpoint, 2 ready endpoints and 4 held: relayed raw, "
        f"got {primary}")
    stamps = [stamp for (_, provider), (_, stamp) in rows.items() if provider == cluster]
    assert all(started - 5.0 <= stamp <= time.time() + 5.0 for stamp in stamps), f"timestamps in ms now: {stamps}"

    set_epp(epp, {"endpoints": 3, "set": {"running": 0.5, "waiting": 0}})
    changed = poll_until(relayed, lambda seen: of(seen, cluster).get(READY) == 3, timeout=timeouts().reconcile,
                         what="the EPP's change relayed", describe=lambda seen: str(of(seen, cluster)))
    primary = {name: value for name, value in of(changed, cluster).items() if name in SERIES.values()}
    assert primary == {RUNNING: 0.5, WAITING: 0, READY: 3, HELD: 0}, f"after the change, got {primary}"


def _refused(url: str, context: ssl.SSLContext) -> bool:
    try:
        fetch(url, context)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
        return True
    return False


@pytest.mark.conformance(id="PROD-SIGNALS-MTLS", profile="producer", level="extended", feature="signalsRelay",
                         spec=INPUTS, statements=["RG-AVAIL-INPUTS"])
def test_signals_endpoint_refuses_a_client_without_a_certificate(scenario: Scenario, endpoint: Any) -> None:
    """The signals endpoint is served over mutual TLS: a client with no certificate is refused, the same request
    with a grid client certificate is answered.

    Fails if the operator serves the signals to anyone (plain TLS, or no TLS at all).
    """
    url = f"https://{endpoint.address}{PATH}"
    assert _refused(url, verify(scenario, certificate=False)), "a client without a certificate must be refused"
    answered = fetch(url, verify(scenario, certificate=True))
    assert answered.status_code == 200, answered.text
