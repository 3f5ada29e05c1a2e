"""Every consumer conformance test can fail: the suite, run against deliberately broken gateways.

Each breakage (selfcheck/breakages.py) is plugged into the consumer suite the way a vendor gateway is,
through an implementation descriptor, and the suite runs only that breakage's target tests
(selfcheck/targets.py). Every target must fail, and fail for the right reason: inside the test body,
not because the broken gateway could not start (unless refusing to start is the breakage). A target that
passes means the suite cannot see that breakage. A separate test checks that the targets of all
breakages together cover every conformance test of the suite. The runner is shared with the producer
judge (selfcheck/judge.py).
"""

from __future__ import annotations

import dataclasses

import pytest

from selfcheck import judge as shared
from selfcheck.judge import CaseResult, SuiteRuns, hand_made_run, judge
from selfcheck.profiles import CONSUMER as PROFILE
from selfcheck.targets import TARGETS, SuiteTest, Targets
from tests.prepared_runs import PreparedRuns

suite_ids, suite_runs = shared.fixtures(PROFILE)


@pytest.mark.parametrize("breakage", list(TARGETS))
def test_suite_fails_every_target(breakage: str, suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_breakage(PROFILE, breakage, suite_runs, suite_ids)


def test_targets_cover_every_consumer_conformance_test(suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_coverage(PROFILE, suite_ids)


def test_every_breakage_has_targets() -> None:
    shared.check_registered(PROFILE)


def test_unknown_breakage_is_refused() -> None:
    shared.check_unknown_refused(PROFILE)


def test_gateway_that_cannot_start_is_no_verdict(suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    """Targets failing because the gateway never started must not count as the suite seeing a breakage."""
    shared.check_cannot_start(PROFILE, suite_runs, suite_ids)


# Judging, on hand-made runs: what each verdict looks like.

_IDS = {"CONS-X": SuiteTest("suites.consumer.test_x", "test_x")}
_BODY_FAILURE = "AssertionError: served provider-a\nsuites/consumer/test_x.py:10: AssertionError"
_START_FAILURE = "harness.backends.local.GatewayStartFailed: gateway /ready: process exited with 2"


_TARGETS = Targets(("CONS-X",))


def _verdict(case: CaseResult, targets: Targets = _TARGETS) -> list[str]:
    failed = bool(case.failures or case.errors)
    run = hand_made_run(PROFILE, "CONS-X", "failed" if failed else "passed", case,
                        returncode=shared.TESTS_FAILED if failed else 0)
    return judge(run, targets, _IDS, PROFILE)


def test_judge_accepts_a_failure_in_the_test_body() -> None:
    assert _verdict(CaseResult("test_x", failures=[_BODY_FAILURE])) == []


def test_judge_reports_a_target_that_passed() -> None:
    problems = _verdict(CaseResult("test_x"))
    assert problems and "cannot see this breakage" in problems[0] and "CONS-X" in problems[0], problems


def test_judge_rejects_failures_for_the_wrong_reason() -> None:
    setup_error = CaseResult("test_x", errors=[_START_FAILURE])
    assert any("did not fail inside the test body" in p for p in _verdict(setup_error))
    in_body = CaseResult("test_x", failures=[_START_FAILURE])
    assert any("failed to start" in p for p in _verdict(in_body))
    assert _verdict(in_body, Targets(("CONS-X",), startup_failure=True)) == []
    unexplained = _verdict(CaseResult("test_x", failures=[_BODY_FAILURE]), Targets(("CONS-X",), expect="DID NOT RAISE"))
    assert any("does not mention 'DID NOT RAISE'" in p for p in unexplained), unexplained


def test_a_statistical_miss_counts_only_when_a_second_run_misses_too() -> None:
    missed = hand_made_run(PROFILE, "CONS-X", "passed", CaseResult("test_x"), returncode=0)
    caught = hand_made_run(PROFILE, "CONS-X", "failed", CaseResult("test_x", failures=[_BODY_FAILURE]))
    statistical = dataclasses.replace(PROFILE, targets={"b": Targets(("CONS-X",), statistical=True)})
    runs = PreparedRuns(missed, caught)
    assert shared.breakage_verdict(statistical, "b", runs, _IDS)[0] == []  # type: ignore[arg-type]
    assert runs.labels == ["b", "b-again"]
    runs = PreparedRuns(missed, missed)
    problems = shared.breakage_verdict(statistical, "b", runs, _IDS)[0]  # type: ignore[arg-type]
    assert "cannot see this breakage" in problems[0] and any("second run" in p for p in problems), problems
    # the twin: an ordinary target's miss is reported at once, without a second run
    runs = PreparedRuns(missed, caught)
    plain = dataclasses.replace(PROFILE, targets={"b": Targets(("CONS-X",))})
    problems = shared.breakage_verdict(plain, "b", runs, _IDS)[0]  # type: ignore[arg-type]
    assert problems and runs.labels == ["b"], problems
    runs = PreparedRuns(caught)
    assert shared.breakage_verdict(statistical, "b", runs, _IDS)[0] == [] and runs.labels == ["b"]  # type: ignore[arg-type]


def test_a_run_cut_off_by_its_budget_is_not_judged_and_is_retried_with_a_longer_one() -> None:
    """The environment first: a cut-off run says so (never that the suite cannot see the breakage), and one
    run with twice the budget decides; its twin, a run that ended by itself, is judged at once."""
    caught = hand_made_run(PROFILE, "CONS-X", "failed", CaseResult("test_x", failures=[_BODY_FAILURE]))
    cut = dataclasses.replace(hand_made_run(PROFILE, "CONS-X", "passed", CaseResult("test_x"), returncode=0),
                              cut_off_after=240.0)
    assert judge(cut, _TARGETS, _IDS, PROFILE)[0].startswith("not judged: cut off after 240 s")
    plain = dataclasses.replace(PROFILE, targets={"b": Targets(("CONS-X",))})
    runs = PreparedRuns(cut, caught)
    assert shared.breakage_verdict(plain, "b", runs, _IDS)[0] == []  # type: ignore[arg-type]
    assert runs.labels == ["b", "b-longer"]
    runs = PreparedRuns(cut, cut)
    problems = shared.breakage_verdict(plain, "b", runs, _IDS)[0]  # type: ignore[arg-type]
    assert problems[0].startswith("not judged: cut off") and not any("cannot see" in p for p in problems)
    runs = PreparedRuns(caught)
    assert shared.breakage_verdict(plain, "b", runs, _IDS)[0] == [] and runs.labels == ["b"]  # type: ignore[arg-type]
