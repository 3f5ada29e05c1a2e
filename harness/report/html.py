"""One self-contained HTML page for a conformance run, for people rather than CI.

The page shows the implementation, the verdict, the failures of the run grouped by feature, per profile
the core/extended (or demo) rollup, its failures by feature and every test with its outcome, and the
timelines tests recorded, drawn as charts (harness.report.timeline_plot); failure
messages are shown in full (up to a generous limit) in ``<pre>`` blocks, each under the feature of its
test. All text that came from a report or a test (names, ids, messages) is escaped: failure messages
routinely contain markup-like text such as ``<script>`` or ``&``, and a report must never execute or
mangle it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from harness.report.model import TestResult
from harness.report.text import failures_by_feature, truncate_message, write_text_atomic

__all__ = ["HTML_MESSAGE_LIMIT", "render_html", "write_html"]

#: Messages longer than this are shortened in the page (head and tail kept).
HTML_MESSAGE_LIMIT = 20_000

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 78em;
       padding: 0 1em; color: #1d2330; }
h1 { margin-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em 0; }
th, td { border: 1px solid #cfd5df; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #eef1f6; }
table.meta th { width: 11em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: 0; white-space: pre-wrap; word-break: break-word; font-size: 0.85em; background: #f7f7f9;
      padding: 0.5em; max-height: 30em; overflow: auto; }
.verdict { display: inline-block; padding: 0.35em 0.9em; border-radius: 4px; font-weight: bold; }
.verdict.pass { background: #d8f3dc; color: #1b5e20; }
.verdict.fail { background: #fde0e0; color: #8e1c1c; }
.passed, .success { background: #e3f6e6; }
.failed, .failure { background: #fde4e4; }
.skipped, .partial { background: #fff4d6; }
.notRun { background: #eeeeee; }
.unsupported { background: #eeeeee; color: #666666; }
tr.detail td { background: #ffffff; }
.muted { color: #667085; }
"""


def write_html(
    report: Mapping[str, Any], results: Sequence[TestResult], path: str | os.PathLike[str]
) -> Path:
    """Write the HTML page for ``report`` and the ``results`` it was built from."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, render_html(report, results))
    return target


def render_html(report: Mapping[str, Any], results: Sequence[TestResult]) -> str:
    """Return the page as a string."""
    impl = _mapping(report.get("implementation"))
    who = f"{impl.get('organization', '?')}/{impl.get('project', '?')} {impl.get('version', '')}"
    title = f"Conformance report: {who}"
    summary = _mapping(report.get("summary"))
    passed = summary.get("passed") is True
    unjudged = [str(_mapping(row).get("profile", "?")) for row in summary.get("notJudged") or []]
    verdict = ("pass", "PASSED: no core test of the selected profiles failed") if passed else (
        "fail", "FAILED: at least one core test failed")
    if passed and unjudged:
        verdict = ("fail", f"NOT JUDGED: no core test of {', '.join(unjudged)} ran (see the skip reasons)")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title.strip())}</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>AGN conformance report</h1>",
        f'<p><span class="verdict {verdict[0]}">{_e(verdict[1])}</span></p>',
        _meta_table(report, impl),
        _summary_failures(report),
        _coverage(report),
    ]
    profiles = [p for p in _list(report.get("profiles")) if isinstance(p, Mapping)]
    shown: set[str] = set()
    for profile in profiles:
        name = str(profile.get("name", "?"))
        shown.add(name)
        parts.append(_profile_section(profile, [r for r in results if r.profile == name]))
    leftovers = sorted({r.profile for r in results} - shown)
    for name in leftovers:
        parts.append(_profile_section({"name": name}, [r for r in results if r.profile == name]))
    timelines = _mapping(report.get("timelines"))
    if timelines:
        from harness.report.timeline_plot import timelines_html  # plotting is loaded only for pages that plot

        parts.append(timelines_html({str(k): [e for e in _list(v) if isinstance(e, Mapping)]
                                     for k, v in timelines.items()}))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _meta_table(report: Mapping[str, Any], impl: Mapping[str, Any]) -> str:
    contacts = ", ".join(_contact(c) for c in _list(impl.get("contact"))) or '<span class="muted">none</span>'
    rows = [
        ("Organization", _e(impl.get("organization", ""))),
        ("Project", _e(impl.get("project", ""))),
        ("Version", _e(impl.get("version", ""))),
        ("Contact", contacts),
        ("Date", _e(report.get("date", ""))),
        ("Harness version", _e(report.get("harnessVersion", ""))),
        ("Backend", _e(report.get("backend", ""))),
        ("Report", _e(f"{report.get('kind', '')} {report.get('apiVersion', '')}")),
    ]
    body = "".join(f"<tr><th>{label}</th><td>{value}</td></tr>" for label, value in rows)
    return f'<table class="meta">{body}</table>'


def _contact(value: Any) -> str:
    text = str(value)
    if text.startswith(("https://", "http://")):
        return f'<a href="{_e(text)}" rel="noopener noreferrer">{_e(text)}</a>'
    return _e(text)


def _profile_section(profile: Mapping[str, Any], results: Sequence[TestResult]) -> str:
    name = str(profile.get("name", "?"))
    parts = [f'<section id="profile-{_e(name)}">', f"<h2>Profile: {_e(name)}</h2>"]
    rollup = ["<table><tr><th>Level</th><th>Result</th><th>Passed</th><th>Failed</th><th>Skipped</th></tr>"]
    for level in _levels(profile):
        section = _mapping(profile.get(level))
        stats = _mapping(section.get("statistics"))
        result = str(section.get("result", "n/a"))
        counts = "".join(f'<td class="num">{_e(stats.get(key, 0))}</td>'
                         for key in ("passed", "failed", "skipped"))
        rollup.append(f'<tr><td>{level}</td><td class="{_e(result)}">{_e(result)}</td>{counts}</tr>')
    rollup.append("</table>")
    parts.append("".join(rollup))
    extended = _mapping(profile.get("extended"))
    parts.append(_feature_line("Supported extended features", extended.get("supportedFeatures")))
    parts.append(_feature_line("Unsupported extended features", extended.get("unsupportedFeatures")))
    parts.append(_profile_failures(profile))
    parts.append(_tests_table(results))
    parts.append("</section>")
    return "\n".join(parts)


def _summary_failures(report: Mapping[str, Any]) -> str:
    """The run's failing features (profile, level, feature, count, tests), most failures first."""
    rows = [_mapping(row) for row in _list(_mapping(report.get("summary")).get("failuresByFeature"))]
    if not rows:  # a report written before failures were grouped: group its sections' failed ids
        rows = [{"profile": _mapping(p).get("name", "?"), "level": level, "feature": feature, "tests": ids}
                for p in _list(report.get("profiles")) for level in _levels(_mapping(p))
                for feature, ids in failures_by_feature(_mapping(_mapping(p).get(level))).items()]
    if not rows:
        return ""
    body = ["<h2>Failures by feature</h2>", '<table class="failures"><tr><th>Profile</th><th>Level</th>'
            "<th>Feature</th><th>Failed</th><th>Tests</th></tr>"]
    for row in rows:
        tests = [str(t) for t in _list(row.get("tests"))]
        body.append(f'<tr class="failed"><td>{_e(row.get("profile", "?"))}</td><td>{_e(row.get("level", "?"))}</td>'
                    f'<td>{_e(row.get("feature", "?"))}</td><td class="num">{len(tests)}</td>'
                    f'<td>{_e(", ".join(tests))}</td></tr>')
    body.append("</table>")
    return "".join(body)


def _coverage(report: Mapping[str, Any]) -> str:
    """Per spec document: its catalogued statements, how many a test of this run enforces, and the rest."""
    rows = [_mapping(row) for row in _list(report.get("coverage"))]
    if not rows:
        return ""
    body = ["<h2>Spec coverage</h2>", '<table class="coverage"><tr><th>Document</th><th>Statements</th>'
            "<th>Enforced</th><th>Out of scope</th><th>Pending a profile</th><th>Not enforced by this run</th></tr>"]
    for row in rows:
        missing = ", ".join(str(s) for s in _list(row.get("uncoveredStatements")))
        body.append(f'<tr><td>{_e(row.get("doc", "?"))}</td><td class="num">{_e(row.get("statements", 0))}</td>'
                    f'<td class="num">{_e(row.get("covered", 0))}</td>'
                    f'<td class="num">{_e(row.get("outOfScope", 0))}</td>'
                    f'<td class="num">{_e(row.get("pending", 0))}</td>'
                    f'<td>{_e(row.get("uncovered", 0))}{(": " + _e(missing)) if missing else ""}</td></tr>')
    body.append("</table>")
    return "".join(body)


def _profile_failures(profile: Mapping[str, Any]) -> str:
    """One line per level and failing feature of a profile."""
    lines = []
    for level in _levels(profile):
        grouped = failures_by_feature(_mapping(profile.get(level)))
        for feature, ids in sorted(grouped.items(), key=lambda item: (-len(item[1]), item[0])):
            lines.append(f'<li class="failed-feature">{_e(level)}: <strong>{_e(feature)}</strong>: '
                         f'{len(ids)} failed ({_e(", ".join(ids))})</li>')
    if not lines:
        return ""
    return f"<p><strong>Failures by feature:</strong></p><ul>{''.join(lines)}</ul>"


def _feature_line(label: str, features: Any) -> str:
    names = ", ".join(_e(f) for f in _list(features)) or '<span class="muted">none</span>'
    return f"<p><strong>{_e(label)}:</strong> {names}</p>"


def _tests_table(results: Sequence[TestResult]) -> str:
    if not results:
        return '<p class="muted">No tests were run for this profile.</p>'
    level_order = {"core": 0, "demo": 0, "extended": 1}
    rows = ["<table><tr><th>Test</th><th>Level</th><th>Feature</th><th>Spec</th><th>Outcome</th>"
            "<th>Duration (s)</th></tr>"]
    for r in sorted(results, key=lambda r: (level_order.get(r.level, 2), r.id)):
        rows.append(
            f'<tr class="{_e(r.outcome)}"><td>{_e(r.id)}</td><td>{_e(r.level)}</td><td>{_e(r.feature)}</td>'
            f"<td>{_e(r.spec)}</td><td>{_e(r.outcome)}</td>"
            f'<td class="num">{r.duration_s:.2f}</td></tr>'
        )
        if r.message and r.outcome != "passed":
            message = truncate_message(r.message, HTML_MESSAGE_LIMIT)
            label = f"{r.outcome} in feature {r.feature} ({r.level})" if r.outcome == "failed" else r.outcome
            rows.append(f'<tr class="detail"><td colspan="6"><p class="muted">{_e(r.id)}: {_e(label)}</p>'
                        f"<pre>{_e(message)}</pre></td></tr>")
    rows.append("</table>")
    return "".join(rows)


def _levels(profile: Mapping[str, Any]) -> tuple[str, ...]:
    """A profile's levels in the page: the demos profile's tests are of the demo level, not core."""
    return ("demo", "extended") if "demo" in profile else ("core", "extended")


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Iterable[Any]:
    return value if isinstance(value, list) else []
