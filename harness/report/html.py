"""One self-contained HTML page for a conformance run, for people rather than CI.

The page reads top down in the order a reader asks: did it pass (the verdict, and a card per profile with
its core/extended or demo results and counts), what failed and why (one card per failing test, core first:
the spec section and the catalogued sentences it enforces, the message, the evidence charts and the
diagnostics the harness attached), and then everything else (failures by feature, every test per profile with
its outcome, the evidence of passing tests behind a click, spec coverage). Filters by outcome, profile and
feature show and hide test rows and failure cards.

The page needs no network: its style, its small script and Plotly's JavaScript (once, only when a chart is
drawn) are inlined. All text that came from a report or a test (names, ids, messages, logs) is escaped:
failure messages routinely contain markup-like text such as ``<script>`` or ``&``, and a report must never
execute or mangle it.
"""

from __future__ import annotations

import functools
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.report.model import TestResult
from harness.report.page_assets import PAGE_SCRIPT, PAGE_STYLE
from harness.report.text import as_list as _list
from harness.report.text import as_mapping as _mapping
from harness.report.text import escape_html as _e
from harness.report.text import failures_by_feature, truncate_message, write_text_atomic

__all__ = ["DRAWN_FAILURES", "HTML_MESSAGE_LIMIT", "render_html", "write_html"]

#: Messages longer than this are shortened in the page (head and tail kept).
HTML_MESSAGE_LIMIT = 20_000
#: Failure cards whose evidence is drawn as the page opens; past them (a run against a badly broken
#: implementation) a card's charts are drawn when their section is opened, so the page still opens at once.
DRAWN_FAILURES = 25
_LEVEL_ORDER = {"core": 0, "demo": 1, "extended": 2}
_OUTCOME_ORDER = ("failed", "notJudged", "passed", "skipped", "unsupported", "notApplicable")


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
    page = _Page(report, results)
    body = [
        "<h1>AGN conformance report</h1>",
        f'<p class="who">{_e(who.strip())}</p>',
        f'<p><span class="verdict {page.verdict[0]}">{_e(page.verdict[1])}</span></p>',
        page.verdict_cards(),
        page.filters(),
        page.failure_cards(),
        _summary_failures(report),
        page.profile_sections(),
        page.orphan_evidence(),
        _coverage(report),
        "<h2>Run</h2>",
        _meta_table(report, impl),
    ]
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title.strip())}</title>",
        f"<style>{PAGE_STYLE}</style>",
    ]
    if page.charts.used:  # the library once, before the first figure that needs it
        from harness.report.plotting import plotly_script

        head.append(plotly_script())
    head.append("</head><body>")
    tail = [f"<script>{PAGE_SCRIPT}</script>", "</body></html>"]
    return "\n".join(head + [part for part in body if part] + tail) + "\n"


class _Page:
    """What the page's sections share: the results in page order, each test's evidence, and the chart ids."""

    def __init__(self, report: Mapping[str, Any], results: Sequence[TestResult]) -> None:
        from harness.report.evidence import ChartIds

        self.report = report
        self.results = sorted(results, key=lambda r: (_LEVEL_ORDER.get(r.level, 3), r.profile, r.id))
        self.profiles = [p for p in _list(report.get("profiles")) if isinstance(p, Mapping)]
        timelines = _mapping(report.get("timelines"))
        self.timelines: dict[str, list[Mapping[str, Any]]] = {
            str(k): [e for e in _list(v) if isinstance(e, Mapping)] for k, v in timelines.items()}
        for r in results:  # a result's own timeline is the complete one (the report leaves diagnostics out)
            if r.timeline:
                self.timelines[r.id] = list(r.timeline)
        self.anchors = {r.id: f"test-{index}" for index, r in enumerate(self.results)}
        self.charts = ChartIds()
        self.verdict = _verdict(_mapping(report.get("summary")))

    # ------------------------------------------------------------------------------------- verdicts

    def verdict_cards(self) -> str:
        """A card per profile: each level's result and counts, unsupported features, claims not applicable."""
        cards = []
        for profile in self.profiles:
            name = str(profile.get("name", "?"))
            levels = _levels(profile)
            results = [str(_mapping(profile.get(level)).get("result", "notRun")) for level in levels]
            judged = results[0]  # core, or demo for the demos profile: what the verdict rests on
            rows = []
            for level, result in zip(levels, results, strict=True):
                stats = _mapping(_mapping(profile.get(level)).get("statistics"))
                counts = ", ".join(f"{_e(stats.get(key, 0))} {key}" for key in ("passed", "failed", "skipped"))
                rows.append(f'<tr><th>{_e(level)}</th><td><span class="result {_e(result)}">{_e(result)}</span>'
                            f"</td><td>{counts}</td></tr>")
            extended = _mapping(profile.get("extended"))
            unsupported = [str(f) for f in _list(extended.get("unsupportedFeatures"))]
            notes = []
            if unsupported:
                notes.append(f"<p>Unsupported extended features: {_e(', '.join(unsupported))}</p>")
            not_applicable = sum(len(list(_list(_mapping(profile.get(level)).get("notApplicable"))))
                                 for level in levels)
            if not_applicable:
                notes.append(f"<p>{not_applicable} claim(s) not applicable</p>")
            cards.append(f'<article class="card {_e(judged)}" data-card-profile="{_e(name)}">'
                         f'<h3><a href="#profile-{_e(name)}">{_e(name)}</a></h3>'
                         f"<table>{''.join(rows)}</table>{''.join(notes)}</article>")
        if not cards:
            return ""
        return f'<section id="verdicts" aria-label="Verdict per profile">{"".join(cards)}</section>'

    # -------------------------------------------------------------------------------------- filters

    def filters(self) -> str:
        """The filter bar; the page's script applies it (without JavaScript it does nothing, and hides nothing)."""
        if not self.results:
            return ""
        counts = {o: sum(1 for r in self.results if r.outcome == o) for o in _OUTCOME_ORDER}
        boxes = "".join(f'<label><input type="checkbox" name="outcome" value="{o}" checked> {o} ({n})</label>'
                        for o, n in counts.items() if n)
        profiles = sorted({r.profile for r in self.results})
        features = sorted({r.feature for r in self.results})
        return ('<form id="filters" aria-label="Filter tests" onsubmit="return false">'
                f"<fieldset><legend>Outcome</legend>{boxes}</fieldset>"
                f'<label>Profile {_select("profile", profiles)}</label>'
                f'<label>Feature {_select("feature", features)}</label>'
                '<button type="reset">Show all</button>'
                f'<span id="filter-count" class="muted">{len(self.results)} tests</span></form>')

    # ------------------------------------------------------------------------------------- failures

    def failure_cards(self) -> str:
        failed = [r for r in self.results if r.outcome == "failed"]
        if not failed:
            return "<h2>Failures</h2><p>No test failed.</p>" if self.results else ""
        cards = [f"<h2>Failures ({len(failed)})</h2>",
                 '<p id="no-failure-shown" class="muted" hidden>No failure matches the filters.</p>']
        cards += [self._failure_card(r, drawn=index < DRAWN_FAILURES) for index, r in enumerate(failed)]
        return f'<section id="failures">{"".join(cards)}</section>'

    def _failure_card(self, r: TestResult, *, drawn: bool) -> str:
        events = self.timelines.get(r.id, [])
        message = truncate_message(r.message or "(no message)", HTML_MESSAGE_LIMIT)
        parts = [f'<article class="failure-card" id="failure-{self.anchors[r.id]}" {_data(r)}>',
                 f'<h3><span class="badge {_e(r.level)}">{_e(r.level)}</span>{_e(r.id)}</h3>',
                 f'<p class="muted">profile {_e(r.profile)} · feature <strong>{_e(r.feature)}</strong> · '
                 f'{r.duration_s:.2f} s · <a href="#{self.anchors[r.id]}">row</a></p>',
                 f"<p><strong>Spec:</strong> {_e(r.spec)}</p>", _statements(r.statements),
                 _message_html(message)]
        from harness.report.evidence import evidence_html, evidence_kinds

        if drawn:
            parts.append(evidence_html(events, self.charts, lazy=False))
        elif evidence_kinds(events):
            parts.append(f"<details><summary>Evidence: {_e(', '.join(evidence_kinds(events)))}</summary>"
                         f"{evidence_html(events, self.charts, lazy=True)}</details>")
        diagnostics = [e for e in events if e.get("kind") == "diagnostics"]
        for entry in diagnostics:
            text = truncate_message(str(entry.get("text", "")), HTML_MESSAGE_LIMIT)
            parts.append(f'<details class="diagnostics"><summary>Diagnostics: {_e(entry.get("title", ""))}'
                         f"</summary><pre>{_e(text)}</pre></details>")
        parts.append("</article>")
        return "".join(part for part in parts if part)

    # ------------------------------------------------------------------------------------- profiles

    def profile_sections(self) -> str:
        shown: set[str] = set()
        parts = ["<h2>Tests</h2>"] if self.profiles or self.results else []
        for profile in self.profiles:
            name = str(profile.get("name", "?"))
            shown.add(name)
            parts.append(self._profile_section(profile, [r for r in self.results if r.profile == name]))
        for name in sorted({r.profile for r in self.results} - shown):
            parts.append(self._profile_section({"name": name}, [r for r in self.results if r.profile == name]))
        return "\n".join(parts)

    def _profile_section(self, profile: Mapping[str, Any], results: Sequence[TestResult]) -> str:
        name = str(profile.get("name", "?"))
        extended = _mapping(profile.get("extended"))
        parts = [f'<section id="profile-{_e(name)}" data-profile-section="{_e(name)}">',
                 f"<h3>Profile: {_e(name)}</h3>",
                 _feature_line("Supported extended features", extended.get("supportedFeatures")),
                 _feature_line("Unsupported extended features", extended.get("unsupportedFeatures")),
                 _profile_failures(profile), self._tests_table(results), "</section>"]
        return "\n".join(part for part in parts if part)

    def _tests_table(self, results: Sequence[TestResult]) -> str:
        if not results:
            return '<p class="muted">No tests were run for this profile.</p>'
        from harness.report.evidence import evidence_html, evidence_kinds

        rows = ['<table class="tests"><tr><th>Test</th><th>Level</th><th>Feature</th><th>Spec</th><th>Outcome</th>'
                "<th>Duration (s)</th></tr>"]
        for r in results:
            anchor = self.anchors[r.id]
            rows.append(f'<tr class="{_e(r.outcome)} test-row" id="{anchor}" {_data(r)}><td>{_e(r.id)}</td>'
                        f"<td>{_e(r.level)}</td><td>{_e(r.feature)}</td><td>{_e(r.spec)}</td>"
                        f'<td>{_e(r.outcome)}</td><td class="num">{r.duration_s:.2f}</td></tr>')
            if r.outcome == "failed":
                rows.append(f'<tr class="detail" {_data(r)}><td colspan="6"><p class="muted">{_e(r.id)}: failed in '
                            f'feature {_e(r.feature)} ({_e(r.level)}): <a href="#failure-{anchor}">message, '
                            "evidence and diagnostics</a></p></td></tr>")
                continue
            if r.message and r.outcome != "passed":
                message = truncate_message(r.message, HTML_MESSAGE_LIMIT)
                rows.append(f'<tr class="detail" {_data(r)}><td colspan="6"><p class="muted">{_e(r.id)}: '
                            f"{_e(r.outcome)}</p><pre>{_e(message)}</pre></td></tr>")
            events = self.timelines.get(r.id, [])
            kinds = evidence_kinds(events)
            if kinds:
                charts = evidence_html(events, self.charts, lazy=True)
                rows.append(f'<tr class="evidence-row" {_data(r)}><td colspan="6"><details><summary>Evidence: '
                            f"{_e(', '.join(kinds))}</summary>{charts}</details></td></tr>")
        rows.append("</table>")
        return "".join(rows)

    def orphan_evidence(self) -> str:
        """Timelines of the report with no result row (a page drawn from a report file alone)."""
        from harness.report.evidence import evidence_html

        known = {r.id for r in self.results}
        parts = []
        for test_id, events in sorted(self.timelines.items()):
            if test_id in known:
                continue
            charts = evidence_html(events, self.charts, lazy=False)
            if charts:
                parts.append(f"<h3>{_e(test_id)}</h3>{charts}")
        if not parts:
            return ""
        return '<section id="timelines"><h2>Evidence</h2>' + "".join(parts) + "</section>"


# ----------------------------------------------------------------------------------------- sections


def _verdict(summary: Mapping[str, Any]) -> tuple[str, str]:
    """The banner: the report's one verdict (harness.report.verdict) and why it is not a pass."""
    verdict = summary.get("verdict")
    reasons = "; ".join(str(r) for r in summary.get("reasons") or [])
    if verdict == "passed" and summary.get("passed") is True:
        return "pass", "PASSED: no core test and no test of a claimed feature failed"
    if verdict == "notJudged":
        return "fail", f"NOT JUDGED: {reasons or 'nothing was judged'}"
    return "fail", f"FAILED: {reasons or 'a core test or a test of a claimed feature failed'}"


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


def _statements(ids: Sequence[str]) -> str:
    """The catalogued sentences a test enforces, quoted with their document and section."""
    if not ids:
        return ""
    catalogue = _catalogue()
    items = []
    for statement_id in ids:
        found = catalogue.get(statement_id)
        if found is None:
            items.append(f"<li><code>{_e(statement_id)}</code></li>")
            continue
        items.append(f"<li><code>{_e(statement_id)}</code> <q>{_e(found.quote)}</q> "
                     f'<span class="muted">({_e(found.doc)}, {_e(found.section)})</span></li>')
    return f'<p><strong>Enforces:</strong></p><ul class="statements">{"".join(items)}</ul>'


@functools.cache
def _catalogue() -> Mapping[str, Any]:
    """The shipped statement catalogue by id; empty where none ships or it cannot be read (the page then
    names the ids without their sentences rather than fail)."""
    from harness.statements import CatalogueError, shipped_statements

    try:
        return shipped_statements() or {}
    except (CatalogueError, OSError, ValueError):
        return {}


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
                    f'<td>{_e(row.get("uncovered", 0))}{_collapsed("statements", missing)}</td></tr>')
    body.append("</table>")
    return "".join(body)


def _collapsed(label: str, text: str) -> str:
    """A long list behind a click: a partial run leaves hundreds of statements unenforced."""
    return f"<details><summary>{_e(label)}</summary>{_e(text)}</details>" if text else ""


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


def _select(name: str, values: Sequence[str]) -> str:
    options = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
    return f'<select name="{name}"><option value="">all</option>{options}</select>'


def _data(r: TestResult) -> str:
    """The attributes the filters read; every element of one test carries them, so they hide together."""
    return (f'data-test="{_e(r.id)}" data-outcome="{_e(r.outcome)}" data-profile="{_e(r.profile)}" '
            f'data-feature="{_e(r.feature)}"')


def _levels(profile: Mapping[str, Any]) -> tuple[str, ...]:
    """A profile's levels in the page: the demos profile's tests are of the demo level, not core."""
    return ("demo", "extended") if "demo" in profile else ("core", "extended")


def error_lines(message: str) -> str:
    """What the failure said: pytest's ``E`` lines of a traceback without their prefix ('' when there are none)."""
    lines = [line[1:] for line in message.splitlines() if line == "E" or line.startswith("E ")]
    return textwrap.dedent("\n".join(lines)).strip()


def _message_html(message: str) -> str:
    """The failure's own words first; the traceback they came from behind a click."""
    said = error_lines(message)
    if not said:
        return f'<pre class="message">{_e(message)}</pre>'
    return (f'<pre class="message">{_e(said)}</pre>'
            f'<details class="traceback"><summary>Traceback</summary><pre>{_e(message)}</pre></details>')






