"""JUnit XML: one test case per conformance test with its metadata as properties, for CI systems."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.impl import Implementation
from harness.report.junit import render_junit
from harness.report.model import TestResult
from harness.report.writer import build_report

HOSTILE = "expected 200, got 503 <script>alert('x')</script> & \x1b[31mred\x1b[0m\nlast line"


def _results() -> list[TestResult]:
    return [
        TestResult("CONS-A", "consumer", "core", "overlayValidation", "architecture 4", "passed", 0.5,
                   statements=("ARCH-1", "ARCH-2")),
        TestResult("CONS-B[x]", "consumer", "core", "reload", "architecture 5", "failed", 1.25, HOSTILE),
        TestResult("CONS-C", "consumer", "extended", "cookieAffinity", "guide 7", "unsupported", 0.0,
                   "Skipped: unsupported feature cookieAffinity"),
        TestResult("PROV-D", "provider", "core", "mtls", "guide 9", "skipped", 0.0, "Skipped: no netns"),
    ]


def _properties(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def test_each_conformance_test_is_a_case_with_its_metadata_as_properties() -> None:
    results = _results()
    report = build_report(results, Implementation("Example", "gw", "1.2.3"), backend="local", harness_version="0.1",
                          profiles=["consumer", "provider"], features_claimed=())
    root = ET.fromstring(render_junit(results, report))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("4", "1", "2")
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert sorted(suites) == ["consumer", "provider"] and suites["consumer"].get("tests") == "3"
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert _properties(cases["CONS-A"]) == {
        "conformance.id": "CONS-A", "conformance.profile": "consumer", "conformance.level": "core",
        "conformance.feature": "overlayValidation", "conformance.spec": "architecture 4",
        "conformance.outcome": "passed", "conformance.statements": "ARCH-1,ARCH-2"}
    failure = cases["CONS-B[x]"].find("failure")
    assert failure is not None and "<script>" in (failure.text or "") and "last line" in (failure.text or "")
    replaced = "\N{REPLACEMENT CHARACTER}"  # the message's first line, the assertion's own words, made XML-safe
    first = f"expected 200, got 503 <script>alert('x')</script> & {replaced}[31mred{replaced}[0m"
    assert failure.get("message") == first
    assert "\x1b" not in (failure.text or "")  # XML cannot carry it; the rest of the message survives
    skipped = cases["CONS-C"].find("skipped")
    assert skipped is not None and skipped.get("message", "").startswith("unsupported: unsupported feature")
    assert _properties(cases["CONS-C"])["conformance.outcome"] == "unsupported"
    assert cases["CONS-A"].find("failure") is None and cases["CONS-A"].find("skipped") is None


def test_a_run_writes_junit_beside_its_report(tmp_path: Path) -> None:
    junit, report = tmp_path / "junit.xml", tmp_path / "report.yaml"
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--profile", "consumer", "--report", str(report),
                           "--junit", str(junit), "--", "-k", "test_unknown_model_gets_404", "-p", "no:xdist"],
                          capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert [c.get("name") for c in cases] == ["CONS-404-UNKNOWN-MODEL"], [c.get("name") for c in cases]
    assert _properties(cases[0])["conformance.profile"] == "consumer"
