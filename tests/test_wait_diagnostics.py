"""A timed-out wait says what the gateway answered and what it logged about the overlay."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import contract
from harness.addresses import AddressPlan
from harness.backends.local import LocalBackend
from harness.grid import Grid
from harness.impl import load_impl
from harness.process import Supervisor
from harness.suite_support import ReloadProbe
from harness.topology import load_topology
from harness.waiting import WaitTimeout, poll_until


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[Grid]:
    impl = load_impl("reference")
    backend = LocalBackend(tmp_path, Supervisor(tmp_path / "logs"), AddressPlan(), impl)
    grid = Grid(load_topology("single-site"), backend, impl.features)
    try:
        yield grid.start()
    finally:
        grid.close()


def test_a_refused_publish_names_the_answer_and_the_logged_reason(grid: Grid) -> None:
    site = grid.site()
    gw = site.gateway("core")
    served = gw.publish(site.envelope([site.candidate("provider-a", "m")]), "m")
    tampered = copy.deepcopy(site.envelope([site.candidate("provider-b", "m")]))
    tampered["overlay"]["candidates"][0]["cluster"] = "provider-c"  # the digest no longer matches
    with pytest.raises(WaitTimeout) as timeout:
        gw.publish(tampered, "m", timeout=1.5)
    message = str(timeout.value)
    assert f"serving revision {served}" in message, message
    assert "the gateway answered 200" in message, message
    assert "what the gateway logged about overlays" in message and "digest" in message, message


def test_a_reload_wait_names_the_logged_outcome(grid: Grid) -> None:
    site = grid.site()
    gw = site.gateway("core")
    gw.publish(site.envelope([site.candidate("provider-a", "m")]), "m")
    probe = ReloadProbe(gw, True)
    before = probe.snapshot()
    gw.write_overlay(contract.encode(site.envelope([site.candidate("provider-b", "m")])))
    with pytest.raises(WaitTimeout) as timeout:
        probe.wait(before, "rejected", timeout=1.5)
    assert "accepted" in str(timeout.value).split("logged about overlays")[-1], str(timeout.value)


def test_a_wait_on_text_observations_is_described_and_a_failing_probe_is_not() -> None:
    """`describe` renders what the probe returned, text included; a probe's failure is reported as it is."""
    with pytest.raises(WaitTimeout, match="last seen: delivered rev-1; now rev-2"):
        poll_until(lambda: "rev-1", lambda r: r == "rev-3", what="rev-3", timeout=0.05,
                   describe=lambda r: f"delivered {r}; now rev-2")

    def broken() -> str:
        raise OSError("gone")

    with pytest.raises(WaitTimeout, match="last seen: OSError: gone"):
        poll_until(broken, lambda r: r == "rev-3", what="rev-3", timeout=0.05, describe=lambda r: f"delivered {r}")
