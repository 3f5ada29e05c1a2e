"""Every producer conformance test can fail: the suite, run against deliberately broken operators.

Each breakage (selfcheck/operator_breakages.py) is plugged into the producer suite the way a vendor
operator is: an implementation descriptor with the reference gateway and, as its operator command, the
reference operator started through selfcheck/operator_launch.py with that breakage applied. The suite
runs only the breakage's target tests (selfcheck/operator_targets.py); every target must fail inside
its test body, not because the broken operator exited. The targets of all breakages together must cover
every producer conformance test. The runner is the one the consumer judge uses (selfcheck/judge.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.impl import EXTENDED_FEATURES, load_impl
from selfcheck import judge as shared
from selfcheck.judge import CaseResult, SuiteRuns, hand_made_run, judge
from selfcheck.operator_targets import TARGETS
from selfcheck.profiles import PRODUCER as PROFILE
from selfcheck.targets import SuiteTest, Targets

suite_ids, suite_runs = shared.fixtures(PROFILE)


@pytest.mark.parametrize("breakage", list(TARGETS))
def test_suite_fails_every_target(breakage: str, suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_breakage(PROFILE, breakage, suite_runs, suite_ids)


def test_targets_cover_every_producer_conformance_test(suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_coverage(PROFILE, suite_ids)


def test_every_operator_breakage_has_targets() -> None:
    shared.check_registered(PROFILE)


def test_unknown_operator_breakage_is_refused() -> None:
    shared.check_unknown_refused(PROFILE)


def test_every_sidecar_breakage_has_targets_applies_and_unknown_is_refused() -> None:
    """The overlay-sync breakages (selfcheck/sync_breakages.py) are judged by the same table: each has
    targets, each finds what it patches, and selfcheck/sync_launch refuses an unknown one."""
    from selfcheck.sync_breakages import BREAKAGES as SYNC_BREAKAGES

    assert sorted(set(SYNC_BREAKAGES) - set(TARGETS)) == []
    code = ("from selfcheck.sync_breakages import BREAKAGES\n"
            "for breakage in BREAKAGES.values():\n    breakage.apply()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=shared.ROOT, env=shared.env(), capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    done = subprocess.run([sys.executable, "-m", "selfcheck.sync_launch", "--break", "no-such-breakage"],
                          cwd=shared.ROOT, env=shared.env(), capture_output=True, timeout=60, check=False)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 2 and all(name in stderr for name in SYNC_BREAKAGES), stderr


def test_operator_that_cannot_start_is_no_verdict(suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    """Targets failing because the operator exited must not count as the suite seeing a breakage."""
    shared.check_cannot_start(PROFILE, suite_runs, suite_ids)


# The judge's producer side, without running the suite.


def test_every_breakage_applies_to_the_reference_operator() -> None:
    """Each breakage still finds the attributes it patches (in a separate process: patches are global)."""
    code = ("from selfcheck.operator_breakages import BREAKAGES\n"
            "for breakage in BREAKAGES.values():\n    breakage.apply()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=shared.ROOT, env=shared.env(), capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_descriptor_plugs_the_broken_operator_in_like_a_vendor(tmp_path: Path) -> None:
    descriptor = load_impl(str(shared.write_descriptor(PROFILE, tmp_path / "impl.yaml", "score-ascending")))
    assert descriptor.operator is not None
    argv, env = descriptor.operator.render(tmp_path / "m", tmp_path / "o", tmp_path, tmp_path / "ca.pem")
    assert argv[1:5] == ["-m", "selfcheck.operator_launch", "--break", "score-ascending"], argv
    assert argv[5:] == ["run", "--manifests", str(tmp_path / "m"), "--out", str(tmp_path / "o"), "--poll", "0.1",
                        "--metrics-ca", str(tmp_path / "ca.pem")], argv
    assert env == {"PYTHONPATH": str(shared.ROOT)}
    reference = load_impl("reference").gateway
    assert descriptor.gateway.argv_template == reference.argv_template
    assert descriptor.gateway.launcher == reference.launcher
    assert descriptor.features == EXTENDED_FEATURES


_NEVER_RENDERED = ("harness.waiting.WaitTimeout: waited 20.0s for candidates p1, p2 in the ConfigMap of "
                   "n1/edge-gateway; last seen: no ConfigMap yet")
_IDS = {"PROD-X": SuiteTest("suites.producer.test_x", "test_x")}
_EXITED = "E   harness.control.OperatorExited: the operator exited with 2\n--- operator log (tail) ---\nerror"


def test_judge_takes_an_operator_exit_for_the_wrong_reason() -> None:
    run = hand_made_run(PROFILE, "PROD-X", "failed", CaseResult("test_x", failures=[_EXITED]))
    assert any("the operator failed to start" in p for p in judge(run, Targets(("PROD-X",)), _IDS, PROFILE))
    never_rendered = hand_made_run(PROFILE, "PROD-X", "failed", CaseResult("test_x", failures=[_NEVER_RENDERED]))
    assert any("failed to start" in p for p in judge(never_rendered, Targets(("PROD-X",)), _IDS, PROFILE))
    assert judge(never_rendered, Targets(("PROD-X",), startup_failure=True), _IDS, PROFILE) == []
    body = hand_made_run(PROFILE, "PROD-X", "failed", CaseResult("test_x", failures=["AssertionError: order"]))
    assert judge(body, Targets(("PROD-X",)), _IDS, PROFILE) == []
