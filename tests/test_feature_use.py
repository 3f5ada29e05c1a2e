"""The harness records which extended features each test asked for, and a core test may use none of them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import contract, feature_use, resources
from harness.feature_use import note, overlay_features, recording, resource_features, violations
from harness.gateway_config import VARIANTS, variant_features
from harness.impl import ImplError, parse_impl
from harness.report.writer import load_report

ROOT = Path(__file__).resolve().parents[1]
SCOPE = contract.ScopeSpec("n", "g", "ns", "s")


def _envelope(mode: str | None) -> dict[str, object]:
    return contract.envelope([contract.candidate("m", "s", "a", selection_group=0, traffic_weight=1)], SCOPE,
                             selection_mode=mode)


def test_a_weighted_overlay_asks_for_weighted_random_and_its_neighbours_do_not() -> None:
    assert set(overlay_features(_envelope("weightedRandom"))) == {"weightedRandom"}
    assert set(overlay_features(contract.encode(_envelope("weightedRandom")))) == {"weightedRandom"}
    for twin in (_envelope("random"), _envelope(None), b"{not json", b"[]", None):
        assert overlay_features(twin) == {}, twin
    legacy = {**contract.legacy([contract.candidate("m", "s", "a")], "s"),
              "selection_policy": {"mode": "weightedRandom"}}
    assert set(overlay_features(legacy)) == {"weightedRandom"}


def test_resources_ask_for_the_features_their_policies_name() -> None:
    ref = [resources.gateway_ref("s")]
    assert set(resource_features(resources.grid_network("n", ref, scoring="kvCachePressure"))) == {"kvCachePressure"}
    assert resource_features(resources.grid_network("n", ref, scoring="queueDepth")) == {}
    assert set(resource_features(resources.grid_network("n", ref, admission=resources.stabilized()))) == \
        {"stabilizedAdmission"}
    assert set(resource_features(resources.tool_provider("t", "n", cluster="c", allow=(), discovered=["x"]))) == \
        {"toolCandidates"}


def test_gateway_variants_ask_for_the_features_of_the_keys_they_render() -> None:
    assert variant_features(VARIANTS["core"]) == {}
    assert set(variant_features(VARIANTS["cookie"])) == {"cookieAffinity"}
    assert set(variant_features(VARIANTS["management"])) == {"managementCluster", "skipPaths"}
    assert set(variant_features(VARIANTS["pinned"])) == {"presetCluster"}


def test_notes_are_kept_only_while_a_test_records() -> None:
    note("weightedRandom", "outside any test")  # nothing to keep it in: ignored
    used: dict[str, str] = {}
    with recording(used):
        note("weightedRandom", "first")
        feature_use.note_overlay(_envelope("weightedRandom"))
    assert used == {"weightedRandom": "first"}
    assert feature_use.current() is None
    with pytest.raises(ValueError, match="not an extended feature"):
        note("groups", "a core feature")


def _row(level: str, feature: str, used: list[str], profile: str = "consumer") -> dict[str, object]:
    return {"id": "T", "profile": profile, "level": level, "feature": feature, "featuresUsed": used}


def test_violations_are_core_tests_with_extended_features_and_extended_tests_with_others() -> None:
    assert violations([_row("core", "groups", ["weightedRandom"])]) == \
        ["T (core groups) used the extended feature weightedRandom"]
    assert violations([_row("core", "groups", [])]) == []
    # an overlay mode in a producer test is the operator's output, not a consumer feature asked of it
    assert violations([_row("core", "ordering", ["weightedRandom"], profile="producer")]) == []
    assert violations([_row("extended", "cookieAffinity", ["cookieAffinity"])]) == []
    assert violations([_row("extended", "cookieAffinity", ["cookieAffinity", "skipPaths"])]) != []
    assert violations([_row("extended", "managementCluster", ["managementCluster", "skipPaths"])]) == []


def test_a_claim_without_the_feature_its_tests_need_is_refused() -> None:
    document = {"implementation": {"organization": "o", "project": "p", "version": "1", "contact": ["c"]},
                "gateway": {"command": ["gw", "-c", "{config}"]}, "features": ["managementCluster"]}
    with pytest.raises(ImplError, match="managementCluster is claimed without skipPaths"):
        parse_impl(document)
    assert parse_impl({**document, "features": ["managementCluster", "skipPaths"]}).features == \
        {"managementCluster", "skipPaths"}


SUITE = '''
import pytest
from harness import feature_use

@pytest.fixture
def weighted():
    feature_use.note("weightedRandom", "a fixture's overlay")

@pytest.mark.conformance(id="T-CORE", profile="consumer", level="core", feature="groups", spec="s")
def test_core(weighted):
    pass

@pytest.mark.conformance(id="T-PLAIN", profile="consumer", level="core", feature="groups", spec="s")
def test_plain():
    feature_use.note("cookieAffinity", "in the body")
'''


def test_the_report_lists_what_each_test_used(tmp_path: Path) -> None:
    """Notes made in a fixture and in the body reach the report's results, and the checker flags both."""
    (tmp_path / "test_tiny_suite.py").write_text(SUITE)
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    report = tmp_path / "report.yaml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
                           "--conformance-report", str(report), "--conformance-profiles", "consumer"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row["id"]: row for row in load_report(report)["results"]}
    assert rows["T-CORE"]["featuresUsed"] == ["weightedRandom"]
    assert rows["T-PLAIN"]["featuresUsed"] == ["cookieAffinity"]
    check = subprocess.run([sys.executable, "-m", "tests.check_feature_use", str(report)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 1 and "T-CORE (core groups) used the extended feature weightedRandom" in check.stderr, \
        check.stdout + check.stderr


def test_a_misspelt_feature_gets_a_did_you_mean() -> None:
    document = {"implementation": {"organization": "o", "project": "p", "version": "1", "contact": ["c"]},
                "gateway": {"command": ["gw", "-c", "{config}"]}, "features": ["weightedRandm"]}
    with pytest.raises(ImplError, match="did you mean 'weightedRandom'"):
        parse_impl(document)
    assert parse_impl({**document, "features": ["weightedRandom"]}).features == {"weightedRandom"}
