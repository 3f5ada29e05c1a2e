"""The samples kept per (site, cluster) for the serving config's window_secs, and what is learned from them.

Only the pollers write here (on the event loop); refreshes read it to build the snapshot the request
path uses, so no request reads the store. A sample is new when its timestamp is later than the last
one kept for its (site, cluster); lines without a timestamp are new on every poll.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from reference.gateway.site_route import availability
from reference.gateway.site_route.availability import Learned, Marked
from reference.gateway.site_route.settings import AvailabilitySettings
from reference.gateway.site_route.signals import Sample

Key = tuple[str, str]  # (site, cluster)
MAX_SAMPLES_PER_KEY = 100_000


class SignalsStore:
    def __init__(self, window_secs: float, settings: AvailabilitySettings) -> None:
        self.window_secs = window_secs
        self.settings = settings
        self._samples: dict[Key, deque[Marked]] = {}
        self._last_stamp: dict[Key, float] = {}
        self.learned: dict[Key, Learned] = {}

    def ingest(self, key: Key, samples: Iterable[Sample], now: float) -> int:
        """Keep and learn from the new ones of `samples` (oldest first), received at `now`; returns how many.

        Instants older than the newest one of the same poll are placed back in time by their stamps."""
        fresh = [s for s in samples if s.stamp is None or s.stamp > self._last_stamp.get(key, float("-inf"))]
        if not fresh:
            return 0
        newest_stamp = max((s.stamp for s in fresh if s.stamp is not None), default=None)
        kept = self._samples.setdefault(key, deque(maxlen=MAX_SAMPLES_PER_KEY))
        learned = self.learned.get(key)
        for sample in fresh:
            at = now
            if sample.stamp is not None and newest_stamp is not None:
                at = now - max(0.0, newest_stamp - sample.stamp)
                self._last_stamp[key] = max(sample.stamp, self._last_stamp.get(key, float("-inf")))
            learned, marked = availability.learn(learned, sample, at, self.settings)
            kept.append(marked)
        if learned is not None:
            self.learned[key] = learned
        return len(fresh)

    def prune(self, now: float) -> None:
        oldest = now - self.window_secs
        for key, kept in list(self._samples.items()):
            while kept and kept[0].at < oldest:
                kept.popleft()
            if not kept:
                del self._samples[key]

    def history(self, key: Key) -> tuple[Marked, ...]:
        return tuple(self._samples.get(key, ()))

    def retain(self, keys: Iterable[Key]) -> None:
        """Forget every (site, cluster) not in `keys` (after the serving config dropped it)."""
        wanted = set(keys)
        for table in (self._samples, self._last_stamp, self.learned):
            for key in [k for k in table if k not in wanted]:
                del table[key]
