"""The catalogue of the spec's normative statements: strict loading, verbatim quotes, coverage, markers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import cli
from harness.impl import load_impl
from harness.report.model import TestResult
from harness.report.writer import build_report
from harness.statements import CatalogueError, Statement, by_document, coverage, load_statements

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT.parent / "shared" / "spec"


def _write(tmp_path: Path, entries: list[dict[str, object]]) -> Path:
    path = tmp_path / "statements.yaml"
    path.write_text(yaml.safe_dump({"statements": entries}))
    return path


def _entry(sid: str = "IR-A", **extra: object) -> dict[str, object]:
    return {"id": sid, "doc": "intelligent-route-filter", "section": "Behavior", "quote": "q", "subject": "consumer",
            "kind": "rejects", **extra}


@pytest.mark.parametrize(("entries", "problem"), [
    ([_entry(), _entry()], "statements[1].id: 'IR-A' appears twice"),
    ([_entry(colour="red")], "statements[0].colour: unknown key"),
    ([_entry(subject="gateway")], "statements[0].subject"),
    ([_entry(kind="maybe")], "statements[0].kind"),
    ([_entry(quote="  ")], "statements[0].quote: must be a non-empty string"),
    ([_entry(out_of_scope="")], "statements[0].out_of_scope"),
    ([_entry(pending="gateway")], "statements[0].pending: 'gateway' is not one of demos"),
    ([_entry(out_of_scope="a Helm rule", pending="demos")], "statements[0].pending: a statement out of scope"),
])
def test_a_bad_catalogue_is_refused_naming_the_entry(tmp_path: Path, entries: list[dict[str, object]],
                                                     problem: str) -> None:
    with pytest.raises(CatalogueError, match=re.escape(problem)):
        load_statements(_write(tmp_path, entries))


def test_coverage_joins_tests_reasons_and_gaps() -> None:
    statements = {s.id: s for s in (
        Statement("IR-A", "d1", "s", "q", "consumer", "rejects"),
        Statement("IR-B", "d1", "s", "q", "general", "behaviour", out_of_scope="a Helm chart rule"),
        Statement("OC-C", "d2", "s", "q", "producer", "order"),
        Statement("RG-D", "d2", "s", "q", "serving", "default", pending="serving"),
        Statement("RG-E", "d2", "s", "q", "serving", "default", pending="serving"),
    )}
    rows = coverage(statements, {"CONS-2": ["IR-A"], "CONS-1": ["IR-A"], "SERV-1": ["RG-E"]})
    assert [(r.statement.id, r.status, r.tests, r.detail) for r in rows] == [
        ("IR-A", "covered", ("CONS-1", "CONS-2"), "CONS-1, CONS-2"),
        ("IR-B", "outOfScope", (), "a Helm chart rule"), ("OC-C", "uncovered", (), "NOT ENFORCED"),
        ("RG-D", "pending", (), "pending: the serving profile, not yet shipped"),
        ("RG-E", "covered", ("SERV-1",), "SERV-1")]
    assert by_document(rows) == [
        {"doc": "d1", "statements": 2, "covered": 1, "outOfScope": 1, "pending": 0, "uncovered": 0,
         "uncoveredStatements": []},
        {"doc": "d2", "statements": 3, "covered": 1, "outOfScope": 0, "pending": 1, "uncovered": 1,
         "uncoveredStatements": ["OC-C"]}]
    with pytest.raises(CatalogueError, match="CONS-9: names statement 'XX-1'"):
        coverage(statements, {"CONS-9": ["XX-1"]})


def test_the_shipped_catalogue_loads_with_unique_ids() -> None:
    statements = load_statements()
    assert len(statements) > 100
    assert {s.doc for s in statements.values()} == {
        "intelligent-route-filter", "routing-architecture-and-overlay-contract", "routing-guide", "provider-scoring"}


@pytest.mark.skipif(not SPEC.is_dir(), reason=f"the spec documents are not present at {SPEC}")
def test_every_quote_stands_verbatim_in_its_document() -> None:
    texts = {p.stem: " ".join(p.read_text().split()) for p in SPEC.glob("*.txt")}
    missing = [s.id for s in load_statements().values() if " ".join(s.quote.split()) not in texts[s.doc]]
    assert not missing, f"quotes not found verbatim in their documents: {missing[:10]}"


def test_the_report_shows_coverage_per_document() -> None:
    statements = load_statements()
    first = next(iter(statements))
    results = [TestResult("CONS-X", "consumer", "core", "f", "s", "passed", 0.1, statements=(first,))]
    report = build_report(results, load_impl("reference").implementation, backend="local", harness_version="0",
                          profiles=["consumer"], features_claimed=(), statements=statements)
    row = next(r for r in report["coverage"] if r["doc"] == statements[first].doc)
    assert row["covered"] == 1 and row["statements"] == sum(1 for s in statements.values() if s.doc == row["doc"])


SUITE = '''
import pytest

@pytest.mark.conformance(id="T-1", profile="consumer", level="core", feature="groups", spec="s",
                         statements=[{sid!r}])
def test_one():
    assert True
'''


def _collect(tmp_path: Path, sid: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_tiny.py").write_text(SUITE.format(sid=sid))
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
                           "--conformance-report", str(tmp_path / "r.yaml"), "--conformance-profiles", "consumer"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_marker_naming_an_unknown_statement_is_a_collection_error(tmp_path: Path) -> None:
    known = next(iter(load_statements()))
    ok = _collect(tmp_path, known)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = yaml.safe_load((tmp_path / "r.yaml").read_text())
    assert sum(row["covered"] for row in report["coverage"]) == 1
    bad = _collect(tmp_path, "IR-NO-SUCH-STATEMENT")
    assert bad.returncode == 4 and "IR-NO-SUCH-STATEMENT" in bad.stdout + bad.stderr, bad.stdout + bad.stderr


def test_coverage_command_lists_every_statement(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["coverage", "--profile", "consumer"]) == 0
    out = capsys.readouterr().out
    statements = load_statements()
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert listed == set(statements)
    for doc in {s.doc for s in statements.values()}:
        assert re.search(rf"^{re.escape(doc)}: \d+ statements, \d+ enforced, \d+ out of scope, \d+ pending, "
                         r"\d+ not enforced$", out, re.MULTILINE), doc


GAPS = ROOT / "tests" / "statement_gaps.yaml"


def test_every_statement_has_a_test_a_reason_or_a_listed_gap(capsys: pytest.CaptureFixture[str]) -> None:
    """No normative statement is silently unjudged: each unenforced one is a listed gap, and the list only shrinks."""
    rc = cli.main(["coverage"])
    assert rc == 0
    unenforced = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.endswith("NOT ENFORCED")}
    listed = {str(gap["id"]) for gap in yaml.safe_load(GAPS.read_text())["gaps"]}
    unlisted, closed = sorted(unenforced - listed), sorted(listed - unenforced)
    assert not unlisted, f"statements with no test, no out-of-scope reason, no pending profile and no entry in " \
                         f"{GAPS.name}: {unlisted}"
    assert not closed, f"{GAPS.name} lists statements that now have a test or a reason; remove them: {closed}"
