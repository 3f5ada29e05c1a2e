"""The plugin records one result per conformance id, alone and under pytest-xdist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report.writer import load_report

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import pytest

def _mark(test_id, level="core", feature="groups"):
    return pytest.mark.conformance(id=test_id, profile="consumer", level=level, feature=feature, spec="s")

@_mark("T-PASS")
def test_pass():
    assert True

@_mark("T-FAIL", feature="roundRobin")
def test_fail():
    assert 1 == 2

@_mark("T-PARAM")
@pytest.mark.parametrize("n", [1, 2, 3])
def test_param(n):
    assert n != 3

@_mark("T-EXT", level="extended", feature="mcpToolRouting")
def test_extended_claimed():
    assert True

@_mark("T-SKIP")
def test_skip():
    pytest.skip("needs network namespaces")

def test_unmarked():
    assert True
'''


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_report_counts_every_conformance_result(tmp_path: Path, workers: str | None) -> None:
    (tmp_path / "test_tiny_suite.py").write_text(SUITE)
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    report = tmp_path / "report.yaml"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
            "--conformance-report", str(report), "--conformance-profiles", "consumer"]
    if workers:
        args += ["-n", workers]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    consumer = load_report(report)["profiles"][0]
    assert consumer["core"]["statistics"] == {"passed": 3, "failed": 2, "skipped": 1}
    assert sorted(consumer["core"]["failedTests"]) == ["T-FAIL", "T-PARAM[3]"]
    assert consumer["core"]["failuresByFeature"] == {"groups": ["T-PARAM[3]"], "roundRobin": ["T-FAIL"]}
    features = {f["id"]: f["feature"] for f in consumer["core"]["failures"]}
    assert features == {"T-FAIL": "roundRobin", "T-PARAM[3]": "groups"}
    assert consumer["core"]["skippedTests"] == ["T-SKIP"]
    assert consumer["extended"]["statistics"]["passed"] == 1
    assert consumer["extended"]["failuresByFeature"] == {}
    summary = load_report(report)["summary"]
    assert summary["passed"] is False
    assert [(row["level"], row["feature"], row["tests"]) for row in summary["failuresByFeature"]] == [
        ("core", "groups", ["T-PARAM[3]"]), ("core", "roundRobin", ["T-FAIL"])]


SLOW_SUITE = '''
import pytest

@pytest.mark.conformance(id="T-QUICK", profile="consumer", level="core", feature="groups", spec="s")
def test_quick():
    assert True

@pytest.mark.slow(60)
@pytest.mark.conformance(id="T-SLOW", profile="consumer", level="core", feature="groups", spec="s")
def test_slow():
    assert True
'''


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_slow_tests_not_selected_are_reported_as_skipped_saying_why(tmp_path: Path, workers: str | None) -> None:
    """Without --grid-slow a slow test is not run and is reported as skipped with its reason (the profile is
    partial, not failed); with it, it runs and is reported like any other."""
    (tmp_path / "test_slow_suite.py").write_text(SLOW_SUITE)
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def run(*extra: str) -> tuple[dict[str, object], str]:
        report = tmp_path / "report.yaml"
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
                "--conformance-report", str(report), "--conformance-profiles", "consumer", *extra]
        if workers:
            args += ["-n", workers]
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return load_report(report)["profiles"][0]["core"], done.stdout

    core, out = run()
    assert core["result"] == "partial" and core["statistics"] == {"passed": 1, "failed": 0, "skipped": 1}, core
    assert core["skippedTests"] == ["T-SLOW"], core
    assert "1 slow test(s) not selected, reported as skipped (T-SLOW)" in out, out
    core, _ = run("--grid-slow")
    assert core["statistics"] == {"passed": 2, "failed": 0, "skipped": 0}, core


MESSAGE_SUITE = '''
import pytest

def helper(count):
    assert count < 10, f"'provider-a' count {count} outside [3156, 3473]\\n  provider-a | 3774 | 0.5"

@pytest.mark.conformance(id="T-ASSERT", profile="consumer", level="core", feature="groups", spec="s")
def test_assert():
    helper(3774)

class WaitTimeout(AssertionError):
    pass

@pytest.mark.conformance(id="T-WAIT", profile="consumer", level="core", feature="groups", spec="s")
def test_wait():
    raise WaitTimeout("waited 10.0s for revision abc; last seen: def")
'''


def test_a_failure_message_is_the_assertion_not_a_traceback(tmp_path: Path) -> None:
    """The report's message is what the assertion said, first line first, with no source excerpt; the
    diagnostics file keeps the whole failure."""
    (tmp_path / "test_messages.py").write_text(MESSAGE_SUITE)
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    report, diagnostics = tmp_path / "report.yaml", tmp_path / "diagnostics"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
                           "--conformance-report", str(report), "--conformance-profiles", "consumer",
                           "--conformance-diagnostics", str(diagnostics)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    messages = {f["id"]: f["message"] for f in load_report(report)["profiles"][0]["core"]["failures"]}
    assert messages["T-ASSERT"].splitlines()[0] == "'provider-a' count 3774 outside [3156, 3473]"
    assert "provider-a | 3774 | 0.5" in messages["T-ASSERT"] and "def helper" not in messages["T-ASSERT"]
    assert messages["T-WAIT"].startswith("test_messages.WaitTimeout: waited 10.0s for revision abc")
    written = (diagnostics / "T-ASSERT.txt").read_text().splitlines()
    assert written[1] == "'provider-a' count 3774 outside [3156, 3473]", written[:3]  # the message first
    assert "def helper" in "\n".join(written)  # then where it failed
