"""What a site's samples say about it, driven sample by sample on a clock the test holds: in-flight,
the ceiling (taught only while nothing waits, decaying by half-life, floored), smoothed saturation,
full after full_after_ms and relieved after room_after_ms in time, the explore floor, readiness,
and the relayed series read out of Prometheus text."""

from __future__ import annotations

import math

import pytest

from reference.gateway.site_route import availability as av
from reference.gateway.site_route.availability import Learned, Marked, SiteView
from reference.gateway.site_route.settings import AvailabilitySettings
from reference.gateway.site_route.signals import Sample, SignalsError, parse_signals
from reference.gateway.site_route.signals_store import SignalsStore

DEFAULTS = AvailabilitySettings()


def sample(running: float, waiting: float = 0.0, ready: float = 1.0, held: float = 0.0,
           stamp: float | None = None) -> Sample:
    return Sample(stamp=stamp, running=running, waiting=waiting, ready=ready, held=held)


class Site:
    """One (site, cluster) fed samples at times the test chooses; `view(now)` assesses it."""

    def __init__(self, settings: AvailabilitySettings = DEFAULTS, load_window_ms: int = 2_000) -> None:
        self.settings = settings
        self.load_window_ms = load_window_ms
        self.learned: Learned | None = None
        self.history: list[Marked] = []

    def feed(self, at: float, s: Sample) -> Site:
        self.learned, marked = av.learn(self.learned, s, at, self.settings)
        self.history.append(marked)
        return self

    def view(self, now: float) -> SiteView:
        view, self.learned = av.assess("site-b", "pool-b", self.learned, self.history, now, self.settings,
                                       self.load_window_ms)
        return view


def test_in_flight_is_concluded_from_the_samples_taken_together() -> None:
    assert av.in_flight(sample(running=3, waiting=0.5, ready=2, held=4)) == (3 + 0.5) * 2 + 4
    assert av.in_flight(Sample(stamp=None, running=2, ready=3)) == 6  # waiting and held absent read as 0
    assert av.in_flight(Sample(stamp=None, running=2)) is None  # no endpoints: no reading
    assert av.in_flight(Sample(stamp=None, ready=2, waiting=1)) is None  # no running: no reading


def test_the_ceiling_is_the_most_in_flight_held_with_nothing_waiting() -> None:
    site = Site().feed(0.0, sample(running=20))
    assert site.learned is not None and site.learned.ceiling == 20
    site.feed(0.1, sample(running=30, waiting=1))  # a whole request waits: 31 in flight teaches nothing
    assert site.learned.ceiling == pytest.approx(20, rel=1e-3)
    site.feed(0.2, sample(running=25, waiting=0.5, ready=2))  # one whole request waits across two endpoints
    assert site.learned.ceiling == pytest.approx(20, rel=1e-3)
    site.feed(0.3, sample(running=25, held=1))  # flow control holds one
    assert site.learned.ceiling == pytest.approx(20, rel=1e-3)
    site.feed(0.4, sample(running=12, waiting=0.4, ready=2))  # 0.8 of a request waiting: teaches 24.8
    assert site.learned.ceiling == pytest.approx(24.8, rel=1e-6)
    site.feed(0.5, sample(running=40))
    assert site.learned.ceiling == 40


def test_the_ceiling_halves_every_half_life_and_never_falls_below_the_floor() -> None:
    settings = AvailabilitySettings(ceiling_half_life_ms=10_000, ceiling_floor=8)
    site = Site(settings).feed(0.0, sample(running=64))
    site.feed(10.0, sample(running=0))
    assert site.learned is not None and site.learned.ceiling == pytest.approx(32)
    site.feed(20.0, sample(running=0))
    assert site.learned.ceiling == pytest.approx(16)
    site.feed(25.0, sample(running=0))  # half a half-life
    assert site.learned.ceiling == pytest.approx(16 / math.sqrt(2))
    site.feed(60.0, sample(running=0))
    assert site.learned.ceiling == 8  # floored
    assert av.decayed(100, 1.0, 1_000) == pytest.approx(50)
    assert Site().feed(0.0, sample(running=0)).learned.ceiling == 8  # type: ignore[union-attr]


def test_saturation_is_smoothed_once_per_new_sample_and_reaches_the_reading() -> None:
    settings = AvailabilitySettings(smoothing=0.5, ceiling_floor=10)
    site = Site(settings).feed(0.0, sample(running=5))
    assert site.learned is not None and site.learned.rho == 0.5  # the first sample: the raw reading
    site.feed(0.1, sample(running=10, waiting=2))  # 12 in flight over a ceiling of 10: raw 1
    assert site.learned.rho == pytest.approx(0.75)
    site.feed(0.2, sample(running=10, waiting=2))
    assert site.learned.rho == pytest.approx(0.875)
    view = site.view(0.2)
    assert view.rho == pytest.approx(0.875) and av.has_room(view)
    assert site.view(0.25).rho == pytest.approx(0.875)  # a refresh with nothing new moves nothing
    for step in range(60):
        site.feed(0.3 + step / 10, sample(running=10, waiting=2))
    assert site.learned.rho == 1.0  # it gets there, so the site has no room
    assert not av.has_room(site.view(6.3))
    assert av.smoothed(None, 0.4, 0.3) == 0.4
    assert av.smoothed(0.4, 1.0, 1.0) == 1.0


def congested_site(settings: AvailabilitySettings) -> Site:
    """A site that taught a ceiling of 8 (the floor), then has four waiting per endpoint."""
    return Site(settings, load_window_ms=60_000).feed(0.0, sample(running=8))


@pytest.mark.parametrize("interval", [0.5, 5.0])
def test_full_after_full_after_ms_measured_in_time_whatever_the_poll_interval(interval: float) -> None:
    settings = AvailabilitySettings(full_after_ms=5_000, room_after_ms=2_000)
    site = congested_site(settings)
    now = 1.0
    site.feed(now, sample(running=8, waiting=4))
    first = site.view(now)
    assert first.congested and not first.full and not first.relieved
    while now + interval < 1.0 + 5.0:
        now += interval
        site.feed(now, sample(running=8, waiting=4))
        assert not site.view(now).full, now
    now += interval
    site.feed(now, sample(running=8, waiting=4))
    assert now - 1.0 >= 5.0 and site.view(now).full


def test_full_needs_work_waiting_per_endpoint_at_queue_full() -> None:
    site = congested_site(AvailabilitySettings(full_after_ms=0, queue_full=2.0))
    site.feed(1.0, sample(running=8, waiting=1.5))  # 9.5 in flight, at the ceiling, but 1.5 < 2 waiting
    assert not site.view(1.0).congested
    site.feed(2.0, sample(running=8, waiting=2.0))
    assert site.view(2.0).full
    held = congested_site(AvailabilitySettings(full_after_ms=0, queue_full=5.0))
    held.feed(1.0, sample(running=8, held=1))  # anything held counts as work waiting
    assert held.view(1.0).full


def test_relieved_when_no_congested_sample_within_room_after_ms_or_the_queue_empties() -> None:
    settings = AvailabilitySettings(full_after_ms=0, room_after_ms=2_000, ceiling_floor=8)
    site = congested_site(settings)
    site.feed(1.0, sample(running=8, waiting=4))
    assert site.view(1.0).full
    for now in (1.5, 2.0, 2.5, 2.9):
        site.feed(now, sample(running=2, waiting=1))  # 3 in flight: below the ceiling, one waiting
        view = site.view(now)
        assert view.congested and not view.relieved, now  # a congested sample is within 2 s
    site.feed(3.1, sample(running=2, waiting=1))
    view = site.view(3.1)
    assert view.relieved and not view.full and not view.congested
    emptied = congested_site(settings)
    emptied.feed(1.0, sample(running=8, waiting=4))
    emptied.feed(1.2, sample(running=8, waiting=0))  # the queue emptied: relieved at once
    assert emptied.view(1.2).relieved


def test_a_break_in_congestion_restarts_the_full_after_clock() -> None:
    settings = AvailabilitySettings(full_after_ms=3_000, room_after_ms=500)
    site = congested_site(settings)
    site.feed(1.0, sample(running=8, waiting=4))
    site.view(1.0)
    site.feed(2.0, sample(running=8, waiting=0))  # emptied: the spell ends
    assert not site.view(2.0).congested
    for now in (2.5, 3.5, 4.5):
        site.feed(now, sample(running=8, waiting=4))
        assert not site.view(now).full, now  # 2.0 s into the new spell at most
    site.feed(5.5, sample(running=8, waiting=4))
    assert site.view(5.5).full


def test_unmeasured_when_no_in_flight_sample_is_fresh_and_unready_below_one_endpoint() -> None:
    site = Site(load_window_ms=2_000).feed(0.0, sample(running=1))
    assert site.view(1.9).measured
    stale = site.view(2.1)
    assert not stale.measured and not av.has_room(stale) and math.isnan(av.gauge_values(stale)["rho"])
    unready = Site().feed(0.0, sample(running=0, ready=0))
    assert not unready.view(0.0).ready
    unready.feed(1.0, Sample(stamp=None, ready=2))  # the latest ready-endpoints value decides
    assert unready.view(1.0).ready
    assert Site().feed(0.0, Sample(stamp=None, running=1)).view(0.0).ready  # never published: ready


def test_weights_are_ceilings_lifted_to_the_explore_floor_of_the_largest() -> None:
    views = [SiteView("a", "pa", measured=True, ceiling=100.0, rho=0.1),
             SiteView("b", "pb", measured=True, ceiling=10.0, rho=0.1),
             SiteView("c", "pc", measured=True, ceiling=40.0, rho=0.1),
             SiteView("d", "pd")]
    weights = [v.weight for v in av.with_weights(views, 0.25)]
    assert weights == [100.0, 25.0, 40.0, None]
    assert [v.weight for v in av.with_weights(views, 0.0)] == [100.0, 10.0, 40.0, None]
    assert [v.weight for v in av.with_weights(views, 1.0)] == [100.0, 100.0, 100.0, None]


# ------------------------------------------------------------------------------- signals in, samples kept

TEXT = """\
# TYPE llm_d_epp_average_running_requests gauge
llm_d_epp_average_running_requests{grid_site="site-b",grid_provider="pool-b"} 3 1796462025550
inference_pool_average_running_requests{grid_site="site-b",grid_provider="pool-b"} 9 1796462025550
inference_pool_average_queue_size{grid_site="site-b",grid_provider="pool-b"} 0.5 1796462025550
llm_d_epp_ready_endpoints{grid_site="site-b",grid_provider="pool-b"} 2 1796462025550
llm_d_epp_flow_control_queue_size{grid_site="site-b",grid_provider="pool-b"} 1 1796462025550
llm_d_epp_average_running_requests{grid_site="site-c",grid_provider="pool-c"} 7 1796462025550
grid_provider_in_flight_requests{grid_site="site-b",grid_provider="pool-b"} 99 1796462025550
llm_d_epp_average_running_requests{grid_site="site-b",grid_provider="pool-b"} 4 1796462026550
"""


def test_the_relayed_series_are_read_per_instant_for_the_polled_site_only() -> None:
    out = parse_signals(TEXT, "site-b")
    assert list(out) == ["pool-b"]  # site-c's row is dropped; grid_provider_* is not an input
    first, second = out["pool-b"]
    assert first == Sample(stamp=pytest.approx(1796462025.55), running=3, waiting=0.5, ready=2, held=1)
    assert second.stamp == pytest.approx(1796462026.55) and second.running == 4 and second.ready is None
    assert av.in_flight(first) == (3 + 0.5) * 2 + 1
    with pytest.raises(SignalsError):
        parse_signals("not a metric line {", "site-b")


def test_the_store_keeps_new_samples_once_and_for_the_window() -> None:
    store = SignalsStore(window_secs=10, settings=DEFAULTS)
    key = ("site-b", "pool-b")
    assert store.ingest(key, [sample(1, stamp=100.0)], now=0.0) == 1
    assert store.ingest(key, [sample(1, stamp=100.0)], now=0.5) == 0  # the same instant again
    assert store.ingest(key, [sample(2, stamp=99.0), sample(3, stamp=101.0), sample(4, stamp=102.0)], now=1.0) == 2
    assert [(m.at, m.sample.running) for m in store.history(key)] == [(0.0, 1), (0.0, 3), (1.0, 4)]
    store.prune(10.5)
    assert [m.sample.running for m in store.history(key)] == [4]
    assert store.learned[key].rho == pytest.approx(0.3 * 4 / 8 + 0.7 * (0.3 * 3 / 8 + 0.7 * 1 / 8))
