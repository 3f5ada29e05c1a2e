"""`agn-conformance self-check`: watch the suites judge deliberately broken implementations on this machine.

A conformance suite is only worth trusting if it fails a broken implementation. For each selected profile
the self-check runs the suite against the implementation (the reference unless `--impl` names another),
which must pass, and then against each shipped breakage of the reference (selfcheck/*_breakages.py) and
each breakage the descriptor lists (a vendor's own broken build). It prints each breakage with the tests
that caught it, and exits 0 only when the implementation passed and every breakage that ran was caught.

Breakages of the shipped tables are judged as the project's own tests judge them (selfcheck.judge): every
target must fail, inside its test body, not because the broken component never started. A descriptor's
breakage is caught when each test it names fails, or, when it names none, when any test of its profile
fails; its runs keep their full deadlines.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from harness.features import CONFORMANCE_PROFILES, PROFILES, parse_profiles
from harness.impl import REFERENCE, DescriptorBreakage, ImplDescriptor, ImplError, descriptor_text, load_impl
from harness.options_file import OptionsFileError, load_self_check_options
from harness.report.verdict import NOT_JUDGED, PASSED
from harness.report.verdict import of_report as report_verdict
from selfcheck.judge import (
    DEFAULT_JOBS,
    Profile,
    SuiteRun,
    SuiteRuns,
    collect_suite_ids,
    confirmed,
    report_outcomes,
)
from selfcheck.profiles import SUITE_PROFILES
from selfcheck.targets import SuiteTest, expand

__all__ = ["Verdict", "build_parser", "main"]

PROG = "agn-conformance self-check"
EXIT_ALL_CAUGHT = 0
EXIT_NOT_CAUGHT = 1
EXIT_USAGE = 2


@dataclass(frozen=True)
class Verdict:
    """One line of the self-check: a breakage (or the implementation itself) and what the suite made of it."""

    profile: str
    name: str
    ok: bool
    detail: str
    seconds: float


# ------------------------------------------------------------------------------------------ arguments


def _profiles(text: str) -> list[str]:
    try:
        return parse_profiles(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run the suites against deliberately broken implementations and show, per breakage, the "
                    "tests that caught it. Exit status: 0 the implementation passed and every breakage that ran "
                    "was caught, 1 a breakage was not caught or the implementation failed, 2 bad arguments.")
    parser.add_argument("--profile", action="append", type=_profiles, default=None, metavar="P",
                        help=f"profile to check ({', '.join(PROFILES)}); repeat or separate with commas "
                             f"(default: {', '.join(CONFORMANCE_PROFILES)})")
    parser.add_argument("--impl", default=REFERENCE, metavar="reference|FILE",
                        help="the implementation that must pass, and whose descriptor breakages are checked too "
                             "(default: the reference)")
    parser.add_argument("--breakage", action="append", default=None, metavar="NAME",
                        help="check only this breakage (repeatable); default: every breakage of the profiles")
    parser.add_argument("--list", action="store_true", help="list the breakages with what each breaks; run nothing")
    parser.add_argument("--slow", action="store_true",
                        help="also check the breakages whose targets are slow tests (minutes each)")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, metavar="N",
                        help=f"suite runs at a time per profile (default {DEFAULT_JOBS})")
    parser.add_argument("--implementation-test", action="append", default=None, metavar="ID",
                        help="run only this conformance test (ID, ID[case] or ID[*]; repeatable) of the "
                             "implementation itself (the verdict then says so); default: the whole suite")
    parser.add_argument("--options", default=None, metavar="FILE",
                        help="the run's options file: its impl, profile, slow and self_check block (breakage, "
                             "implementation_test, jobs, workdir); flags given here override it")
    parser.add_argument("--workdir", default=None, metavar="DIR",
                        help="keep every run's descriptor, report, JUnit file and output here (default: a "
                             "temporary directory, removed at the end)")
    return parser


# ------------------------------------------------------------------------------------------ planning


@dataclass(frozen=True)
class Planned:
    """One breakage to check: from a shipped table (`profile` judges it) or from the descriptor."""

    profile: Profile
    name: str
    summary: str
    descriptor: DescriptorBreakage | None = None


def _summaries(profile: Profile) -> dict[str, str]:
    """What each shipped breakage of `profile` breaks, from the tables that register them."""
    from selfcheck.breakages import BREAKAGES
    from selfcheck.mesh_breakages import BREAKAGES as MESH
    from selfcheck.operator_breakages import BREAKAGES as OPERATOR
    from selfcheck.provider_breakages import BREAKAGES as PROVIDER
    from selfcheck.serving_breakages import BREAKAGES as SERVING
    from selfcheck.sync_breakages import BREAKAGES as SYNC

    known = {**BREAKAGES, **PROVIDER, **OPERATOR, **SYNC, **MESH, **SERVING}
    return {name: known[name].summary if name in known else "" for name in profile.targets}


def plan(profiles: Sequence[str], descriptor: ImplDescriptor, only: Sequence[str] | None) -> list[Planned]:
    """The breakages to check, shipped ones first; ValueError naming a --breakage that matches none."""
    out: list[Planned] = []
    for name in profiles:
        for judged in SUITE_PROFILES[name]:
            summaries = _summaries(judged)
            out += [Planned(judged, breakage, summaries[breakage]) for breakage in judged.targets]
        out += [Planned(SUITE_PROFILES[name][0], b.name, b.summary or "(the descriptor's own breakage)", b)
                for b in descriptor.breakages if b.profile == name]
    if only:
        unknown = sorted(set(only) - {p.name for p in out})
        if unknown:
            raise ValueError(f"no breakage named {', '.join(unknown)} in the profiles {', '.join(profiles)}")
        out = [p for p in out if p.name in only]
    return out


def descriptor_document(descriptor: ImplDescriptor) -> dict[str, Any]:
    """The implementation's descriptor as a document (the reference's, or the vendor's file as written)."""
    return dict(yaml.safe_load(descriptor_text(descriptor.source)))


def broken_document(document: Mapping[str, Any], breakage: DescriptorBreakage) -> dict[str, Any]:
    """The descriptor with the breakage's sections in place of its own, and no breakages of its own."""
    out = {key: value for key, value in document.items() if key != "breakages"}
    out.update(dict(breakage.sections))
    out["implementation"] = {**dict(out["implementation"]),
                             "project": f"{out['implementation']['project']}-broken-{breakage.name}"}
    return out


# ------------------------------------------------------------------------------------------ judging


def implementation_verdict(profile: str, run: SuiteRun, restricted: Sequence[str] | None) -> Verdict:
    """The implementation itself must pass every core test of the profile, and some must have run."""
    scope = f" (only {', '.join(restricted)})" if restricted else ""
    if run.report is None:
        return Verdict(profile, "implementation", False, f"no report{scope}: {run.report_problem}\n{run.describe()}",
                       run.seconds)
    total, failed, skipped = report_outcomes(run.report)
    counts = f"{total - len(failed) - len(skipped)} passed, {len(failed)} failed, {len(skipped)} skipped{scope}"
    verdict = report_verdict(run.report)
    if verdict.outcome == NOT_JUDGED or total == 0:
        return Verdict(profile, "implementation", False, f"not judged: {'; '.join(verdict.reasons)} ({counts})",
                       run.seconds)
    if verdict.outcome != PASSED:
        return Verdict(profile, "implementation", False, f"failed: {counts}; failing: {sorted(failed)}", run.seconds)
    return Verdict(profile, "implementation", True, f"passed: {counts}", run.seconds)


def descriptor_breakage_verdict(planned: Planned, run: SuiteRun) -> Verdict:
    """Caught when every named test failed, or, naming none, when any test failed."""
    assert planned.descriptor is not None
    if run.report is None:
        return Verdict(planned.profile.name, planned.name, False, f"no report: {run.report_problem}", run.seconds)
    _, failed, _ = report_outcomes(run.report)
    wanted = run.expected if planned.descriptor.must_fail else []
    missing = [test for test in wanted if test not in failed]
    if missing:
        return Verdict(planned.profile.name, planned.name, False,
                       f"NOT CAUGHT: these tests passed or did not run against it: {missing}", run.seconds)
    if not failed:
        return Verdict(planned.profile.name, planned.name, False,
                       "NOT CAUGHT: every test of the profile passed against it", run.seconds)
    return Verdict(planned.profile.name, planned.name, True, f"caught by {', '.join(sorted(failed))}", run.seconds)


def shipped_breakage_verdict(planned: Planned, run: SuiteRun, tests: Mapping[str, SuiteTest],
                             runs: SuiteRuns) -> Verdict:
    """Caught when every target failed for the right reason; a statistical breakage's targets that missed
    are run once more first (selfcheck.judge.confirmed)."""
    first = run
    if run.cut_off_after is not None:  # the machine, not the suite: once more with twice the budget
        run = runs.submit(f"{planned.name}-longer", planned.name, planned.profile.targets[planned.name],
                          budget_scale=2.0).result()
    problems, final = confirmed(planned.profile, planned.name, run, runs, tests)
    seconds = first.seconds + (run.seconds if run is not first else 0.0) + (final.seconds if final is not run else 0.0)
    if problems:
        label = "NOT JUDGED: " if final.cut_off_after is not None else "NOT CAUGHT: "
        return Verdict(planned.profile.name, planned.name, False, label + "\n  ".join(problems), seconds)
    _, failed, _ = report_outcomes(final.report or {})
    again = " (in a second run: statistical targets miss about one run in a hundred)" if final is not run else ""
    return Verdict(planned.profile.name, planned.name, True, f"caught by {', '.join(sorted(failed))}{again}", seconds)


def uncovered(profile: Profile, tests: Mapping[str, SuiteTest]) -> list[str]:
    """Conformance tests of the suite that no shipped breakage targets (none, in a release)."""
    covered: set[str] = set()
    for targets in profile.targets.values():
        covered.update(expand(targets.ids, tests, profile.suite))
    return sorted(set(tests) - covered)


# ------------------------------------------------------------------------------------------ running


class Printer:
    """Progress a person can follow: one line per finished run, numbered, flushed at once."""

    def __init__(self, out: TextIO, total: int) -> None:
        self.out = out
        self.total = total
        self.done = 0

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def verdict(self, verdict: Verdict) -> None:
        self.done += 1
        mark = "ok " if verdict.ok else "FAIL"
        self.line(f"[{self.done}/{self.total}] {mark} {verdict.profile}: {verdict.name} "
                  f"({verdict.seconds:.1f} s): {verdict.detail}")


@contextlib.contextmanager
def _workdir(given: str | None) -> Iterator[Path]:
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix="agn-self-check-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


#: Seconds without a finished run after which the self-check says what is still running.
HEARTBEAT_S = 30.0


def _as_completed(pending: Mapping[Future[SuiteRun], Any], runs: SuiteRuns, profile: str,
                  printer: Printer) -> Iterator[Future[SuiteRun]]:
    """The runs as they finish; while none does for HEARTBEAT_S, a line naming the runs still going, so a
    long wait (the implementation's whole suite, a slow breakage) never looks like a hang."""
    started = time.monotonic()
    left = set(pending)
    while left:
        done, left = wait(left, timeout=HEARTBEAT_S, return_when=FIRST_COMPLETED)
        if not done:
            printer.line(f"[running {time.monotonic() - started:.0f} s] {profile}: "
                         f"{', '.join(runs.running()) or 'starting'}; {len(left)} runs left")
        yield from done


def check_suite(judged: Profile, planned: Sequence[Planned], *, document: Mapping[str, Any],
                run_implementation: bool, restricted: Sequence[str] | None, slow: bool, jobs: int, workdir: Path,
                printer: Printer) -> list[Verdict]:
    """Run one suite against the implementation and the planned breakages judged by `judged`."""
    tests = collect_suite_ids(judged)
    verdicts: list[Verdict] = []
    try:
        for item in planned:
            if item.descriptor is not None:
                expand(item.descriptor.must_fail, tests, judged.suite)
        if run_implementation and restricted:
            expand(restricted, tests, judged.suite)
    except ValueError as exc:  # a named test the suite does not have: nothing would be judged
        verdicts.append(Verdict(judged.name, "implementation", False, str(exc), 0.0))
        printer.verdict(verdicts[-1])
        return verdicts
    missing = uncovered(judged, tests)
    if missing:
        verdicts.append(Verdict(judged.name, "coverage", False, f"no breakage targets {missing}", 0.0))
        printer.verdict(verdicts[-1])
    runs = SuiteRuns(judged, workdir / judged.name, tests, jobs)
    pending: dict[Future[SuiteRun], Any] = {}
    try:
        if run_implementation:
            pending[runs.submit_descriptor("implementation", document, restricted or ())] = "implementation"
        for item in planned:
            if item.descriptor is not None:
                future = runs.submit_descriptor(f"descriptor-{item.name}", broken_document(document, item.descriptor),
                                                item.descriptor.must_fail)
            elif judged.targets[item.name].slow and not slow:
                printer.line(f"[skip] {judged.name}: {item.name}: its targets are slow tests; --slow checks it")
                continue
            else:
                future = runs.submit(item.name, item.name, judged.targets[item.name])
            pending[future] = item
        for future in _as_completed(pending, runs, judged.name, printer):
            item = pending[future]
            run = future.result()
            if item == "implementation":
                verdict = implementation_verdict(judged.name.split("-")[0], run, restricted)
            elif item.descriptor is not None:
                verdict = descriptor_breakage_verdict(item, run)
            else:
                verdict = shipped_breakage_verdict(item, run, tests, runs)
            verdicts.append(verdict)
            printer.verdict(verdict)
    finally:
        runs.close()
    return verdicts


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = build_parser()
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(arguments)
    if args.options:
        try:
            defaults = load_self_check_options(Path(args.options))
        except OptionsFileError as exc:
            parser.error(f"--options: {exc}")
        if "profile" in defaults:
            defaults["profile"] = [_profiles(",".join(defaults["profile"]))]
        for flag in ("profile", "breakage", "implementation_test"):  # these append: given here, they replace the file's
            option = "--" + flag.replace("_", "-")
            if any(arg == option or arg.startswith(option + "=") for arg in arguments):
                defaults.pop(flag, None)
        parser.set_defaults(**defaults)
        args = parser.parse_args(arguments)
    profiles = list(dict.fromkeys(name for group in (args.profile or [list(CONFORMANCE_PROFILES)]) for name in group))
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    try:
        descriptor = load_impl(args.impl)
        planned = plan(profiles, descriptor, args.breakage)
    except (ImplError, ValueError) as exc:
        parser.error(str(exc))
    if args.list:
        for item in planned:
            slow = " (slow)" if item.descriptor is None and item.profile.targets[item.name].slow else ""
            print(f"{item.profile.name}: {item.name}{slow}: {item.summary}", file=out)
        return EXIT_ALL_CAUGHT
    document = descriptor_document(descriptor)
    judged_profiles = [j for name in profiles for j in SUITE_PROFILES[name]]
    runs_of = {j.name: [p for p in planned if p.profile is j] for j in judged_profiles}
    # the implementation runs once per conformance profile: with the first suite judging that profile
    first = {SUITE_PROFILES[name][0].name for name in profiles}
    total = sum(len(items) for items in runs_of.values()) + len(first)
    printer = Printer(out, total)
    printer.line(f"{PROG}: profiles {', '.join(profiles)}; implementation {descriptor.implementation.project} "
                 f"{descriptor.implementation.version} ({descriptor.source}); {total} runs, {args.jobs} at a time")
    started = time.monotonic()
    verdicts: list[Verdict] = []
    with _workdir(args.workdir) as workdir:
        for judged in judged_profiles:
            if not runs_of[judged.name] and judged.name not in first:
                continue
            verdicts += check_suite(judged, runs_of[judged.name], document=document,
                                    run_implementation=judged.name in first, restricted=args.implementation_test,
                                    slow=args.slow, jobs=args.jobs, workdir=workdir, printer=printer)
    return summarize(verdicts, printer, time.monotonic() - started)


def summarize(verdicts: Sequence[Verdict], printer: Printer, seconds: float) -> int:
    """The closing lines: each breakage with the tests that caught it, then the verdict of the check."""
    breakages = [v for v in verdicts if v.name not in ("implementation", "coverage")]
    caught = [v for v in breakages if v.ok]
    printer.line("")
    printer.line("breakage -> the tests that caught it")
    for verdict in sorted(breakages, key=lambda v: (v.profile, v.name)):
        printer.line(f"  {verdict.profile}: {verdict.name} -> {verdict.detail}")
    failed = [v for v in verdicts if not v.ok]
    printer.line("")
    printer.line(f"{len(caught)} of {len(breakages)} breakages caught; "
                 + "; ".join(f"{v.profile}: implementation {v.detail.split(':')[0]}"
                             for v in verdicts if v.name == "implementation")
                 + f"; {seconds:.0f} s")
    if failed:
        printer.line("SELF-CHECK FAILED: " + ", ".join(f"{v.profile}: {v.name}" for v in failed))
        return EXIT_NOT_CAUGHT
    printer.line("SELF-CHECK PASSED: every breakage that ran was caught and the implementation passed")
    return EXIT_ALL_CAUGHT
