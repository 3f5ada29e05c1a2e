"""The ``agn-conformance`` command: run the conformance suites and publish a conformance report.

``run`` validates the implementation descriptor, runs the suite packages of the selected profiles in
pytest (in this process) and turns the report the pytest plugin wrote into an exit status: 0 when every
core test of the selected profiles passed, 1 when a core test failed, 2 when the run itself could not be
judged (bad arguments, a pytest usage or internal error, no report). ``list`` shows the conformance tests
with their ids, profiles, levels, features and spec sections without running them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import platform
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pytest

from harness import submission
from harness.backends.registry import backend_names
from harness.features import CONFORMANCE_PROFILES, DEMO_LEVEL, DEMOS, DEMOS_PROFILE, PROFILES, parse_profiles
from harness.id_select import item_id, nearest, unmatched
from harness.impl import REFERENCE, ImplDescriptor, ImplError, descriptor_text, load_impl
from harness.options_file import OptionsFileError, load_options
from harness.plugin_loading import only_needed_plugins
from harness.provenance import copy_wheel, source_commit
from harness.report.compare import add_compare_parser, run_compare
from harness.report.html import write_html
from harness.report.verdict import FAILED, NOT_JUDGED, PASSED
from harness.report.verdict import of_report as report_verdict
from harness.report.writer import (
    ReportError,
    build_report,
    failures_by_feature,
    harness_version,
    load_report,
    write_yaml,
)
from harness.run_options import OPTIONS, RUN_KEYS, add_run_arguments
from harness.run_options import pytest_args as run_pytest_args
from harness.timeouts import parse_overrides as parse_timeout_overrides
from harness.workers import order_slow_first, worker_args
from harness.workers import resolve as workers_for

__all__ = [
    "BACKENDS",
    "DEFAULT_REPORT",
    "PROFILES",
    "SUITES_PACKAGE",
    "ConformanceCollector",
    "build_parser",
    "build_pytest_args",
    "find_profile_packages",
    "list_pytest_args",
    "main",
    "parse_args",
    "run_exit_code",
    "run_pytest",
    "summary_lines",
]

PROG = "agn-conformance"
BACKENDS: tuple[str, ...] = backend_names()
DEFAULT_REPORT: str = next(o.run_default for o in OPTIONS if o.key == "report")
SUITES_PACKAGE = "suites"
SELF_CHECK = "self-check"

EXIT_PASSED = 0
EXIT_CORE_FAILED = 1
EXIT_UNJUDGED = 2
_EXIT_BY_VERDICT = {PASSED: EXIT_PASSED, FAILED: EXIT_CORE_FAILED, NOT_JUDGED: EXIT_UNJUDGED}

_UNJUDGED_PYTEST_CODES = frozenset({
    int(pytest.ExitCode.INTERRUPTED),
    int(pytest.ExitCode.INTERNAL_ERROR),
    int(pytest.ExitCode.USAGE_ERROR),
})
_JUDGED_PYTEST_CODES = frozenset({
    int(pytest.ExitCode.OK),
    int(pytest.ExitCode.TESTS_FAILED),
    int(pytest.ExitCode.NO_TESTS_COLLECTED),
})


# ------------------------------------------------------------------------------------------ arguments


def _profiles_arg(text: str) -> list[str]:
    """Parse one ``--profile`` value; a comma-separated list is accepted too."""
    try:
        return parse_profiles(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser(run_defaults: Mapping[str, Any] | None = None) -> argparse.ArgumentParser:
    """The argument parser (arguments after ``--`` are split off before it sees them); `run_defaults` are
    the run options an options file gave, which flags on the command line override."""
    return _build_parsers(run_defaults)[0]


def _build_parsers(
    run_defaults: Mapping[str, Any] | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each subcommand's own, so an error found after parsing (a bad options file)
    prints the usage of the subcommand it belongs to."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Conformance suites for AI Grid Network routing and the Praxis AI data plane.",
        epilog="Arguments after '--' are passed to pytest unchanged, e.g. "
               f"'{PROG} run --profile consumer -- -k revision -x'.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {harness_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    run = commands.add_parser(
        "run", help="run the conformance suites and write a conformance report",
        description="Run the conformance suites against an implementation and write a ConformanceReport. "
                    "Exit status: 0 no core test of the selected profiles failed, 1 a core test failed, "
                    "2 the run could not be judged (bad arguments, pytest usage or internal error, "
                    "no report, a profile none of whose core tests ran).",
        epilog="Arguments after '--' are passed to pytest unchanged. The run loads only its own pytest plugin "
               "and pytest-xdist; name any other with '-- -p NAME'.",
    )
    add_run_arguments(run)  # every run option (harness.run_options), as the plugin has them
    _add_profile_arg(run)
    run.add_argument("--options", default=None, metavar="FILE",
                     help=f"a YAML file of run options (the flags without dashes: {', '.join(RUN_KEYS)}, "
                          "profile; timeout as NAME: SECONDS); flags given here override it")
    if run_defaults:
        run.set_defaults(**run_defaults)

    listing = commands.add_parser(
        "list", help="list the conformance tests without running them",
        description="Collect the conformance suites and print one line per test: "
                    "id, cases, profile, level, feature (and with --wide the spec section it cites).",
        epilog="Arguments after '--' are passed to pytest unchanged.",
    )
    _add_profile_arg(listing)
    listing.add_argument("--features", action="store_true",
                         help="print the extended features with their profiles, what each covers and where its "
                              "rule comes from")
    listing.add_argument("--wide", action="store_true",
                         help="add the spec section each test cites (lines then exceed a terminal's width)")

    demo = commands.add_parser(
        "demo", help="judge one demo's routing claims (the demos profile, one demo)",
        description="Run one demo's scenario of the demos profile and write a ConformanceReport of its claims. "
                    "Exit status as for run: 0 every demo test passed, 1 one failed, 2 not judged.",
        epilog="Arguments after '--' are passed to pytest unchanged.",
    )
    demo.add_argument("name", metavar="NAME", help=f"the demo ({', '.join(DEMOS)})")
    add_run_arguments(demo)

    commands.add_parser(
        SELF_CHECK, add_help=False,
        help="run the suites against deliberately broken implementations and show the tests that catch each "
             f"(see '{PROG} {SELF_CHECK} --help')")

    covering = commands.add_parser(
        "coverage", help="list each normative statement of the spec with the tests that enforce it",
        description="Collect the conformance suites and print, per spec document, every catalogued statement "
                    "(suites/statements.yaml) with the conformance ids that enforce it, the reason it is "
                    "out of scope, or the profile not yet shipped that will judge it (pending).",
        epilog="Arguments after '--' are passed to pytest unchanged.",
    )
    _add_profile_arg(covering)
    add_compare_parser(commands)
    covering.add_argument("--strict", action="store_true",
                          help="exit 1 when a statement has neither a test nor an out-of-scope reason")
    return parser, {"run": run, "list": listing, "demo": demo, "coverage": covering}


def _add_profile_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", action="append", type=_profiles_arg, default=None, metavar="P",
                        help=f"profile to include ({', '.join(PROFILES)}); repeat or separate with commas "
                             f"(default: all; for run, all but serving and the demos, "
                             f"{', '.join(CONFORMANCE_PROFILES)})")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``; ``extra`` holds what followed ``--`` and ``profiles`` the flattened profile list."""
    args = list(argv)
    extra: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, extra = args[:cut], args[cut + 1:]
    namespace = build_parser().parse_args(args)
    if namespace.command == "run" and namespace.options:
        defaults = _options_defaults(namespace.options)
        if any(arg == "--profile" or arg.startswith("--profile=") for arg in args):
            defaults.pop("profile", None)  # --profile appends: given on the command line, it replaces the file's
        namespace = build_parser(defaults).parse_args(args)
    # a run judges the conformance profiles unless told otherwise; listing and coverage show every profile
    default = CONFORMANCE_PROFILES if namespace.command == "run" else PROFILES
    chosen = [name for group in (getattr(namespace, "profile", None) or [list(default)]) for name in group]
    if namespace.command == "demo":
        chosen = [DEMOS_PROFILE]
    namespace.profiles = list(dict.fromkeys(chosen))
    namespace.extra = extra
    return namespace


def _options_defaults(path: str) -> dict[str, Any]:
    """The run defaults from an options file, checked as the flags are; exit 2 naming the key otherwise."""
    try:
        defaults = load_options(Path(path))
        if "backend" in defaults and defaults["backend"] not in BACKENDS:
            raise OptionsFileError(f"{path}: backend: {defaults['backend']!r} is not one of {', '.join(BACKENDS)}")
        if "profile" in defaults:
            defaults["profile"] = [_profiles_arg(",".join(defaults["profile"]))]
    except (OptionsFileError, argparse.ArgumentTypeError) as exc:
        _build_parsers()[1]["run"].error(f"--options: {exc}")
    return defaults


def build_pytest_args(
    *,
    suite_profiles: Sequence[str],
    profiles: Sequence[str],
    backend: str,
    impl: str,
    report: str,
    html: str | None = None,
    junit: str | None = None,
    diagnostics: str | None = None,
    keep: bool = False,
    slow: bool = False,
    timeouts: Sequence[str] = (),
    seed: int | None = None,
    ids: Sequence[str] = (),
    extra: Sequence[str] = (),
    package: str = SUITES_PACKAGE,
    image: str | None = None,
    kube_contexts: str | None = None,
    wait_scale: float | None = None,
    kind_node_image: str | None = None,
    demo_dir: str | None = None,
) -> list[str]:
    """Arguments for ``pytest.main`` for a conformance run.

    ``suite_profiles`` are the profiles whose suite packages exist and are run; ``profiles`` are all the
    selected ones, which the report lists even when they have no tests.
    """
    # the CLI imports harness and suites before pytest starts; their assertion rewriting is not needed
    args = ["-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning", "--pyargs"]
    args += [f"{package}.{name}" for name in suite_profiles]
    args += run_pytest_args({"backend": backend, "impl": impl, "report": report})
    args += ["--conformance-profiles", ",".join(profiles)]
    args += run_pytest_args({"html": html, "junit": junit, "diagnostics": diagnostics, "keep": keep, "slow": slow,
                             "timeout": list(timeouts), "id": list(ids), "seed": seed, "image": image,
                             "kube_contexts": kube_contexts,
                             "wait_scale": wait_scale,
                             "kind_node_image": kind_node_image, "demo_dir": demo_dir})
    return args + list(extra)


def list_pytest_args(suite_profiles: Sequence[str], extra: Sequence[str] = (),
                     package: str = SUITES_PACKAGE) -> list[str]:
    """Arguments for ``pytest.main`` that collect the suites without running them."""
    return (["--collect-only", "-q", "-p", "no:cacheprovider", "--pyargs"]
            + [f"{package}.{name}" for name in suite_profiles] + list(extra))


# ------------------------------------------------------------------------------------------- judging


def run_exit_code(pytest_rc: int, report: Mapping[str, Any] | None) -> int:
    """Exit status of ``run`` from pytest's exit code and the report it left (``None``: no report).

    The report's verdict decides (harness.report.verdict): a failed core test or a failed test of a claimed
    extended feature is 1, a run that judged nothing (or a selected profile none of whose core tests ran) 2.
    """
    if int(pytest_rc) in _UNJUDGED_PYTEST_CODES or int(pytest_rc) not in _JUDGED_PYTEST_CODES:
        return EXIT_UNJUDGED
    if report is None:
        return EXIT_UNJUDGED  # a run that judged nothing must never read as a pass
    return _EXIT_BY_VERDICT[report_verdict(report).outcome]


def _not_judged(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    rows = (report.get("summary") or {}).get("notJudged") or []
    return [row for row in rows if isinstance(row, Mapping)]


def summary_lines(report: Mapping[str, Any], report_path: str, html_path: str | None = None) -> list[str]:
    """A few lines for the terminal: the verdict, one line per profile with its failures grouped by
    feature (the feature with most failures first), where the reports are."""
    impl = report.get("implementation") or {}
    unjudged = _not_judged(report)
    verdict = report_verdict(report)
    lines = [f"{PROG}: {verdict.headline} for {impl.get('project', '?')} {impl.get('version', '')}".rstrip()
             + f" (backend {report.get('backend', '?')})"]
    lines += [f"  {row.get('profile', '?')}: no core test ran: {row.get('reason', '')}" for row in unjudged]
    if verdict.outcome == NOT_JUDGED and not unjudged:
        lines.append("  no test passed or failed (interrupted, deselected, or nothing was collected)")
    for profile in report.get("profiles") or []:
        parts = [f"  {str(profile.get('name', '?')):<9}"]
        for level in _shown_levels(profile):
            section = profile.get(level) or {}
            stats = section.get("statistics") or {}
            parts.append(f"{level}: {section.get('result', '?')} ({stats.get('passed', 0)} passed, "
                         f"{stats.get('failed', 0)} failed, {stats.get('skipped', 0)} skipped)")
        unsupported = (profile.get("extended") or {}).get("unsupportedFeatures") or []
        if unsupported:
            parts.append(f"unsupported: {', '.join(map(str, unsupported))}")
        lines.append("  ".join(parts))
        lines += _failure_lines(profile)
    inputs = report.get("demoInputs")
    if isinstance(inputs, Mapping):
        unused = [u for u in inputs.get("unused") or [] if isinstance(u, Mapping)]
        lines.append(f"  demo folder {inputs.get('source', '?')}: {len(inputs.get('used') or [])} keys used, "
                     f"{len(unused)} not used (demoInputs.unused in the report gives each file, key and reason)")
        taken = inputs.get("taken") or {}
        scalars = [f"{key} {value}" for key, value in taken.items() if isinstance(value, str)] if isinstance(
            taken, Mapping) else []
        if scalars:
            lines.append(f"    runs with the folder's {', '.join(scalars)} (demoInputs.taken)")
    lines.append(f"  report: {report_path}" + (f"  html: {html_path}" if html_path else ""))
    return lines


def _shown_levels(profile: Mapping[str, Any]) -> tuple[str, ...]:
    """The levels a profile's summary shows: the demos profile's tests are of the demo level, not core."""
    return (DEMO_LEVEL, "extended") if DEMO_LEVEL in profile else ("core", "extended")


#: The failing ids a summary line names before it says how many more there are.
_IDS_SHOWN = 4


def _failure_lines(profile: Mapping[str, Any]) -> list[str]:
    """`    core: 6 failed in cookieAffinity: ID-1, ID-2, ...` per level and failing feature."""
    lines = []
    for level in _shown_levels(profile):
        grouped = failures_by_feature(profile.get(level) or {})
        for feature, ids in sorted(grouped.items(), key=lambda item: (-len(item[1]), item[0])):
            shown = ", ".join(ids[:_IDS_SHOWN]) + (f", +{len(ids) - _IDS_SHOWN} more" if len(ids) > _IDS_SHOWN else "")
            where = "a feature not recorded in the report" if feature == "?" else feature
            lines.append(f"    {level}: {len(ids)} failed in {where}: {shown}")
    return lines


# -------------------------------------------------------------------------------------------- running


def find_profile_packages(
    profiles: Sequence[str], package: str = SUITES_PACKAGE
) -> tuple[list[str], list[str]]:
    """Split ``profiles`` into those whose suite package exists and those without one.

    Only a missing package counts as absent; a package that exists but fails to import is kept, so that
    pytest reports its import error instead of the profile silently disappearing.
    """
    present: list[str] = []
    missing: list[str] = []
    for name in profiles:
        try:
            spec = importlib.util.find_spec(f"{package}.{name}")
        except ModuleNotFoundError:
            spec = None
        # A directory without __init__.py (a namespace package) is not a suite yet.
        if spec is None or spec.origin is None:
            missing.append(name)
        else:
            present.append(name)
    return present, missing


def run_pytest(args: Sequence[str], plugins: Sequence[object] = ()) -> int:
    """Run pytest in this process and return its exit code."""
    return int(pytest.main(list(args), plugins=list(plugins)))


def _error(message: str, stream: TextIO | None = None) -> None:
    print(f"{PROG}: error: {message}", file=stream or sys.stderr)


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def _command_run(args: argparse.Namespace) -> int:
    try:
        descriptor = load_impl(args.impl)
    except ImplError as exc:
        _error(f"--impl {args.impl}: {exc}")
        return EXIT_UNJUDGED
    impl_arg = REFERENCE if descriptor.source == REFERENCE else str(Path(args.impl).absolute())
    report_path = Path(args.report).absolute()
    html_path = str(Path(args.html).absolute()) if args.html else None
    junit_path = str(Path(args.junit).absolute()) if args.junit else None
    diagnostics_dir = str(Path(args.diagnostics).absolute()) if args.diagnostics else None
    folder: submission.SubmissionPaths | None = None
    if args.submission:
        try:
            submission.check_version(descriptor.implementation.version)
        except submission.SubmissionError as exc:
            _error(f"--submission: {exc}")
            return EXIT_UNJUDGED
        final = Path(args.submission).absolute()
        if final.exists() and (not final.is_dir() or any(final.iterdir())) and not args.force:
            _error(f"--submission: {final} exists and is not empty; give --force to replace it")
            return EXIT_UNJUDGED
        # The run writes into a staging folder beside it, moved into place only when the run judged something:
        # a run that judged nothing leaves an earlier submission as it was.
        staging = final.with_name(f".{final.name}.staging-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        folder = submission.paths(staging, args.profiles, descriptor.implementation.version, args.backend)
        if args.seed is None:  # chosen here so the submission can say which, and a rerun can use it
            args.seed = secrets.randbelow(2**31)
        report_path, html_path, junit_path = folder.report, str(folder.html), str(folder.junit)
        diagnostics_dir = str(folder.diagnostics)

    present, missing = find_profile_packages(args.profiles, SUITES_PACKAGE)
    if args.command == "demo":
        try:
            present, missing = [demo_module(args.name)], []
        except LookupError as exc:
            _error(str(exc))
            return EXIT_UNJUDGED
    for name in missing:
        _warn(f"profile {name!r} has no suite package ({SUITES_PACKAGE}.{name}); "
              "it is reported with zero tests")
    if not present:
        _write_empty_report(descriptor, args, report_path, html_path)
        _error(f"none of the selected profiles ({', '.join(args.profiles)}) has a suite package; "
               f"wrote an empty report to {report_path}")
        return EXIT_UNJUDGED

    try:
        parse_timeout_overrides(args.timeout)
    except ValueError as exc:
        _error(f"--timeout: {exc}")
        return EXIT_UNJUDGED
    if args.id and _unknown_ids(args) is not None:
        return EXIT_UNJUDGED
    try:
        workers = workers_for(args.workers, args.backend, args.extra, present)
    except ValueError as exc:
        _error(str(exc))
        return EXIT_UNJUDGED
    if workers > 1:
        present = order_slow_first(present)
    # A report left over from an earlier run must not be mistaken for this run's.
    if report_path.is_file():
        report_path.unlink()
    pytest_args = build_pytest_args(
        suite_profiles=present, profiles=args.profiles, backend=args.backend, impl=impl_arg,
        report=str(report_path), html=html_path, junit=junit_path, diagnostics=diagnostics_dir, keep=args.keep,
        slow=args.slow, timeouts=args.timeout, ids=args.id or (),
        seed=args.seed, wait_scale=args.wait_scale, extra=[*worker_args(workers), *args.extra], package=SUITES_PACKAGE,
        image=args.image,
        kube_contexts=args.kube_contexts, kind_node_image=args.kind_node_image,
        demo_dir=str(Path(args.demo_dir).absolute()) if args.demo_dir else None)
    with only_needed_plugins() as plugin_args:
        rc = run_pytest([*plugin_args, *pytest_args])

    report: dict[str, Any] | None = None
    try:
        report = load_report(report_path)
    except ReportError as exc:
        _error(f"{exc} (pytest exit code {rc}: {_pytest_code_name(rc)})")
    code = run_exit_code(rc, report)
    if folder is not None:
        final = Path(args.submission).absolute()
        if report is None or code == EXIT_UNJUDGED:
            shutil.rmtree(folder.root, ignore_errors=True)
            why = "; ".join(report_verdict(report).reasons) if report is not None else "no report"
            _error(f"--submission: refused, the run was not judged ({why}); {final} was left as it was")
            if report is not None:
                print("\n".join(summary_lines(report, "(not kept)")))
            return EXIT_UNJUDGED
        shutil.rmtree(final, ignore_errors=True)
        folder.root.rename(final)
        folder = submission.paths(final, args.profiles, descriptor.implementation.version, args.backend)
        report_path, html_path = folder.report, str(folder.html)
        for asked, made in ((args.html, folder.html), (args.junit, folder.junit)):  # also where the flags said
            if asked and made.is_file():
                Path(asked).absolute().parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(made, Path(asked).absolute())
        digest = submission.write_descriptor(descriptor_text(descriptor.source), folder.descriptor)
        # Run from the folder's parent, the command uses the folder's own copy of the descriptor and the seed
        # this run used, so it needs nothing of the submitter's machine.
        again = [PROG, "run", "--profile", ",".join(args.profiles), "--backend", args.backend,
                 "--impl", f"{final.name}/{folder.descriptor.name}", "--seed", str(args.seed),
                 "--workers", str(workers), *(f"--id={i}" for i in args.id or ()), "--submission", final.name,
                 "--force", *(["--", *args.extra] if args.extra else [])]
        wheel = copy_wheel(folder.root)
        submission.write_readme(folder, report, command=again, descriptor_sha256=digest,
                                wheel=wheel, commit=source_commit(),
                                implementation_descriptor=args.impl, environment={
                                    "Seed": str(args.seed), "Workers": str(workers), "Backend": args.backend,
                                    "Python": platform.python_version(), "OS": platform.platform(),
                                    "Command as given": shlex.join([PROG, *getattr(args, "argv", [])])})
    if report is not None:
        print("\n".join(summary_lines(report, str(report_path), html_path)))
        if folder is not None:
            print(f"  submission: {folder.root} (start with {folder.readme.name})")
        verdict = report_verdict(report)
        if code == EXIT_UNJUDGED and verdict.outcome == NOT_JUDGED and int(rc) in _JUDGED_PYTEST_CODES:
            _error(f"{'; '.join(verdict.reasons)}: the run cannot be judged")
        elif code == EXIT_UNJUDGED:
            _error(f"pytest stopped with exit code {rc} ({_pytest_code_name(rc)}); the run cannot be judged")
    return code


def demo_module(name: str, package: str = SUITES_PACKAGE) -> str:
    """The suite module (relative to `package`) of demo `name`; LookupError saying why when there is none."""
    if name not in DEMOS:
        raise LookupError(f"unknown demo {name!r} (known: {', '.join(DEMOS)})")
    def module(demo: str) -> str:
        return f"{DEMOS_PROFILE}.test_{demo.replace('-', '_')}"

    def exists(demo: str) -> bool:
        try:
            return importlib.util.find_spec(f"{package}.{module(demo)}") is not None
        except ModuleNotFoundError:
            return False

    if not exists(name):
        have = [d for d in DEMOS if exists(d)]
        raise LookupError(f"demo {name!r} has no scenario in this version (scenarios: {', '.join(have) or 'none'})")
    return module(name)


def _pytest_code_name(rc: int) -> str:
    try:
        return pytest.ExitCode(rc).name.lower().replace("_", " ")
    except ValueError:
        return "unknown"


def _write_empty_report(descriptor: ImplDescriptor, args: argparse.Namespace, report_path: Path,
                        html_path: str | None) -> None:
    report = build_report([], descriptor.implementation, backend=args.backend,
                          harness_version=harness_version(), profiles=args.profiles,
                          features_claimed=descriptor.features)
    write_yaml(report, report_path)
    if html_path:
        write_html(report, [], html_path)


@dataclass
class ConformanceCollector:
    """pytest plugin object that records the ``conformance`` marker of every collected test."""

    rows: list[dict[str, str]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # each test's conformance id with its case, as the report names it
    unmarked: list[str] = field(default_factory=list)
    statements: dict[str, set[str]] = field(default_factory=dict)  # conformance id -> statement ids

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            marker = item.get_closest_marker("conformance")
            if marker is None:
                self.unmarked.append(item.nodeid)
                continue
            kwargs = marker.kwargs
            self.rows.append({key: str(kwargs.get(key, "-"))
                              for key in ("id", "profile", "level", "feature", "spec")})
            self.ids.append(item_id(str(kwargs.get("id", "-")), item))
            self.statements.setdefault(str(kwargs.get("id", "-")), set()).update(kwargs.get("statements", ()))


def _command_list(args: argparse.Namespace, out: TextIO) -> int:
    if getattr(args, "features", False):
        from harness.features import EXTENDED_BY_PROFILE
        from harness.impl import FEATURE_DESCRIPTIONS

        width = max(len(name) for name in FEATURE_DESCRIPTIONS)
        profiles = {name: ",".join(p for p, features in EXTENDED_BY_PROFILE.items() if name in features)
                    for name in FEATURE_DESCRIPTIONS}
        column = max(len(p) for p in profiles.values())
        out.write("".join(f"{name.ljust(width)}  {profiles[name].ljust(column)}  {text}\n"
                          for name, text in sorted(FEATURE_DESCRIPTIONS.items())))
        return 0
    collector = _collect(args)
    if collector is None:
        return EXIT_UNJUDGED
    out.write(_format_rows(collector.rows, wide=args.wide))
    return 0


def _unknown_ids(args: argparse.Namespace) -> str | None:
    """Why --id cannot select what it asks for (said on stderr), or None when every pattern selects a test."""
    collector = _collect(args)
    if collector is None:
        return "collecting the suites failed"
    missing = unmatched(args.id, collector.ids)
    for pattern in missing:
        near = nearest(pattern, collector.ids)
        _error(f"--id {pattern}: no conformance test of {', '.join(args.profiles)} has this id"
               + (f"; did you mean {', '.join(near)}?" if near else f" (see {PROG} list)"))
    return "unknown id" if missing else None


def _collect(args: argparse.Namespace) -> ConformanceCollector | None:
    """The conformance markers of the selected profiles' suites, or None (said why) when collection fails."""
    present, missing = find_profile_packages(args.profiles, SUITES_PACKAGE)
    for name in missing:
        _warn(f"profile {name!r} has no suite package ({SUITES_PACKAGE}.{name})")
    if not present:
        _error(f"none of the selected profiles ({', '.join(args.profiles)}) has a suite package")
        return None
    collector = ConformanceCollector()
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        rc = run_pytest(list_pytest_args(present, args.extra, SUITES_PACKAGE), plugins=[collector])
    if rc not in (int(pytest.ExitCode.OK), int(pytest.ExitCode.NO_TESTS_COLLECTED)):
        sys.stderr.write(captured.getvalue())
        _error(f"collecting the suites failed (pytest exit code {rc})")
        return None
    if collector.unmarked:
        _warn(f"{len(collector.unmarked)} collected test(s) carry no conformance marker, "
              f"e.g. {collector.unmarked[0]}")
    return collector


def _command_coverage(args: argparse.Namespace, out: TextIO) -> int:
    """Each catalogued statement with the conformance ids that enforce it, or its out-of-scope reason."""
    from harness.statements import CatalogueError, by_document, coverage, load_statements

    collector = _collect(args)
    if collector is None:
        return EXIT_UNJUDGED
    try:
        rows = coverage(load_statements(), collector.statements)
    except CatalogueError as exc:
        _error(str(exc))
        return EXIT_UNJUDGED
    for doc in by_document(rows):
        out.write(f"{doc['doc']}: {doc['statements']} statements, {doc['covered']} enforced, "
                  f"{doc['outOfScope']} out of scope, {doc['pending']} pending, {doc['uncovered']} not enforced\n")
        for row in (r for r in rows if r.statement.doc == doc["doc"]):
            out.write(f"  {row.statement.id}  {row.status}  {row.detail}\n")
    uncovered = sum(1 for row in rows if row.status == "uncovered")
    return 1 if getattr(args, "strict", False) and uncovered else 0


def _format_rows(rows: Sequence[Mapping[str, str]], *, wide: bool = False) -> str:
    """One line per conformance id, with how many cases (parameters) it has, in collection order; the spec
    column (a section and sometimes a sentence) only when `wide`, so the default fits a terminal."""
    headers = ("id", "cases", "profile", "level", "feature") + (("spec",) if wide else ())
    by_id: dict[str, dict[str, str]] = {}
    cases: dict[str, int] = {}
    for row in rows:
        by_id.setdefault(row["id"], dict(row))
        cases[row["id"]] = cases.get(row["id"], 0) + 1
    table = [list(headers)] + [[str(cases[i]) if key == "cases" else row[key] for key in headers]
                               for i, row in by_id.items()]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    lines = ("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
             for line in table)
    return "".join(line + "\n" for line in lines)


def _command_self_check(arguments: Sequence[str]) -> int:
    """The shipped breakages patch the reference, so the harness never imports them: the self-check runs as
    a process of its own (``python -m selfcheck``), its arguments and exit status passed through."""
    process = subprocess.Popen([sys.executable, "-m", "selfcheck", *arguments])
    try:
        return process.wait()
    except KeyboardInterrupt:  # the self-check got the same interrupt: let it stop its runs, then report that
        process.wait()
        return EXIT_UNJUDGED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agn-conformance`` console script; returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == [SELF_CHECK]:
        return _command_self_check(arguments[1:])
    args = parse_args(arguments)
    args.argv = arguments
    if args.command in ("run", "demo"):
        return _command_run(args)
    if args.command == "compare":
        return run_compare(args, sys.stdout)
    if args.command == "coverage":
        return _command_coverage(args, sys.stdout)
    return _command_list(args, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
