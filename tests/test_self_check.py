"""`agn-conformance self-check`, as a user runs it: the shipped breakages are caught, the implementation
passes, and a descriptor's own breakage is caught only when the build it names is really broken."""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from harness.impl import Implementation, reference_document
from harness.report.model import TestResult
from harness.report.writer import build_report
from selfcheck import command
from selfcheck.command import Planned, descriptor_breakage_verdict, implementation_verdict
from selfcheck.judge import CaseResult, SuiteRun, hand_made_run
from selfcheck.profiles import CONSUMER
from selfcheck.targets import SuiteTest, Targets
from tests.prepared_runs import PreparedRuns

SWAP = "CONS-REV-UNCHANGED-NO-SWAP"
# The implementation's own run is restricted to two tests to keep this quick; the verdict says so.
QUICK = ["--implementation-test", SWAP, "--implementation-test", "CONS-404-UNKNOWN-MODEL"]


def _self_check(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", "self-check", *args], capture_output=True, text=True,
                          timeout=600, check=False, cwd=cwd)


def test_shipped_breakages_are_caught_and_the_reference_passes(tmp_path: Path) -> None:
    done = _self_check("--profile", "consumer", "--breakage", "unchanged-swaps", "--breakage", "slow-reload", *QUICK,
                       "--workdir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"consumer: unchanged-swaps -> caught by {SWAP}" in done.stdout, done.stdout
    assert "consumer: slow-reload -> caught by CONS-RELOAD-DEADLINE" in done.stdout, done.stdout
    assert "[3/3]" in done.stdout and "implementation (" in done.stdout, done.stdout  # progress, numbered
    assert "SELF-CHECK PASSED" in done.stdout
    assert (tmp_path / "runs" / "consumer" / "unchanged-swaps" / "junit.xml").is_file()  # kept where asked


def test_a_descriptor_breakage_counts_only_when_its_build_is_broken(tmp_path: Path) -> None:
    """Two breakages of the descriptor name the same test: the one whose command really starts a broken gateway
    is caught; the one whose command starts the working gateway is not, and the self-check fails for it."""
    document = reference_document()
    broken = ["{python}", "-m", "selfcheck.launch", "--break", "unchanged-swaps", "-c", "{config}"]
    working = ["{python}", "-m", "reference.gateway", "-c", "{config}"]
    document["breakages"] = [
        {"name": "swaps-on-unchanged", "summary": "a regression we fear", "profile": "consumer", "must_fail": [SWAP],
         "gateway": {"command": broken}},
        {"name": "not-really-broken", "profile": "consumer", "must_fail": [SWAP], "gateway": {"command": working}},
    ]
    descriptor = tmp_path / "vendor.yaml"
    descriptor.write_text(yaml.safe_dump(document))
    done = _self_check("--profile", "consumer", "--impl", str(descriptor), "--breakage", "swaps-on-unchanged",
                       "--breakage", "not-really-broken", *QUICK, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"consumer: swaps-on-unchanged -> caught by {SWAP}" in done.stdout, done.stdout
    assert "consumer: not-really-broken -> NOT CAUGHT" in done.stdout, done.stdout
    assert "SELF-CHECK FAILED: consumer: not-really-broken" in done.stdout, done.stdout


def test_listing_and_unknown_breakages(tmp_path: Path) -> None:
    listed = _self_check("--profile", "consumer", "--list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "consumer: unchanged-swaps: " in listed.stdout and len(listed.stdout.splitlines()) == len(CONSUMER.targets)
    unknown = _self_check("--profile", "consumer", "--breakage", "no-such-breakage", cwd=tmp_path)
    assert unknown.returncode == 2 and "no breakage named no-such-breakage" in unknown.stderr, unknown.stderr


def _run(outcome: str, expected: list[str]) -> SuiteRun:
    result = TestResult(id=SWAP, profile="consumer", level="core", feature="f", spec="s", outcome=outcome,  # type: ignore[arg-type]
                        duration_s=0.1, message="m" if outcome == "failed" else "")
    report = build_report([result], Implementation("o", "p", "1"), backend="local", harness_version="0",
                          profiles=["consumer"], features_claimed=())
    return SuiteRun("hand-made", expected, "", 1 if outcome == "failed" else 0, "", 0.1, report, "", {})


def test_an_implementation_that_fails_a_core_test_fails_the_self_check() -> None:
    assert implementation_verdict("consumer", _run("passed", [SWAP]), None).ok
    failing = implementation_verdict("consumer", _run("failed", [SWAP]), None)
    assert not failing.ok and SWAP in failing.detail
    skipped_only = implementation_verdict("consumer", _run("skipped", [SWAP]), None)
    assert not skipped_only.ok and "not judged" in skipped_only.detail


def test_a_descriptor_breakage_naming_no_test_is_caught_by_any_failure() -> None:
    from harness.impl import parse_impl

    document = reference_document()
    document["breakages"] = [{"name": "b", "profile": "consumer", "gateway": dict(document["gateway"])}]
    (breakage,) = parse_impl(document).breakages
    planned = Planned(CONSUMER, "b", "", breakage)
    assert descriptor_breakage_verdict(planned, _run("failed", [SWAP])).ok
    assert not descriptor_breakage_verdict(planned, _run("passed", [SWAP])).ok


def test_a_long_run_is_reported_while_it_lasts(monkeypatch: pytest.MonkeyPatch) -> None:
    """No run finishing for a while prints which runs are still going, so a long wait never looks hung."""
    monkeypatch.setattr(command, "HEARTBEAT_S", 0.05)
    release = threading.Event()

    class Runs:
        def running(self) -> list[str]:
            release.set()  # the heartbeat asked what runs: now let the run end
            return ["implementation"]

    out = io.StringIO()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(release.wait, 60)
        finished = list(command._as_completed({future: "implementation"}, Runs(), "consumer",  # type: ignore[arg-type]
                                              command.Printer(out, 1)))
    assert finished == [future] and future.result() is True
    assert "] consumer: implementation; 1 runs left" in out.getvalue(), out.getvalue()


def test_a_statistical_breakage_missed_once_is_judged_on_a_second_run() -> None:
    """Targets.statistical: a miss stands only when a second run of the targets misses too."""
    tests = {"CONS-X": SuiteTest("suites.consumer.test_x", "test_x")}
    profile = dataclasses.replace(CONSUMER, targets={"b": Targets(("CONS-X",), statistical=True)})
    planned = Planned(profile, "b", "")
    missed = hand_made_run(profile, "CONS-X", "passed", CaseResult("test_x"), returncode=0)
    caught = hand_made_run(profile, "CONS-X", "failed", CaseResult("test_x", failures=["AssertionError: x"]))

    runs = PreparedRuns(caught)
    verdict = command.shipped_breakage_verdict(planned, missed, tests, runs)  # type: ignore[arg-type]
    assert verdict.ok and "second run" in verdict.detail and runs.labels == ["b-again"], verdict
    both = command.shipped_breakage_verdict(planned, missed, tests, PreparedRuns(missed))  # type: ignore[arg-type]
    assert not both.ok and both.detail.count("cannot see this breakage") == 2, both
    # the twin: a breakage caught at once needs no second run
    runs = PreparedRuns()
    first = command.shipped_breakage_verdict(planned, caught, tests, runs)  # type: ignore[arg-type]
    assert first.ok and "second run" not in first.detail and runs.labels == [], first
