"""`agn-conformance run --submission DIR`: a folder a reviewer can read and reproduce, for a vendor's gateway."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.impl import reference_document
from harness.report.writer import load_report
from harness.submission import SubmissionError, check_version, diagnostics_name

SWAP_TEST = "test_rerender_with_same_revision_keeps_round_robin_state"
SWAP = "CONS-REV-UNCHANGED-NO-SWAP"


def _vendor(tmp_path: Path, version: str, command: list[str] | None = None) -> Path:
    """A descriptor as a vendor writes one: their own names and version, their gateway's command."""
    document: dict[str, Any] = reference_document()
    document["implementation"] = {"organization": "Example Networks", "project": "edge-gateway", "version": version,
                                  "contact": ["mailto:conformance@example.invalid"],
                                  "version_command": ["{python}", "-c", "print('edge-gateway 2.4.1 (build 77)')"]}
    if command is not None:
        document["gateway"] = {"command": command}
    path = tmp_path / "edge-gateway.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _run(tmp_path: Path, descriptor: Path, *tests: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", "run", "--profile", "consumer",
                           "--impl", str(descriptor), "--submission", str(tmp_path / "out"),
                           "--", "-k", " or ".join(tests), "-p", "no:xdist"],
                          capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)


@pytest.mark.parametrize("version", ["main", "master", "HEAD", "", "  ", "latest", "stable", "nightly", "dev"])
def test_a_branch_name_is_not_a_version(version: str) -> None:
    check_version("v2.4.1")  # the twin: a release tag is accepted
    check_version("3f2c1e9")
    with pytest.raises(SubmissionError, match="branch name|is empty"):
        check_version(version)


def test_a_submission_with_a_branch_version_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = _run(tmp_path, _vendor(tmp_path, "main"), "test_unknown_model_gets_404")
    assert done.returncode == 2 and "--submission: implementation.version 'main' is a branch name" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_failing_vendor_run_gives_a_folder_to_review_and_reproduce(tmp_path: Path) -> None:
    # The vendor's gateway here is the reference with one behaviour broken, started from a plain command.
    broken = [sys.executable, "-m", "selfcheck.launch", "--break", "unchanged-swaps", "-c", "{config}"]
    descriptor = _vendor(tmp_path, "v2.4.1", broken)
    done = _run(tmp_path, descriptor, "test_unknown_model_gets_404", SWAP_TEST)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    report_file = out / "consumer-v2.4.1-local-report.yaml"
    report = load_report(report_file)
    assert report["implementation"]["project"] == "edge-gateway"
    assert report["profiles"][0]["core"]["failedTests"] == [SWAP]
    readme = (out / "README.md").read_text()
    for heading in ("## Contents", "## Verdict per profile", "## Features", "## Failures", "## Reproduce"):
        assert heading in readme
    assert "Verdict: **FAILED**" in readme and "| consumer | core | failure | 1 | 1 | 0 |" in readme
    assert f"`{SWAP}`" in readme and f"diagnostics/{diagnostics_name(SWAP)}" in readme
    digest = hashlib.sha256(descriptor.read_bytes()).hexdigest()
    assert digest in readme and (out / "descriptor.yaml").read_bytes() == descriptor.read_bytes()
    assert f"--submission {out}" in readme
    # the harness that judged: its wheel in the folder (an installed harness) or its commit (a development install)
    wheels = list(out.glob("*.whl"))
    if wheels:
        assert f"pip install './out/{wheels[0].name}'" in readme
        assert hashlib.sha256(wheels[0].read_bytes()).hexdigest() in readme
    else:
        assert "pip install ." in readme and "- Harness source commit: `" in readme
    assert report["implementation"]["reportedVersion"]["output"] == "edge-gateway 2.4.1 (build 77)"
    assert "reports it: `edge-gateway 2.4.1 (build 77)`" in readme
    # the command to run again uses the folder's own descriptor and the seed this run chose, and says where it ran
    assert "--impl out/descriptor.yaml --seed " in readme and "--submission out --force" in readme
    assert all(f"- {name}: `" in readme for name in ("Seed", "Workers", "Backend", "Python", "OS"))
    diagnostics = (out / "diagnostics" / diagnostics_name(SWAP)).read_text()
    assert "last overlay written" in diagnostics and "log tail" in diagnostics, diagnostics[:2000]
    assert sorted(p.name for p in (out / "diagnostics").iterdir()) == [diagnostics_name(SWAP)]  # failures only
    names = [case.get("name") for case in ET.parse(out / "junit.xml").getroot().iter("testcase")]
    assert sorted(names) == sorted(["CONS-404-UNKNOWN-MODEL", SWAP])
    assert (out / "consumer-v2.4.1-local-report.html").is_file()


def test_a_run_that_judged_nothing_leaves_an_earlier_submission_alone(tmp_path: Path) -> None:
    """A -k matching nothing judges nothing: no submission is written (exit 2, saying why) and the folder an
    earlier run left keeps every file. A non-empty folder needs --force even for a run that judges something."""
    descriptor = _vendor(tmp_path, "v2.4.1")
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("an earlier run's submission\n")
    refused = _run(tmp_path, descriptor, "test_unknown_model_gets_404")
    assert refused.returncode == 2 and "exists and is not empty; give --force" in refused.stderr, refused.stderr
    nothing = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--profile", "consumer", "--impl",
                              str(descriptor), "--submission", str(out), "--force", "--", "-k", "no_such_test_here",
                              "-p", "no:xdist"], capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert nothing.returncode == 2 and "--submission: refused, the run was not judged" in nothing.stderr, \
        nothing.stdout + nothing.stderr
    assert "NOT JUDGED" in nothing.stdout and "PASSED" not in nothing.stdout, nothing.stdout
    assert [p.name for p in out.iterdir()] == ["README.md"] and "earlier" in (out / "README.md").read_text()
    assert not [p for p in tmp_path.iterdir() if ".staging-" in p.name]
    judged = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--profile", "consumer", "--impl",
                             str(descriptor), "--submission", str(out), "--force", "--html", "page.html",
                             "--junit", "ci/junit.xml", "--", "-k", "test_unknown_model_gets_404", "-p", "no:xdist"],
                            capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert judged.returncode == 0, judged.stdout + judged.stderr
    assert "Verdict: **PASSED**" in (out / "README.md").read_text()
    # --html and --junit with --submission write where asked as well as into the folder
    assert (tmp_path / "page.html").read_bytes() == next(out.glob("*-report.html")).read_bytes()
    assert (tmp_path / "ci" / "junit.xml").read_bytes() == (out / "junit.xml").read_bytes()
    assert load_report(next(out.glob("*-report.yaml")))["summary"]["verdict"] == "passed"
