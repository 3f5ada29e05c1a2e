"""The feature registry: every marker names a known (profile, level, feature); a misspelt one stops collection."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.features import (
    CONFORMANCE_PROFILES,
    CORE_FEATURES,
    DEMOS,
    EXTENDED_BY_PROFILE,
    FEATURE_DESCRIPTIONS,
    PROFILES,
    marker_problem,
)


def test_every_extended_feature_belongs_to_a_profile_and_has_a_description() -> None:
    claimed = set().union(*EXTENDED_BY_PROFILE.values())
    assert claimed == set(FEATURE_DESCRIPTIONS)
    assert set(EXTENDED_BY_PROFILE) == set(CORE_FEATURES) == set(PROFILES)
    assert all(text.strip() for features in CORE_FEATURES.values() for text in features.values())


def test_demos_name_their_repository_and_experimental_ones_say_so() -> None:
    assert DEMOS["grid-combined-site"].source == "praxis-proxy/demos, demos/grid-combined-site/README.md"
    assert not DEMOS["grid-combined-site"].experimental
    assert {name for name, d in DEMOS.items() if d.experimental} == {
        "grid-weighted-dynamic-routing", "grid-cloud-burst", "grid-distributed-token-rate-limit"}
    assert CONFORMANCE_PROFILES == ("consumer", "producer", "provider", "mesh") and "demos" in PROFILES


@pytest.mark.parametrize(("profile", "level", "feature", "problem"), [
    ("consumer", "core", "roundRobin", None),
    ("consumer", "core", "roundRobbin", "'roundRobbin' is not a core feature of the consumer profile"),
    ("consumer", "core", "weightedRandom", "'weightedRandom' is not a core feature of the consumer profile"),
    ("consumer", "extended", "weightedRandom", None),
    ("mesh", "extended", "toolCandidates", None),
    ("provider", "extended", "toolCandidates", "'toolCandidates' is not a extended feature of the provider"),
    ("serving", "core", "sitePick", None),
    ("serving", "core", "x", "'x' is not a core feature of the serving profile"),
    ("serving", "extended", "betweenTwoShare", None),
    ("gateway", "core", "x", "unknown profile 'gateway'"),
    ("demos", "demo", "grid-combined-site", None),
    ("demos", "demo", "grid-combined-sites", "'grid-combined-sites' is not a demo"),
    ("demos", "core", "grid-combined-site", "the demo level is the demos profile's, and its only one"),
    ("consumer", "demo", "grid-combined-site", "the demo level is the demos profile's, and its only one"),
    ("consumer", "optional", "roundRobin", "unknown level 'optional'"),
])
def test_marker_problem(profile: str, level: str, feature: str, problem: str | None) -> None:
    found = marker_problem(profile, level, feature)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found


def _collect(tmp_path: Path, feature: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_marked.py"
    test.write_text(textwrap.dedent(f"""
        import pytest

        @pytest.mark.conformance(id="X-ONE", profile="consumer", level="core", feature={feature!r}, spec="s")
        def test_one():
            pass
    """))
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(test)], capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_misspelt_marker_feature_stops_collection_naming_the_test(tmp_path: Path) -> None:
    """The same marker with the right name collects: the refusal is for the name alone."""
    good = _collect(tmp_path, "roundRobin")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _collect(tmp_path, "roundRobbin")
    output = bad.stdout + bad.stderr
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert "test_marked.py::test_one" in output and "'roundRobbin' is not a core feature" in output, output
