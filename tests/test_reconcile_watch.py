"""When a forced reconcile counts as answered: a rewritten status, or (an operator that writes only on change)
a scrape after the force and then an unchanged status, or else quiet through half the deadline."""

from __future__ import annotations

import pytest

from harness import reconcile_watch
from harness.reconcile_watch import ReconcileWatch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(reconcile_watch.time, "monotonic", found.monotonic)
    monkeypatch.setattr(reconcile_watch, "wait_scale", lambda: 1.0)
    return found


def test_a_rewritten_status_answers_at_once(clock: Clock) -> None:
    watch = ReconcileWatch("before", lambda: 0, timeout=20.0)
    assert not watch.answered("before") and watch.answered("after")
    assert not watch.answered(None)  # a network with no status yet must get one


def test_a_scrape_after_the_force_then_an_unchanged_status_answers_after_the_settle(clock: Clock) -> None:
    count = [5]
    watch = ReconcileWatch("same", lambda: count[0], timeout=20.0)
    clock.now += 0.2
    assert not watch.answered("same")  # nothing scraped yet
    count[0] = 7
    clock.now += 0.2
    assert not watch.answered("same")  # scraped: the status may still be on its way
    clock.now += reconcile_watch.SETTLE_AFTER_SCRAPE_S - 0.1
    assert not watch.answered("same")
    clock.now += 0.2
    assert watch.answered("same")


def test_without_a_scrape_only_quiet_through_half_the_deadline_answers(clock: Clock) -> None:
    watch = ReconcileWatch("same", lambda: 3, timeout=20.0)
    clock.now += 9.9
    assert not watch.answered("same")
    clock.now += 0.2
    assert watch.answered("same")


def test_the_scrape_count_skips_a_backend_that_cannot_answer() -> None:
    """A fake backend a test stopped or made fail is no evidence either way; the others still count."""
    from types import SimpleNamespace

    import httpx

    from harness.control import ControlPlane

    def requests(name: str) -> int:
        if name == "down":
            raise httpx.ConnectError("refused")
        if name == "failing":
            raise AssertionError("down /admin/stats answered 503")
        return 4

    providers = [SimpleNamespace(name=n) for n in ("up", "down", "failing", "up2")]
    plane = SimpleNamespace(site=SimpleNamespace(spec=SimpleNamespace(providers=providers),
                                                 backend_metrics_requests=requests))
    assert ControlPlane.scrapes(plane) == 8  # type: ignore[arg-type]
