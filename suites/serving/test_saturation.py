"""Saturation: in-flight over the learned ceiling, concluded from the series each site relays, reaching 1.0 as
a queue forms and falling as it drains; and the traffic it steers, a saturating site losing its share and
getting it back once drained.
"""

from __future__ import annotations

import time

import pytest

from harness.serving.grid import EppSetting, ServingGrid
from harness.serving.judge import assert_at_least, plan_at_least
from harness.serving.load import LoadRun, distinct_prompt
from harness.serving.record import SaturationRecorder
from harness.timeline import record_action
from harness.timeouts import timeouts
from harness.waiting import hold_for, poll_until

GUIDE = "routing guide 7b. Measured site availability"
#: A pool running 4 requests at once for 100 ms each; 16 clients keep 12 of them waiting.
SMALL_POOL = EppSetting(endpoints=1, concurrency=4, service_ms=100)


@pytest.mark.conformance(id="SERV-RHO-METRIC", profile="serving", level="core", feature="routeMetrics",
                         spec=f"{GUIDE}, tuning: \"grid_route_site_rho should reach 1.0 as the engine queue forms "
                              "and fall as it drains\"",
                         statements=["RG-AVAIL-METRIC-RHO"])
def test_rho_reaches_one_as_the_queue_forms_and_falls_as_it_drains(two: ServingGrid, model: str) -> None:
    """Sixteen clients sent straight to site-b's pool (4 running at once) keep a queue of about 12 there:
    grid_route_site_rho{site-b} climbs to 0.99 or more (1.0 as the default smoothing lets it approach: at
    least 13 samples in). Once the load stops and the pool's queue is empty, it falls below 0.5."""
    two.configure("site-b", SMALL_POOL)
    gateway = two.start_gateway(model, availability={})
    gateway.wait_measured()
    with SaturationRecorder(gateway, ["site-b"]):
        with LoadRun(two.backend_url("site-b"), model, prompt=distinct_prompt(f"{model}/rho"), concurrency=16):
            record_action("16 clients straight to site-b's pool", site="site-b")
            poll_until(lambda: two.queued("site-b"), lambda q: q >= 4, what="a queue at site-b's pool",
                       timeout=timeouts().serving_signal)
            gateway.wait_rho("site-b", lambda r: r >= 0.99, what="to reach 1.0 while the queue holds")
        record_action("load stopped: site-b's queue drains", site="site-b")
        poll_until(lambda: two.queued("site-b"), lambda q: q == 0, what="site-b's queue to drain",
                   timeout=timeouts().serving_signal)
        gateway.wait_rho("site-b", lambda r: r < 0.5, what="to fall once the queue drained")


@pytest.mark.conformance(id="SERV-INPUTS", profile="serving", level="core", feature="saturation",
                         spec=f"{GUIDE}: \"Every input is a raw series the site's operator relays from its EPP: "
                              "running and waiting per endpoint, ready endpoints, and what flow control holds. The "
                              "gateway concludes in-flight from those itself\"; \"reads saturation as in-flight over "
                              "that ceiling\"",
                         statements=["RG-AVAIL-INPUTS", "RG-AVAIL-SATURATION"])
def test_in_flight_is_concluded_from_every_relayed_series(two: ServingGrid, model: str) -> None:
    """site-b publishes, one change at a time: 2 ready endpoints running 1.5 each (3 in flight), then 0.25
    waiting per endpoint besides (3.5), then 1 held by flow control besides (4.5). Its ceiling stays at the
    floor 8 and its saturation reads 3/8, 3.5/8 and 4.5/8 in turn: per-endpoint values times the endpoints,
    plus what is held. Smoothing is set to 1, so each reading is the last sample's."""
    gateway = two.start_gateway(model, availability={"smoothing": 1.0})
    steps: list[tuple[dict[str, float], float]] = [
        ({"ready": 2, "running": 1.5, "waiting": 0, "held": 0}, 3.0),
        ({"ready": 2, "running": 1.5, "waiting": 0.25, "held": 0}, 3.5),
        ({"ready": 2, "running": 1.5, "waiting": 0.25, "held": 1}, 4.5)]
    for values, in_flight in steps:
        two.publish("site-b", **values)
        expected = in_flight / 8
        seen = gateway.wait_rho("site-b", lambda r: abs(r - expected) < 1e-9,  # noqa: B023 - used at once
                                what=f"to read {in_flight:g}/8 on {values}")
        assert seen.ceiling["site-b"] == pytest.approx(8.0, abs=1e-9), seen.describe(gateway.sites)


#: Operator-style conclusions site-b's relay carries in the conclusions test: a full, busy, unready site.
CONCLUSIONS = {"in_flight": 64.0, "saturation": 1.0, "rho": 1.0, "ceiling": 1.0, "ready_endpoints": 0.0,
               "average_running_requests": 64.0}


@pytest.mark.conformance(id="SERV-CONCLUSIONS-NOT-INPUTS", profile="serving", level="core", feature="saturation",
                         spec=f"{GUIDE}: \"The operator's grid_provider_* conclusions are its Prometheus metrics, not "
                              "gateway inputs.\"",
                         statements=["RG-AVAIL-PROVIDER-METRICS-NOT-INPUTS"])
def test_an_operators_conclusions_are_not_read_as_inputs(two: ServingGrid, model: str) -> None:
    """site-b's signals carry, beside its EPP series (2 running on the floor ceiling of 8), grid_provider_*
    series saying it is full, saturated and unready. The gateway reads site-b at 2/8 with its ceiling 8 and
    keeps sending it requests; then site-b's EPP series say 6 running and the gateway reads 6/8 (the twin: it
    does read that endpoint). Smoothing is set to 1, so each reading is the last sample's."""
    two.publish("site-b", running=2, waiting=0)
    two.conclude("site-b", **CONCLUSIONS)
    gateway = two.start_gateway(model, availability={"smoothing": 1.0})
    seen = gateway.wait_rho("site-b", lambda r: abs(r - 0.25) < 1e-9, what="to read 2/8 from the EPP series")
    assert seen.ceiling["site-b"] == pytest.approx(8.0, abs=1e-9), seen.describe(gateway.sites)
    hold_for(gateway.metrics, lambda m: m.rho.get("site-b") == pytest.approx(0.25, abs=1e-9), seconds=WATCH_S,
             what="site-b read from its EPP series alone while its relay carries conclusions",
             describe=lambda m: m.describe(two.names))
    batch = gateway.send(40)
    assert batch.statuses() == {200: 40}, batch.describe()
    assert batch.by_site().get("site-b", 0) > 0, f"site-b is ready and has room: {batch.describe()}"
    two.publish("site-b", running=6, waiting=0)
    gateway.wait_rho("site-b", lambda r: abs(r - 0.75) < 1e-9, what="to read 6/8 once its EPP series say so")


#: Requests the no-own-count test keeps in flight through the gateway, held at the pools.
IN_FLIGHT = 20
#: How long their absence from the gateway's readings is watched (about ten polls).
WATCH_S = 1.0


@pytest.mark.conformance(id="SERV-NO-OWN-COUNT", profile="serving", level="core", feature="saturation",
                         spec=f"{GUIDE}: \"The gateway concludes in-flight from those itself and counts nothing of "
                              "its own.\"",
                         statements=["RG-AVAIL-NO-OWN-COUNT"])
def test_requests_the_gateway_sent_count_only_as_the_sites_publish_them(two: ServingGrid, model: str) -> None:
    """Both pools publish 0 running and 0 waiting and hold every request. Twenty requests go through the
    gateway and stay in flight at the pools; for a second (about ten polls) both sites' saturation stays 0
    and their ceilings 8. Then site-b publishes 6 running: its saturation reads 0.75 (the twin: the gateway
    does read what the site relays). Smoothing is set to 1, so each reading is the last sample's."""
    for site in two.names:
        two.publish(site, running=0, waiting=0)
    gateway = two.start_gateway(model, availability={"smoothing": 1.0})
    gateway.wait_measured()
    before = sum(two.backend_requests(site) for site in two.names)
    for site in two.names:
        two.hold(site, True)
    load = gateway.load(IN_FLIGHT)
    try:
        poll_until(lambda: sum(two.backend_requests(site) for site in two.names) - before,
                   lambda n: n >= IN_FLIGHT, what=f"{IN_FLIGHT} requests to reach the pools",
                   timeout=timeouts().request)
        record_action(f"{IN_FLIGHT} requests in flight through the gateway, held at the pools")
        hold_for(gateway.metrics,
                 lambda m: all(m.rho.get(s) == 0.0 and m.ceiling.get(s) == pytest.approx(8.0) for s in two.names),
                 seconds=WATCH_S, what="saturations stay 0 and ceilings 8 with requests the gateway sent in flight",
                 describe=lambda m: m.describe(two.names))
        two.publish("site-b", running=6, waiting=0)
        gateway.wait_rho("site-b", lambda r: abs(r - 0.75) < 1e-9, what="to read 6/8 once site-b publishes it")
    finally:
        for site in two.names:
            two.hold(site, False)
        load.stop()


def _all_served(load: LoadRun, seconds: float) -> None:
    """Let `load` run for `seconds` (the scenario's measuring window), checking every answer is a 200."""
    hold_for(load.batch.statuses, lambda statuses: set(statuses) <= {200}, seconds=seconds,
             what="every request of the load is served", describe=lambda statuses: f"statuses {dict(statuses)}")


#: The saturation scenario's pools: site-a and site-b run 64 requests at once, site-c only 1, each request
#: for 20 ms; 16 clients through the gateway saturate site-c alone.
BIG = EppSetting(endpoints=1, concurrency=64, service_ms=20)
ONE_SLOT = EppSetting(endpoints=1, concurrency=1, service_ms=20)
CLIENTS = 16
SATURATED_WINDOW_S = 2.0
PROBE_CLIENTS = 4
#: The drained site-c's share of the light load: at least 12% for a correct pick (its ceiling of 8 weighs
#: against the others' learned ones, about twice as large, and it has room again, so it gets about a
#: fifth), judged against a gateway that keeps avoiding it (3%).
RETURNED = plan_at_least("site-c", 0.12, 0.03)


@pytest.mark.conformance(id="SERV-SATURATING-SITE", profile="serving", level="core", feature="sitePick",
                         spec=f"{GUIDE}: \"reads saturation as in-flight over that ceiling, and picks among the sites "
                              "with room by it\"; routing guide: \"A grid gateway serving gridServing chooses sites "
                              "with grid_site_route instead, from load each site publishes\"",
                         statements=["RG-AVAIL-PICK", "RG-AVAIL-SATURATION", "RG-INTRO-GRID-SITE-ROUTE"])
def test_a_saturating_site_loses_traffic_and_gets_it_back_as_it_drains(three: ServingGrid, model: str) -> None:
    """site-c's pool runs 1 request at a time, site-a's and site-b's 64 (20 ms each). Sixteen clients through
    the gateway queue requests at site-c: of the requests sent in the 2 s after its queue formed, site-c
    serves under 20% and under half of each other site's share (a gateway blind to saturation would keep
    sending it a third, its queue absorbing the clients). Once the load stops and site-c's queue drained,
    its saturation falls below 0.5 and a light load (4 clients) gets site-c's share back: of the planned
    sample, site-c serves at least the threshold (false failure <= 1e-6 at a share of 12%, power >= 0.99
    against 3%). The requests, each site's saturation and its pool's queue are on the timeline."""
    three.configure("site-a", BIG)
    three.configure("site-b", BIG)
    three.configure("site-c", ONE_SLOT)
    gateway = three.start_gateway(model, availability={}, prefix_affinity={})
    gateway.wait_measured()
    with SaturationRecorder(gateway):
        load = gateway.load(CLIENTS)
        try:
            poll_until(lambda: three.queued("site-c"), lambda q: q >= 2, what="a queue at site-c's pool",
                       timeout=timeouts().serving_signal)
            record_action("site-c queues: its share is measured for 2 s", site="site-c")
            start = time.monotonic()
            _all_served(load, SATURATED_WINDOW_S)
            end = time.monotonic()
        finally:
            batch = load.stop()
        record_action("load stopped: site-c drains", site="site-c")
        window = batch.sent_between(start, end)
        shares = batch.by_site(window)
        total = sum(shares.values())
        record_action(f"while site-c was saturated: {batch.describe(window)}")
        assert total >= 100 and all(shares[s] for s in ("site-a", "site-b")), batch.describe(window)
        assert shares["site-c"] < 0.2 * total and shares["site-c"] < 0.5 * min(shares["site-a"], shares["site-b"]), \
            f"site-c saturated yet kept its share: {batch.describe(window)}"
        poll_until(lambda: three.queued("site-c"), lambda q: q == 0, what="site-c's queue to drain",
                   timeout=timeouts().serving_signal)
        gateway.wait_rho("site-c", lambda r: r < 0.5, what="to fall once its queue drained")
        record_action(f"light load: {RETURNED.describe()}")
        light = gateway.send(RETURNED.sample_size, concurrency=PROBE_CLIENTS)
    assert light.statuses() == {200: RETURNED.sample_size}, light.describe()
    assert_at_least(light.by_site(), RETURNED, what="site-c's share once drained")
