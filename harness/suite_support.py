"""Observations the consumer suites share: when a reload was processed, and its outcome."""

from __future__ import annotations

import time

from harness.gateway_config import RELOAD_DEBOUNCE_MS
from harness.grid import Gateway
from harness.timeline import record_action
from harness.waiting import WaitTimeout, poll_until, wait_until_elapsed

RELOADS = "praxis_ai_intelligent_route_snapshot_reloads_total"
#: What a wait for an empty versioned overlay's 404 says first when the gateway never answered it: most often
#: the gateway refused the empty overlay and kept serving the previous one, which the spec does not allow.
EMPTY_ACCEPTED = ("the spec accepts an empty versioned overlay as authoritative (intelligent-route-filter, "
                  "Selection: \"A validated versioned overlay may have no candidates in any selection mode; "
                  "matching requests are rejected with HTTP 404.\"); the gateway did not answer 404, so it kept "
                  "serving the previous overlay (refused the empty one?) or answered otherwise:")


class ReloadProbe:
    """Knows when a gateway has processed an overlay write.

    With the Prometheus feature the reload counter is polled; without it, the probe observes the gateway
    for a window of several debounce periods, during which the caller's own assertions keep holding.
    """

    def __init__(self, gateway: Gateway, has_metrics: bool) -> None:
        self.gateway = gateway
        self.has_metrics = has_metrics

    def count(self, result: str) -> float:
        return self.gateway.metric(RELOADS, result=result) if self.has_metrics else 0.0

    def snapshot(self) -> dict[str, float]:
        return {r: self.count(r) for r in ("accepted", "unchanged", "rejected", "read_error")}

    def wait(self, before: dict[str, float], result: str, timeout: float = 10.0) -> None:
        """Wait until a reload with `result` was counted after `before`."""
        if not self.has_metrics:
            wait_until_elapsed(time.monotonic(), 4 * RELOAD_DEBOUNCE_MS / 1000 + 1.0)
            return
        try:
            poll_until(self.snapshot, lambda now: now[result] > before[result],
                       what=f"a reload counted as {result!r} (counts before: {before})", timeout=timeout)
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\n{self.gateway.overlay_log()}") from None
        record_action(f"reload counted as {result}", gateway=self.gateway.name)
