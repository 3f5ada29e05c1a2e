"""Every mesh conformance test can fail: the suite, run against deliberately broken operators.

Each breakage (selfcheck/mesh_breakages.py) is plugged in the way a vendor operator is: an
implementation descriptor whose operator command is the reference operator started through
selfcheck/operator_launch.py with that breakage applied, followed by the reference's mesh arguments.
All three sites of the mesh run that broken operator. The suite runs only the breakage's target tests
(selfcheck/mesh_targets.py); every target must fail inside its test body, and the targets of all
breakages together must cover every mesh conformance test. The runner is the one the other judges use
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
from selfcheck.mesh_targets import TARGETS
from selfcheck.profiles import MESH as PROFILE
from selfcheck.targets import SuiteTest, Targets

suite_ids, suite_runs = shared.fixtures(PROFILE)


@pytest.mark.parametrize("breakage", list(TARGETS))
def test_suite_fails_every_target(breakage: str, suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_breakage(PROFILE, breakage, suite_runs, suite_ids)


def test_targets_cover_every_mesh_conformance_test(suite_ids: dict[str, SuiteTest]) -> None:
    shared.check_coverage(PROFILE, suite_ids)


def test_every_mesh_breakage_has_targets() -> None:
    shared.check_registered(PROFILE)


def test_unknown_mesh_breakage_is_refused() -> None:
    shared.check_unknown_refused(PROFILE)


def test_operator_that_cannot_join_is_no_verdict(suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    """Targets failing because the operators never came up must not count as the suite seeing a breakage."""
    shared.check_cannot_start(PROFILE, suite_runs, suite_ids)


def test_mesh_and_producer_breakages_have_distinct_names() -> None:
    from selfcheck.mesh_breakages import BREAKAGES as MESH
    from selfcheck.operator_breakages import BREAKAGES as PRODUCER

    assert not set(MESH) & set(PRODUCER)


def test_every_mesh_breakage_applies_to_the_reference_operator() -> None:
    """Each breakage still finds what it patches (in a separate process: patches are global)."""
    code = ("from selfcheck.mesh_breakages import BREAKAGES\n"
            "for breakage in BREAKAGES.values():\n    breakage.apply()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=shared.ROOT, env=shared.env(), capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_descriptor_plugs_the_broken_operator_in_with_the_mesh_arguments(tmp_path: Path) -> None:
    descriptor = load_impl(str(shared.write_descriptor(PROFILE, tmp_path / "impl.yaml", "self-echo-kept")))
    assert descriptor.operator is not None
    mesh = {"site": "site-a", "mesh_bind": "127.0.0.1:7946", "mesh_advertise": "127.0.0.1:7946", "mesh_seeds": "",
            "gateway_address": "127.0.0.1:1",
            "routing_cluster": "rc", "client_cert": "c", "client_key": "k", "probe_interval": "1",
            "probe_timeout": "0.4", "suspicion_mult": "3"}
    argv, env = descriptor.operator.render(tmp_path / "m", tmp_path / "o", tmp_path, tmp_path / "ca.pem", mesh)
    assert argv[1:5] == ["-m", PROFILE.launcher, "--break", "self-echo-kept"], argv
    assert argv[5:9] == ["run", "--manifests", str(tmp_path / "m"), "--out"], argv
    assert argv[argv.index("--mesh-site") + 1] == "site-a"
    assert env == {"PYTHONPATH": str(shared.ROOT)}


def _run_of(outcomes: dict[str, str]) -> shared.SuiteRun:
    """A judged run with the given outcome per target, each failing inside its test body when it failed."""
    from harness.impl import Implementation
    from harness.report.model import TestResult
    from harness.report.writer import build_report

    results = [TestResult(id=test_id, profile="mesh", level="core", feature="f", spec="s", outcome=outcome,
                          duration_s=0.1, message="m" if outcome == "failed" else "")
               for test_id, outcome in outcomes.items()]
    report = build_report(results, Implementation("o", "p", "1"), backend="local", harness_version="0",
                          profiles=["mesh"], features_claimed=())
    cases = {f"test_{i}": shared.CaseResult(f"test_{i}", failures=["AssertionError: x"] if o == "failed" else [],
                                            skipped=o == "skipped")
             for i, o in enumerate(outcomes.values())}
    return shared.SuiteRun("hand-made", list(outcomes), "k", shared.TESTS_FAILED, "", 0.0, report, "", cases)


def test_a_partition_target_skipped_for_want_of_namespaces_is_excused_only_beside_a_judged_one() -> None:
    ids = {"MESH-STALE-TTL-EVICTION": SuiteTest("suites.mesh.test_failure", "test_0"),
           "MESH-PARTITION-DEGRADE-EVICT-HEAL": SuiteTest("suites.mesh.test_failure", "test_1")}
    both = Targets(tuple(ids))
    excused = _run_of({"MESH-STALE-TTL-EVICTION": "failed", "MESH-PARTITION-DEGRADE-EVICT-HEAL": "skipped"})
    assert shared.judge(excused, both, ids, PROFILE) == []
    alone = _run_of({"MESH-PARTITION-DEGRADE-EVICT-HEAL": "skipped"})
    only = Targets(("MESH-PARTITION-DEGRADE-EVICT-HEAL",))
    assert any("nothing was judged" in p for p in shared.judge(alone, only, ids, PROFILE))
    other = _run_of({"MESH-STALE-TTL-EVICTION": "skipped", "MESH-PARTITION-DEGRADE-EVICT-HEAL": "failed"})
    assert any("nothing was judged" in p for p in shared.judge(other, both, ids, PROFILE))
