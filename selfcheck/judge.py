"""Judging a conformance suite with deliberately broken implementations, for any profile.

A profile names the suite, its breakages and their targets, and how a broken implementation is plugged
in through an implementation descriptor (a broken gateway for the consumer suite, the reference gateway
with a broken operator for the producer suite). Each breakage's target tests run in a subprocess against
the broken implementation; every target must fail inside its test body, not because the broken
component could not start (unless refusing to start is the breakage). A target that passes means the
suite cannot see that breakage, and the targets of all breakages together must cover the whole suite.

Runs are pytest sessions of their own, forked from a server that imported the suite once, a few at a
time, all started when the first test of a judge module needs them. Under pytest-xdist that needs the
whole module on one worker (``--dist loadscope`` or ``loadfile``; the controller tells its workers which,
see `pass_dist`): a worker then starts its module's runs together, as a lone session does. A worker that
holds only some of a module's tests cannot know which, and runs its breakages one after another instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from harness.impl import (
    DYNAMIC_WEIGHTS_FEATURE,
    EXTENDED_FEATURES,
    OVERLAY_SYNC_FEATURE,
    OVERLAY_SYNC_METRICS_FEATURE,
    SIGNALS_RELAY_FEATURE,
    Implementation,
    load_impl,
    reference_document,
)
from harness.report.model import TestResult
from harness.report.writer import ReportError, build_report, load_report
from selfcheck.forkserver import ForkServer
from selfcheck.targets import SuiteTest, Targets, expand, keyword_expression, load_ids, modules

#: Targets are expected to fail; many can only fail by waiting out a deadline, so the judge halves every
#: deadline (the reference, judged by `tox -e conformance`, keeps the full ones).
JUDGE_WAIT_SCALE = 0.5
#: The directory holding the selfcheck, harness and reference packages: the source tree, or site-packages.
ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 240.0
#: Slow targets wait out cadences of up to five minutes each, at their full deadlines.
SLOW_RUN_TIMEOUT_S = 900.0
#: A whole suite at full deadlines (the mesh's is the longest, a few minutes).
FULL_RUN_TIMEOUT_S = 1800.0
SLOW_ENV = "AGN_JUDGE_SLOW"
COLLECT_TIMEOUT_S = 120.0
JOBS_ENV = "AGN_JUDGE_JOBS"
DEFAULT_JOBS = 3
#: Runs at a time for a judge module on a pytest-xdist worker (AGN_JUDGE_JOBS overrides it too). Most runs
#: spend their time waiting out a deadline and leave the CPU idle, so a worker runs more of them at once
#: than a lone session does, while the other workers run other modules.
XDIST_JOBS = 4
#: The key of the xdist controller's distribution mode in a worker's ``workerinput`` (see `pass_dist`).
DIST_KEY = "agn_judge_dist"
#: The pytest-xdist distribution modes that send all the tests of a module to one worker.
WHOLE_MODULE_DISTS = frozenset({"loadscope", "loadfile"})
TESTS_FAILED = int(pytest.ExitCode.TESTS_FAILED)
# A component command that never starts: the judge must not take its failures for a verdict.
CANNOT_START = "cannot-start"
NO_SUCH_BREAKAGE = "no-such-breakage"


@dataclass(frozen=True)
class Profile:
    """Everything that differs between judging the consumer suite and judging the producer suite.

    `components(breakage)` gives the descriptor sections (``gateway``, ``operator``) that plug the broken
    implementation in. `startup_failures` are texts a failure carries when the broken component never
    came up (or, for an operator, never rendered where the suite looks), and `cannot_start_symptom` what
    the judge says of a run whose component never started. `launcher` is the module that applies a
    breakage and starts the component, with `launch_args` the arguments that would start it;
    `registered` lists the breakages the launcher knows. `pytest_args` go to every run's pytest: by
    default they switch off plugins a judged run does not use, which only cost start-up time.
    """

    name: str
    suite: str
    component: str
    targets: Mapping[str, Targets]
    components: Callable[[str], dict[str, Any]]
    startup_failures: tuple[str, ...]
    launcher: str
    launch_args: tuple[str, ...]
    registered: Callable[[], Iterable[str]]
    cannot_start_targets: Targets
    cannot_start_test: str
    cannot_start_symptom: str
    slow_first: tuple[str, ...] = ()
    #: Conformance ids that skip where the machine lacks something (network namespaces): a target among
    #: them that skipped is not judged, as long as another target of the breakage was.
    may_skip: frozenset[str] = frozenset()
    #: The breakages `launcher` itself knows, when `registered` also lists ones another launcher applies.
    launched: Callable[[], Iterable[str]] | None = None
    pytest_args: tuple[str, ...] = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:pytest-kubernetes")


def reference_gateway() -> dict[str, Any]:
    """The reference descriptor's gateway section (command, launcher, timeout) as a descriptor spells it."""
    return dict(reference_document()["gateway"])


def broken_gateway(module: str, breakage: str, table: str, flag: str = "--break") -> dict[str, Any]:
    """A gateway section starting ``python -m module --break breakage -c {config}`` (``flag`` in place of
    ``--break`` for a conformant variant), warm-started like the reference gateway from a launcher that has
    also imported the `table` of breakages or variants."""
    reference = reference_gateway()
    source = {"PYTHONPATH": str(ROOT)}
    launcher = {"command": [*reference["launcher"]["command"], "--preload", table], "env": source}
    command = ["{python}", "-m", "reference.warm_start", "run", "{launcher}", "-m", module, flag, breakage,
               "-c", "{config}"]
    return {"command": command, "env": source, "startup_timeout_s": 20, "launcher": launcher}


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), out.get("PYTHONPATH", "")) if p)
    return out


def run_dir(fallback: Path) -> Path:
    """Where judged sessions run: the source tree (its conftest registers the plugin) when this is one, else
    `fallback`, so an installed copy never runs pytest inside site-packages."""
    return ROOT if (ROOT / "pyproject.toml").is_file() else fallback


def tail(text: str, lines: int = 60) -> str:
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
    #: The budget the run was cut off at (None: it ended by itself); such a run judged nothing.
    cut_off_after: float | None = None

    def describe(self) -> str:
        return (f"run {self.label}: pytest exit {self.returncode} after {self.seconds:.1f}s, -k {self.keyword!r}\n"
                f"--- output (tail) ---\n{tail(self.output)}")


def write_descriptor(profile: Profile, path: Path, breakage: str) -> Path:
    """An implementation descriptor for the broken implementation, claiming every extended feature its
    sections can serve (the overlay-sync ones only with an overlay_sync section, dynamic weights and the signals
    endpoint only with an operator that says how to turn them on)."""
    components = profile.components(breakage)
    features = set(EXTENDED_FEATURES)
    if "overlay_sync" not in components:
        features -= {OVERLAY_SYNC_FEATURE, OVERLAY_SYNC_METRICS_FEATURE}
    operator = components.get("operator")
    if not isinstance(operator, Mapping) or not operator.get("dynamic_weights"):
        features -= {DYNAMIC_WEIGHTS_FEATURE}
    if not isinstance(operator, Mapping) or not operator.get("signals_args"):
        features -= {SIGNALS_RELAY_FEATURE}
    descriptor = {
        "implementation": {"organization": "agn-conformance", "project": f"broken-{profile.component}-{breakage}",
                           "version": "0.0.0", "contact": ["selfcheck"]},
        **components,
        "features": sorted(features),
    }
    return _dump_descriptor(descriptor, path)


def _dump_descriptor(document: Mapping[str, Any], path: Path) -> Path:
    """Write a descriptor the judged run starts from; the harness must accept it as it accepts a vendor's."""
    path.write_text(yaml.safe_dump(dict(document), sort_keys=False))
    load_impl(str(path))
    return path


def junit_cases(path: Path) -> dict[str, CaseResult]:
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


def _ended(server: ForkServer, label: str, grace: float) -> bool:
    """Whether the session `label` ended within `grace` seconds."""
    return server.wait(label, grace) is not None


def _stop_session(pid: int, ended: Callable[[float], bool], grace: float = 15.0) -> None:
    """Interrupt a run (pytest then tears its grid down), and kill its group if it lingers."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        if ended(grace):
            return


class SuiteRuns:
    """Runs a profile's suite against broken implementations, a few sessions at a time.

    Each run is a pytest session of its own, forked from a server that has imported the suite once
    (selfcheck/forkserver.py), in its own process group, with its output in a file.
    """

    def __init__(self, profile: Profile, workdir: Path, tests: Mapping[str, SuiteTest], jobs: int) -> None:
        self.profile = profile
        self.workdir = workdir
        self.tests = dict(tests)
        self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix=f"{profile.name}-run")
        self._futures: dict[str, Future[SuiteRun]] = {}
        self._live: dict[str, int] = {}  # label -> pid of the running session
        self._lock = threading.Lock()
        self._closed = False
        self._server: ForkServer | None = None

    def submit(self, label: str, breakage: str, targets: Targets, budget_scale: float = 1.0) -> Future[SuiteRun]:
        """Start (once per label) a run of `targets` against the implementation broken by `breakage`, cut off
        after its budget times `budget_scale`."""
        scale = 1.0 if targets.slow else JUDGE_WAIT_SCALE
        timeout = (SLOW_RUN_TIMEOUT_S if targets.slow else RUN_TIMEOUT_S) * budget_scale
        return self._submit(label, lambda d: write_descriptor(self.profile, d / "impl.yaml", breakage),
                            targets.ids, scale=scale, slow=targets.slow, timeout=timeout)

    def submit_descriptor(self, label: str, document: Mapping[str, Any], ids: Sequence[str] = (),
                          timeout: float = FULL_RUN_TIMEOUT_S) -> Future[SuiteRun]:
        """Start (once per label) a run of the suite, or of `ids`, against the implementation `document`
        describes, at full deadlines: a failure then means the suite saw something, not a halved wait."""

        return self._submit(label, lambda d: _dump_descriptor(document, d / "impl.yaml"), tuple(ids), scale=1.0,
                            slow=False, timeout=timeout)

    def _submit(self, label: str, descriptor: Callable[[Path], Path], ids: tuple[str, ...], *, scale: float,
                slow: bool, timeout: float) -> Future[SuiteRun]:
        with self._lock:
            if label not in self._futures:
                self._futures[label] = self._pool.submit(self._run, label, descriptor, ids, scale, slow, timeout)
            return self._futures[label]

    def running(self) -> list[str]:
        """The labels of the sessions running now (not those queued)."""
        with self._lock:
            return sorted(self._live)

    def close(self) -> None:
        """Cancel queued runs, interrupt running ones and wait for their processes to end."""
        with self._lock:
            self._closed = True
            for future in self._futures.values():
                future.cancel()
            live = dict(self._live)
            server = self._server
        if server is not None:  # no server: no run ever started
            for label, pid in live.items():
                _stop_session(pid, functools.partial(_ended, server, label))
        self._pool.shutdown(wait=True)
        if server is not None:
            server.close()

    def _fork_server(self) -> ForkServer:
        """The server runs fork from, started with the first run (under the lock)."""
        if self._server is None:
            self._server = ForkServer(self.profile.suite, self.profile.pytest_args, run_dir(self.workdir), env(),
                                      self.workdir / "forkserver.log")
        return self._server

    def _run(self, label: str, make_descriptor: Callable[[Path], Path], ids: tuple[str, ...], scale: float,
             slow: bool, timeout: float) -> SuiteRun:
        directory = self.workdir / label
        directory.mkdir(parents=True, exist_ok=True)
        descriptor = make_descriptor(directory)
        report, junit, output = directory / "report.yaml", directory / "junit.xml", directory / "output.txt"
        if ids:  # only the suite modules holding the targets are collected; -k picks the targets inside them
            expected = expand(ids, self.tests, self.profile.suite)
            keyword = keyword_expression(expected, self.tests)
            selection = [*modules(expected, self.tests), "-k", keyword]
        else:  # the whole suite
            expected, keyword = list(self.tests), ""
            selection = [self.profile.suite]
        # A slow target's deadline is the cadence it judges: halved, every implementation would miss it.
        argv = ["--pyargs", *selection, "-p", "no:cacheprovider",
                "-q", "--impl", str(descriptor), "--conformance-report", str(report), "--junitxml", str(junit),
                "--grid-wait-scale", str(scale), *(["--grid-slow"] if slow else []), *self.profile.pytest_args]
        started = time.monotonic()
        with self._lock:
            if self._closed:
                raise RuntimeError("the suite runs were closed before this run started")
            server = self._fork_server()
            self._live[label] = server.start(label, argv, output)
        stopped = ""
        try:
            returncode = server.wait(label, timeout)
            if returncode is None:
                _stop_session(self._live[label], functools.partial(_ended, server, label))
                returncode = server.wait(label, 1.0)
                stopped = f"\n[stopped after {timeout:.0f}s]"
        finally:
            with self._lock:
                self._live.pop(label, None)
        try:
            out = output.read_text(errors="replace") + stopped
        except OSError as exc:
            out = f"[no output: {exc}]{stopped}"
        loaded: dict[str, Any] | None = None
        problem = ""
        try:
            loaded = load_report(report)
        except ReportError as exc:
            problem = str(exc)
        return SuiteRun(label, expected, keyword, returncode, out, time.monotonic() - started, loaded, problem,
                        junit_cases(junit), cut_off_after=timeout if stopped else None)


# ------------------------------------------------------------------------------------------- judging


def report_outcomes(report: Mapping[str, Any]) -> tuple[int, dict[str, str], list[str]]:
    """(tests run, failed id -> message, skipped ids) over every profile and level of a report."""
    total = 0
    failed: dict[str, str] = {}
    skipped: list[str] = []
    for profile in report.get("profiles") or []:
        for level in ("core", "extended", "demo"):  # the demos profile has a demo section instead of core
            section = profile.get(level) or {}
            stats = section.get("statistics") or {}
            total += sum(int(stats.get(key, 0)) for key in ("passed", "failed", "skipped"))
            messages = {f["id"]: f.get("message", "") for f in section.get("failures") or []}
            for test_id in section.get("failedTests") or []:
                failed[test_id] = messages.get(test_id, "")
            skipped.extend(section.get("skippedTests") or [])
    return total, failed, skipped


def judge(run: SuiteRun, targets: Targets, tests: Mapping[str, SuiteTest], profile: Profile) -> list[str]:
    """Why `run` does not show that every target fails for the right reason; empty when it does."""
    if run.cut_off_after is not None:  # the environment, not the suite: say so first
        return [f"not judged: cut off after {run.cut_off_after:.0f} s (the machine was too slow or too busy for "
                "the run's budget); nothing is known of the suite's view of this breakage"]
    if run.report is None:
        return [f"no conformance report ({run.report_problem})"]
    total, failed, skipped = report_outcomes(run.report)
    problems: list[str] = []
    passed = [test_id for test_id in run.expected if test_id not in failed and test_id not in skipped]
    if passed:
        problems.append(f"the suite cannot see this breakage: these conformance tests passed against it: {passed}")
    excused = [test_id for test_id in skipped if test_id.split("[", 1)[0] in profile.may_skip]
    if sorted(set(skipped) - set(excused)) or (skipped and len(excused) == len(run.expected)):
        problems.append(f"targets were skipped, so nothing was judged: {skipped}")
    unexpected = sorted((set(failed) | set(skipped)) - set(run.expected))
    if unexpected or total != len(run.expected):
        problems.append(f"{total} conformance tests ran ({unexpected} not targets); targets: {run.expected}")
    if run.returncode != TESTS_FAILED:
        problems.append(f"pytest ended with exit code {run.returncode}, not {TESTS_FAILED} (tests failed)")
    for test_id in sorted(set(run.expected) & set(failed)):
        case = run.cases.get(tests[test_id].name)
        if case is None or not case.failures:
            errors = tail(case.errors[0], 12) if case is not None and case.errors else "nothing recorded"
            problems.append(f"{test_id}: did not fail inside the test body: {errors}")
            continue
        text = "\n".join(case.failures + case.errors)
        if case.errors:
            problems.append(f"{test_id}: error outside the test body: {tail(case.errors[0], 12)}")
        marker = next((m for m in profile.startup_failures if m in text), None)
        if marker is not None and not targets.startup_failure:
            problems.append(f"{test_id}: the {profile.component} failed to start ({marker!r}): {tail(text, 12)}")
        if targets.expect is not None and targets.expect not in text:
            problems.append(f"{test_id}: the failure does not mention {targets.expect!r}: {tail(text, 12)}")
    return problems


def hand_made_run(profile: Profile, test_id: str, outcome: Literal["passed", "failed"], case: CaseResult,
                  returncode: int = TESTS_FAILED) -> SuiteRun:
    """A run of one test as the judge would read it back, for checking what each verdict looks like."""
    result = TestResult(id=test_id, profile=profile.name, level="core", feature="f", spec="s",
                        outcome=outcome, duration_s=0.1, message="m" if outcome == "failed" else "")
    report = build_report([result], Implementation("o", "p", "1"), backend="local", harness_version="0",
                          profiles=[profile.name], features_claimed=())
    return SuiteRun("hand-made", [test_id], case.name, returncode, "", 0.0, report, "", {case.name: case})


# ------------------------------------------------------------------------------------------- fixtures


def collect_suite_ids(profile: Profile) -> dict[str, SuiteTest]:
    """Every conformance id (``ID`` or ``ID[param]``) of the suite -> the module and pytest item that run it."""
    done = subprocess.run([sys.executable, "-m", "selfcheck.targets", profile.suite], cwd=run_dir(Path.cwd()),
                          env=env(), capture_output=True, timeout=COLLECT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"collecting {profile.suite} failed:\n{done.stderr.decode(errors='replace')}")
    tests = load_ids(done.stdout.decode())
    if not tests:
        raise RuntimeError(f"{profile.suite} has no conformance tests")
    return tests


def _selected(items: Sequence[pytest.Item], module: Any, profile: Profile) -> tuple[list[str], bool]:
    """The breakages whose judge test this session runs from `module`, and whether it runs cannot-start."""
    breakages: set[str] = set()
    cannot_start = False
    for item in items:
        if getattr(item, "module", None) is not module:
            continue
        name = getattr(item, "originalname", None)
        params = getattr(getattr(item, "callspec", None), "params", {})
        # the judge test of a breakage, whatever its name (the demos' is test_demos_fail_every_target)
        if "breakage" in params and "suite_runs" in getattr(item, "fixturenames", ()):
            breakages.add(params["breakage"])
        cannot_start = cannot_start or name == profile.cannot_start_test
    order = profile.slow_first
    return sorted(breakages, key=lambda b: order.index(b) if b in order else len(order)), cannot_start


def pass_dist(node: Any) -> None:
    """For xdist's ``pytest_configure_node`` hook: tell a worker how the controller distributes tests (a
    worker's own options always say ``no``), so its judge modules know whether they hold all their tests."""
    node.workerinput[DIST_KEY] = node.config.getoption("dist")


def module_on_this_worker(request: pytest.FixtureRequest) -> bool:
    """Whether every selected test of the requesting module runs in this session: always without
    pytest-xdist; under it, only when the controller sends whole modules to a worker."""
    workerinput = getattr(request.config, "workerinput", None)
    if workerinput is None:
        return True
    return workerinput.get(DIST_KEY) in WHOLE_MODULE_DISTS


def fixtures(profile: Profile) -> tuple[Any, Any]:
    """The ``suite_ids`` and ``suite_runs`` fixtures of a judge module for `profile`."""

    @pytest.fixture(scope="module", name="suite_ids")
    def suite_ids_fixture() -> dict[str, SuiteTest]:
        return collect_suite_ids(profile)

    @pytest.fixture(scope="module", name="suite_runs")
    def suite_runs_fixture(request: pytest.FixtureRequest, suite_ids: dict[str, SuiteTest],
                           tmp_path_factory: pytest.TempPathFactory) -> Iterator[SuiteRuns]:
        whole = module_on_this_worker(request)
        under_xdist = "PYTEST_XDIST_WORKER" in os.environ
        jobs = max(1, int(os.environ.get(JOBS_ENV, XDIST_JOBS if under_xdist else DEFAULT_JOBS))) if whole else 1
        runs = SuiteRuns(profile, tmp_path_factory.mktemp(f"{profile.name}-runs"), suite_ids, jobs)
        if whole:  # start every selected run now, longest first; the tests then wait for theirs
            breakages, cannot_start = _selected(request.session.items, request.module, profile)
            for name in breakages:
                if judge_slow() or not profile.targets[name].slow:
                    runs.submit(name, name, profile.targets[name])
            if cannot_start:
                runs.submit(CANNOT_START, NO_SUCH_BREAKAGE, profile.cannot_start_targets)
        try:
            yield runs
        finally:
            runs.close()

    return suite_ids_fixture, suite_runs_fixture


# --------------------------------------------------------------------------------------- test bodies


def judge_slow() -> bool:
    """Whether this session judges the slow targets too (AGN_JUDGE_SLOW=1; minutes per breakage)."""
    return os.environ.get(SLOW_ENV, "") == "1"


def check_breakage(profile: Profile, breakage: str, runs: SuiteRuns, tests: Mapping[str, SuiteTest]) -> None:
    """Every target of `breakage` fails, for the right reason."""
    targets = profile.targets[breakage]
    if targets.slow and not judge_slow():
        pytest.skip(f"its targets are slow tests (minutes each); judged with {SLOW_ENV}=1")
    problems, run = breakage_verdict(profile, breakage, runs, tests)
    assert not problems, f"breakage {breakage}:\n" + "\n".join(problems) + "\n" + run.describe()


def breakage_verdict(profile: Profile, breakage: str, runs: SuiteRuns, tests: Mapping[str, SuiteTest]
                     ) -> tuple[list[str], SuiteRun]:
    """Run the targets of `breakage` and judge them (see `confirmed`); a run cut off by its budget is run once
    more with twice the budget before anything is said of the suite."""
    run = runs.submit(breakage, breakage, profile.targets[breakage]).result()
    if run.cut_off_after is not None:
        run = runs.submit(f"{breakage}-longer", breakage, profile.targets[breakage], budget_scale=2.0).result()
    return confirmed(profile, breakage, run, runs, tests)


def confirmed(profile: Profile, breakage: str, run: SuiteRun, runs: SuiteRuns, tests: Mapping[str, SuiteTest]
              ) -> tuple[list[str], SuiteRun]:
    """What is wrong with the suite's view of `breakage` as `run` shows it (nothing: an empty list), and the
    run the verdict rests on.

    Statistical targets (Targets.statistical) that miss are run once more, and only a second miss counts.
    """
    targets = profile.targets[breakage]
    problems = judge(run, targets, tests, profile)
    if not problems or not targets.statistical:
        return problems, run
    again = runs.submit(f"{breakage}-again", breakage, targets).result()
    second = judge(again, targets, tests, profile)
    if not second:
        return [], again
    return [*problems, "and in a second run (the targets are statistical: one miss in a hundred runs is expected):",
            *second], again


def check_coverage(profile: Profile, tests: Mapping[str, SuiteTest]) -> None:
    """The targets of all breakages together name every conformance test of the suite."""
    covered: set[str] = set()
    for breakage, targets in profile.targets.items():
        try:
            covered.update(expand(targets.ids, tests, profile.suite))
        except ValueError as exc:
            pytest.fail(f"breakage {breakage}: {exc}")
    uncovered = sorted(set(tests) - covered)
    assert not uncovered, f"no breakage shows that these conformance tests can fail: {uncovered}"


def check_registered(profile: Profile) -> None:
    """Every registered breakage has targets, and every table entry is a registered breakage."""
    registered = set(profile.registered())
    assert registered == set(profile.targets), (
        f"without targets: {sorted(registered - set(profile.targets))}; "
        f"not registered: {sorted(set(profile.targets) - registered)}")
    assert all(targets.ids for targets in profile.targets.values())


def check_unknown_refused(profile: Profile) -> None:
    """The launcher exits 2 on an unknown breakage and lists the known ones."""
    done = subprocess.run([sys.executable, "-m", profile.launcher, "--break", NO_SUCH_BREAKAGE,
                           *profile.launch_args], cwd=run_dir(Path.cwd()), env=env(), capture_output=True, timeout=60,
                          check=False)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 2, stderr
    assert NO_SUCH_BREAKAGE in stderr, stderr
    assert all(name in stderr for name in (profile.launched or profile.registered)()), stderr


def check_cannot_start(profile: Profile, runs: SuiteRuns, tests: Mapping[str, SuiteTest]) -> None:
    """Targets failing because the component never started must not count as the suite seeing a breakage."""
    run = runs.submit(CANNOT_START, NO_SUCH_BREAKAGE, profile.cannot_start_targets).result()
    problems = judge(run, profile.cannot_start_targets, tests, profile)
    assert run.report is not None and report_outcomes(run.report)[0] == len(run.expected), run.describe()
    assert any(profile.cannot_start_symptom in p for p in problems), problems
