"""Conformance report: result model, YAML report (ConformanceReport) and a readable HTML page."""

from harness.report.html import render_html, write_html
from harness.report.model import LEVELS, OUTCOMES, Level, Outcome, TestResult
from harness.report.writer import (
    API_VERSION,
    KIND,
    ReportError,
    build_report,
    core_passed,
    harness_version,
    load_report,
    write_yaml,
)

__all__ = [
    "API_VERSION",
    "KIND",
    "LEVELS",
    "OUTCOMES",
    "Level",
    "Outcome",
    "ReportError",
    "TestResult",
    "build_report",
    "core_passed",
    "harness_version",
    "load_report",
    "render_html",
    "write_html",
    "write_yaml",
]
