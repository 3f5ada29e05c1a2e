"""Learned ceilings: a site's ceiling is the most in-flight it has held with nothing waiting. It settles near
the pool's running plateau under real load, stops learning while work waits, and an unproven site still
weighs a share of the largest ceiling (explore_floor).

Real load is sent straight to a site's pool (its fake backend), past the gateway, so the pool's queue is
the test's own and the gateway only reads what the site relays.
"""

from __future__ import annotations

import pytest

from harness.serving.grid import EppSetting, ServingGrid
from harness.serving.judge import assert_at_least, plan_at_least
from harness.serving.load import LoadRun, distinct_prompt
from harness.serving.record import SaturationRecorder
from harness.timeline import record_action
from harness.timeouts import timeouts
from harness.waiting import hold_for, poll_until

GUIDE = "routing guide 7b. Measured site availability"
#: A pool of 2 endpoints running 6 requests each for 200 ms: it runs at most 12 at once (its plateau).
PLATEAU_POOL = EppSetting(endpoints=2, concurrency=6, service_ms=200)
#: How long the ceiling is watched while twice the plateau is offered (about ten polls at 100 ms).
OVERLOAD_WATCH_S = 1.0


@pytest.mark.conformance(id="SERV-CEILING-PLATEAU", profile="serving", level="core", feature="ceilings",
                         spec=f"{GUIDE}: \"The gateway learns each site's ceiling, the most in-flight it has held "
                              "with nothing waiting\"; tuning: \"grid_route_site_ceiling should settle near the "
                              "engine's running plateau\"",
                         statements=["RG-AVAIL-CEILING", "RG-AVAIL-METRIC-CEILING"])
def test_the_ceiling_settles_at_the_running_plateau(two: ServingGrid, model: str) -> None:
    """site-b's pool runs at most 12 requests at once (2 endpoints x 6). Twelve clients sent straight to it
    keep it at its plateau with nothing waiting: grid_route_site_ceiling{site-b} rises to at least 90% of 12.
    Twenty-four clients then keep 12 running and about 12 waiting: for a second (about ten polls) the
    ceiling stays at most 12, the plateau, not the 24 in flight."""
    two.configure("site-b", PLATEAU_POOL)
    gateway = two.start_gateway(model, availability={})
    gateway.wait_measured()
    plateau = PLATEAU_POOL.plateau
    url = two.backend_url("site-b")
    with SaturationRecorder(gateway, ["site-b"]), \
            LoadRun(url, model, prompt=distinct_prompt(f"{model}/plateau"), concurrency=plateau):
        record_action(f"{plateau} clients straight to site-b's pool", site="site-b")
        gateway.wait_ceiling("site-b", lambda c: c >= 0.9 * plateau, what=f"to settle near the plateau {plateau}")
        with LoadRun(url, model, prompt=distinct_prompt(f"{model}/overload"), concurrency=plateau):
            record_action(f"{plateau} more clients: a queue forms at site-b", site="site-b")
            poll_until(lambda: two.queued("site-b"), lambda q: q >= plateau / 2,
                       what="site-b's pool to queue half the plateau", timeout=timeouts().serving_signal)
            hold_for(lambda: gateway.metrics().ceiling.get("site-b", 0.0), lambda c: c <= plateau + 1e-6,
                     seconds=OVERLOAD_WATCH_S, what=f"site-b's ceiling stays at most its plateau {plateau} while "
                                                    "work waits")
            settled = gateway.metrics().ceiling["site-b"]
    assert 0.9 * plateau <= settled <= plateau + 1e-6, f"site-b's ceiling {settled} is not near its plateau {plateau}"


#: What site-b publishes while teaching must stop: 30 running and one whole request waiting (one endpoint).
RUNNING = 30.0


@pytest.mark.conformance(id="SERV-TEACHING-STOPS", profile="serving", level="core", feature="ceilings",
                         spec=f"{GUIDE}: \"queue_full 1.0 ... Teaching stops on any whole request waiting, "
                              "whatever this is set to.\"",
                         statements=["RG-AVAIL-TEACHING-STOPS", "RG-AVAIL-CEILING"])
def test_no_ceiling_is_learned_while_a_request_waits(two: ServingGrid, model: str) -> None:
    """With queue_full set to 4, site-b publishes 30 running and 1 waiting (one endpoint): the gateway reads
    it (its saturation climbs past 0.9, seven samples or more at the default smoothing) yet the ceiling
    stays at the floor, 8. The same 30 running with nothing waiting then teaches it: the ceiling rises to 30."""
    two.publish("site-b", running=RUNNING, waiting=1)
    gateway = two.start_gateway(model, availability={"queue_full": 4})
    seen = gateway.wait_rho("site-b", lambda r: r >= 0.9, what="to climb past 0.9 on 31 in flight")
    assert seen.ceiling["site-b"] == pytest.approx(8.0, abs=1e-6), \
        f"a request was waiting, so nothing may be learned: {seen.describe(gateway.sites)}"
    two.publish("site-b", running=RUNNING, waiting=0)
    gateway.wait_ceiling("site-b", lambda c: c >= RUNNING - 1e-6,
                         what=f"to learn {RUNNING:g} once nothing waits (the twin)")


#: The ceiling taught to site-a in the explore floor test, and the floor site-b keeps.
LARGE = 64.0


@pytest.mark.conformance(id="SERV-EXPLORE-FLOOR", profile="serving", level="core", feature="ceilings",
                         spec=f"{GUIDE}: \"explore_floor 0.25 The least share of the largest ceiling a measured "
                              "site weighs, so an unproven site can prove more.\"",
                         statements=["RG-AVAIL-EXPLORE-FLOOR"])
def test_an_unproven_site_weighs_a_quarter_of_the_largest_ceiling(two: ServingGrid, model: str) -> None:
    """site-a's ceiling is taught 64; site-b stays at the floor, 8; then both publish 0 in flight (saturation
    0, both with room). The weighted pick between the two then gives site-b at least the share of a weight
    of 0.25 x 64 = 16 against 64, 20%, where its own ceiling alone would give it 8/72, 11%. Smoothing is
    set to 1 so saturation follows each sample at once (what is judged is the default explore_floor).
    Judged one-sided at the planned n: false failure <= 1e-6 at 20%, power >= 0.99 against 11%."""
    two.publish("site-a", running=LARGE, waiting=0)
    two.publish("site-b", running=0, waiting=0)
    gateway = two.start_gateway(model, availability={"smoothing": 1.0}, prefix_affinity={})
    gateway.wait_ceiling("site-a", lambda c: c >= LARGE - 1e-6, what=f"to learn {LARGE:g}")
    two.publish("site-a", running=0, waiting=0)
    metrics = gateway.wait_rho("site-a", lambda r: r == 0.0, what="to read 0 once site-a is idle")
    assert metrics.ceiling["site-b"] == pytest.approx(8.0, abs=1e-6), metrics.describe(gateway.sites)
    plan = plan_at_least("site-b", 0.199, 8.0 / 72.0)  # 16 / 80, a hair less for the ceiling's decay
    record_action(f"sample: {plan.describe()}")
    batch = gateway.send(plan.sample_size, concurrency=16)
    assert batch.statuses() == {200: plan.sample_size}, batch.describe()
    assert_at_least(batch.by_site(), plan, what="site-b's share at the floor beside a ceiling of 64")
