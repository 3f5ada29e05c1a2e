"""A test's timeline: what it did and what it observed, in order, stamped with seconds since it began.

Demo tests judge claims that unfold over time (a provider withdrawn, traffic moving, a revision reaching
the gateway). The verdict alone does not show a maintainer *how* the claim held, so each such test records
its evidence here: the actions it took, metric changes, each revision stage (rendered, distributed,
accepted, serving) and the provider that served every request. The report carries the timeline and the
HTML page draws it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EVENT_KINDS", "REVISION_STAGES", "Timeline", "served_shares"]

#: What an event records: an action of the test, a metric it changed, a revision stage, one request.
EVENT_KINDS: tuple[str, ...] = ("action", "metric", "revision", "request")
#: The stages a revision moves through (routing architecture: revision lifecycle).
REVISION_STAGES: tuple[str, ...] = ("rendered", "distributed", "accepted", "serving")
#: Events kept per test: a long statistical test sends thousands of requests; the page needs their shape,
#: and the report must stay readable. Past the limit, further requests are counted, not kept.
MAX_EVENTS = 5000


@dataclass
class Timeline:
    """The events of one test; `t` is seconds since the timeline began (monotonic clock)."""

    started: float = field(default_factory=time.monotonic)
    events: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0

    def _add(self, kind: str, fields: Mapping[str, Any]) -> None:
        if len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return
        event = {"t": round(time.monotonic() - self.started, 3), "kind": kind}
        event.update({k: v for k, v in fields.items() if v is not None})
        self.events.append(event)

    def action(self, what: str, **fields: Any) -> None:
        """Something the test did to the grid (withdrew a provider, restarted an operator, ...)."""
        self._add("action", {"what": what, **fields})

    def metric(self, name: str, value: float | str | None, **labels: Any) -> None:
        """A metric the test set or observed, with what it belongs to (provider, site, ...)."""
        self._add("metric", {"name": name, "value": value, **labels})

    def revision(self, stage: str, revision: str | None, **where: Any) -> None:
        """A revision reached `stage` (one of REVISION_STAGES) at `where` (site, gateway)."""
        if stage not in REVISION_STAGES:
            raise ValueError(f"unknown revision stage {stage!r} (known: {', '.join(REVISION_STAGES)})")
        self._add("revision", {"stage": stage, "revision": revision, **where})

    def request(self, served_by: str | None, status: int, **where: Any) -> None:
        """One request's outcome: the provider that served it (None when none did) and the status."""
        self._add("request", {"servedBy": served_by, "status": status, **where})

    def records(self) -> list[dict[str, Any]]:
        """The events for the report; a last `action` says how many requests were not kept."""
        out = list(self.events)
        if self.dropped:
            out.append({"t": out[-1]["t"] if out else 0.0, "kind": "action",
                        "what": f"{self.dropped} further events not kept (limit {MAX_EVENTS})"})
        return out


def served_shares(events: Iterable[Mapping[str, Any]], window: float) -> list[tuple[float, dict[str, float]]]:
    """The share of requests each provider served per `window` seconds: (window start, {provider: share}).

    Requests no provider served count under "none", so a gap in service shows as such.
    """
    buckets: dict[int, dict[str, int]] = {}
    for event in events:
        if event.get("kind") != "request":
            continue
        slot = int(float(event.get("t", 0.0)) // window)
        name = str(event.get("servedBy") or "none")
        counts = buckets.setdefault(slot, {})
        counts[name] = counts.get(name, 0) + 1
    shares = []
    for slot in sorted(buckets):
        total = sum(buckets[slot].values())
        shares.append((slot * window, {name: n / total for name, n in sorted(buckets[slot].items())}))
    return shares
