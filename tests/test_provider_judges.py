"""Every provider conformance test can fail: the suite, run against deliberately broken provider gateways.

Each breakage (selfcheck/provider_breakages.py) is plugged into the provider suite the way a vendor
gateway is: an implementation descriptor whose gateway command is the reference gateway started through
selfcheck/provider_launch.py with that breakage applied. The suite starts site-a's consumer gateway
and site-b's provider gateways with that one command, so a breakage changes only provider-side behaviour
(or, for a credential object, the consumer's overlay check). The suite runs only the breakage's target
tests (selfcheck/provider_targets.py); every target must fail inside its test body, and the targets of
all breakages together must cover every provider conformance test. The runner is the one the consumer
and producer judges use (selfcheck/judge.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.impl import load_impl
from selfcheck import judge as shared
from selfcheck.judge import CaseResult, SuiteRuns, hand_made_run, judge
from selfcheck.profiles import PROVIDER as PROFILE
from selfcheck.provider_targets import TARGETS
from selfcheck.targets import SuiteTest, Targets

suite_ids, suite_runs = shared.fixtures(PROFILE)


@pytest.mark.parametrize("breakage", list(TARGETS))
def test_suite_fails_every_target(breakage: str, suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_breakage(PROFILE, breakage, suite_runs, suite_ids)


def test_targets_cover_every_provider_conformance_test(suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_coverage(PROFILE, suite_ids)


def test_every_provider_breakage_has_targets() -> None:
    shared.check_registered(PROFILE)


def test_unknown_provider_breakage_is_refused() -> None:
    shared.check_unknown_refused(PROFILE)


def test_provider_gateway_that_cannot_start_is_no_verdict(suite_runs: SuiteRuns,
                                                          suite_ids: dict[str, SuiteTest]) -> None:
    """Targets failing because the gateways never started must not count as the suite seeing a breakage."""
    shared.check_cannot_start(PROFILE, suite_runs, suite_ids)


# The judge's provider side, without running the suite.


def test_every_provider_breakage_applies_to_the_reference_gateway() -> None:
    """Each breakage still finds the attributes it patches (in a separate process: patches are global)."""
    code = ("from selfcheck.provider_breakages import BREAKAGES\n"
            "for breakage in BREAKAGES.values():\n    breakage.apply()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=shared.ROOT, env=shared.env(), capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_descriptor_plugs_the_broken_provider_gateway_in_like_a_vendor(tmp_path: Path) -> None:
    descriptor = load_impl(str(shared.write_descriptor(PROFILE, tmp_path / "impl.yaml", "token-logged")))
    argv, env = descriptor.gateway.render(tmp_path / "praxis.yaml", tmp_path, tmp_path / "launcher.sock")
    assert argv[1:] == ["-m", "reference.warm_start", "run", str(tmp_path / "launcher.sock"), "-m", PROFILE.launcher,
                        "--break", "token-logged", "-c", str(tmp_path / "praxis.yaml")], argv
    assert env == {"PYTHONPATH": str(shared.ROOT)}
    assert descriptor.gateway.launcher is not None
    launcher, launcher_env = descriptor.gateway.launcher.render(tmp_path / "launcher.sock")
    assert launcher[-2:] == ["--preload", "selfcheck.provider_breakages"] and launcher_env == env, launcher


_IDS = {"PROV-X": SuiteTest("suites.provider.test_x", "test_x")}
_SETUP_ERROR = ("harness.backends.local.GatewayStartFailed: gateway provider-site-b-gateway-1 /ready: process "
                "exited with 2")


def test_judge_takes_a_hop_that_never_came_up_for_no_verdict() -> None:
    setup = hand_made_run(PROFILE, "PROV-X", "failed", CaseResult("test_x", errors=[_SETUP_ERROR]))
    assert any("did not fail inside the test body" in p for p in judge(setup, Targets(("PROV-X",)), _IDS, PROFILE))
    in_body = hand_made_run(PROFILE, "PROV-X", "failed", CaseResult("test_x", failures=[_SETUP_ERROR]))
    assert any("failed to start" in p for p in judge(in_body, Targets(("PROV-X",)), _IDS, PROFILE))
    assert judge(in_body, Targets(("PROV-X",), startup_failure=True), _IDS, PROFILE) == []
