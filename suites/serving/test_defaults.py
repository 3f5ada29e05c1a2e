"""The availability block of grid_site_route: nothing needs setting, a field set in the block is what the
gateway uses, and the defaults the routing guide's table gives (ceiling_floor, ceiling_half_life_ms,
smoothing) are the ones a gateway without the field applies.

Each test starts its own gateway on quiet pools (nothing sent, every series measured); it waits until the
gateway has measured the sites before it reads anything.
"""

from __future__ import annotations

import math
import time

import pytest

from harness.serving.grid import ServingGrid
from harness.serving.metrics import RouteMetrics
from harness.waiting import wait_until_elapsed

GUIDE = "routing guide 7b. Measured site availability"


def _served(reply_site: str | None, sites: tuple[str, ...]) -> bool:
    return reply_site is not None and reply_site in sites


@pytest.mark.conformance(id="SERV-NOTHING-NEEDS-SETTING", profile="serving", level="core",
                         feature="availabilityConfig",
                         spec=f"{GUIDE}: \"Nothing needs setting. Every field below has a default, and the one "
                              "switch is shedding.\"",
                         statements=["RG-AVAIL-NOTHING-NEEDS-SETTING", "RG-AVAIL-ALL-DEFAULTED"])
def test_a_gateway_without_availability_settings_starts_and_routes(three: ServingGrid, model: str) -> None:
    """A gateway whose grid_site_route has an empty availability block, and one with none at all, both start
    and route requests for the model to its sites; both measure every site (a ceiling and a saturation
    learned from defaults alone)."""
    blocks: tuple[dict[str, object] | None, ...] = ({}, None)
    for availability in blocks:
        gateway = three.start_gateway(model, availability=availability, label="defaults")
        reply = gateway.request()
        site = reply.headers.get("x-agn-site")
        assert reply.status == 200 and _served(site, three.names), \
            f"availability {availability!r}: {reply.describe()} (site {site})\n{gateway.log_tail()}"
        gateway.wait_measured()
        three.stop_gateway(gateway)


def _quiet_ceilings(three: ServingGrid, model: str, availability: dict[str, object] | None) -> RouteMetrics:
    gateway = three.start_gateway(model, availability=availability, label="floor")
    metrics = gateway.wait_measured()
    three.stop_gateway(gateway)
    return metrics


@pytest.mark.conformance(id="SERV-CEILING-FLOOR", profile="serving", level="core", feature="ceilings",
                         spec=f"{GUIDE}: \"ceiling_floor 8 The least a ceiling can be, so a quiet site does not "
                              "read as full.\"",
                         statements=["RG-AVAIL-CEILING-FLOOR"])
def test_a_quiet_site_reads_the_default_ceiling_floor(three: ServingGrid, model: str) -> None:
    """With nothing sent and nothing waiting (every pool publishes 0 running), each site's learned ceiling
    (grid_route_site_ceiling) reads 8, the default floor, and its saturation 0."""
    metrics = _quiet_ceilings(three, model, {})
    for site in three.names:
        assert metrics.ceiling[site] == pytest.approx(8.0, abs=1e-9), metrics.describe(three.names)
        assert metrics.rho[site] == pytest.approx(0.0, abs=1e-9), metrics.describe(three.names)


@pytest.mark.conformance(id="SERV-CONFIG-BLOCK", profile="serving", level="core", feature="availabilityConfig",
                         spec=f"{GUIDE}: \"The fields live in the availability block of the grid_site_route filter "
                              "in the gateway's praxis config\"",
                         statements=["RG-AVAIL-CONFIG-BLOCK"])
def test_a_field_of_the_availability_block_is_what_the_gateway_uses(three: ServingGrid, model: str) -> None:
    """ceiling_floor: 12 in the availability block makes a quiet site's ceiling read 12; the same grid's
    gateway without the field reads the default 8 (so the 12 came from the block)."""
    set_floor = _quiet_ceilings(three, model, {"ceiling_floor": 12})
    default = _quiet_ceilings(three, model, {})
    for site in three.names:
        assert set_floor.ceiling[site] == pytest.approx(12.0, abs=1e-9), set_floor.describe(three.names)
        assert default.ceiling[site] == pytest.approx(8.0, abs=1e-9), default.describe(three.names)


#: A learned ceiling well above the floor, so its decay shows; and how long the test watches it decay.
TAUGHT = 64.0
DECAY_WATCH_S = 3.0


@pytest.mark.conformance(id="SERV-CEILING-HALF-LIFE", profile="serving", level="core", feature="ceilings",
                         spec=f"{GUIDE}: \"ceiling_half_life_ms 600000 How long a learned ceiling takes to halve "
                              "once load falls away.\"",
                         statements=["RG-AVAIL-CEILING-HALF-LIFE"])
def test_a_learned_ceiling_decays_with_the_default_half_life(two: ServingGrid, model: str) -> None:
    """site-b publishes 64 running with nothing waiting, so its ceiling learns 64; then it publishes 0. Over
    the next 3 s the ceiling falls by the factor 0.5^(elapsed / 600 s): the half-life implied by two readings
    3 s apart lies within a factor 2 of 600000 ms (each reading's age is uncertain by about one poll, which
    the factor 2 covers many times over), where no decay would imply an infinite one and a ten times shorter
    half-life 60 s."""
    two.publish("site-b", running=TAUGHT, waiting=0)
    gateway = two.start_gateway(model, availability={})
    gateway.wait_ceiling("site-b", lambda c: c >= TAUGHT - 1e-6, what=f"to learn {TAUGHT:g}")
    two.publish("site-b", running=0, waiting=0)
    first = gateway.wait_rho("site-b", lambda r: r < 0.5, what="to fall once load is gone")
    start = time.monotonic()
    wait_until_elapsed(start, DECAY_WATCH_S, what="the ceiling to decay for 3 s")
    last = gateway.metrics()
    elapsed = time.monotonic() - start
    c1, c2 = first.ceiling["site-b"], last.ceiling["site-b"]
    assert 0 < c2 < c1 <= TAUGHT, f"the ceiling must decay once load fell away: {c1} then {c2} after {elapsed:.2f}s"
    implied_ms = elapsed * 1000.0 * math.log(0.5) / math.log(c2 / c1)
    assert 300_000 <= implied_ms <= 1_200_000, \
        f"ceiling {c1:.6f} -> {c2:.6f} over {elapsed:.2f}s implies a half-life of {implied_ms:.0f} ms, not about " \
        f"600000 ms"


#: What site-b publishes in the smoothing test: 4 running on a ceiling of 8, a raw saturation of 0.5.
RAW = 0.5


def _on_curve(value: float, raw: float, smoothing: float, steps: int = 200) -> int | None:
    """The k >= 1 with value == raw * (1 - (1 - smoothing)^k) (to 1e-9), or None."""
    for k in range(1, steps):
        if abs(value - raw * (1.0 - (1.0 - smoothing) ** k)) < 1e-9:
            return k
    return None


@pytest.mark.conformance(id="SERV-SMOOTHING", profile="serving", level="core", feature="saturation",
                         spec=f"{GUIDE}: \"smoothing 0.3 How far one new sample moves saturation toward the new "
                              "reading.\"",
                         statements=["RG-AVAIL-SMOOTHING"])
def test_each_sample_moves_saturation_three_tenths_of_the_way(two: ServingGrid, model: str) -> None:
    """site-b is quiet (saturation 0), then publishes 4 running on its ceiling of 8 (a reading of 0.5). Every
    saturation the gateway shows afterwards lies on 0.5 * (1 - 0.7^k) for a whole number k of samples: each
    sample moved it 0.3 of the way from where it was to the new reading; at least two such steps are seen,
    in order. (Without smoothing it would jump to 0.5; with another factor it would leave the curve.)"""
    gateway = two.start_gateway(model, availability={})
    gateway.wait_measured()
    two.publish("site-b", running=4, waiting=0)
    seen: list[tuple[float, int | None]] = []

    def steps() -> list[tuple[float, int | None]]:
        rho = gateway.metrics().rho.get("site-b", math.nan)
        if not math.isnan(rho) and rho > 0 and (not seen or seen[-1][0] != rho):
            seen.append((rho, _on_curve(rho, RAW, 0.3)))
        return seen

    gateway.wait_until(lambda _m: len(steps()) >= 4, what="site-b's rho to take four steps toward 0.5")
    off = [value for value, k in seen if k is None]
    assert not off, f"saturations off the curve 0.5*(1-0.7^k): {off} (all seen: {seen})"
    ks = [k for _, k in seen if k is not None]
    assert ks == sorted(ks) and len(set(ks)) == len(ks), f"the steps must come in order: {seen}"
