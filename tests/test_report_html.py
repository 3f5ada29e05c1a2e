"""The HTML report: verdict cards, failures first with their spec sentences, message, evidence and diagnostics,
filters, one self-contained file, and escaping of everything a report or a test wrote."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from harness.impl import Implementation
from harness.report import TestResult, build_report, render_html, write_html
from harness.report.distribution_plot import distribution_rows
from harness.report.member_plot import member_spans
from harness.report.revision_plot import route_changes

IMPL = Implementation("Example Corp", "example-gateway", "2.3.1", ("https://example.invalid/gw",))
DATE = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script> & <img src=x onerror=alert(1)>'
STATEMENT = "OC-LIFECYCLE-UNCHANGED-NO-REPLACE"  # catalogued in suites/statements.yaml
DISTRIBUTION = {"t": 1.0, "kind": "distribution", "counts": {"provider-a": 60, "provider-b": 40},
                "expected": {"provider-a": 0.5, "provider-b": 0.5},
                "intervals": {"provider-a": [38, 62], "provider-b": [38, 62]}, "alpha": 1e-6, "n": 100,
                "passed": True}


def result(test_id: str, outcome: str, *, profile: str = "consumer", level: str = "core",
           feature: str = "overlayValidation", message: str = "", timeline: tuple[dict[str, Any], ...] = (),
           statements: tuple[str, ...] = ()) -> TestResult:
    return TestResult(id=test_id, profile=profile, level=level, feature=feature,  # type: ignore[arg-type]
                      spec="overlay-contract 3.1", outcome=outcome, duration_s=0.25,  # type: ignore[arg-type]
                      message=message, timeline=timeline, statements=statements)


def page_for(results: list[TestResult], *, profiles: tuple[str, ...] = ("consumer",),
             claimed: frozenset[str] = frozenset(), impl: Implementation = IMPL) -> str:
    report = build_report(results, impl, backend="local", harness_version="0.1.0", profiles=profiles,
                          features_claimed=claimed, date=DATE)
    return render_html(report, results)


class _Page(HTMLParser):
    """Tags, links, script sources, <pre> texts and the elements the filters act on."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.hrefs: list[str] = []
        self.sources: list[str] = []
        self.pre: list[str] = []
        self.filtered: list[dict[str, str]] = []
        self.scripts: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        self.tags.append(tag)
        self.hrefs += [values["href"]] if "href" in values else []
        self.sources += [values["src"]] if "src" in values else []
        if "data-test" in values:
            self.filtered.append({"tag": tag, **values})
        self._in = tag if tag in ("pre", "script") else None
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "pre":
            self.pre.append(data)
        elif self._in == "script":
            self.scripts[-1] += data


def parsed(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    return parser


# ---------------------------------------------------------------------------------------------- layout


def test_a_verdict_card_per_profile_gives_each_levels_result_and_counts() -> None:
    results = [result("C-1", "failed", message="boom"), result("C-2", "passed"), result("C-3", "skipped"),
               result("E-1", "unsupported", level="extended", feature="cookieAffinity"),
               result("D-1", "passed", profile="demos", level="demo", feature="grid-combined-site"),
               result("D-2", "notApplicable", profile="demos", level="demo", feature="grid-combined-site",
                      message="Skipped: not applicable: a NetworkPolicy")]
    page = page_for(results, profiles=("consumer", "demos", "mesh"))
    cards = re.findall(r'<article class="card (\w+)" data-card-profile="(\w+)">(.*?)</article>', page)
    assert [(cls, name) for cls, name, _ in cards] == [("failure", "consumer"), ("success", "demos"),
                                                       ("notRun", "mesh")]
    consumer, demos, _mesh = (body for _, _, body in cards)
    assert ('core</th><td><span class="result failure">failure</span></td><td>1 passed, 1 failed, 1 skipped'
            in consumer)
    assert "Unsupported extended features: cookieAffinity" in consumer
    assert ">demo</th>" in demos and ">core</th>" not in demos and "1 claim(s) not applicable" in demos
    assert page.index('id="verdicts"') < page.index('id="filters"') < page.index('id="failures"') < page.index(
        "Profile: consumer")


def test_failures_come_first_core_before_extended_each_with_spec_sentence_message_and_diagnostics() -> None:
    diagnostics = ({"t": 0.5, "kind": "diagnostics", "title": "agn-conformance single-site grid (call)",
                    "text": "=== gateway log tail"},)
    results = [result("A-EXT", "failed", level="extended", feature="cookieAffinity", message="ext boom"),
               result("Z-CORE", "failed", message="core boom", statements=(STATEMENT, "NOT-CATALOGUED"),
                      timeline=diagnostics),
               result("B-PASS", "passed")]
    page = page_for(results, claimed=frozenset({"cookieAffinity"}))
    cards = re.findall(r'<article class="failure-card".*?</article>', page, re.S)
    assert [re.search(r"</span>([\w-]+)</h3>", card).group(1) for card in cards] == [  # type: ignore[union-attr]
        "Z-CORE", "A-EXT"]
    core = cards[0]
    assert "<strong>Spec:</strong> overlay-contract 3.1" in core
    assert (f"<code>{STATEMENT}</code> <q>an unchanged semantic revision does not cause a replacement.</q>"
            in core), "the catalogued sentence is quoted"
    assert "<code>NOT-CATALOGUED</code>" in core
    assert '<pre class="message">core boom</pre>' in core
    assert "Diagnostics: agn-conformance single-site grid (call)" in core and "=== gateway log tail" in core
    assert page.index("Failures (2)") < page.index("Failures by feature") < page.index("Profile: consumer")
    row = re.search(r'<tr class="detail"[^>]*data-test="Z-CORE"[^>]*>(.*?)</tr>', page)
    assert row is not None and 'href="#failure-' in row.group(1), "the row links to its failure instead of repeating it"


def test_a_run_without_failures_says_so_and_a_passing_page_passes() -> None:
    page = page_for([result("C-1", "passed")])
    assert "No test failed." in page and "PASSED" in page and "Failures by feature" not in page
    assert 'class="failure-card"' not in page


def test_the_page_still_shows_full_messages_and_skip_reasons() -> None:
    long_message = "head " + "y" * 5000 + " tail"
    results = [result("c-1", "failed", message=long_message), result("c-2", "passed"),
               result("c-3", "skipped", message="needs root"),
               result("e-1", "unsupported", level="extended", feature="cookieAffinity")]
    page = page_for(results, profiles=("consumer", "mesh"))
    for outcome in ("failed", "passed", "skipped", "unsupported"):
        assert f'<tr class="{outcome} test-row"' in page
    assert long_message in page  # the page is for reading: not cut at the YAML limit
    assert "needs root" in page and "No tests were run for this profile." in page
    assert "Profile: mesh" in page and "cookieAffinity" in page


def test_failures_by_feature_are_listed_most_failures_first() -> None:
    results = [result(f"AFF-{i}", "failed", level="extended", feature="cookieAffinity", message=f"boom {i}")
               for i in range(1, 7)]
    results += [result("SEL-1", "failed", feature="selection", message="wrong backend"),
                result("SEL-2", "passed", feature="selection")]
    page = page_for(results, claimed=frozenset({"cookieAffinity"}))
    table = re.search(r'<table class="failures">(.*?)</table>', page)
    assert table is not None
    rows = re.findall(r'<tr class="failed"><td>(\w+)</td><td>(\w+)</td><td>(\w+)</td><td class="num">(\d+)</td>',
                      table.group(1))
    assert rows == [("consumer", "core", "selection", "1"), ("consumer", "extended", "cookieAffinity", "6")]
    assert "extended: <strong>cookieAffinity</strong>: 6 failed" in page


# --------------------------------------------------------------------------------------------- filters


def test_every_element_of_a_test_carries_what_the_filters_read() -> None:
    results = [result("C-1", "failed", message="boom", feature="roundRobin"),
               result("C-2", "passed", timeline=(DISTRIBUTION,)),
               result("C-3", "skipped", message="needs root", feature="headerAffinity"),
               result("M-1", "passed", profile="mesh", feature="membership")]
    page = page_for(results, profiles=("consumer", "mesh"))
    found = parsed(page).filtered
    by_test: dict[str, list[str]] = {}
    for element in found:
        assert {"data-outcome", "data-profile", "data-feature"} <= set(element), element
        by_test.setdefault(element["data-test"], []).append(element.get("class", element["tag"]))
    assert by_test == {"C-1": ["failure-card", "failed test-row", "detail"],
                       "C-2": ["passed test-row", "evidence-row"],
                       "C-3": ["skipped test-row", "detail"], "M-1": ["passed test-row"]}
    filters = re.search(r'<form id="filters".*?</form>', page, re.S)
    assert filters is not None
    boxes = re.findall(r'name="outcome" value="(\w+)" checked> \w+ \((\d+)\)', filters.group(0))
    assert boxes == [("failed", "1"), ("passed", "2"), ("skipped", "1")]
    assert re.findall(r'<option value="(\w+)">', filters.group(0)) == [
        "consumer", "mesh", "headerAffinity", "membership", "overlayValidation", "roundRobin"]
    assert 'data-profile-section="mesh"' in page


def test_no_filter_bar_without_tests() -> None:
    assert 'id="filters"' not in page_for([])


# -------------------------------------------------------------------------------------------- evidence


def test_a_failing_tests_evidence_is_drawn_and_a_passing_ones_waits_behind_a_click() -> None:
    failing = result("C-1", "failed", message="boom", timeline=({**DISTRIBUTION, "passed": False},))
    passing = result("C-2", "passed", timeline=(DISTRIBUTION,))
    page = page_for([failing, passing])
    card = re.search(r'<article class="failure-card".*?</article>', page, re.S)
    assert card is not None and 'class="plotly-graph-div"' in card.group(0), "drawn as the page opens"
    evidence = re.search(r'<tr class="evidence-row"[^>]*data-test="C-2".*?</tr>', page, re.S)
    assert evidence is not None
    assert "<summary>Evidence: distribution</summary>" in evidence.group(0)
    assert 'class="plotly-lazy"' in evidence.group(0) and 'type="application/json"' in evidence.group(0)
    assert "46.58%" not in page and "60.00%" in page and "outside" in page, "the numbers are in a table too"


def test_revisions_give_stage_and_latency_charts_and_members_a_state_chart() -> None:
    revisions = ({"t": 0.5, "kind": "revision", "stage": "rendered", "revision": "r1", "site": "west"},
                 {"t": 1.5, "kind": "revision", "stage": "accepted", "revision": "r1", "site": "west"},
                 {"t": 2.0, "kind": "revision", "stage": "serving", "revision": "r1", "site": "west",
                  "gateway": "gw"},
                 {"t": 2.5, "kind": "revision", "stage": "rendered", "revision": "r2", "site": "west"})
    members = ({"t": 0.0, "kind": "member", "observer": "a", "member": "c", "state": "alive"},
               {"t": 3.0, "kind": "member", "observer": "a", "member": "c", "state": "dead"},
               {"t": 1.0, "kind": "action", "what": "killed c's operator"})
    page = page_for([result("P-1", "passed", profile="producer", feature="status", timeline=revisions),
                     result("M-1", "passed", profile="mesh", feature="membership", timeline=members)],
                    profiles=("producer", "mesh"))
    assert "<summary>Evidence: revisions</summary>" in page and "<summary>Evidence: mesh members</summary>" in page
    assert "Route-change latency" in page and '<td class="num">1.500</td>' in page
    assert route_changes(revisions) == [{"revision": "r1", "site": "west", "from": "rendered", "latency": 1.5,
                                         "stages": {"rendered": 0.5, "accepted": 1.5, "serving": 2.0}}]
    assert member_spans(members) == [
        {"lane": "a sees c (membership)", "state": "alive", "reason": None, "start": 0.0, "end": 3.0},
        {"lane": "a sees c (membership)", "state": "dead", "reason": None, "start": 3.0, "end": 3.0}]


def test_distribution_rows_mark_candidates_outside_their_interval_and_strangers() -> None:
    rows = distribution_rows({**DISTRIBUTION, "counts": {"provider-a": 70, "provider-b": 29, "other": 1}})
    assert [(r["name"], r["inside"], r["expected"]) for r in rows] == [
        ("provider-a", False, 0.5), ("provider-b", False, 0.5), ("other", False, None)]
    assert rows[0]["low"] == 0.38 and rows[0]["high"] == 0.62 and rows[2]["low"] is None


def test_timelines_of_a_report_read_alone_are_drawn_under_evidence() -> None:
    report = build_report([result("D-1", "passed", timeline=(DISTRIBUTION,))], IMPL, backend="local",
                          harness_version="0.1.0", profiles=("consumer",), features_claimed=(), date=DATE)
    page = render_html(report, [])
    assert '<section id="timelines"><h2>Evidence</h2><h3>D-1</h3>' in page and "plotly-graph-div" in page


# ---------------------------------------------------------------------------------- self-contained, safe


def test_the_page_is_one_file_plotly_included_once_and_only_when_it_draws() -> None:
    with_charts = page_for([result("C-1", "failed", message="x", timeline=(DISTRIBUTION,)),
                            result("C-2", "passed", timeline=(DISTRIBUTION,))])
    found = parsed(with_charts)
    assert found.sources == [], "no script, image or frame is loaded from elsewhere"
    assert not [href for href in found.hrefs if not href.startswith(("#", "https://example.invalid"))]
    markup = re.sub(r"<script[^>]*>.*?</script>", "", with_charts, flags=re.S)
    assert "<link" not in markup and "@import" not in markup and "url(" not in markup
    assert len(re.findall(r"\* plotly\.js v\d+\.\d+\.\d+", with_charts)) == 1
    without = page_for([result("C-1", "passed")])
    assert "plotly.js v" not in without and len(without) < 100_000


def test_everything_a_report_or_test_wrote_is_escaped(tmp_path: Path) -> None:
    impl = Implementation(f"Org {HOSTILE}", "gw", "1", ("javascript:alert(1)", "https://example.invalid/a?b=1&c=2"))
    distribution = {**DISTRIBUTION, "counts": {HOSTILE: 100}, "expected": {HOSTILE: 1.0},
                    "intervals": {HOSTILE: [100, 100]}, "what": HOSTILE}
    timeline = (distribution, {"t": 0.2, "kind": "diagnostics", "title": HOSTILE, "text": f"log {HOSTILE}"},
                {"t": 0.3, "kind": "revision", "stage": "serving", "revision": HOSTILE, "site": HOSTILE},
                {"t": 0.4, "kind": "action", "what": HOSTILE})
    results = [result(f"c-1{HOSTILE}", "failed", message=f"expected 200\n{HOSTILE}", timeline=timeline,
                      statements=(HOSTILE,)),
               result("c-2", "passed", feature=f"f{HOSTILE}", timeline=timeline),
               result("e-1", "unsupported", level="extended", feature=f"feat{HOSTILE}")]
    report = build_report(results, impl, backend="local", harness_version="0.1.0", profiles=("consumer",),
                          features_claimed=(), date=DATE)
    page = write_html(report, results, tmp_path / "report.html").read_text(encoding="utf-8")
    found = parsed(page)
    assert "img" not in found.tags
    assert not any("<" in script for script in found.scripts if not _is_plotly(script)), \
        "text of a test inside a script of the page is JSON with every < escaped"
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert [h for h in found.hrefs if not h.startswith("#")] == ["https://example.invalid/a?b=1&c=2"]
    assert any(f"expected 200\n{HOSTILE}" in block for block in found.pre)
    assert any(f"log {HOSTILE}" in block for block in found.pre)
    assert page.count("<script") == page.count("</script>") == len(found.scripts), "no script but the page's own"


def _is_plotly(script: str) -> bool:
    return script.startswith("/**\n* plotly.js v")


def test_statements_a_run_left_unenforced_wait_behind_a_click() -> None:
    from harness.statements import shipped_statements

    results = [result("C-1", "passed", statements=(STATEMENT,))]
    report = build_report(results, IMPL, backend="local", harness_version="0.1.0", profiles=("consumer",),
                          features_claimed=(), date=DATE, statements=shipped_statements())
    page = render_html(report, results)
    coverage = re.search(r'<table class="coverage">.*?</table>', page, re.S)
    assert coverage is not None and "<details><summary>statements</summary>" in coverage.group(0)
    assert STATEMENT not in coverage.group(0), "enforced by this run"


def test_past_the_first_failures_a_cards_charts_wait_behind_a_click(monkeypatch: Any) -> None:
    from harness.report import html

    monkeypatch.setattr(html, "DRAWN_FAILURES", 1)
    failing = [result(f"C-{i}", "failed", message="boom", timeline=(DISTRIBUTION,)) for i in (1, 2)]
    cards = re.findall(r'<article class="failure-card".*?</article>', page_for(failing), re.S)
    assert 'class="plotly-graph-div"' in cards[0] and "plotly-lazy" not in cards[0]
    assert "<summary>Evidence: distribution</summary>" in cards[1] and 'class="plotly-lazy"' in cards[1]


def test_a_failure_card_shows_what_the_failure_said_first_and_the_traceback_behind_a_click() -> None:
    from harness.report.html import error_lines

    traceback = ("    def test_x():\n>       assert_distribution(counts, plan)\n"
                 "E       AssertionError: selection distribution does not match: 'provider-a' count 2480 outside\n"
                 "E         category  observed <b>\n\nsuites/consumer/test_selection.py:301: AssertionError")
    assert error_lines(traceback) == ("AssertionError: selection distribution does not match: 'provider-a' count "
                                      "2480 outside\n  category  observed <b>")
    assert error_lines("plain message without a traceback") == ""
    result = TestResult("CONS-X", "consumer", "core", "random", "guide 4", "failed", 1.0, traceback)
    page = render_html(build_report([result], Implementation("o", "p", "1"), backend="local", harness_version="0",
                                    profiles=["consumer"], features_claimed=()), [result])
    card = page[page.index('class="failure-card"'):]
    said = card.index("AssertionError: selection distribution does not match")
    assert said < card.index("<summary>Traceback</summary>") < card.index("assert_distribution(counts, plan)")
    assert "observed &lt;b&gt;" in card
