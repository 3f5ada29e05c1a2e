"""Conformance report: rollup rules, unsupported features, YAML round trip (the HTML page: test_report_html.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.impl import Implementation
from harness.report import (
    API_VERSION,
    KIND,
    ReportError,
    TestResult,
    build_report,
    core_passed,
    load_report,
    render_html,
    write_yaml,
)
from harness.report.writer import MESSAGE_LIMIT, truncate_message

IMPL = Implementation("Example Corp", "example-gateway", "2.3.1", ("https://example.invalid/gw",))
DATE = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


def result(test_id: str, outcome: str, *, profile: str = "consumer", level: str = "core",
           feature: str = "overlayValidation", message: str = "") -> TestResult:
    return TestResult(id=test_id, profile=profile, level=level, feature=feature,  # type: ignore[arg-type]
                      spec="overlay-contract 3.1", outcome=outcome, duration_s=0.25,  # type: ignore[arg-type]
                      message=message)


def report_for(results: list[TestResult], *, profiles: tuple[str, ...] = ("consumer",),
               claimed: frozenset[str] = frozenset()) -> dict[str, Any]:
    return build_report(results, IMPL, backend="local", harness_version="0.1.0", profiles=profiles,
                        features_claimed=claimed, date=DATE)


def profile(report: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [p for p in report["profiles"] if p["name"] == name]
    assert len(matches) == 1, report["profiles"]
    return matches[0]


# ---------------------------------------------------------------------------------------------- rollup


def test_header_fields() -> None:
    report = report_for([])
    assert list(report)[:2] == ["apiVersion", "kind"]
    assert report["apiVersion"] == API_VERSION and report["kind"] == KIND
    assert report["implementation"] == {"organization": "Example Corp", "project": "example-gateway",
                                        "version": "2.3.1", "contact": ["https://example.invalid/gw"]}
    assert report["date"] == "2026-03-04T05:06:07Z"
    assert report["harnessVersion"] == "0.1.0" and report["backend"] == "local"


def test_all_passed_is_success() -> None:
    core = profile(report_for([result("c-1", "passed"), result("c-2", "passed")]), "consumer")["core"]
    assert core["result"] == "success"
    assert core["statistics"] == {"passed": 2, "failed": 0, "skipped": 0}
    assert core["failedTests"] == [] and core["skippedTests"] == [] and core["failures"] == []
    assert core["failuresByFeature"] == {}


def test_skip_without_failure_is_partial() -> None:
    core = profile(report_for([result("c-2", "skipped", message="needs netns"), result("c-1", "passed")]),
                   "consumer")["core"]
    assert core["result"] == "partial"
    assert core["statistics"] == {"passed": 1, "failed": 0, "skipped": 1}
    assert core["skippedTests"] == ["c-2"]


def test_any_failure_is_failure_and_lists_ids_sorted() -> None:
    results = [result("c-3", "failed", message="boom"), result("c-2", "skipped"), result("c-1", "failed"),
               result("c-0", "passed")]
    report = report_for(results)
    core = profile(report, "consumer")["core"]
    assert core["result"] == "failure"
    assert core["statistics"] == {"passed": 1, "failed": 2, "skipped": 1}
    assert core["failedTests"] == ["c-1", "c-3"]
    assert core["failuresByFeature"] == {"overlayValidation": ["c-1", "c-3"]}
    assert core["failures"] == [{"id": "c-1", "feature": "overlayValidation", "message": ""},
                                {"id": "c-3", "feature": "overlayValidation", "message": "boom"}]
    assert report["summary"] == {"verdict": "failed", "passed": False, "reasons": ["consumer: 2 core test(s) failed"],
                                 "failuresByFeature": [
        {"profile": "consumer", "level": "core", "feature": "overlayValidation", "failed": 2,
         "tests": ["c-1", "c-3"]}]}
    assert not core_passed(report)


def test_failures_are_grouped_by_feature() -> None:
    results = [result(f"AFF-{i}", "failed", level="extended", feature="cookieAffinity") for i in (3, 1, 6, 2, 5, 4)]
    results += [result("SEL-1", "failed", feature="selection"), result("SEL-2", "passed", feature="selection"),
                result("REV-1", "failed", feature="revision"), result("REV-2", "failed", feature="revision"),
                result("P-1", "failed", profile="provider", feature="peerTrust")]
    report = report_for(results, profiles=("consumer", "provider"), claimed=frozenset({"cookieAffinity"}))
    consumer = profile(report, "consumer")
    assert consumer["extended"]["failuresByFeature"] == {"cookieAffinity": [f"AFF-{i}" for i in range(1, 7)]}
    assert consumer["extended"]["failedTests"] == [f"AFF-{i}" for i in range(1, 7)]  # ids stay as they were
    assert consumer["core"]["failuresByFeature"] == {"revision": ["REV-1", "REV-2"], "selection": ["SEL-1"]}
    assert list(consumer["core"]["failuresByFeature"]) == ["revision", "selection"]
    assert [f["feature"] for f in consumer["core"]["failures"]] == ["revision", "revision", "selection"]
    rows = report["summary"]["failuresByFeature"]
    assert [(r["profile"], r["level"], r["feature"], r["failed"]) for r in rows] == [
        ("consumer", "core", "revision", 2), ("consumer", "core", "selection", 1),
        ("consumer", "extended", "cookieAffinity", 6), ("provider", "core", "peerTrust", 1)]
    assert rows[2]["tests"] == [f"AFF-{i}" for i in range(1, 7)]
    assert "failuresByFeature" not in report_for([result("c-1", "passed")])["summary"]


def test_failures_by_feature_reads_reports_without_the_key() -> None:
    from harness.report.writer import failures_by_feature

    old = {"failedTests": ["c-1", "c-2"], "failures": [{"id": "c-1", "message": "m"}, {"id": "c-2"}]}
    assert failures_by_feature(old) == {"?": ["c-1", "c-2"]}
    assert failures_by_feature({"failedTests": ["c-1"], "failures": [{"id": "c-1", "feature": "ttl"}]}) == {
        "ttl": ["c-1"]}
    assert failures_by_feature({"failedTests": []}) == {} and failures_by_feature({}) == {}
    assert failures_by_feature({"failuresByFeature": {"ttl": ["c-9"]}, "failedTests": ["c-9"]}) == {"ttl": ["c-9"]}


def test_a_failing_test_of_a_claimed_feature_fails_the_run() -> None:
    """Core passed, but the implementation claimed weightedRandom and its test failed: the verdict is failed
    (Gateway API conformance fails a supported feature's failure too); core_passed still tells core apart."""
    results = [result("c-1", "passed"),
               result("e-1", "failed", level="extended", feature="weightedRandom", message="share off")]
    report = report_for(results, claimed=frozenset({"weightedRandom"}))
    extended = profile(report, "consumer")["extended"]
    assert extended["result"] == "failure" and extended["failedTests"] == ["e-1"]
    assert report["summary"] == {"verdict": "failed", "passed": False,
                                 "reasons": ["consumer: 1 claimed extended feature test(s) failed"],
                                 "failuresByFeature": [{"profile": "consumer", "level": "extended",
                                                        "feature": "weightedRandom", "failed": 1, "tests": ["e-1"]}]}
    assert core_passed(report)
    twin = report_for([result("c-1", "passed"), result("e-1", "passed", level="extended", feature="weightedRandom")],
                      claimed=frozenset({"weightedRandom"}))
    assert twin["summary"] == {"verdict": "passed", "passed": True}


def test_a_run_that_judged_nothing_is_never_passed() -> None:
    """No result at all, or only skipped and unsupported ones: not judged, and summary.passed is false."""
    for results in ([], [result("e-1", "unsupported", level="extended", feature="cookieAffinity")]):
        summary = report_for(results)["summary"]
        assert summary["verdict"] == "notJudged" and summary["passed"] is False, summary
    assert report_for([result("c-1", "passed")])["summary"]["verdict"] == "passed"


def test_unsupported_features_are_reported_not_counted() -> None:
    results = [
        result("e-1", "passed", level="extended", feature="weightedRandom"),
        result("e-2", "unsupported", level="extended", feature="cookieAffinity"),
        result("e-3", "unsupported", level="extended", feature="cookieAffinity"),
        result("e-4", "unsupported", level="extended", feature="mcpToolRouting"),
    ]
    claimed = frozenset({"weightedRandom", "skipPaths"})  # skipPaths has no test in this profile
    extended = profile(report_for(results, claimed=claimed), "consumer")["extended"]
    assert extended["result"] == "success"
    assert extended["statistics"] == {"passed": 1, "failed": 0, "skipped": 0}
    assert extended["skippedTests"] == []
    assert extended["supportedFeatures"] == ["weightedRandom"]
    assert extended["unsupportedFeatures"] == ["cookieAffinity", "mcpToolRouting"]


def test_features_are_per_profile() -> None:
    results = [result("p-e-1", "passed", profile="provider", level="extended", feature="prometheusMetrics"),
               result("c-e-1", "skipped", level="extended", feature="weightedRandom")]
    report = report_for(results, profiles=("consumer", "provider"),
                        claimed=frozenset({"prometheusMetrics", "weightedRandom"}))
    assert profile(report, "consumer")["extended"]["supportedFeatures"] == ["weightedRandom"]
    assert profile(report, "consumer")["extended"]["result"] == "partial"
    assert profile(report, "provider")["extended"]["supportedFeatures"] == ["prometheusMetrics"]


def test_selected_profile_without_tests_still_appears() -> None:
    report = report_for([result("c-1", "passed")], profiles=("consumer", "mesh"))
    assert report["summary"]["passed"] is True  # nothing failed: an empty profile does not fail the run
    assert [p["name"] for p in report["profiles"]] == ["consumer", "mesh"]
    mesh = profile(report, "mesh")
    for level in ("core", "extended"):
        assert mesh[level]["result"] == "notRun"
        assert mesh[level]["statistics"] == {"passed": 0, "failed": 0, "skipped": 0}
    assert mesh["extended"]["supportedFeatures"] == [] and mesh["extended"]["unsupportedFeatures"] == []


def test_profile_seen_in_results_but_not_selected_is_reported() -> None:
    report = report_for([result("m-1", "failed", profile="mesh")], profiles=("consumer",))
    assert [p["name"] for p in report["profiles"]] == ["consumer", "mesh"]
    assert report["summary"]["passed"] is False


def test_failure_messages_are_truncated_keeping_both_ends() -> None:
    message = "START " + "x" * 10_000 + " assert 3 == 4"
    report = report_for([result("c-1", "failed", message=message)])
    shown = profile(report, "consumer")["core"]["failures"][0]["message"]
    assert len(shown) <= MESSAGE_LIMIT + 60
    assert shown.startswith("START ") and shown.endswith("assert 3 == 4")
    assert "characters omitted" in shown
    assert truncate_message("short") == "short"


def test_dates_are_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    aware = build_report([], IMPL, backend="kind", harness_version="x", profiles=(), features_claimed=(),
                         date=datetime(2026, 1, 1, 1, 30, tzinfo=plus_two))
    assert aware["date"] == "2025-12-31T23:30:00Z"
    naive = build_report([], IMPL, backend="kind", harness_version="x", profiles=(), features_claimed=(),
                         date=datetime(2026, 1, 1, 1, 30))
    assert naive["date"] == "2026-01-01T01:30:00Z"
    now = build_report([], IMPL, backend="kind", harness_version="x", profiles=(), features_claimed=())
    parsed = datetime.strptime(now["date"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(parsed - datetime.now(UTC)) < timedelta(minutes=5)


def test_test_result_rejects_unknown_outcome_and_level() -> None:
    with pytest.raises(ValueError, match="outcome"):
        result("c-1", "flaky")
    with pytest.raises(ValueError, match="level"):
        result("c-1", "passed", level="optional")


# ------------------------------------------------------------------------------------------------ YAML


def test_yaml_round_trip(tmp_path: Path) -> None:
    results = [result("c-1", "failed", message="line one\nline: two # not a comment"),
               result("e-1", "unsupported", level="extended", feature="cookieAffinity")]
    report = report_for(results, profiles=("consumer", "producer"))
    path = write_yaml(report, tmp_path / "out" / "report.yaml")
    assert load_report(path) == report
    text = path.read_text(encoding="utf-8")
    assert text.startswith(f"apiVersion: {API_VERSION}\nkind: {KIND}\n")
    assert not list(tmp_path.joinpath("out").glob("*.tmp"))
    assert yaml.safe_load(text)["profiles"][0]["core"]["failures"][0]["message"].endswith("# not a comment")


def test_load_report_rejects_missing_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no conformance report"):
        load_report(tmp_path / "missing.yaml")
    foreign = tmp_path / "foreign.yaml"
    foreign.write_text("kind: Deployment\napiVersion: apps/v1\n", encoding="utf-8")
    with pytest.raises(ReportError, match="not a ConformanceReport"):
        load_report(foreign)
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [", encoding="utf-8")
    with pytest.raises(ReportError, match="cannot read"):
        load_report(broken)


def test_load_report_reads_a_report_written_before_failures_were_grouped(tmp_path: Path) -> None:
    report = report_for([result("c-1", "failed", message="boom"), result("c-2", "passed")])
    for section in report["profiles"]:
        for level in ("core", "extended"):
            del section[level]["failuresByFeature"]
            for failure in section[level]["failures"]:
                del failure["feature"]
    del report["summary"]["failuresByFeature"]
    path = write_yaml(report, tmp_path / "old.yaml")
    loaded = load_report(path)
    assert loaded == report and not core_passed(loaded)
    page = render_html(loaded, [])
    assert "Failures by feature" in page and "c-1" in page


def test_core_passed_does_not_trust_a_contradicting_summary() -> None:
    report = report_for([result("c-1", "failed")])
    report["summary"]["passed"] = True
    assert not core_passed(report)
    assert not core_passed({"summary": {"passed": "yes"}, "profiles": []})
    assert core_passed(report_for([result("c-1", "passed")]))


# ------------------------------------------------------------------------------------------- demo level


def demo(test_id: str, outcome: str, message: str = "") -> TestResult:
    return result(test_id, outcome, profile="demos", level="demo", feature="grid-combined-site", message=message)


def test_demo_tests_have_a_section_of_their_own_and_a_failure_fails_the_run() -> None:
    passing = report_for([demo("DEMO-A", "passed")], profiles=("demos",))
    section = profile(passing, "demos")
    assert section["demo"]["result"] == "success" and section["core"]["result"] == "notRun"
    assert passing["summary"]["passed"] is True and core_passed(passing)
    failing = report_for([demo("DEMO-A", "passed"), demo("DEMO-B", "failed", "E boom")], profiles=("demos",))
    assert profile(failing, "demos")["demo"]["failedTests"] == ["DEMO-B"]
    assert failing["summary"]["passed"] is False and not core_passed(failing)
    assert failing["summary"]["failuresByFeature"] == [
        {"profile": "demos", "level": "demo", "feature": "grid-combined-site", "failed": 1, "tests": ["DEMO-B"]}]


def test_not_applicable_claims_are_listed_with_their_reason_and_are_not_skips() -> None:
    report = report_for([demo("DEMO-A", "passed"),
                         demo("DEMO-NA[POLICY]", "notApplicable", "Skipped: not applicable: a NetworkPolicy")],
                        profiles=("demos",))
    section = profile(report, "demos")["demo"]
    assert section["result"] == "success" and section["statistics"] == {"passed": 1, "failed": 0, "skipped": 0}
    assert section["notApplicable"] == [{"id": "DEMO-NA[POLICY]", "feature": "grid-combined-site",
                                         "reason": "a NetworkPolicy"}]
    assert "notApplicable" not in profile(report_for([demo("DEMO-A", "passed")], profiles=("demos",)), "demos")["demo"]


def test_a_demos_run_whose_demo_tests_all_skipped_is_not_judged() -> None:
    report = report_for([demo("DEMO-A", "skipped", "no Docker")], profiles=("demos",))
    assert report["summary"]["notJudged"] == [{"profile": "demos", "reason": "no Docker"}]
    judged = report_for([demo("DEMO-A", "passed")], profiles=("demos",))
    assert "notJudged" not in judged["summary"]


def test_timelines_travel_in_the_report_and_the_page_draws_them(tmp_path: Path) -> None:
    events = ({"t": 0.1, "kind": "request", "servedBy": "inference-west", "status": 200},)
    with_timeline = TestResult(id="DEMO-T", profile="demos", level="demo", feature="grid-combined-site", spec="s",
                               outcome="passed", duration_s=1.0, timeline=events)
    report = report_for([with_timeline, demo("DEMO-U", "passed")], profiles=("demos",))
    assert report["timelines"] == {"DEMO-T": list(events)}
    path = write_yaml(report, tmp_path / "r.yaml")
    assert load_report(path)["timelines"] == {"DEMO-T": list(events)}
    page = render_html(report, [with_timeline])
    assert "Evidence: served shares" in page and 'class="plotly-lazy"' in page
    assert "Evidence:" not in render_html(report_for([demo("DEMO-U", "passed")], profiles=("demos",)), [])


def test_the_report_leaves_a_failures_diagnostics_to_the_page() -> None:
    events = ({"t": 0.1, "kind": "revision", "stage": "serving", "revision": "r1", "site": "west"},
              {"t": 0.2, "kind": "diagnostics", "title": "grid", "text": "gateway log"})
    failing = TestResult(id="C-1", profile="consumer", level="core", feature="hotReload", spec="s", outcome="failed",
                         duration_s=1.0, message="boom", timeline=events)
    only_logs = TestResult(id="C-2", profile="consumer", level="core", feature="hotReload", spec="s",
                           outcome="failed", duration_s=1.0, message="boom", timeline=events[1:])
    report = report_for([failing, only_logs])
    assert report["timelines"] == {"C-1": [events[0]]}
    assert "gateway log" in render_html(report, [failing, only_logs])


def test_one_test_the_environment_kept_from_being_judged_makes_the_run_not_judged() -> None:
    """A cluster that could not be created for one test of many: the run is notJudged (never passed, never
    failed for it); a failure elsewhere wins, with the test not judged listed beside it."""
    environment = "Skipped: not judged (environment): the kind clusters could not be made ready: port in use"
    passed = result("CONS-A", "passed")
    unjudged = result("CONS-B", "notJudged", message=environment)
    report = report_for([passed, unjudged])
    core = profile(report, "consumer")["core"]
    assert core["statistics"] == {"passed": 1, "failed": 0, "skipped": 0, "notJudged": 1}
    assert core["result"] == "partial" and core["notJudgedTests"][0]["id"] == "CONS-B"
    summary = report["summary"]
    assert summary["verdict"] == "notJudged" and summary["passed"] is False
    assert summary["reasons"] == ["consumer: 1 core test(s) not judged (not judged (environment): the kind "
                                  "clusters could not be made ready: port in use)"]
    failing = report_for([passed, unjudged, result("CONS-C", "failed", message="boom")])["summary"]
    assert failing["verdict"] == "failed"
    assert failing["reasons"][0] == "consumer: 1 core test(s) failed" and "not judged" in failing["reasons"][1]
    # the twin: without the test the environment kept out, the same run passes
    assert report_for([passed])["summary"]["verdict"] == "passed"
