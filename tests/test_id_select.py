"""Selecting conformance tests by id: exact ids with or without their case, `*` the only wildcard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.id_select import matches, nearest, unmatched
from harness.report.writer import load_report

IDS = ["CONS-SEL-WEIGHTED[70-30]", "CONS-SEL-WEIGHTED[1-1-1]", "CONS-SEL-WEIGHTED-EXTRA", "CONS-SEL-ROUND-ROBIN",
       "CONS-COLD-REJECT[not-json]", "CONS-COLD-REJECT-STRICT[unknown-kind]"]


def _selected(pattern: str) -> list[str]:
    return [test_id for test_id in IDS if matches(pattern, test_id)]


def test_an_id_selects_itself_or_all_its_cases_and_nothing_that_only_starts_like_it() -> None:
    assert _selected("CONS-SEL-WEIGHTED[70-30]") == ["CONS-SEL-WEIGHTED[70-30]"]
    assert _selected("CONS-SEL-WEIGHTED") == ["CONS-SEL-WEIGHTED[70-30]", "CONS-SEL-WEIGHTED[1-1-1]"]
    assert _selected("CONS-SEL-ROUND-ROBIN") == ["CONS-SEL-ROUND-ROBIN"]
    assert _selected("CONS-SEL") == []


def test_star_is_the_only_wildcard_and_brackets_are_literal() -> None:
    assert _selected("CONS-SEL-*") == IDS[:4]
    assert _selected("CONS-COLD-REJECT[*]") == ["CONS-COLD-REJECT[not-json]"]
    assert _selected("CONS-COLD-REJECT[not-json") == []
    assert _selected("CONS-?EL-ROUND-ROBIN") == []


def test_an_id_that_selects_nothing_gets_the_nearest_ids() -> None:
    assert unmatched(["CONS-SEL-ROUND-ROBIN", "CONS-SEL-ROUND-ROBBIN"], IDS) == ["CONS-SEL-ROUND-ROBBIN"]
    assert nearest("CONS-SEL-ROUND-ROBBIN", IDS)[0] == "CONS-SEL-ROUND-ROBIN"


def test_the_readme_one_test_recipe_runs_exactly_that_test(tmp_path: Path) -> None:
    """`agn-conformance run --profile consumer --id ID` runs the one test; an unknown id is refused first."""
    report = tmp_path / "report.yaml"
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--profile", "consumer", "--id",
                           "CONS-404-UNKNOWN-MODEL", "--report", str(report), "--", "-p", "no:xdist"],
                          capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [row["id"] for row in load_report(report)["results"]] == ["CONS-404-UNKNOWN-MODEL"]
    wrong = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--profile", "consumer", "--id",
                            "CONS-404-UNKNOWN", "--report", str(tmp_path / "r2.yaml")],
                           capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert wrong.returncode == 2 and "did you mean CONS-404-UNKNOWN-MODEL" in wrong.stderr, wrong.stderr
    assert not (tmp_path / "r2.yaml").exists()


def test_a_k_expression_matches_conformance_ids_as_list_names_them() -> None:
    """pytest's `-k` matches the conformance id (with its case), not only the function name."""
    listed = subprocess.run([sys.executable, "-m", "harness.cli", "list", "--profile", "consumer", "--",
                             "-k", "CONS-404-UNKNOWN-MODEL or CONS-COLD-REJECT[not-json]"],
                            capture_output=True, text=True, timeout=300, check=False)
    assert listed.returncode == 0, listed.stderr
    ids = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert sorted(ids) == ["CONS-404-UNKNOWN-MODEL", "CONS-COLD-REJECT"], listed.stdout
    cases = [line.split()[1] for line in listed.stdout.splitlines()[1:] if line.startswith("CONS-COLD-REJECT ")]
    assert cases == ["1"], listed.stdout
