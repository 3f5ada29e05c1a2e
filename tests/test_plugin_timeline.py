"""The plugin makes every conformance test's timeline current while it runs, so what the harness records
(a distribution judged by assert_distribution, a revision stage) reaches the report without a fixture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.report.writer import load_report

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import pytest

from harness.stats import assert_distribution, plan_distribution
from harness.timeline import current, record_revision

PLAN = plan_distribution({"provider-a": 0.5, "provider-b": 0.5})
N = PLAN.sample_size


def _mark(test_id):
    return pytest.mark.conformance(id=test_id, profile="consumer", level="core", feature="random", spec="s")


@_mark("T-DIST-PASS")
def test_distribution_pass():
    assert_distribution({"provider-a": N // 2, "provider-b": N - N // 2}, PLAN)


@_mark("T-DIST-FAIL")
def test_distribution_fail():
    assert_distribution({"provider-a": N, "provider-b": 0}, PLAN, what="<b>west</b>")


@_mark("T-QUIET")
def test_records_nothing():
    assert current() is not None


@_mark("T-FIXTURE")
def test_fixture_and_harness_share_one_timeline(timeline):
    timeline.action("withdraw west")
    record_revision("serving", "r1", site="west")
    assert current() is timeline


def test_unmarked_has_no_timeline():
    assert current() is None
'''


def test_harness_records_reach_the_report_without_a_fixture(tmp_path: Path) -> None:
    (tmp_path / "test_recording_suite.py").write_text(SUITE)
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    report, page = tmp_path / "report.yaml", tmp_path / "report.html"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
            "--conformance-report", str(report), "--conformance-html", str(page), "--conformance-profiles", "consumer"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    timelines = load_report(report)["timelines"]
    assert sorted(timelines) == ["T-DIST-FAIL", "T-DIST-PASS", "T-FIXTURE"], "only what holds evidence travels"
    passed, failed = timelines["T-DIST-PASS"][0], timelines["T-DIST-FAIL"][0]
    assert passed["kind"] == failed["kind"] == "distribution"
    assert passed["passed"] is True and failed["passed"] is False and failed["what"] == "<b>west</b>"
    assert failed["counts"] == {"provider-a": passed["n"], "provider-b": 0}
    assert set(passed["intervals"]) == {"provider-a", "provider-b"} and passed["alpha"] == 1e-6
    assert [e["kind"] for e in timelines["T-FIXTURE"]] == ["action", "revision"]
    text = page.read_text(encoding="utf-8")
    assert text.count('class="failure-card"') == 1 and "Evidence: distribution" in text
    assert "<b>west</b>" not in text
