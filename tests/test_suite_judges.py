"""Every consumer conformance test can fail: the suite, run against deliberately broken gateways.

Each breakage (tests/broken/breakages.py) is plugged into the consumer suite the way a vendor gateway is,
through an implementation descriptor, and the suite runs only that breakage's target tests
(tests/broken/targets.py). Every target must fail, and fail for the right reason: inside the test body,
not because the broken gateway could not start (unless refusing to start is the breakage). A target that
passes means the suite cannot see that breakage. A separate test checks that the targets of all
breakages together cover every conformance test of the suite.

Runs execute as subprocesses, a few at a time, all started when the session begins; under pytest-xdist
each worker runs its own breakages one after another instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from harness.impl import EXTENDED_FEATURES, Implementation, load_impl
from harness.report.model import TestResult
from harness.report.writer import ReportError, build_report, load_report
from tests.broken.targets import (
    SUITE,
    TARGETS,
    SuiteTest,
    Targets,
    expand,
    keyword_expression,
    load_ids,
    modules,
)

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 240.0
COLLECT_TIMEOUT_S = 120.0
JOBS_ENV = "AGN_JUDGE_JOBS"
DEFAULT_JOBS = 3
STARTUP_FAILURE = "GatewayStartFailed: "
TESTS_FAILED = int(pytest.ExitCode.TESTS_FAILED)
# Runs that take longest start first, so the parallel runs finish close together.
SLOW_FIRST = ("drop-lkg-on-reject", "ignore-groups", "wrong-revision-header", "weights-off", "accept-wrong-digest",
              "reload-once", "accept-any-cold-start", "random-biased", "slow-reload")
# A gateway command that never starts: the judge must not take its failures for a verdict.
CANNOT_START = "cannot-start"
CANNOT_START_TARGETS = Targets(("CONS-HOP-NO-CREDENTIAL", "CONS-404-UNKNOWN-MODEL"))
NO_SUCH_BREAKAGE = "no-such-breakage"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


# ------------------------------------------------------------------------------------------ one run


@dataclass
class CaseResult:
    """One pytest item of a run, from the JUnit XML: where it failed and the full failure text."""

    name: str
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: bool = False


@dataclass
class SuiteRun:
    label: str
    expected: list[str]
    keyword: str
    returncode: int | None
    output: str
    seconds: float
    report: dict[str, Any] | None
    report_problem: str
    cases: dict[str, CaseResult]

    def describe(self) -> str:
        return (f"run {self.label}: pytest exit {self.returncode} after {self.seconds:.1f}s, -k {self.keyword!r}\n"
                f"--- output (tail) ---\n{_tail(self.output)}")


def write_descriptor(path: Path, breakage: str) -> Path:
    """An implementation descriptor for the broken gateway, claiming every extended feature."""
    descriptor = {
        "implementation": {"organization": "agn-conformance", "project": f"broken-gateway-{breakage}",
                           "version": "0.0.0", "contact": ["tests/broken"]},
        "gateway": {"command": ["{python}", "-m", "tests.broken.launch", "--break", breakage, "-c", "{config}"],
                    "env": {"PYTHONPATH": str(REPO)}, "startup_timeout_s": 20},
        "features": sorted(EXTENDED_FEATURES),
    }
    path.write_text(yaml.safe_dump(descriptor, sort_keys=False))
    load_impl(str(path))  # the harness must accept it exactly as it accepts a vendor's
    return path


def _junit_cases(path: Path) -> dict[str, CaseResult]:
    if not path.is_file():
        return {}
    cases: dict[str, CaseResult] = {}
    for element in ET.parse(path).getroot().iter("testcase"):
        name = element.get("name", "?")
        case = cases.setdefault(name, CaseResult(name))
        for child in element:
            text = f"{child.get('message', '')}\n{child.text or ''}"
            if child.tag == "failure":
                case.failures.append(text)
            elif child.tag == "error":
                case.errors.append(text)
            elif child.tag == "skipped":
                case.skipped = True
    return cases


def _stop_group(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """Interrupt a run (pytest then tears its grid down), and kill it if it lingers."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


class SuiteRuns:
    """Runs the consumer suite against broken gateways in subprocesses, a few at a time."""

    def __init__(self, workdir: Path, tests: Mapping[str, SuiteTest], jobs: int) -> None:
        self.workdir = workdir
        self.tests = dict(tests)
        self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="suite-run")
        self._futures: dict[str, Future[SuiteRun]] = {}
        self._live: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, label: str, breakage: str, targets: Targets) -> Future[SuiteRun]:
        """Start (once per label) a run of `targets` against the gateway broken by `breakage`."""
        with self._lock:
            if label not in self._futures:
                self._futures[label] = self._pool.submit(self._run, label, breakage, targets)
            return self._futures[label]

    def close(self) -> None:
        """Cancel queued runs, interrupt running ones and wait for their processes to end."""
        with self._lock:
            self._closed = True
            for future in self._futures.values():
                future.cancel()
            live = list(self._live)
        for proc in live:
            _stop_group(proc)
        self._pool.shutdown(wait=True)

    def _run(self, label: str, breakage: str, targets: Targets) -> SuiteRun:
        directory = self.workdir / label
        directory.mkdir(parents=True, exist_ok=True)
        descriptor = write_descriptor(directory / "impl.yaml", breakage)
        report, junit = directory / "report.yaml", directory / "junit.xml"
        expected = expand(targets.ids, self.tests)
        keyword = keyword_expression(expected, self.tests)
        # Only the suite modules holding the targets are imported; -k picks the targets inside them.
        argv = [sys.executable, "-m", "pytest", "--pyargs", *modules(expected, self.tests), "-p", "no:cacheprovider",
                "-q", "--impl", str(descriptor), "--conformance-report", str(report), "--junitxml", str(junit),
                "-k", keyword]
        started = time.monotonic()
        with self._lock:
            if self._closed:
                raise RuntimeError("the suite runs were closed before this run started")
            proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            self._live.add(proc)
        try:
            try:
                out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _stop_group(proc)
                out, _ = proc.communicate()
                out += f"\n[stopped after {RUN_TIMEOUT_S:.0f}s]".encode()
        finally:
            with self._lock:
                self._live.discard(proc)
        loaded: dict[str, Any] | None = None
        problem = ""
        try:
            loaded = load_report(report)
        except ReportError as exc:
            problem = str(exc)
        return SuiteRun(label, expected, keyword, proc.returncode, out.decode(errors="replace"),
                        time.monotonic() - started, loaded, problem, _junit_cases(junit))


# ------------------------------------------------------------------------------------------- judging


def report_outcomes(report: Mapping[str, Any]) -> tuple[int, dict[str, str], list[str]]:
    """(tests run, failed id -> message, skipped ids) over every profile and level of a report."""
    total = 0
    failed: dict[str, str] = {}
    skipped: list[str] = []
    for profile in report.get("profiles") or []:
        for level in ("core", "extended"):
            section = profile.get(level) or {}
            stats = section.get("statistics") or {}
            total += sum(int(stats.get(key, 0)) for key in ("passed", "failed", "skipped"))
            messages = {f["id"]: f.get("message", "") for f in section.get("failures") or []}
            for test_id in section.get("failedTests") or []:
                failed[test_id] = messages.get(test_id, "")
            skipped.extend(section.get("skippedTests") or [])
    return total, failed, skipped


def judge(run: SuiteRun, targets: Targets, tests: Mapping[str, SuiteTest]) -> list[str]:
    """Why `run` does not show that every target fails for the right reason; empty when it does."""
    if run.report is None:
        return [f"no conformance report ({run.report_problem})"]
    total, failed, skipped = report_outcomes(run.report)
    problems: list[str] = []
    passed = [test_id for test_id in run.expected if test_id not in failed and test_id not in skipped]
    if passed:
        problems.append(f"the suite cannot see this breakage: these conformance tests passed against it: {passed}")
    if skipped:
        problems.append(f"targets were skipped, so nothing was judged: {skipped}")
    unexpected = sorted((set(failed) | set(skipped)) - set(run.expected))
    if unexpected or total != len(run.expected):
        problems.append(f"{total} conformance tests ran ({unexpected} not targets); targets: {run.expected}")
    if run.returncode != TESTS_FAILED:
        problems.append(f"pytest ended with exit code {run.returncode}, not {TESTS_FAILED} (tests failed)")
    for test_id in sorted(set(run.expected) & set(failed)):
        case = run.cases.get(tests[test_id].name)
        if case is None or not case.failures:
            errors = _tail(case.errors[0], 12) if case is not None and case.errors else "nothing recorded"
            problems.append(f"{test_id}: did not fail inside the test body: {errors}")
            continue
        text = "\n".join(case.failures + case.errors)
        if case.errors:
            problems.append(f"{test_id}: error outside the test body: {_tail(case.errors[0], 12)}")
        if STARTUP_FAILURE in text and not targets.startup_failure:
            problems.append(f"{test_id}: a gateway failed to start: {_tail(text, 12)}")
        if targets.expect is not None and targets.expect not in text:
            problems.append(f"{test_id}: the failure does not mention {targets.expect!r}: {_tail(text, 12)}")
    return problems


# ------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def suite_ids() -> dict[str, SuiteTest]:
    """Every consumer conformance id (``ID`` or ``ID[param]``) -> the module and pytest item that run it."""
    done = subprocess.run([sys.executable, "-m", "tests.broken.targets"], cwd=REPO, env=_env(),
                          capture_output=True, timeout=COLLECT_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"collecting {SUITE} failed:\n{done.stderr.decode(errors='replace')}"
    tests = load_ids(done.stdout.decode())
    assert tests, f"{SUITE} has no conformance tests"
    return tests


def _selected_breakages(items: Sequence[pytest.Item]) -> set[str]:
    """The breakages whose judge test is selected in this session."""
    selected: set[str] = set()
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "originalname", None) == "test_suite_fails_every_target" and "breakage" in params:
            selected.add(params["breakage"])
    return selected


def _start_order(breakage: str) -> int:
    return SLOW_FIRST.index(breakage) if breakage in SLOW_FIRST else len(SLOW_FIRST)


@pytest.fixture(scope="session")
def suite_runs(request: pytest.FixtureRequest, suite_ids: dict[str, SuiteTest],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[SuiteRuns]:
    under_xdist = "PYTEST_XDIST_WORKER" in os.environ
    jobs = 1 if under_xdist else max(1, int(os.environ.get(JOBS_ENV, DEFAULT_JOBS)))
    runs = SuiteRuns(tmp_path_factory.mktemp("suite-runs"), suite_ids, jobs)
    if not under_xdist:  # start every selected run now, longest first; the tests then wait for theirs
        for name in sorted(_selected_breakages(request.session.items), key=_start_order):
            runs.submit(name, name, TARGETS[name])
        if any(getattr(item, "originalname", None) == "test_gateway_that_cannot_start_is_no_verdict"
               for item in request.session.items):
            runs.submit(CANNOT_START, NO_SUCH_BREAKAGE, CANNOT_START_TARGETS)
    try:
        yield runs
    finally:
        runs.close()


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("breakage", list(TARGETS))
def test_suite_fails_every_target(breakage: str, suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    run = suite_runs.submit(breakage, breakage, TARGETS[breakage]).result()
    problems = judge(run, TARGETS[breakage], suite_ids)
    assert not problems, f"breakage {breakage}:\n" + "\n".join(problems) + "\n" + run.describe()


def test_targets_cover_every_consumer_conformance_test(suite_ids: dict[str, SuiteTest]) -> None:
    covered: set[str] = set()
    for breakage, targets in TARGETS.items():
        try:
            covered.update(expand(targets.ids, suite_ids))
        except ValueError as exc:
            pytest.fail(f"breakage {breakage}: {exc}")
    uncovered = sorted(set(suite_ids) - covered)
    assert not uncovered, f"no breakage shows that these conformance tests can fail: {uncovered}"


def test_every_breakage_has_targets() -> None:
    from tests.broken.breakages import BREAKAGES

    assert set(BREAKAGES) == set(TARGETS), (
        f"without targets: {sorted(set(BREAKAGES) - set(TARGETS))}; "
        f"not registered: {sorted(set(TARGETS) - set(BREAKAGES))}")
    assert all(targets.ids for targets in TARGETS.values())


def test_unknown_breakage_is_refused() -> None:
    done = subprocess.run([sys.executable, "-m", "tests.broken.launch", "--break", NO_SUCH_BREAKAGE,
                           "-c", "praxis.yaml"], cwd=REPO, env=_env(), capture_output=True, timeout=60,
                          check=False)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 2, stderr
    assert NO_SUCH_BREAKAGE in stderr and "drop-lkg-on-reject" in stderr, stderr


def test_gateway_that_cannot_start_is_no_verdict(suite_runs: SuiteRuns, suite_ids: dict[str, SuiteTest]) -> None:
    """Targets failing because the gateway never started must not count as the suite seeing a breakage."""
    run = suite_runs.submit(CANNOT_START, NO_SUCH_BREAKAGE, CANNOT_START_TARGETS).result()
    problems = judge(run, CANNOT_START_TARGETS, suite_ids)
    assert run.report is not None and report_outcomes(run.report)[0] == len(run.expected), run.describe()
    assert any("did not fail inside the test body" in p for p in problems), problems


# Judging, on hand-made runs: what each verdict looks like.

_TEST = SuiteTest("suites.consumer.test_x", "test_x")
_IDS = {"CONS-X": _TEST}
_BODY_FAILURE = "AssertionError: served provider-a\nsuites/consumer/test_x.py:10: AssertionError"
_START_FAILURE = "harness.backends.local.GatewayStartFailed: gateway /ready: process exited with 2"


def _run(outcome: Literal["passed", "failed"], case: CaseResult, returncode: int = TESTS_FAILED) -> SuiteRun:
    result = TestResult(id="CONS-X", profile="consumer", level="core", feature="f", spec="s",
                        outcome=outcome, duration_s=0.1, message="m" if outcome == "failed" else "")
    report = build_report([result], Implementation("o", "p", "1"), backend="local", harness_version="0",
                          profiles=["consumer"], features_claimed=())
    return SuiteRun("hand-made", ["CONS-X"], "test_x", returncode, "", 0.0, report, "", {"test_x": case})


def test_judge_accepts_a_failure_in_the_test_body() -> None:
    assert judge(_run("failed", CaseResult("test_x", failures=[_BODY_FAILURE])), Targets(("CONS-X",)), _IDS) == []


def test_judge_reports_a_target_that_passed() -> None:
    problems = judge(_run("passed", CaseResult("test_x"), returncode=0), Targets(("CONS-X",)), _IDS)
    assert problems and "cannot see this breakage" in problems[0] and "CONS-X" in problems[0], problems


def test_judge_rejects_failures_for_the_wrong_reason() -> None:
    setup_error = _run("failed", CaseResult("test_x", errors=[_START_FAILURE]))
    assert any("did not fail inside the test body" in p for p in judge(setup_error, Targets(("CONS-X",)), _IDS))
    in_body = _run("failed", CaseResult("test_x", failures=[_START_FAILURE]))
    assert any("failed to start" in p for p in judge(in_body, Targets(("CONS-X",)), _IDS))
    assert judge(in_body, Targets(("CONS-X",), startup_failure=True), _IDS) == []
    unexplained = judge(_run("failed", CaseResult("test_x", failures=[_BODY_FAILURE])),
                        Targets(("CONS-X",), expect="DID NOT RAISE"), _IDS)
    assert any("does not mention 'DID NOT RAISE'" in p for p in unexplained), unexplained
