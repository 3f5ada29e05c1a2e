"""``agn-conformance compare A B``: the tests whose outcome differs between two conformance reports.

Two implementations, or two versions of one, are judged by the same suites; what a reader needs is the
handful of tests that went another way, with both sides' messages, not two reports side by side. A test's
outcome comes from the report's ``results`` list (every test, passed ones included); a report written
before that list existed gives only the ids of its failed, skipped and not-applicable tests and its
unsupported features, so a test it does not list reads as ``unlisted`` (passed, or not run). A test
present in one report only (``absent`` on the other side) is counted apart, not listed among the differences:
comparing a one-profile run with a full run is not hundreds of differences. ``--profile`` compares only the
tests of the profiles named.

Exit status: 0 the reports agree on every test both judged, 1 at least one such test differs, 2 a report could
not be read (the message names the file) or the HTML page could not be written.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from harness.features import DEMO_LEVEL
from harness.report.text import as_list as _list
from harness.report.text import as_mapping as _mapping
from harness.report.text import escape_html as _e
from harness.report.text import write_text_atomic
from harness.report.writer import ReportError, load_report

__all__ = [
    "ABSENT",
    "UNLISTED",
    "Difference",
    "Outcome",
    "add_compare_parser",
    "counts",
    "differences",
    "has_results",
    "outcomes",
    "render_compare_html",
    "run_compare",
    "text_lines",
    "write_compare_html",
]

#: The outcome of a test one report does not have at all.
ABSENT = "absent"
#: The outcome of a test an old report (one without ``results``) does not list: it passed or did not run.
UNLISTED = "unlisted"

EXIT_SAME = 0
EXIT_DIFFERENT = 1
EXIT_UNREADABLE = 2

#: Messages on the terminal are cut to about this many characters, on one line.
TERMINAL_MESSAGE = 160

_PROG = "agn-conformance compare"
_LEVEL_ORDER = {"core": 0, DEMO_LEVEL: 0, "extended": 1}


@dataclass(frozen=True)
class Outcome:
    """What one report says about one test."""

    id: str
    profile: str
    level: str
    feature: str
    outcome: str
    message: str = ""


@dataclass(frozen=True)
class Difference:
    """One test the two reports judge differently; ``a`` or ``b`` is None where that report lacks it."""

    id: str
    a: Outcome | None
    b: Outcome | None

    @property
    def outcome_a(self) -> str:
        return self.a.outcome if self.a is not None else ABSENT

    @property
    def outcome_b(self) -> str:
        return self.b.outcome if self.b is not None else ABSENT

    def where(self, attribute: str) -> str:
        """The test's profile or level; ``A->B`` when the two reports place it differently."""
        values = [getattr(side, attribute) for side in (self.a, self.b) if side is not None]
        return values[0] if len(set(values)) == 1 else "->".join(values)


# ------------------------------------------------------------------------------------------- reading


def outcomes(report: Mapping[str, Any]) -> dict[str, Outcome]:
    """Every test the report knows, by id, with its outcome and its message (failure text or reason)."""
    failures, reasons = _messages(report)
    rows = report.get("results")
    if isinstance(rows, list):
        found: dict[str, Outcome] = {}
        for row in rows:
            if not isinstance(row, Mapping) or not row.get("id"):
                continue
            test_id = str(row["id"])
            outcome = str(row.get("outcome", "?"))
            message = str(row.get("reason") or "") or (failures.get(test_id, "") if outcome == "failed"
                                                          else reasons.get(test_id, ""))
            found[test_id] = Outcome(test_id, str(row.get("profile", "?")), str(row.get("level", "?")),
                                     str(row.get("feature", "?")), outcome, message)
        return found
    return _listed_outcomes(report, failures, reasons)


def _messages(report: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Failure messages and not-applicable reasons by test id, from the profile sections."""
    failures: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for _, _, section in _sections(report):
        for entry in _list(section.get("failures")):
            if isinstance(entry, Mapping) and entry.get("id"):
                failures[str(entry["id"])] = str(entry.get("message") or "")
        for entry in _list(section.get("notApplicable")):
            if isinstance(entry, Mapping) and entry.get("id"):
                reasons[str(entry["id"])] = str(entry.get("reason") or "")
    return failures, reasons


def _listed_outcomes(report: Mapping[str, Any], failures: Mapping[str, str],
                     reasons: Mapping[str, str]) -> dict[str, Outcome]:
    """The tests a report without ``results`` names: failed, skipped and not applicable (passed ones are
    only counted there)."""
    found: dict[str, Outcome] = {}
    for profile, level, section in _sections(report):
        features = {str(e.get("id")): str(e.get("feature") or "?") for e in _list(section.get("failures"))
                    if isinstance(e, Mapping)}
        for test_id in map(str, _list(section.get("failedTests"))):
            found[test_id] = Outcome(test_id, profile, level, features.get(test_id, "?"), "failed",
                                     failures.get(test_id, ""))
        for test_id in map(str, _list(section.get("skippedTests"))):
            found[test_id] = Outcome(test_id, profile, level, "?", "skipped")
        for entry in _list(section.get("notApplicable")):
            if isinstance(entry, Mapping) and entry.get("id"):
                test_id = str(entry["id"])
                found[test_id] = Outcome(test_id, profile, level, str(entry.get("feature") or "?"), "notApplicable",
                                         reasons.get(test_id, ""))
    return found


def _unsupported(report: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(profile, feature) of every extended feature the report says the implementation does not support."""
    return {(profile, str(feature)) for profile, level, section in _sections(report) if level == "extended"
            for feature in _list(section.get("unsupportedFeatures"))}


def _sections(report: Mapping[str, Any]) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
    for profile in _list(report.get("profiles")):
        if not isinstance(profile, Mapping):
            continue
        for level in ("core", "extended", DEMO_LEVEL):
            section = profile.get(level)
            if isinstance(section, Mapping):
                yield str(profile.get("name", "?")), level, section


def has_results(report: Mapping[str, Any]) -> bool:
    """Whether the report lists every test (passed ones included)."""
    return isinstance(report.get("results"), list)


# ------------------------------------------------------------------------------------------ comparing


def differences(a: Mapping[str, Any], b: Mapping[str, Any],
                profiles: Sequence[str] | None = None) -> list[Difference]:
    """The tests whose outcome differs between reports `a` and `b` (only those of `profiles`, when given), by
    profile, level and id; a test in one report only is among them, its other side None (see `split`)."""
    side_a, side_b = outcomes(a), outcomes(b)
    if profiles:
        side_a = {k: v for k, v in side_a.items() if v.profile in profiles}
        side_b = {k: v for k, v in side_b.items() if v.profile in profiles}
    found: list[Difference] = []
    for test_id in sorted(side_a.keys() | side_b.keys()):
        one, other = side_a.get(test_id), side_b.get(test_id)
        one = one or _inferred(a, other)
        other = other or _inferred(b, one)
        if one is None or other is None or one.outcome != other.outcome:
            found.append(Difference(test_id, one, other))
    order = _profile_order(a, b)
    return sorted(found, key=lambda d: (order.get(d.where("profile").split("->")[0], len(order)),
                                        _LEVEL_ORDER.get(d.where("level").split("->")[0], 2), d.id))


def split(found: Sequence[Difference]) -> tuple[list[Difference], list[Difference]]:
    """(tests both reports judged differently, tests only one report has)."""
    changed = [d for d in found if d.a is not None and d.b is not None]
    return changed, [d for d in found if d.a is None or d.b is None]


def _one_sided(absent: Sequence[Difference], limit: int = 10) -> str:
    """One line for the tests one report lacks: how many on each side, and their ids when few."""
    only_a = [d.id for d in absent if d.b is None]
    only_b = [d.id for d in absent if d.a is None]
    parts = []
    for label, ids in (("A", only_a), ("B", only_b)):
        if ids:
            named = f": {', '.join(ids)}" if len(ids) <= limit else ""
            parts.append(f"{len(ids)} only in {label}{named}")
    return f"{len(absent)} test(s) in one report only, not compared ({'; '.join(parts)})"


def _inferred(report: Mapping[str, Any], known: Outcome | None) -> Outcome | None:
    """What a report without ``results`` says of a test it does not list but the other report has: unsupported
    when it declines the test's feature, else unlisted (passed, or not run). None for a report with results."""
    if known is None or has_results(report):
        return None
    if known.level == "extended" and (known.profile, known.feature) in _unsupported(report):
        return Outcome(known.id, known.profile, known.level, known.feature, "unsupported")
    return Outcome(known.id, known.profile, known.level, known.feature, UNLISTED)


def _profile_order(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, int]:
    names = [str(p.get("name")) for r in (a, b) for p in _list(r.get("profiles")) if isinstance(p, Mapping)]
    return {name: index for index, name in enumerate(dict.fromkeys(names))}


def counts(report: Mapping[str, Any]) -> Counter[str]:
    """How many tests of each outcome the report lists."""
    return Counter(o.outcome for o in outcomes(report).values())


# ------------------------------------------------------------------------------------------- terminal


def describe(report: Mapping[str, Any]) -> str:
    """``org/project version, date, backend, harness`` of a report."""
    impl = _mapping(report.get("implementation"))
    who = f"{impl.get('organization', '?')}/{impl.get('project', '?')} {impl.get('version', '')}".rstrip()
    return (f"{who}, {report.get('date', '?')}, backend {report.get('backend', '?')}, "
            f"harness {report.get('harnessVersion', '?')}")


def _count_text(report: Mapping[str, Any]) -> str:
    tally = counts(report)
    parts = ", ".join(f"{n} {name}" for name, n in sorted(tally.items(), key=lambda item: (-item[1], item[0])))
    total = sum(tally.values())
    note = "" if has_results(report) else "; passed tests are not listed (a report without results)"
    return f"{total} tests listed ({parts or 'none'}){note}"


def _transitions(found: Sequence[Difference]) -> str:
    moves = Counter(f"{d.outcome_a} -> {d.outcome_b}" for d in found)
    return ", ".join(f"{n} {move}" for move, n in sorted(moves.items(), key=lambda item: (-item[1], item[0])))


def oneline(message: str, limit: int = TERMINAL_MESSAGE) -> str:
    """`message` on one line, cut to about `limit` characters keeping its start and its end (where a
    traceback's assertion is)."""
    text = re.sub(r"\s+", " ", message).strip()
    if len(text) <= limit:
        return text
    head = max(limit * 2 // 5, 1)
    tail = max(limit - head - 5, 1)
    return f"{text[:head]} ... {text[-tail:]}"


def text_lines(a: Mapping[str, Any], b: Mapping[str, Any], found: Sequence[Difference],
               names: tuple[str, str]) -> list[str]:
    """The terminal report: both runs, their counts, then one row per differing test with both messages."""
    lines = [f"A: {describe(a)} ({names[0]})", f"   {_count_text(a)}",
             f"B: {describe(b)} ({names[1]})", f"   {_count_text(b)}"]
    found, absent = split(found)
    if absent:
        lines.append(_one_sided(absent))
    if not found:
        lines.append("no test's outcome differs")
        return lines
    lines.append(f"{len(found)} test(s) differ: {_transitions(found)}")
    table = [("test", "profile", "level", "A", "B")]
    table += [(d.id, d.where("profile"), d.where("level"), d.outcome_a, d.outcome_b) for d in found]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for index, row in enumerate(table):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            continue
        diff = found[index - 1]
        for label, side in (("A", diff.a), ("B", diff.b)):
            if side is not None and side.message:
                lines.append(f"    {label}: {oneline(side.message)}")
    return lines


# ----------------------------------------------------------------------------------------------- html

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 90em;
       padding: 0 1em; color: #1d2330; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em 0; }
th, td { border: 1px solid #cfd5df; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #eef1f6; }
pre { margin: 0; white-space: pre-wrap; word-break: break-word; font-size: 0.85em; background: #f7f7f9;
      padding: 0.4em; max-height: 24em; overflow: auto; }
.passed { background: #e3f6e6; }
.failed { background: #fde4e4; }
.skipped, .unlisted { background: #fff4d6; }
.unsupported, .notApplicable, .absent { background: #eeeeee; }
.muted { color: #667085; }
"""


def render_compare_html(a: Mapping[str, Any], b: Mapping[str, Any], found: Sequence[Difference],
                        names: tuple[str, str]) -> str:
    """One self-contained page: both runs, their counts and every differing test with both messages in full.

    All report text is escaped: messages routinely hold markup such as ``<script>``.
    """
    runs = "".join(f"<tr><th>{label}</th><td>{_e(describe(report))}</td><td>{_e(name)}</td>"
                   f"<td>{_e(_count_text(report))}</td></tr>"
                   for label, report, name in (("A", a, names[0]), ("B", b, names[1])))
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(f'Conformance comparison: {describe(a)} / {describe(b)}')}</title>",
             f"<style>{_STYLE}</style></head><body>", "<h1>AGN conformance: two runs compared</h1>",
             f"<table><tr><th></th><th>Implementation, date, backend, harness</th><th>Report</th>"
             f"<th>Tests</th></tr>{runs}</table>"]
    found, absent = split(found)
    if absent:
        parts.append(f'<p class="muted">{_e(_one_sided(absent))}</p>')
    if not found:
        parts.append("<p>No test's outcome differs.</p>")
    else:
        parts.append(f"<p><strong>{len(found)} test(s) differ</strong>: {_e(_transitions(found))}</p>")
        parts.append("<table><tr><th>Test</th><th>Profile</th><th>Level</th><th>A</th><th>B</th>"
                     "<th>Message in A</th><th>Message in B</th></tr>")
        for d in found:
            messages = "".join(f"<td>{_pre(side.message if side else '')}</td>" for side in (d.a, d.b))
            parts.append(f"<tr><td>{_e(d.id)}</td><td>{_e(d.where('profile'))}</td><td>{_e(d.where('level'))}"
                         f'</td><td class="{_e(d.outcome_a)}">{_e(d.outcome_a)}</td>'
                         f'<td class="{_e(d.outcome_b)}">{_e(d.outcome_b)}</td>{messages}</tr>')
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _pre(message: str) -> str:
    return f"<pre>{_e(message)}</pre>" if message else '<span class="muted">-</span>'


# ------------------------------------------------------------------------------------------- command


def add_compare_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``compare`` subcommand to the ``agn-conformance`` parser."""
    compare = commands.add_parser(
        "compare", help="list the tests whose outcome differs between two conformance reports",
        description="Compare two ConformanceReports (two implementations, or two versions of one) and print "
                    "each test whose outcome differs, with both messages; a test in one report only is a "
                    "difference too. Exit status: 0 no test differs, 1 some test differs, 2 a report could "
                    "not be read.",
    )
    compare.add_argument("report_a", metavar="A", help="the first report (YAML, as `run --report` writes it)")
    compare.add_argument("report_b", metavar="B", help="the second report")
    compare.add_argument("--profile", default=None, metavar="P[,P...]",
                         help="compare only the tests of these profiles (comma-separated)")
    compare.add_argument("--html", default=None, metavar="FILE",
                         help="also write the comparison as one self-contained HTML page, messages in full")


def run_compare(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``compare`` on the parsed `args`, writing the comparison to `out`; the exit status."""
    try:
        a, b = _load(args.report_a), _load(args.report_b)
    except ReportError as exc:
        print(f"{_PROG}: error: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    names = (str(args.report_a), str(args.report_b))
    selected = getattr(args, "profile", None)
    profiles = [p.strip() for p in selected.split(",") if p.strip()] if selected else None
    found = differences(a, b, profiles)
    out.write("".join(line + "\n" for line in text_lines(a, b, found, names)))
    html_path: str | None = getattr(args, "html", None)
    if html_path:
        try:
            write_compare_html(a, b, found, names, html_path)
        except OSError as exc:
            print(f"{_PROG}: error: cannot write {html_path}: {exc}", file=sys.stderr)
            return EXIT_UNREADABLE
        out.write(f"html: {html_path}\n")
    return EXIT_DIFFERENT if split(found)[0] else EXIT_SAME


def _load(path: str) -> dict[str, Any]:
    """The report at `path`; ReportError naming the file when there is none or it is not one."""
    if not Path(path).exists():
        raise ReportError(f"{path}: no such file")
    return load_report(path)


def write_compare_html(a: Mapping[str, Any], b: Mapping[str, Any], found: Sequence[Difference],
                       names: tuple[str, str], path: str | os.PathLike[str]) -> Path:
    """Write the comparison page atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, render_compare_html(a, b, found, names))
    return target






