"""JUnit XML of a conformance run, so CI systems show its results natively.

One ``testsuite`` per profile and one ``testcase`` per conformance test, named by its conformance id (a
parametrized case as ``ID[case]``), so the CI's test list reads like the report. Each test case carries
the conformance metadata as properties (``conformance.id``, ``profile``, ``level``, ``feature``, ``spec``,
``outcome``, the catalogued statements it enforces), which a CI can filter on. Failures carry the full
message; skipped, unsupported and not-applicable tests are ``skipped`` with their reason, the outcome
property telling them apart. The XML is written with the standard library's ElementTree, which escapes
every attribute and text (failure messages contain markup and control characters; those XML cannot hold
are replaced).
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.report.model import TestResult
from harness.report.text import write_text_atomic

__all__ = ["render_junit", "write_junit"]

#: Characters XML 1.0 cannot carry (control characters other than tab, newline, carriage return).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("\N{REPLACEMENT CHARACTER}", text)


def _first_line(text: str) -> str:
    """The failure's summary for the message attribute: the first line of its assertion's message."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _clean(lines[0] if lines else "")[:500]


def _case(result: TestResult) -> ET.Element:
    case = ET.Element("testcase", {"classname": f"agn-conformance.{result.profile}.{result.level}",
                                   "name": _clean(result.id), "time": f"{result.duration_s:.3f}"})
    properties = ET.SubElement(case, "properties")
    fields = {"conformance.id": result.id, "conformance.profile": result.profile, "conformance.level": result.level,
              "conformance.feature": result.feature, "conformance.spec": result.spec,
              "conformance.outcome": result.outcome}
    if result.statements:
        fields["conformance.statements"] = ",".join(result.statements)
    for name, value in fields.items():
        ET.SubElement(properties, "property", {"name": name, "value": _clean(str(value))})
    if result.outcome == "failed":
        failure = ET.SubElement(case, "failure", {"message": _first_line(result.message), "type": "AssertionError"})
        failure.text = _clean(result.message)
    elif result.outcome != "passed":
        reason = result.message.removeprefix("Skipped: ") or result.outcome
        ET.SubElement(case, "skipped", {"message": _clean(f"{result.outcome}: {reason}")[:2000]})
    return case


def _counts(results: Sequence[TestResult]) -> dict[str, str]:
    return {"tests": str(len(results)),
            "failures": str(sum(r.outcome == "failed" for r in results)),
            "errors": "0",
            "skipped": str(sum(r.outcome not in ("passed", "failed") for r in results)),
            "time": f"{sum(r.duration_s for r in results):.3f}"}


def render_junit(results: Sequence[TestResult], report: Mapping[str, Any]) -> str:
    """The JUnit XML document of a run's results (the report gives the implementation and date)."""
    found = report.get("implementation")
    impl: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    name = f"agn-conformance {impl.get('project', '?')} {impl.get('version', '')}".strip()
    root = ET.Element("testsuites", {"name": _clean(name), **_counts(results)})
    profiles = list(dict.fromkeys(r.profile for r in results))
    for profile in profiles:
        cases = sorted((r for r in results if r.profile == profile), key=lambda r: r.id)
        suite = ET.SubElement(root, "testsuite", {"name": profile, "timestamp": str(report.get("date", "")),
                                                  **_counts(cases)})
        suite_properties = ET.SubElement(suite, "properties")
        for key in ("backend", "harnessVersion"):
            ET.SubElement(suite_properties, "property", {"name": f"conformance.{key}", "value": str(report.get(key))})
        suite.extend(_case(r) for r in cases)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(results: Sequence[TestResult], report: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the JUnit XML atomically (a CI never reads half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, render_junit(results, report))
    return target
