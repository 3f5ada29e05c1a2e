"""Which serving conformance tests each broken grid_site_route must make fail.

Targets are conformance ids as the report names them (``ID``, ``ID[param]``, ``ID[*]``; see
selfcheck/targets.py). Together the breakages of selfcheck/serving_breakages.py must cover every
conformance test of the serving suite. A target is listed only where the breakage certainly changes what
the test asserts. Where the breakage is exactly the alternative a target's planned sample has power 0.99
against, the targets are marked statistical: the judge runs them again after a miss.
"""

from __future__ import annotations

from selfcheck.targets import Targets, must_fail

__all__ = ["SUITE", "TARGETS"]

SUITE = "suites.serving"

TARGETS: dict[str, Targets] = {
    # measuring a site
    "ceiling-taught-while-waiting": must_fail("SERV-TEACHING-STOPS"),
    "ceiling-never-taught": must_fail("SERV-CEILING-PLATEAU"),
    "no-ceiling-floor": must_fail("SERV-CEILING-FLOOR"),
    "saturation-capped": must_fail("SERV-RHO-METRIC"),
    "no-explore-floor": must_fail("SERV-EXPLORE-FLOOR", statistical=True),  # 8/72, the plan's alternative
    "ceiling-never-decays": must_fail("SERV-CEILING-HALF-LIFE"),
    "unsmoothed": must_fail("SERV-SMOOTHING"),
    "held-ignored": must_fail("SERV-INPUTS"),
    "provider-conclusions-read": must_fail("SERV-CONCLUSIONS-NOT-INPUTS"),
    "queue-full-ignored": must_fail("SERV-QUEUE-FULL"),
    "own-requests-counted": must_fail("SERV-NO-OWN-COUNT"),
    "availability-block-ignored": must_fail("SERV-CONFIG-BLOCK"),
    "availability-block-required": must_fail("SERV-NOTHING-NEEDS-SETTING", expect="availability: is required",
                                             startup_failure=True),
    "site-gauges-unlabelled": must_fail("SERV-EXT-SITE-LABELS"),
    # the pick
    # one weighted draw leaves the idle pair 80%, SERV-TWO-CHOICES's alternative
    "first-draw-wins": must_fail("SERV-TWO-CHOICES", "SERV-EXT-TWO-DISTINCT-DRAWS", "SERV-SATURATING-SITE",
                                 statistical=True),
    "repeated-draws": must_fail("SERV-EXT-TWO-DISTINCT-DRAWS", expect="must get none"),
    "two-choices-between-two": must_fail("SERV-BETWEEN-TWO", "SERV-EXT-BETWEEN-TWO-SHARE"),
    # half, SERV-BETWEEN-TWO's alternative
    "even-between-two": must_fail("SERV-BETWEEN-TWO", "SERV-EXT-BETWEEN-TWO-SHARE", "SERV-EXT-BETWEEN-TWO-CLAMP",
                                  statistical=True),
    "room-ignored": must_fail("SERV-SELECTIONS-METRIC", "SERV-EXT-SELECTION-PATHS"),
    "least-saturated-always": must_fail("SERV-TWO-CHOICES"),
    "path-unlabelled": must_fail("SERV-SELECTIONS-METRIC", "SERV-EXT-SELECTION-PATHS"),
    # shedding
    "sheds-at-once": must_fail("SERV-SHEDDING-429[*]"),
    "default-full-after-halved": must_fail("SERV-SHEDDING-DEFAULT-TIMING", slow=True),
    "never-releases": must_fail("SERV-SHEDDING-429[*]", "SERV-SHEDDING-METRIC"),
    "sheds-when-off": must_fail("SERV-SHEDDING-OFF-BY-DEFAULT"),
    "shed-as-503": must_fail("SERV-SHEDDING-429[*]", "SERV-SHEDDING-METRIC"),
    "shed-without-retry-after": must_fail("SERV-SHEDDING-429[*]"),
    "shedding-gauge-stuck": must_fail("SERV-SHEDDING-METRIC"),
    # answers and headers
    "unknown-model-503": must_fail("SERV-EXT-UNKNOWN-MODEL-404"),
    "no-model-404": must_fail("SERV-EXT-NO-MODEL-REFUSED"),
    "not-ready-without-retry-after": must_fail("SERV-EXT-NO-READY-SITE-503"),
    "site-header-names-cluster": must_fail("SERV-EXT-GRID-SITE-HEADERS"),
    # prefix affinity
    "no-prefix-affinity": must_fail("SERV-PREFIX-AFFINITY", statistical=True),  # a third, the plan's alternative
}
