"""Every serving conformance test can fail: the suite, run against deliberately broken grid gateways.

Each breakage (selfcheck/serving_breakages.py) is plugged into the serving suite the way a vendor gateway
is: an implementation descriptor whose gateway command is the reference gateway started through
selfcheck/serving_launch.py with that breakage applied. The suite runs only the breakage's target tests
(selfcheck/serving_targets.py); every target must fail inside its test body, and the targets of all
breakages together must cover every serving conformance test. The runner is the one the other judges use
(selfcheck/judge.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.impl import load_impl
from selfcheck import judge as shared
from selfcheck.judge import SuiteRuns
from selfcheck.profiles import SERVING as PROFILE
from selfcheck.serving_targets import TARGETS
from selfcheck.targets import SuiteTest

suite_ids, suite_runs = shared.fixtures(PROFILE)


@pytest.mark.parametrize("breakage", list(TARGETS))
def test_suite_fails_every_target(breakage: str, suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_breakage(PROFILE, breakage, suite_runs, suite_ids)


def test_targets_cover_every_serving_conformance_test(suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_coverage(PROFILE, suite_ids)


def test_every_serving_breakage_has_targets() -> None:
    shared.check_registered(PROFILE)


def test_unknown_serving_breakage_is_refused() -> None:
    shared.check_unknown_refused(PROFILE)


def test_grid_gateway_that_cannot_start_is_no_verdict(suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    """Targets failing because the grid gateway never started must not count as the suite seeing a breakage."""
    shared.check_cannot_start(PROFILE, suite_runs, suite_ids)


def test_every_serving_breakage_applies_to_the_reference_gateway() -> None:
    """Each breakage still finds the attributes it patches (in a separate process: patches are global)."""
    code = ("from selfcheck.serving_breakages import BREAKAGES\n"
            "for breakage in BREAKAGES.values():\n    breakage.apply()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=shared.ROOT, env=shared.env(), capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_descriptor_plugs_the_broken_grid_gateway_in_like_a_vendor(tmp_path: Path) -> None:
    descriptor = load_impl(str(shared.write_descriptor(PROFILE, tmp_path / "impl.yaml", "room-ignored")))
    argv, env = descriptor.gateway.render(tmp_path / "praxis.yaml", tmp_path, tmp_path / "launcher.sock")
    assert argv[1:] == ["-m", "reference.warm_start", "run", str(tmp_path / "launcher.sock"), "-m", PROFILE.launcher,
                        "--break", "room-ignored", "-c", str(tmp_path / "praxis.yaml")], argv
    assert env == {"PYTHONPATH": str(shared.ROOT)}
