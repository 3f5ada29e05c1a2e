"""The agn-conformance command: argument handling, pytest arguments, exit status, list output.

The real suites are not run here; ``run`` is driven with a stand-in for pytest that writes the report
the way the pytest plugin does, and ``list`` collects a tiny suite package made for the test.
"""

from __future__ import annotations

import io
import sys
import textwrap
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import cli
from harness.impl import Implementation, load_impl
from harness.report import TestResult, build_report, load_report, write_yaml

ALL = ["consumer", "producer", "provider", "mesh"]

PREAMBLE = ["-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning"]


# ------------------------------------------------------------------------------------------- parsing


def test_defaults() -> None:
    args = cli.parse_args(["run"])
    assert (args.command, args.backend, args.impl, args.report) == ("run", "local", "reference",
                                                                     "conformance-report.yaml")
    assert args.profiles == ALL
    assert args.html is None and args.keep is False and args.seed is None and args.extra == []


def test_profiles_repeat_commas_and_dedupe() -> None:
    args = cli.parse_args(["run", "--profile", "mesh", "--profile", "consumer,mesh", "--profile", "provider"])
    assert args.profiles == ["mesh", "consumer", "provider"]


def test_everything_after_double_dash_goes_to_pytest() -> None:
    args = cli.parse_args(["run", "--backend", "kind", "--seed", "7",
                           "--", "-k", "revision", "--profile", "x", "--", "-x"])
    assert args.backend == "kind" and args.seed == 7
    assert args.extra == ["-k", "revision", "--profile", "x", "--", "-x"]
    assert args.profiles == ALL


@pytest.mark.parametrize("argv", [["run", "--backend", "docker"], ["run", "--profile", "gateway"],
                                  ["run", "--seed", "abc"], ["list", "--profile", ","], []])
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.parse_args(argv)
    assert caught.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.startswith("agn-conformance ")


# ------------------------------------------------------------------------------------ pytest arguments


def test_build_pytest_args_full() -> None:
    args = cli.build_pytest_args(
        suite_profiles=["consumer", "mesh"], profiles=["consumer", "producer", "mesh"], backend="kind",
        impl="/x/impl.yaml", report="/x/r.yaml", html="/x/r.html", keep=True, seed=42, extra=["-k", "ttl"])
    assert args == PREAMBLE + ["--pyargs", "suites.consumer", "suites.mesh",
                    "--grid-backend", "kind", "--impl", "/x/impl.yaml", "--conformance-report", "/x/r.yaml",
                    "--conformance-profiles", "consumer,producer,mesh", "--conformance-html", "/x/r.html",
                    "--grid-keep", "--grid-seed", "42", "-k", "ttl"]


def test_build_pytest_args_minimal() -> None:
    args = cli.build_pytest_args(suite_profiles=["consumer"], profiles=["consumer"], backend="local",
                                 impl="reference", report="r.yaml", seed=0)
    assert args == PREAMBLE + ["--pyargs", "suites.consumer", "--grid-backend", "local",
                    "--impl", "reference", "--conformance-report", "r.yaml", "--conformance-profiles",
                    "consumer", "--grid-seed", "0"]


def test_list_pytest_args() -> None:
    assert cli.list_pytest_args(["provider"], ["-m", "conformance"]) == [
        "--collect-only", "-q", "-p", "no:cacheprovider", "--pyargs", "suites.provider", "-m", "conformance"]


# ---------------------------------------------------------------------------------------- exit status


def _report(*outcomes: tuple[str, str]) -> dict[str, Any]:
    results = [TestResult(id=f"t-{i}", profile="consumer", level=level, feature="f",  # type: ignore[arg-type]
                          spec="s", outcome=outcome, duration_s=0.1)  # type: ignore[arg-type]
               for i, (level, outcome) in enumerate(outcomes)]
    return build_report(results, Implementation("o", "p", "1"), backend="local", harness_version="0.1.0",
                        profiles=["consumer"], features_claimed=["f"])


@pytest.mark.parametrize(("pytest_rc", "outcomes", "expected"), [
    (0, [("core", "passed")], 0),
    (1, [("core", "passed"), ("extended", "failed")], 1),   # a claimed feature's failure fails the run
    (1, [("core", "failed")], 1),
    (0, [("core", "failed")], 1),                           # the report decides, not pytest's code
    (5, [], 2),                                             # nothing ran: never a pass
    (0, [], 2),                                             # no result recorded (e.g. lost workers)
    (2, [("core", "passed")], 2),                           # interrupted
    (3, [("core", "passed")], 2),                           # internal error
    (4, [("core", "passed")], 2),                           # usage error
    (99, [("core", "passed")], 2),                          # unknown code from a plugin
    (0, None, 2),                                           # no report
    (0, [("core", "skipped"), ("core", "skipped")], 2),     # a profile that ran no core test: not judged
    (0, [("core", "skipped"), ("extended", "passed")], 2),  # ... whatever its extended tests did
    (0, [("core", "passed"), ("core", "skipped")], 0),      # some core tests skipped: judged, partial
    (0, [("core", "unsupported")], 2),                      # nothing passed or failed: nothing judged
    (0, [("core", "failed"), ("core", "skipped")], 1),
])
def test_run_exit_code(pytest_rc: int, outcomes: list[tuple[str, str]] | None, expected: int) -> None:
    report = None if outcomes is None else _report(*outcomes)
    assert cli.run_exit_code(pytest_rc, report) == expected


def test_summary_lines() -> None:
    report = _report(("core", "failed"), ("extended", "passed"))
    lines = cli.summary_lines(report, "/r.yaml", "/r.html")
    assert lines[0].startswith("agn-conformance: FAILED for p 1")
    assert "core: failure (0 passed, 1 failed, 0 skipped)" in lines[1]
    assert "extended: success (1 passed, 0 failed, 0 skipped)" in lines[1]
    assert lines[2] == "    core: 1 failed in f: t-0"
    assert lines[-1].strip() == "report: /r.yaml  html: /r.html"
    assert len(lines) == 4


def test_summary_lines_group_failures_by_feature() -> None:
    results = [TestResult(id=f"AFF-{i}", profile="consumer", level="extended", feature="cookieAffinity",
                          spec="s", outcome="failed", duration_s=0.1) for i in range(1, 7)]
    results += [TestResult(id="SEL-1", profile="consumer", level="core", feature="selection", spec="s",
                           outcome="failed", duration_s=0.1),
                TestResult(id="P-1", profile="provider", level="core", feature="peerTrust", spec="s",
                           outcome="passed", duration_s=0.1)]
    report = build_report(results, Implementation("o", "p", "1"), backend="local", harness_version="0.1.0",
                          profiles=["consumer", "provider"], features_claimed=["cookieAffinity"])
    lines = cli.summary_lines(report, "/r.yaml")
    assert lines[1].startswith("  consumer ") and "core: failure (0 passed, 1 failed" in lines[1]
    assert lines[2:4] == ["    core: 1 failed in selection: SEL-1",
                          "    extended: 6 failed in cookieAffinity: AFF-1, AFF-2, AFF-3, AFF-4, +2 more"]
    assert lines[4].startswith("  provider ") and len(lines) == 6


def test_summary_lines_of_a_report_without_features_of_failures() -> None:
    report = _report(("core", "failed"), ("core", "failed"))
    del report["profiles"][0]["core"]["failuresByFeature"]
    for failure in report["profiles"][0]["core"]["failures"]:
        del failure["feature"]
    lines = cli.summary_lines(report, "/r.yaml")
    assert lines[2] == "    core: 2 failed in a feature not recorded in the report: t-0, t-1"


def test_summary_lines_name_a_profile_that_ran_no_core_test() -> None:
    results = [TestResult(id=f"t-{i}", profile="mesh", level="core", feature="f", spec="s", outcome="skipped",
                          duration_s=0.0, message="`docker info` failed (exit 1): no Docker engine")
               for i in range(3)]
    report = build_report(results, Implementation("o", "p", "1"), backend="kind", harness_version="0.1.0",
                          profiles=["mesh"], features_claimed=[])
    assert report["summary"] == {
        "verdict": "notJudged", "passed": False,
        "reasons": ["mesh: no core test ran (`docker info` failed (exit 1): no Docker engine)"],
        "notJudged": [{"profile": "mesh", "reason": "`docker info` failed (exit 1): no Docker engine"}]}
    lines = cli.summary_lines(report, "/r.yaml")
    assert lines[0] == "agn-conformance: NOT JUDGED for p 1 (backend kind)"
    assert lines[1] == "  mesh: no core test ran: `docker info` failed (exit 1): no Docker engine"
    assert cli.run_exit_code(0, report) == cli.EXIT_UNJUDGED


# ---------------------------------------------------------------------------------------- run command


def _write_impl(tmp_path: Path, command: list[str]) -> Path:
    path = tmp_path / "impl.yaml"
    path.write_text(yaml.safe_dump({
        "implementation": {"organization": "o", "project": "p", "version": "1", "contact": []},
        "gateway": {"command": command},
        "features": ["skipPaths"],
    }), encoding="utf-8")
    return path


def test_run_with_bad_impl_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pytest(args: Sequence[str], plugins: Sequence[object] = ()) -> int:
        raise AssertionError("pytest must not run with a bad descriptor")

    monkeypatch.setattr(cli, "run_pytest", no_pytest)
    impl = _write_impl(tmp_path, ["gw", "--workdir", "{workdir}"])
    assert cli.main(["run", "--impl", str(impl), "--report", str(tmp_path / "r.yaml")]) == 2
    err = capsys.readouterr().err
    assert "gateway.command: must contain {config}" in err and str(impl) in err
    assert not (tmp_path / "r.yaml").exists()


class FakePytest:
    """Stands in for pytest.main: records the arguments and writes a report like the plugin does."""

    def __init__(self, outcome: str | None, rc: int) -> None:
        self.outcome = outcome
        self.rc = rc
        self.calls: list[list[str]] = []

    def __call__(self, args: Sequence[str], plugins: Sequence[object] = ()) -> int:
        self.calls.append(list(args))
        if self.outcome is not None:
            options = dict(zip(args, args[1:], strict=False))
            profiles = options["--conformance-profiles"].split(",")
            descriptor = load_impl(options["--impl"])
            results = [TestResult(id="consumer-1", profile="consumer", level="core", feature="f", spec="s",
                                  outcome=self.outcome, duration_s=0.1)]  # type: ignore[arg-type]
            write_yaml(build_report(results, descriptor.implementation, backend=options["--grid-backend"],
                                    harness_version="0.1.0", profiles=profiles,
                                    features_claimed=descriptor.features),
                       options["--conformance-report"])
        return self.rc


@pytest.mark.parametrize(("outcome", "rc", "expected"), [("passed", 0, 0), ("failed", 1, 1), (None, 3, 2)])
def test_run_end_to_end_with_stand_in_pytest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str],
                                             outcome: str | None, rc: int, expected: int) -> None:
    fake = FakePytest(outcome, rc)
    monkeypatch.setattr(cli, "run_pytest", fake)
    monkeypatch.setattr(cli, "find_profile_packages",
                        lambda profiles, package="suites": ([p for p in profiles if p == "consumer"],
                                                            [p for p in profiles if p != "consumer"]))
    impl = _write_impl(tmp_path, ["gw", "-c", "{config}"])
    report_path = tmp_path / "r.yaml"
    report_path.write_text("stale: report from an earlier run\n", encoding="utf-8")

    code = cli.main(["run", "--profile", "consumer,mesh", "--impl", str(impl), "--report", str(report_path),
                     "--", "-x"])

    assert code == expected
    [args] = fake.calls
    assert args[:10] == ["-p", "harness.plugin", "-p", "xdist", *PREAMBLE, "--pyargs", "suites.consumer"]
    assert "suites.mesh" not in args and args[-1] == "-x"
    assert args[args.index("--conformance-profiles") + 1] == "consumer,mesh"
    assert args[args.index("--impl") + 1] == str(impl.absolute())
    captured = capsys.readouterr()
    assert "profile 'mesh' has no suite package" in captured.err
    if outcome is None:
        assert not report_path.exists()  # the stale report was removed, not read
        assert "no conformance report was written" in captured.err
    else:
        assert [p["name"] for p in load_report(report_path)["profiles"]] == ["consumer", "mesh"]
        assert ("PASSED" if expected == 0 else "FAILED") in captured.out
        assert f"report: {report_path}" in captured.out


def test_run_without_any_suite_package_writes_empty_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "SUITES_PACKAGE", f"no_such_suites_{uuid.uuid4().hex}")
    monkeypatch.setattr(cli, "run_pytest", FakePytest(None, 0))
    report_path, html_path = tmp_path / "r.yaml", tmp_path / "r.html"
    code = cli.main(["run", "--profile", "consumer", "--profile", "producer", "--report", str(report_path),
                     "--html", str(html_path)])
    assert code == 2
    report = load_report(report_path)
    assert [p["name"] for p in report["profiles"]] == ["consumer", "producer"]
    zero = {"passed": 0, "failed": 0, "skipped": 0}
    assert all(p["core"]["statistics"] == zero for p in report["profiles"])
    assert report["implementation"]["project"] == "reference-gateway"
    assert html_path.is_file()
    assert "has a suite package" in capsys.readouterr().err


# --------------------------------------------------------------------------------- suite packages, list


@pytest.fixture
def tiny_suites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A throwaway suite package: consumer (two tests), producer (namespace dir, no suite), no mesh."""
    name = f"tiny_suites_{uuid.uuid4().hex[:12]}"
    root = tmp_path / name
    (root / "consumer").mkdir(parents=True)
    (root / "producer").mkdir()
    (root / "__init__.py").write_text("", encoding="utf-8")
    (root / "consumer" / "__init__.py").write_text("", encoding="utf-8")
    (root / "consumer" / "test_sample.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.conformance(id="consumer-revision-1", profile="consumer", level="core",
                                 feature="overlayValidation", spec="overlay-contract 4.2")
        def test_revision():
            raise AssertionError("collection only: never run")

        @pytest.mark.conformance(id="consumer-weights-1", profile="consumer", level="extended",
                                 feature="weightedRandom", spec="selection 2.3")
        def test_weights():
            raise AssertionError("collection only: never run")

        def test_helper_without_marker():
            pass
        """), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def test_find_profile_packages(tiny_suites: str) -> None:
    present, missing = cli.find_profile_packages(["consumer", "producer", "mesh"], tiny_suites)
    assert present == ["consumer"]
    assert missing == ["producer", "mesh"]
    assert cli.find_profile_packages(["consumer"], f"absent_{uuid.uuid4().hex}") == ([], ["consumer"])


def test_list_prints_marker_fields(tiny_suites: str, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "SUITES_PACKAGE", tiny_suites)
    assert cli.main(["list", "--profile", "consumer,producer"]) == 0
    narrow = capsys.readouterr().out.splitlines()
    assert [line.split() for line in narrow] == [
        ["id", "cases", "profile", "level", "feature"],
        ["consumer-revision-1", "1", "consumer", "core", "overlayValidation"],
        ["consumer-weights-1", "1", "consumer", "extended", "weightedRandom"],
    ]
    assert cli.main(["list", "--wide", "--profile", "consumer,producer"]) == 0
    captured = capsys.readouterr()
    lines = [line.split() for line in captured.out.splitlines()]
    assert lines == [
        ["id", "cases", "profile", "level", "feature", "spec"],
        ["consumer-revision-1", "1", "consumer", "core", "overlayValidation", "overlay-contract", "4.2"],
        ["consumer-weights-1", "1", "consumer", "extended", "weightedRandom", "selection", "2.3"],
    ]
    assert "profile 'producer' has no suite package" in captured.err
    assert "1 collected test(s) carry no conformance marker" in captured.err


def test_list_reports_collection_errors(tiny_suites: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / tiny_suites / "consumer" / "test_broken.py"
    broken.write_text("import no_such_module_for_agn_conformance\n", encoding="utf-8")
    monkeypatch.setattr(cli, "SUITES_PACKAGE", tiny_suites)
    assert cli.main(["list", "--profile", "consumer"]) == 2
    err = capsys.readouterr().err
    assert "no_such_module_for_agn_conformance" in err and "collecting the suites failed" in err


def test_list_features_names_the_source_of_public_code_rules(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.impl import FEATURE_DESCRIPTIONS

    assert cli.main(["list", "--features"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == sorted(FEATURE_DESCRIPTIONS)
    for name in ("strictOverlayValidation", "exactValueLimits", "providerRouteStatus", "credentialFailClosed"):
        (line,) = [line for line in lines if line.startswith(name + " ")]
        assert "praxis-proxy/ai" in line, line
    assert [line.split()[1] for line in lines if line.startswith("toolCandidates ")] == ["producer,mesh"]
    assert [line.split()[1] for line in lines if line.startswith("weightedRandom ")] == ["consumer"]


def test_an_options_file_error_prints_the_run_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options = tmp_path / "options.yaml"
    options.write_text("bogus: 1\n", encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        cli.parse_args(["run", "--options", str(options)])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err.startswith("usage: agn-conformance run ") and "unknown option 'bogus'" in err, err


def test_an_options_file_sets_run_options_and_flags_override_it(tmp_path: Path) -> None:
    options = tmp_path / "options.yaml"
    options.write_text("backend: kind\nprofile: [consumer, mesh]\nseed: 7\nkeep: true\nslow: true\n"
                       "kube_contexts: {site-a: ctx1}\ntimeout: {reload: 30, heal: 60}\n")
    args = cli.parse_args(["run", "--options", str(options)])
    assert (args.backend, args.profiles, args.seed, args.keep, args.slow) == ("kind", ["consumer", "mesh"], 7,
                                                                              True, True)
    assert args.kube_contexts == "site-a=ctx1" and args.timeout == ["reload=30", "heal=60"]
    args = cli.parse_args(["run", "--options", str(options), "--backend", "local", "--profile", "producer",
                           "--timeout", "reload=5"])
    assert (args.backend, args.profiles, args.seed) == ("local", ["producer"], 7)
    assert args.timeout[-1] == "reload=5"  # the last entry for a name wins


@pytest.mark.parametrize(("text", "problem"), [
    ("backnd: kind\n", "unknown option 'backnd'"),
    ("backend: moon\n", "backend: 'moon' is not one of"),
    ("profile: [consumer, ghost]\n", "unknown profile ghost"),
    ("seed: seven\n", "seed: expected an integer"),
    ("keep: yes please\n", "keep: expected true or false"),
    ("timeout: {reload: soon}\n", "timeout.reload: expected a number of seconds"),
    ("- backend\n", "expected a mapping"),
    ("self_check: {breakages: [x]}\n", "self_check.breakages: unknown self-check option"),
    ("self_check: {jobs: 0}\n", "self_check.jobs: expected an integer of at least 1"),
])
def test_a_bad_options_file_is_refused_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      text: str, problem: str) -> None:
    """The nearest good file (backend: kind) is read: each refusal is for its stated reason."""
    good = tmp_path / "good.yaml"
    good.write_text("backend: kind\n")
    assert cli.parse_args(["run", "--options", str(good)]).backend == "kind"
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(["run", "--options", str(bad)])
    assert exit_info.value.code == 2
    assert problem in capsys.readouterr().err


def test_summary_lines_of_a_run_where_no_test_ran() -> None:
    """An interrupted run leaves a report of no results: its verdict must not read PASSED."""
    report = build_report([], Implementation("o", "p", "1"), backend="kind", harness_version="0.1.0",
                          profiles=["consumer"], features_claimed=[])
    lines = cli.summary_lines(report, "/r.yaml")
    assert lines[0] == "agn-conformance: NOT JUDGED for p 1 (backend kind)"
    assert lines[1] == "  no test passed or failed (interrupted, deselected, or nothing was collected)"
    assert cli.run_exit_code(2, report) == cli.EXIT_UNJUDGED
    passed = cli.summary_lines(_report(("core", "passed")), "/r.yaml")
    assert passed[0].startswith("agn-conformance: PASSED for p 1")


# --------------------------------------------------------------------------------------------- demos


def test_a_run_leaves_the_demos_out_unless_asked_and_listing_shows_them() -> None:
    assert "demos" not in cli.parse_args(["run"]).profiles
    assert "serving" not in cli.parse_args(["run"]).profiles
    assert cli.parse_args(["run", "--profile", "demos"]).profiles == ["demos"]
    assert cli.parse_args(["run", "--profile", "serving"]).profiles == ["serving"]
    assert cli.parse_args(["list"]).profiles == [*ALL, "serving", "demos"]
    demo_args = cli.parse_args(["demo", "grid-combined-site", "--backend", "kind"])
    assert (demo_args.command, demo_args.name, demo_args.profiles, demo_args.backend) == (
        "demo", "grid-combined-site", ["demos"], "kind")


def test_demo_module_names_the_scenario_or_says_why_there_is_none() -> None:
    assert cli.demo_module("grid-combined-site") == "demos.test_grid_combined_site"
    with pytest.raises(LookupError, match="unknown demo 'grid-combined-sites' .known: grid-combined-site, "):
        cli.demo_module("grid-combined-sites")
    with pytest.raises(LookupError, match="demo 'grid-combined-site' has no scenario in this version"):
        cli.demo_module("grid-combined-site", package="harness")


def test_demo_of_an_unknown_name_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "no-such-demo"]) == 2
    assert "unknown demo 'no-such-demo'" in capsys.readouterr().err


def test_summary_lines_of_a_demos_run_show_the_demo_level() -> None:
    from harness.impl import Implementation
    from harness.report import TestResult, build_report

    failed = TestResult(id="DEMO-B", profile="demos", level="demo", feature="grid-glb-demo", spec="s",
                        outcome="failed", duration_s=1.0, message="E boom")
    report = build_report([failed], Implementation("o", "p", "1", ()), backend="local", harness_version="0",
                          profiles=["demos"], features_claimed=())
    lines = cli.summary_lines(report, "r.yaml")
    assert lines[0].startswith("agn-conformance: FAILED")
    assert any(line.strip().startswith("demos") and "demo: failure (0 passed, 1 failed" in line for line in lines)
    assert "    demo: 1 failed in grid-glb-demo: DEMO-B" in lines


def test_the_documented_options_example_is_complete_and_reads(tmp_path: Path) -> None:
    """The documentation (docs/running.md, "The options file") shows every key of the options file, and the
    example as written is accepted by both the run and the self-check."""
    from harness.options_file import KEYS, SELF_CHECK_KEYS, load_options, load_self_check_options

    page = (Path(__file__).resolve().parents[1] / "docs" / "running.md").read_text()
    start = page.index("# options.yaml: a complete example")
    example = page[start:page.index("```", start)]
    document = yaml.safe_load(example)
    assert sorted(document) == sorted(KEYS), "the documented options example must show every key"
    assert sorted(document["self_check"]) == sorted(SELF_CHECK_KEYS)
    options = tmp_path / "options.yaml"
    options.write_text(example)
    assert load_options(options)["submission"] == "submission"
    assert load_self_check_options(options)["breakage"] == ["unchanged-swaps", "slow-reload"]


def test_the_self_check_takes_its_options_from_the_file_and_flags_override_them(tmp_path: Path) -> None:
    from selfcheck.command import main as self_check

    options = tmp_path / "options.yaml"
    options.write_text("profile: [consumer]\nself_check: {breakage: unchanged-swaps}\n")
    out = io.StringIO()
    assert self_check(["--options", str(options), "--list"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("consumer: unchanged-swaps:"), lines
    out = io.StringIO()
    assert self_check(["--options", str(options), "--list", "--breakage", "slow-reload"], out=out) == 0
    assert [line.split(":")[1].strip() for line in out.getvalue().splitlines()] == ["slow-reload"]
