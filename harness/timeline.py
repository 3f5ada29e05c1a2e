"""A test's timeline: what it did and what it observed, in order, stamped with seconds since it began.

Demo tests judge claims that unfold over time (a provider withdrawn, traffic moving, a revision reaching
the gateway). The verdict alone does not show a maintainer *how* the claim held, so each such test records
its evidence here: the actions it took, metric changes, each revision stage (rendered, distributed,
accepted, serving) and the provider that served every request. The report carries the timeline and the
HTML page draws it.

Every conformance test has a timeline, made current by the plugin while the test runs, so the harness's
own waits and judgements record what they saw without a fixture: library code calls the module-level
``record_*`` functions (``record_revision``, ``record_member``, ``record_distribution``, ``record_action``),
which do nothing outside a test. An observation made by polling is recorded only when it changes, and each
kind of event has its own bound, so recording stays cheap and a report stays readable.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EVENT_KINDS",
    "REVISION_STAGES",
    "Timeline",
    "current",
    "record_action",
    "record_distribution",
    "record_member",
    "record_revision",
    "recording",
    "served_shares",
]

#: What an event records: an action of the test, a metric it changed, a revision stage, one request, a
#: distribution judgement (counts against expected shares), a mesh member's state as one site saw it, and
#: the diagnostics attached to a failure.
EVENT_KINDS: tuple[str, ...] = ("action", "metric", "revision", "request", "distribution", "member", "diagnostics")
#: The stages a revision moves through (routing architecture: revision lifecycle).
REVISION_STAGES: tuple[str, ...] = ("rendered", "distributed", "accepted", "serving")
#: Events kept per kind and test: a long statistical test sends thousands of requests; the page needs their
#: shape, and the report must stay readable. Past the limit, further events of that kind are counted, not kept.
MAX_EVENTS = 5000
#: Characters kept of one diagnostics text (its head and tail): component logs can be long.
MAX_DIAGNOSTICS_CHARS = 12_000


@dataclass
class Timeline:
    """The events of one test; `t` is seconds since the timeline began (monotonic clock)."""

    started: float = field(default_factory=time.monotonic)
    events: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0
    _kept: dict[str, int] = field(default_factory=dict, repr=False)
    _dropped_by_kind: dict[str, int] = field(default_factory=dict, repr=False)
    _seen: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)
    _last_revision: tuple[Any, ...] | None = field(default=None, repr=False)

    def _add(self, kind: str, fields: Mapping[str, Any]) -> None:
        kept = self._kept.get(kind, 0)
        if kept >= MAX_EVENTS:
            self.dropped += 1
            self._dropped_by_kind[kind] = self._dropped_by_kind.get(kind, 0) + 1
            return
        self._kept[kind] = kept + 1
        event = {"t": round(time.monotonic() - self.started, 3), "kind": kind}
        event.update({k: v for k, v in fields.items() if v is not None})
        self.events.append(event)

    def _changed(self, key: tuple[Any, ...], value: Any) -> bool:
        """Whether `value` differs from the last one observed under `key` (and remember it): a wait polls the
        same state many times, and only its changes are evidence."""
        if key in self._seen and self._seen[key] == value:
            return False
        self._seen[key] = value
        return True

    def action(self, what: str, **fields: Any) -> None:
        """Something the test did to the grid (withdrew a provider, restarted an operator, ...)."""
        self._add("action", {"what": what, **fields})

    def metric(self, name: str, value: float | str | None, **labels: Any) -> None:
        """A metric the test set or observed, with what it belongs to (provider, site, ...)."""
        self._add("metric", {"name": name, "value": value, **labels})

    def revision(self, stage: str, revision: str | None, *, repeat: bool = False, **where: Any) -> None:
        """A revision reached `stage` (one of REVISION_STAGES) at `where` (site, gateway).

        A record that repeats the latest revision event (same stage, revision and site) is left out unless
        `repeat`: a test recording a stage the harness's own wait has just recorded adds nothing. Writing the
        same revision again on purpose (a re-render) passes `repeat=True`.
        """
        if stage not in REVISION_STAGES:
            raise ValueError(f"unknown revision stage {stage!r} (known: {', '.join(REVISION_STAGES)})")
        latest = (stage, revision, where.get("site"))
        if not repeat and latest == self._last_revision:
            return
        self._last_revision = latest
        self._add("revision", {"stage": stage, "revision": revision, **where})

    def saw_revision(self, stage: str, revision: str | None, **where: Any) -> None:
        """A revision observed at `stage` by polling: recorded when it differs from the last one seen there."""
        if revision is not None and self._changed(("revision", stage, *sorted(where.items())), revision):
            self.revision(stage, revision, **where)

    def request(self, served_by: str | None, status: int, **where: Any) -> None:
        """One request's outcome: the provider that served it (None when none did) and the status."""
        self._add("request", {"servedBy": served_by, "status": status, **where})

    def member(self, observer: str, member: str, state: str | None, **fields: Any) -> None:
        """Site `observer` saw mesh member `member` in `state` (alive, suspect, dead; a GridSite phase),
        recorded when it differs from what `observer` last showed of `member` from the same source."""
        key = ("member", observer, member, fields.get("source"), fields.get("network"))
        if self._changed(key, (state, fields.get("reason"))):
            self._add("member", {"observer": observer, "member": member, "state": state or "absent", **fields})

    def distribution(self, *, counts: Mapping[str, int], expected: Mapping[str, float],
                     intervals: Mapping[str, tuple[int, int]], alpha: float, n: int, passed: bool,
                     **fields: Any) -> None:
        """A distribution judgement: observed counts against expected shares and their acceptance intervals."""
        self._add("distribution", {
            "counts": {str(k): int(v) for k, v in counts.items()},
            "expected": {str(k): float(v) for k, v in expected.items()},
            "intervals": {str(k): [int(lo), int(hi)] for k, (lo, hi) in intervals.items()},
            "alpha": float(alpha), "n": int(n), "passed": bool(passed), **fields})

    def diagnostics(self, title: str, text: str) -> None:
        """What the harness attached to a failure (logs, serving overlays), its head and tail kept."""
        if len(text) > MAX_DIAGNOSTICS_CHARS:
            keep = MAX_DIAGNOSTICS_CHARS // 2
            text = f"{text[:keep]}\n... [{len(text) - 2 * keep} characters omitted] ...\n{text[-keep:]}"
        self._add("diagnostics", {"title": title, "text": text})

    def records(self) -> list[dict[str, Any]]:
        """The events for the report; a last `action` says how many events were not kept, and of which kinds."""
        out = list(self.events)
        if self.dropped:
            kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self._dropped_by_kind.items()))
            out.append({"t": out[-1]["t"] if out else 0.0, "kind": "action",
                        "what": f"{self.dropped} further events not kept ({kinds}; limit {MAX_EVENTS} per kind)"})
        return out


# ----------------------------------------------------------------------------------- the current test

#: The timeline of the test running in this process. A module-level value rather than a context variable:
#: the threads a test starts (load generators, watchers) record into it too. Tests of one process run one
#: at a time; xdist runs them in separate processes.
_current: Timeline | None = None


def current() -> Timeline | None:
    """The running test's timeline, or None outside a test."""
    return _current


@contextmanager
def recording(timeline: Timeline) -> Iterator[Timeline]:
    """Make `timeline` current for the duration of the block (the plugin wraps every conformance test's call)."""
    global _current
    previous, _current = _current, timeline
    try:
        yield timeline
    finally:
        _current = previous


def record_action(what: str, **fields: Any) -> None:
    """Record an action of the harness on the running test's timeline (nothing outside a test)."""
    if _current is not None:
        _current.action(what, **fields)


def record_revision(stage: str, revision: str | None, *, observed: bool = True, **where: Any) -> None:
    """Record a revision stage on the running test's timeline: an observation (the default) when it changed,
    otherwise as `Timeline.revision` with `repeat=True` (something the harness did, such as a write)."""
    if _current is None:
        return
    if observed:
        _current.saw_revision(stage, revision, **where)
    else:
        _current.revision(stage, revision, repeat=True, **where)


def record_member(observer: str, member: str, state: str | None, **fields: Any) -> None:
    """Record a mesh member's state as `observer` showed it, when it changed (nothing outside a test)."""
    if _current is not None:
        _current.member(observer, member, state, **fields)


def record_distribution(**judged: Any) -> None:
    """Record a distribution judgement (see `Timeline.distribution`) on the running test's timeline."""
    if _current is not None:
        _current.distribution(**judged)


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
