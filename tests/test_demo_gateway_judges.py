"""Every demo test can fail: the demos profile, run against deliberately broken gateways.

A demo starts consumer and provider gateways from the descriptor's one gateway command, so each breakage
(a consumer one from selfcheck/breakages.py or a provider one from selfcheck/provider_breakages.py,
the tables the conformance judges use) is plugged in through selfcheck/demo_launch.py and breaks every
gateway of the run. The suite runs only the breakage's target tests (selfcheck/demo_targets.py); each
must fail inside its test body. The operator breakages are judged in tests/test_demo_operator_judges.py;
the two tables together must cover every demo test but the claims listed as not applicable.
"""

from __future__ import annotations

import pytest

from selfcheck import judge as shared
from selfcheck.demo_targets import GATEWAY_TARGETS, NOT_APPLICABLE_MARK, OPERATOR_TARGETS, SUITE
from selfcheck.judge import SuiteRuns
from selfcheck.profiles import DEMOS_GATEWAY as PROFILE
from selfcheck.targets import SuiteTest, expand

suite_ids, suite_runs = shared.fixtures(PROFILE)


@pytest.mark.parametrize("breakage", list(GATEWAY_TARGETS))
def test_demos_fail_every_target(breakage: str, suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_breakage(PROFILE, breakage, suite_runs, suite_ids)


def test_gateway_and_operator_targets_cover_every_judged_demo_test(suite_ids: dict[str, SuiteTest]) -> None:
    covered: set[str] = set()
    for breakage, targets in {**GATEWAY_TARGETS, **OPERATOR_TARGETS}.items():
        try:
            covered.update(expand(targets.ids, suite_ids, SUITE))
        except ValueError as exc:
            pytest.fail(f"breakage {breakage}: {exc}")
    judged = {test_id for test_id in suite_ids if NOT_APPLICABLE_MARK not in test_id}
    assert judged, "the demos profile has tests"
    uncovered = sorted(judged - covered)
    assert not uncovered, f"no breakage shows that these demo tests can fail: {uncovered}"


def test_every_demo_gateway_breakage_is_one_the_launcher_knows() -> None:
    assert set(GATEWAY_TARGETS) <= set(PROFILE.registered())
