"""When the operator has answered a forced reconcile, whether or not it wrote anything.

A reconcile the spec says must happen (a new force-refresh annotation) is seen first by what the operator
wrote: its status rewritten. An operator that writes status only when it changes (the public one keeps
`renderedAt` while the revision is unchanged) writes nothing when the result is the same; its reconcile is
then seen by what it read: the providers' metrics scraped again after the force, and the status still the
same a moment after the last scrape. Only a reconcile that leaves no trace at all (no scraped provider, no
write) is taken from quiet: the status unchanged through half the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from harness.waiting import wait_scale

__all__ = ["SETTLE_AFTER_SCRAPE_S", "ReconcileWatch"]

#: How long the status must stay as it was after the operator's last scrape to count as its unchanged answer
#: (scaled by --wait-scale): long enough for an operator that does write to have written.
SETTLE_AFTER_SCRAPE_S = 1.0
#: How often the scrape counters are read while waiting (each read is one request per metrics backend).
_SCRAPE_POLL_S = 0.1


class ReconcileWatch:
    """Judges, poll by poll, whether a forced reconcile has been answered. Made before the force is sent."""

    def __init__(self, before: Hashable | None, scrapes: Callable[[], int], timeout: float) -> None:
        self.before = before
        self.scrapes = scrapes
        self.timeout = timeout * wait_scale()
        self.baseline = scrapes()
        self.started = time.monotonic()
        self.last_count = self.baseline
        self.last_scrape: float | None = None  # when a scrape after the force was last seen
        self._read_at = float("-inf")
        self.settle = SETTLE_AFTER_SCRAPE_S * wait_scale()

    def answered(self, stamp: Hashable | None) -> bool:
        """True once `stamp` (the status now) shows the reconcile's answer; None is no status yet."""
        if stamp is None:
            return False  # a network with no status yet must get one
        if stamp != self.before:
            return True
        now = time.monotonic()
        if now - self._read_at >= _SCRAPE_POLL_S:
            self._read_at = now
            count = self.scrapes()
            if count > self.last_count:
                self.last_count, self.last_scrape = count, now
        if self.last_scrape is not None and now - self.last_scrape >= self.settle:
            return True
        return now - self.started >= self.timeout / 2
