"""Polling with deadlines: the only way suites wait.

A wait names what it waits for and, on timeout, reports the last thing it saw, so a failure reads as
"waited 10.0s for revision abc to serve; last seen revision def" rather than a bare timeout.

A wait that lasts tells the wait observer (harness.progress, the run's progress lines) what it waits for,
after NOTICE_AFTER_S and then every NOTICE_EVERY_S, so a long run never looks hung; without an observer
this costs one comparison per probe.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")

#: A wait is announced to the observer once it has lasted this long, and again every NOTICE_EVERY_S.
NOTICE_AFTER_S = 5.0
NOTICE_EVERY_S = 10.0


@dataclass(frozen=True)
class WaitNotice:
    """A wait still going on: what it waits for, how long so far and for how long at most.

    `kind` is ``until`` (polling for a condition), ``hold`` (checking a condition keeps holding) or
    ``elapse`` (waiting out a span of time the spec defines behaviour by).
    """

    what: str
    elapsed_s: float
    limit_s: float
    kind: Literal["until", "hold", "elapse"]


WaitObserver = Callable[[WaitNotice], None]
_observer: WaitObserver | None = None


def observe_waits(observer: WaitObserver | None) -> WaitObserver | None:
    """Make `observer` the function told about long waits (None: nobody); returns the one it replaces.

    The observer is called from the waiting thread and must be quick; an exception it raises is ignored,
    since showing progress must never change how a wait ends.
    """
    global _observer
    previous, _observer = _observer, observer
    return previous


class _Announcer:
    """When a wait next tells the observer about itself."""

    __slots__ = ("kind", "limit", "next_at", "start", "what")

    def __init__(self, what: str, limit: float, kind: Literal["until", "hold", "elapse"],
                 start: float | None = None) -> None:
        self.what, self.limit, self.kind = what, limit, kind
        self.start = time.monotonic() if start is None else start
        self.next_at = self.start + NOTICE_AFTER_S

    def tick(self) -> None:
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + NOTICE_EVERY_S
        observer = _observer
        if observer is not None:
            with contextlib.suppress(Exception):  # a progress display must not change how a wait ends
                observer(WaitNotice(self.what, now - self.start, self.limit, self.kind))


#: Environment variable that scales every wait deadline (the plugin's --grid-wait-scale sets it).
WAIT_SCALE_ENV = "AGN_CONFORMANCE_WAIT_SCALE"


def wait_scale() -> float:
    """The factor applied to every deadline: above 1 on slow machines; 1 when unset or unreadable."""
    try:
        scale = float(os.environ.get(WAIT_SCALE_ENV, "1"))
    except ValueError:
        return 1.0
    return scale if scale > 0 else 1.0


class WaitTimeout(AssertionError):
    """A polled condition did not hold before its deadline."""


def poll_until(
    probe: Callable[[], T],
    done: Callable[[T], bool],
    *,
    what: str,
    timeout: float,
    interval: float = 0.02,
    max_interval: float = 0.05,
    describe: Callable[[Any], str] | None = None,
    fatal: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `probe` until `done(result)` or the deadline; back off gently between probes.

    `describe` renders the last observation for the timeout message; exceptions listed in `fatal`
    (such as the component under test having exited) end the wait at once instead of being observed.
    """
    timeout *= wait_scale()
    deadline = time.monotonic() + timeout
    announcer = _Announcer(what, timeout, "until")
    last: Any = "<nothing observed>"
    observed = False  # `last` is what the probe returned (else a note on its failure), so `describe` applies
    while True:
        try:
            last = probe()
            observed = True
            if done(last):
                return last
        except fatal:
            raise
        except Exception as exc:  # a probe failing is an observation, not a crash
            last, observed = f"{type(exc).__name__}: {exc}", False
        if time.monotonic() >= deadline:
            seen = describe(last) if describe is not None and observed else last
            raise WaitTimeout(f"waited {timeout:.1f}s for {what}; last seen: {_short(seen, 1500)}")
        announcer.tick()
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.5, max_interval)


def wait_until_elapsed(start: float, seconds: float, *, what: str = "") -> None:
    """Block until `seconds` have passed since monotonic `start` (time itself is the observed condition);
    `what` says what the time is waited out for, should the wait be long enough to be announced.

    Used only where the spec defines behaviour by elapsed time, such as a session TTL.
    """
    announcer = _Announcer(what or f"{seconds:.1f}s to pass", seconds, "elapse", start)
    while (remaining := start + seconds - time.monotonic()) > 0:
        announcer.tick()
        time.sleep(min(remaining, 0.05))


def hold_for(probe: Callable[[], T], holds: Callable[[T], bool], *, seconds: float, what: str,
             describe: Callable[[T], str] | None = None, interval: float = 0.05) -> int:
    """Check that `holds(probe())` stays true for `seconds` (sampled every `interval`, at least twice: at
    the start and at the end); AssertionError at the first sample where it does not, naming `what` and
    that observation. Returns the number of samples. For "must not happen within" judgements.
    """
    end = time.monotonic() + seconds
    announcer = _Announcer(what, seconds, "hold")
    samples = 0
    while True:
        last = probe()
        samples += 1
        if not holds(last):
            raise AssertionError(f"{what}; it stopped holding after {samples} samples: "
                                 f"{_short(describe(last) if describe is not None else last, 1500)}")
        remaining = end - time.monotonic()
        if remaining <= 0 and samples >= 2:
            return samples
        announcer.tick()
        time.sleep(min(interval, max(0.0, remaining)))


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + "..."
