"""Conformance report: roll test results up into a Gateway-API-style ConformanceReport document.

The report is what a vendor publishes: per profile, a core and an extended section (the demos profile: a
demo section, which judges a demo's claims as core judges conformance), each with a result
(``success`` / ``partial`` / ``failure``), counts, the failed and skipped test ids, the failed ids grouped
by the feature they test (``failuresByFeature``), and short failure messages; the extended section also
says which features were claimed and exercised and which the implementation does not support.
``summary.verdict`` is the one word CI cares about (harness.report.verdict: passed, failed or notJudged), and
``summary.passed`` is true only when it is passed. ``summary.failuresByFeature``
lists every failing feature of the run, so many failures of one missing feature read as one problem.
``results`` lists every test with its outcome (passed ones included, which the sections only count), so
two reports can be compared test by test (harness.report.compare); a test that did not pass gives its
skip reason there, a failed one its message under its level's ``failures``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from harness import fastyaml
from harness.features import DEMO_LEVEL, DEMOS_PROFILE
from harness.impl import Implementation
from harness.report.html import write_html as _write_html
from harness.report.model import TestResult
from harness.report.text import MESSAGE_LIMIT, failures_by_feature, truncate_message, write_text_atomic
from harness.report.verdict import PASSED
from harness.report.verdict import judge as judge_verdict
from harness.statements import Statement, by_document, coverage

__all__ = [
    "API_VERSION",
    "KIND",
    "MESSAGE_LIMIT",
    "ReportError",
    "build_report",
    "core_passed",
    "failures_by_feature",
    "format_date",
    "harness_version",
    "load_report",
    "per_test_results",
    "truncate_message",
    "write_html",
    "write_text_atomic",
    "write_yaml",
]

API_VERSION = "agn-conformance.praxis.fast/v1alpha1"
KIND = "ConformanceReport"

_DIST_NAME = "agn-conformance"


class ReportError(ValueError):
    """A report file that is missing, unreadable or not a ConformanceReport."""


def harness_version() -> str:
    """Version of the installed distribution, else of the source tree this module comes from."""
    try:
        return metadata.version(_DIST_NAME)
    except metadata.PackageNotFoundError:
        from harness import __version__

        return __version__


def format_date(date: datetime | None = None) -> str:
    """RFC 3339 UTC timestamp with second precision; a naive ``date`` is taken as UTC."""
    moment = date or datetime.now(UTC)
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def build_report(
    results: Sequence[TestResult],
    impl: Implementation,
    *,
    backend: str,
    harness_version: str,
    profiles: Sequence[str],
    features_claimed: Collection[str],
    date: datetime | None = None,
    statements: Mapping[str, Statement] | None = None,
    reported_version: Mapping[str, str] | None = None,
    harness_commit: str | None = None,
) -> dict[str, Any]:
    """Build the ConformanceReport document (plain dicts and lists, ready for YAML).

    Every profile in ``profiles`` appears, even without tests. A profile that occurs in ``results`` but
    was not listed is appended (sorted): its tests were run, so they are reported and judged.
    """
    claimed = frozenset(features_claimed)
    names = list(dict.fromkeys(profiles))
    names += sorted({r.profile for r in results} - set(names))
    sections = [_profile_section(name, [r for r in results if r.profile == name], claimed) for name in names]
    report: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "implementation": {
            "organization": impl.organization,
            "project": impl.project,
            "version": impl.version,
            "contact": list(impl.contact),
            **({"reportedVersion": dict(reported_version)} if reported_version else {}),
        },
        "date": format_date(date),
        "harnessVersion": harness_version,
        **({"harnessCommit": harness_commit} if harness_commit else {}),
        "backend": backend,
        "profiles": sections,
        "summary": {},
    }
    timelines = {r.id: events for r in results if (events := _evidence(r.timeline))}
    if timelines:
        report["timelines"] = timelines
    grouped = _summary_failures(sections)
    unjudged = not_judged(results, names)
    outcome = judge_verdict(sections, unjudged)
    report["summary"] = {"verdict": outcome.outcome, "passed": outcome.outcome == PASSED}
    if outcome.reasons:
        report["summary"]["reasons"] = list(outcome.reasons)
    if grouped:
        report["summary"]["failuresByFeature"] = grouped
    if unjudged:
        report["summary"]["notJudged"] = unjudged
    if statements is not None:
        rows = coverage(statements, {r.id: r.statements for r in results if r.statements})
        report["coverage"] = by_document(rows)
    report["results"] = per_test_results(results)
    return report


#: Skip reasons in ``results`` are cut to about this many characters: they are one-line reasons.
REASON_LIMIT = 500


def per_test_results(results: Iterable[TestResult]) -> list[dict[str, Any]]:
    """One row per test (id, profile, level, feature, outcome), sorted by id; a test skipped, unsupported or
    not applicable gives its reason, and a test whose inputs asked for extended features lists them
    (``featuresUsed``). Failure messages stay in the levels' ``failures``, not repeated here."""
    rows: list[dict[str, Any]] = []
    for r in sorted(results, key=lambda r: r.id):
        row: dict[str, Any] = {"id": r.id, "profile": r.profile, "level": r.level, "feature": r.feature,
                               "outcome": r.outcome}
        if r.outcome not in ("passed", "failed") and r.message:
            row["reason"] = truncate_message(_reason(r.message), REASON_LIMIT)
        if r.features_used:
            row["featuresUsed"] = list(r.features_used)
        rows.append(row)
    return rows


def _evidence(timeline: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The events of a test's timeline the report keeps: everything but the diagnostics of a failure (component
    logs are for the HTML page and the terminal; a report is published, and stays small)."""
    return [dict(event) for event in timeline if event.get("kind") != "diagnostics"]


def _summary_failures(sections: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per profile, level and failing feature; within a level the feature with most failures first."""
    rows: list[dict[str, Any]] = []
    for section in sections:
        for level in ("core", "extended", DEMO_LEVEL):
            grouped = failures_by_feature(section.get(level) or {})
            for feature, ids in sorted(grouped.items(), key=lambda item: (-len(item[1]), item[0])):
                rows.append({"profile": section.get("name", "?"), "level": level, "feature": feature,
                             "failed": len(ids), "tests": list(ids)})
    return rows


def not_judged(results: Sequence[TestResult], profiles: Sequence[str]) -> list[dict[str, str]]:
    """Profiles none of whose core tests (demo tests, for the demos profile) ran, skipped for a reason other
    than an unsupported feature.

    Such a profile was not judged at all (no cluster, no Docker engine, a missing tool): the run must not
    read as a pass. A profile the implementation does not support (every core test `unsupported`) is
    not listed; it was judged to be unsupported.
    """
    found: list[dict[str, str]] = []
    for name in profiles:
        level = DEMO_LEVEL if name == DEMOS_PROFILE else "core"
        core = [r for r in results if r.profile == name and r.level == level]
        if any(r.outcome in ("passed", "failed") for r in core):
            continue
        skipped = [r for r in core if r.outcome == "skipped"]
        if skipped:
            found.append({"profile": name, "reason": truncate_message(skipped[0].message or "skipped")})
    return found


def _profile_section(name: str, results: Sequence[TestResult], claimed: frozenset[str]) -> dict[str, Any]:
    core = [r for r in results if r.level == "core"]
    extended = [r for r in results if r.level == "extended"]
    ext_features = {r.feature for r in extended}
    # Unsupported tests are accounted for by feature, not counted as skips.
    exercised = [r for r in extended if r.outcome != "unsupported"]
    extended_section = _level_section(exercised)
    extended_section["supportedFeatures"] = sorted(ext_features & claimed)
    extended_section["unsupportedFeatures"] = sorted(ext_features - claimed)
    section = {"name": name, "core": _level_section(core), "extended": extended_section}
    if name == DEMOS_PROFILE or any(r.level == DEMO_LEVEL for r in results):
        section[DEMO_LEVEL] = _level_section([r for r in results if r.level == DEMO_LEVEL])
    return section


def _level_section(results: Iterable[TestResult]) -> dict[str, Any]:
    ordered = sorted(results, key=lambda r: r.id)
    # A core test cannot be unsupported; if one is reported so, count it as skipped rather than lose it.
    failed = [r for r in ordered if r.outcome == "failed"]
    skipped = [r for r in ordered if r.outcome in ("skipped", "unsupported")]
    passed = [r for r in ordered if r.outcome == "passed"]
    not_applicable = [r for r in ordered if r.outcome == "notApplicable"]
    unjudged = [r for r in ordered if r.outcome == "notJudged"]  # the environment's problem, not the tests'
    if failed:
        result = "failure"
    elif skipped or unjudged:
        result = "partial"
    elif passed:
        result = "success"
    else:
        result = "notRun"  # no test of this level exists (or ran): nothing was judged
    by_feature: dict[str, list[str]] = {}
    for r in sorted(failed, key=lambda r: (r.feature, r.id)):
        by_feature.setdefault(r.feature, []).append(r.id)
    section: dict[str, Any] = {
        "result": result,
        "statistics": {"passed": len(passed), "failed": len(failed), "skipped": len(skipped)},
        "failedTests": [r.id for r in failed],
        "failuresByFeature": by_feature,
        "skippedTests": [r.id for r in skipped],
        "failures": [{"id": r.id, "feature": r.feature, "message": truncate_message(r.message)} for r in failed],
    }
    if unjudged:
        section["statistics"]["notJudged"] = len(unjudged)
        section["notJudgedTests"] = [{"id": r.id, "reason": _reason(r.message)} for r in unjudged]
    if not_applicable:
        section["notApplicable"] = [{"id": r.id, "feature": r.feature, "reason": _reason(r.message)}
                                    for r in not_applicable]
    return section


def _reason(message: str) -> str:
    """A not-applicable claim's reason without pytest's skip prefix."""
    return truncate_message(message.removeprefix("Skipped: ").removeprefix("not applicable: "))


def _no_core_failure(sections: Iterable[Mapping[str, Any]]) -> bool:
    """No core section (and no demo section, where a profile has one) records a failure."""
    for section in sections:
        levels = ["core"] + ([DEMO_LEVEL] if DEMO_LEVEL in section else [])
        for level in levels:
            judged = section.get(level)
            if not isinstance(judged, Mapping):
                return False
            statistics = judged.get("statistics")
            if not isinstance(statistics, Mapping) or statistics.get("failed") != 0 or judged.get("failedTests"):
                return False
    return True


def core_passed(report: Mapping[str, Any]) -> bool:
    """True when no profile's core section records a failure and the summary does not say otherwise.

    Both are checked so that a hand-edited or truncated report cannot claim a pass it does not show.
    """
    summary = report.get("summary")
    profiles = report.get("profiles")
    if not isinstance(summary, Mapping) or not isinstance(profiles, list) or \
            not all(isinstance(p, Mapping) for p in profiles):
        return False
    if summary.get("verdict") is None and summary.get("passed") is not True:  # a report without a verdict
        return False
    return _no_core_failure(profiles)



def write_yaml(report: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the report as YAML, atomically (a reader never sees half a report)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(dict(report), sort_keys=False, allow_unicode=True, default_flow_style=False,
                          width=110)
    write_text_atomic(target, text)
    return target


def write_html(
    report: Mapping[str, Any], results: Sequence[TestResult], path: str | os.PathLike[str]
) -> Path:
    """Write the HTML page; see :func:`harness.report.html.write_html` (re-exported here for convenience)."""
    return _write_html(report, results, path)


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a report written by :func:`write_yaml`; raise :class:`ReportError` when it is not one."""
    source = Path(path)
    try:
        data = fastyaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ReportError(f"{source}: no conformance report was written") from exc
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ReportError(f"{source}: cannot read conformance report: {exc}") from exc
    if not isinstance(data, dict) or data.get("kind") != KIND or data.get("apiVersion") != API_VERSION:
        raise ReportError(f"{source}: not a {KIND} ({API_VERSION})")
    if not isinstance(data.get("profiles"), list) or not isinstance(data.get("summary"), dict):
        raise ReportError(f"{source}: {KIND} without profiles or summary")
    return data
