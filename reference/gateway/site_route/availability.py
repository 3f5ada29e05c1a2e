"""What a site's samples say about it: in-flight, ceiling, saturation, congestion, full and relieved.

Pure functions of their inputs; every time is passed in (monotonic seconds), nothing reads a clock, so
tests drive them sample by sample. Callers look these up as module attributes at call time.

- in_flight = (running + waiting) * ready_endpoints + held; absent waiting/held read as 0; without
  running or ready endpoints an instant has no in-flight reading.
- ceiling = max(previous ceiling decayed by its half-life, in-flight when nothing waits, ceiling_floor);
  an instant with a whole request waiting (waiting * endpoints >= 1, or held >= 1) teaches nothing.
- rho = clamp(in_flight / ceiling, 0, 1), smoothed once per new sample (the first sample: raw).
- congested: some sample within the settling time (room_after_ms, stretched to reach the newest sample)
  was at the ceiling with work waiting (waiting per endpoint >= queue_full, or anything held), and the
  newest sample's queue is not empty; full: congested without a break for full_after_ms; relieved: not
  congested. Both are measured in time, whatever the poll interval.
- weight = ceiling, lifted to explore_floor * the largest measured ceiling; has room: measured, rho < 1.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from reference.gateway.site_route.settings import AvailabilitySettings
from reference.gateway.site_route.signals import Sample

#: a smoothed saturation this close to the reading is the reading (repeated smoothing never gets there)
SNAP = 1e-9
WHOLE = 1.0 - 1e-9  # a whole request, with room for float error in average * endpoints


@dataclass(frozen=True)
class Marked:
    """A sample as kept in the store: when it arrived (monotonic seconds) and what it read as then."""

    at: float
    sample: Sample
    in_flight: float | None
    congested: bool


@dataclass(frozen=True)
class Learned:
    """What a site's load has taught so far, carried from refresh to refresh."""

    ceiling: float
    at: float  # when the ceiling was last set (monotonic seconds), for its decay
    rho: float
    congested_since: float | None = None


@dataclass(frozen=True)
class SiteView:
    """One (site, cluster) as a refresh sees it; the request path reads only these."""

    site: str
    cluster: str
    ready: bool = True
    measured: bool = False
    ceiling: float | None = None
    rho: float | None = None
    weight: float | None = None
    in_flight: float | None = None
    congested: bool = False
    full: bool = False
    relieved: bool = False


def in_flight(sample: Sample) -> float | None:
    if sample.running is None or sample.ready is None:
        return None
    return (sample.running + (sample.waiting or 0.0)) * sample.ready + (sample.held or 0.0)


def teaches(sample: Sample) -> bool:
    """False when any whole request waits: at the site (waiting per endpoint * endpoints) or held."""
    waiting = (sample.waiting or 0.0) * (sample.ready or 0.0)
    return waiting < WHOLE and (sample.held or 0.0) < WHOLE


def decayed(ceiling: float, elapsed_secs: float, half_life_ms: int) -> float:
    return ceiling * 0.5 ** (max(0.0, elapsed_secs) * 1000.0 / half_life_ms)


def next_ceiling(prev: Learned | None, sample: Sample, at: float, settings: AvailabilitySettings) -> float:
    remembered = decayed(prev.ceiling, at - prev.at, settings.ceiling_half_life_ms) if prev is not None else 0.0
    flight = in_flight(sample)
    taught = flight if flight is not None and teaches(sample) else 0.0
    return max(remembered, taught, settings.ceiling_floor)


def saturation(flight: float, ceiling: float) -> float:
    return min(1.0, max(0.0, flight / ceiling))


def smoothed(prev: float | None, raw: float, smoothing: float) -> float:
    if prev is None:
        return raw
    rho = prev * (1.0 - smoothing) + raw * smoothing
    return raw if abs(rho - raw) < SNAP else rho


def at_ceiling_with_work_waiting(sample: Sample, flight: float, ceiling: float, queue_full: float) -> bool:
    waiting = sample.waiting or 0.0
    return flight >= ceiling and (waiting >= queue_full or (sample.held or 0.0) >= WHOLE)


def queue_empty(sample: Sample) -> bool:
    return (sample.waiting or 0.0) <= 0.0 and (sample.held or 0.0) <= 0.0


def learn(prev: Learned | None, sample: Sample, at: float,
          settings: AvailabilitySettings) -> tuple[Learned | None, Marked]:
    """Fold one new sample into what is learned; returns the new state and the sample as stored."""
    flight = in_flight(sample)
    if flight is None:
        return prev, Marked(at, sample, None, False)
    ceiling = next_ceiling(prev, sample, at, settings)
    rho = smoothed(prev.rho if prev is not None else None, saturation(flight, ceiling), settings.smoothing)
    congested = at_ceiling_with_work_waiting(sample, flight, ceiling, settings.queue_full)
    since = prev.congested_since if prev is not None else None
    return Learned(ceiling=ceiling, at=at, rho=rho, congested_since=since), Marked(at, sample, flight, congested)


def latest_ready(history: Sequence[Marked]) -> bool:
    """Unready when the latest ready-endpoints value is below 1; ready when it is 1+ or never published."""
    for marked in reversed(history):
        if marked.sample.ready is not None:
            return marked.sample.ready >= 1.0
    return True


def congested_now(history: Sequence[Marked], newest: Marked, now: float, room_after_ms: int) -> bool:
    """A sample within the settling time (room_after_ms, stretched to reach the newest sample) was at the
    ceiling with work waiting, and the newest sample's queue is not empty."""
    settle = max(room_after_ms / 1000.0, now - newest.at + 1e-3)
    return not queue_empty(newest.sample) and any(
        m.congested for m in history if m.in_flight is not None and m.at >= now - settle
    )


def full_for(congested_since: float | None, now: float, full_after_ms: int) -> bool:
    """Congested without a break for full_after_ms, in time (not in samples)."""
    return congested_since is not None and (now - congested_since) * 1000.0 >= full_after_ms


def assess(site: str, cluster: str, learned: Learned | None, history: Sequence[Marked], now: float,
           settings: AvailabilitySettings, load_window_ms: int) -> tuple[SiteView, Learned | None]:
    """The site at `now` from its kept samples (oldest first); returns its view and the updated state."""
    ready = latest_ready(history)
    newest = next((m for m in reversed(history) if m.in_flight is not None), None)
    if learned is None or newest is None or (now - newest.at) * 1000.0 > load_window_ms:
        if learned is not None and learned.congested_since is not None:
            learned = dataclasses.replace(learned, congested_since=None)
        return SiteView(site, cluster, ready=ready), learned
    congested = congested_now(history, newest, now, settings.room_after_ms)
    since = (learned.congested_since if learned.congested_since is not None else now) if congested else None
    full = full_for(since, now, settings.full_after_ms)
    if since != learned.congested_since:
        learned = dataclasses.replace(learned, congested_since=since)
    view = SiteView(site, cluster, ready=ready, measured=True, ceiling=learned.ceiling, rho=learned.rho,
                    in_flight=newest.in_flight, congested=congested, full=full, relieved=not congested)
    return view, learned


def with_weights(views: Iterable[SiteView], explore_floor: float) -> list[SiteView]:
    """Each measured view weighted by its ceiling, lifted to explore_floor * the largest measured ceiling."""
    views = list(views)
    largest = max((v.ceiling for v in views if v.measured and v.ceiling is not None), default=0.0)
    lifted = largest * explore_floor
    return [dataclasses.replace(v, weight=max(v.ceiling, lifted)) if v.measured and v.ceiling is not None else v
            for v in views]


def has_room(view: SiteView) -> bool:
    return view.measured and view.rho is not None and view.rho < 1.0


def gauge_values(view: SiteView) -> Mapping[str, float]:
    """The per-site gauges: NaN while unmeasured."""
    nan = math.nan
    if not view.measured:
        return {"ceiling": nan, "rho": nan, "weight": nan}
    return {
        "ceiling": view.ceiling if view.ceiling is not None else nan,
        "rho": view.rho if view.rho is not None else nan,
        "weight": view.weight if view.weight is not None else nan,
    }
