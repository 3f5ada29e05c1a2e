"""Every demo test can fail: the demos profile, run against deliberately broken gateways.

A demo starts consumer and provider gateways from the descriptor's one gateway command, so each breakage
(a consumer one from tests/broken/breakages.py or a provider one from tests/broken/provider_breakages.py,
the tables the conformance judges use) is plugged in through tests/broken/demo_launch.py and breaks every
gateway of the run. The suite runs only the breakage's target tests (tests/broken/demo_targets.py); each
must fail inside its test body. The operator breakages are judged in tests/test_demo_operator_judges.py;
the two tables together must cover every demo test but the claims listed as not applicable.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.impl import reference_document
from tests.broken import judge as shared
from tests.broken.demo_targets import GATEWAY_TARGETS, NOT_APPLICABLE_MARK, OPERATOR_TARGETS, SUITE
from tests.broken.judge import SuiteRuns
from tests.broken.targets import SuiteTest, Targets, expand
from tests.test_provider_judges import PROFILE as PROVIDER_PROFILE

LAUNCHER = "tests.broken.demo_launch"


def _components(breakage: str) -> dict[str, Any]:
    """The broken gateway with the reference operator and its mesh arguments (every demo site runs one)."""
    operator = reference_document()["operator"]
    assert "mesh_args" in operator, "the reference descriptor's operator has mesh arguments"
    return {"gateway": shared.broken_gateway(LAUNCHER, breakage, LAUNCHER), "operator": dict(operator)}


def _registered() -> list[str]:
    from tests.broken.demo_launch import BREAKAGES

    return sorted(BREAKAGES)


PROFILE = dataclasses.replace(
    PROVIDER_PROFILE, name="demos-gateway", suite=SUITE, targets=GATEWAY_TARGETS, components=_components,
    launcher=LAUNCHER, registered=_registered, launched=None,
    cannot_start_targets=Targets(("DEMO-COMBINED-SITE-LOCAL-FIRST",)), cannot_start_test="",
    slow_first=("hop-without-client-cert",),  # its targets include the run that restarts every operator
)

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
    assert set(GATEWAY_TARGETS) <= set(_registered())
