"""Every demo test can fail: the demos profile, run against deliberately broken operators.

Each operator breakage (selfcheck/operator_breakages.py and mesh_breakages.py, the tables the producer
and mesh judges use) runs on every site of the demo, plugged in as the mesh judge plugs it: the reference
operator started through selfcheck/operator_launch.py with its mesh arguments. The gateway breakages
and the coverage of both tables are in tests/test_demo_gateway_judges.py.
"""

from __future__ import annotations

import pytest

from selfcheck import judge as shared
from selfcheck.demo_targets import OPERATOR_TARGETS
from selfcheck.judge import SuiteRuns
from selfcheck.profiles import DEMOS_OPERATOR as PROFILE
from selfcheck.targets import SuiteTest

suite_ids, suite_runs = shared.fixtures(PROFILE)


@pytest.mark.parametrize("breakage", list(OPERATOR_TARGETS))
def test_demos_fail_every_target(breakage: str, suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_breakage(PROFILE, breakage, suite_runs, suite_ids)
