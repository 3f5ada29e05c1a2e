"""Polling with deadlines: the only way suites wait.

A wait names what it waits for and, on timeout, reports the last thing it saw, so a failure reads as
"waited 10.0s for revision abc to serve; last seen revision def" rather than a bare timeout.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

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
    last: Any = "<nothing observed>"
    while True:
        try:
            last = probe()
            if done(last):
                return last
        except fatal:
            raise
        except Exception as exc:  # a probe failing is an observation, not a crash
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            seen = describe(last) if describe is not None and not isinstance(last, str) else last
            raise WaitTimeout(f"waited {timeout:.1f}s for {what}; last seen: {_short(seen, 1500)}")
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.5, max_interval)


def wait_until_elapsed(start: float, seconds: float) -> None:
    """Block until `seconds` have passed since monotonic `start` (time itself is the observed condition).

    Used only where the spec defines behaviour by elapsed time, such as a session TTL.
    """
    while (remaining := start + seconds - time.monotonic()) > 0:
        time.sleep(min(remaining, 0.05))


def hold_for(probe: Callable[[], T], holds: Callable[[T], bool], *, seconds: float, what: str,
             describe: Callable[[T], str] | None = None, interval: float = 0.05) -> int:
    """Check that `holds(probe())` stays true for `seconds` (sampled every `interval`, at least twice: at
    the start and at the end); AssertionError at the first sample where it does not, naming `what` and
    that observation. Returns the number of samples. For "must not happen within" judgements.
    """
    end = time.monotonic() + seconds
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
        time.sleep(min(interval, max(0.0, remaining)))


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + "..."
