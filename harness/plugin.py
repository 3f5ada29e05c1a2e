"""The agn-conformance pytest plugin: options, the conformance marker, grid fixtures and the report."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.backends import OperationUnsupported
from harness.dealing import GROUP_MARKER, LASTS_MARKER, deal
from harness.environment import is_not_judged
from harness.failure_text import failure_message
from harness.features import PROFILES, marker_problem
from harness.grid_factory import GridFactory
from harness.id_select import item_id as conformance_test_id
from harness.id_select import matches as id_matches
from harness.run_options import add_pytest_options
from harness.timeouts import TIMEOUTS_ENV
from harness.timeouts import encode as encode_timeouts
from harness.timeouts import parse_overrides as parse_timeout_overrides
from harness.waiting import WAIT_SCALE_ENV

#: The progress lines (harness.progress) come with the plugin; loaded with it so that --no-progress exists.
pytest_plugins = ["harness.progress"]

_RESULTS_KEY = pytest.StashKey[dict[str, Any]]()
_ID_KEY = pytest.StashKey[str]()
_IMPL_KEY = pytest.StashKey[Any]()
FACTORY_KEY = pytest.StashKey[Any]()  # the session's grid factory, with every grid and mesh it has open
_UNSUPPORTED = "unsupported feature"
#: The skip reason of a demo claim no test can judge here (a NetworkPolicy, a model server): the report
#: lists it with its reason as not applicable, neither a pass nor a skip.
NOT_APPLICABLE = "not applicable"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agn-conformance", "AI Grid Network conformance")
    add_pytest_options(group)  # the run options (harness.run_options), as `agn-conformance run` has them
    group.addoption("--conformance-profiles", default=None,
                    help="comma-separated profiles the report covers (default: those of the collected tests)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "conformance(id, profile, level, feature, spec, statements): a conformance test with a stable id"
    )
    config.addinivalue_line(
        "markers", "slow(seconds): a conformance test that waits out a default cadence of about `seconds`; "
                   "it runs only with --grid-slow"
    )
    config.addinivalue_line(
        "markers", f"{LASTS_MARKER}(seconds): a test that lasts about `seconds` by design (it waits out the guide's "
                   "durations); a distributed run starts it at the head of a worker's part (harness.dealing)"
    )
    if not config.pluginmanager.hasplugin("xdist"):  # pytest-xdist registers its marker itself
        config.addinivalue_line("markers", f"{GROUP_MARKER}(name): tests that belong on one worker (harness.dealing)")
    config.stash[_RESULTS_KEY] = {}
    config.pluginmanager.register(_Recorder(config), "agn-conformance-recorder")
    scale = config.getoption("--grid-wait-scale", None)
    if scale is not None:
        if not scale > 0:
            raise pytest.UsageError("--grid-wait-scale must be a positive number")
        # the environment carries it to xdist workers started after this point as well
        os.environ[WAIT_SCALE_ENV] = repr(scale)
    entries = config.getoption("--grid-timeout", None) or []
    if entries:
        try:
            overrides = parse_timeout_overrides(entries)
        except ValueError as exc:
            raise pytest.UsageError(f"--grid-timeout: {exc}") from None
        os.environ[TIMEOUTS_ENV] = encode_timeouts(overrides)


def conformance_statements(item: pytest.Item) -> tuple[str, ...]:
    """The catalogued spec statements a conformance test names as the ones it enforces."""
    marker = item.get_closest_marker("conformance")
    value = marker.kwargs.get("statements", ()) if marker is not None else ()
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise pytest.UsageError(f"{item.nodeid}: conformance statements must be a list of statement ids")
    return tuple(value)


def conformance_meta(item: pytest.Item) -> dict[str, str] | None:
    marker = item.get_closest_marker("conformance")
    if marker is None:
        return None
    meta = {key: value for key, value in marker.kwargs.items() if key != "statements"}
    missing = [key for key in ("id", "profile", "level", "feature", "spec") if not meta.get(key)]
    if missing:
        raise pytest.UsageError(f"{item.nodeid}: conformance marker lacks {', '.join(missing)}")
    problem = marker_problem(str(meta["profile"]), str(meta["level"]), str(meta["feature"]))
    if problem is not None:
        raise pytest.UsageError(f"{item.nodeid}: conformance marker: {problem}")
    return {key: str(value) for key, value in meta.items()}


SLOW_OPTION = "--grid-slow"
#: The skip reason of a slow test a run did not ask for: reported as skipped with this reason in every file,
#: so a reader sees what the run left out and how to run it.
NOT_SELECTED = "slow test not selected"
_NOT_SELECTED_KEY = pytest.StashKey[set[str]]()


def skip_unless_slow(config: pytest.Config, item: pytest.Item) -> None:
    """A slow test is skipped, saying how long it takes and how to run it, unless slow tests were asked for."""
    marker = item.get_closest_marker("slow")
    if marker is None or config.getoption(SLOW_OPTION, False):
        return
    meta = conformance_meta(item)
    if meta is not None and meta["level"] == "extended" and meta["feature"] not in _load_impl(config).features:
        return  # unsupported, not skipped: pytest_runtest_setup says so
    seconds = marker.args[0] if marker.args else marker.kwargs.get("seconds", "?")
    item.add_marker(pytest.mark.skip(reason=f"{NOT_SELECTED}: waits out a default cadence (about {seconds} s); run "
                                            f"with {SLOW_OPTION} (agn-conformance run --slow)"))


@pytest.hookimpl(tryfirst=True)  # before pytest's own `-k`/`-m` deselection, which reads the ids noted here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen: dict[str, str] = {}
    catalogue: Any = None
    for item in items:
        meta = conformance_meta(item)
        if meta is None:
            continue
        skip_unless_slow(config, item)
        named = conformance_statements(item)
        if named:
            if catalogue is None:
                from harness.statements import load_statements

                catalogue = load_statements()
            unknown = [sid for sid in named if sid not in catalogue]
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: names statement {unknown[0]!r}, which suites/statements.yaml "
                                        "lacks")
        test_id = conformance_test_id(meta["id"], item)
        if test_id in seen and seen[test_id] != item.nodeid:
            raise pytest.UsageError(f"duplicate conformance id {test_id}: {seen[test_id]} and {item.nodeid}")
        seen[test_id] = item.nodeid
        item.stash[_ID_KEY] = test_id
        # `-k` matches keywords: the conformance id (with its case) is one, so `-- -k CONS-SEL-ROUND-ROBIN`
        # selects what `agn-conformance list` names
        item.extra_keyword_matches.update({test_id, meta["id"]})
    patterns = config.getoption("--conformance-id", None) or []
    if patterns:  # --id: keep the conformance tests whose id a pattern selects (harness.id_select)

        kept = [item for item in items if _ID_KEY in item.stash and any(id_matches(p, item.stash[_ID_KEY])
                                                                          for p in patterns)]
        if len(kept) < len(items):
            keep = set(kept)
            config.hook.pytest_deselected(items=[item for item in items if item not in keep])
            items[:] = kept
    lengths = [_lasts_s(item) for item in items]  # checked in every run, used where there are workers
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers > 1:
        items[:] = deal(items, lengths, workers, [_group(item) for item in items])


def _group(item: pytest.Item) -> str | None:
    """The group `item` belongs on one worker with (pytest-xdist's xdist_group marker, named as xdist names
    it), None when unmarked or skipped anyway."""
    marker = item.get_closest_marker(GROUP_MARKER)
    if marker is None or item.get_closest_marker("skip") is not None:
        return None
    return str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))


def _lasts_s(item: pytest.Item) -> float | None:
    """How long `item` lasts by design (its lasts marker), None when unmarked or skipped anyway."""
    marker = item.get_closest_marker(LASTS_MARKER)
    if marker is None or item.get_closest_marker("skip") is not None:
        return None
    seconds = marker.args[0] if marker.args else marker.kwargs.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise pytest.UsageError(f"{item.nodeid}: {LASTS_MARKER}(seconds) needs a positive number of seconds, "
                                f"got {seconds!r}")
    return float(seconds)


def _load_impl(config: pytest.Config) -> Any:
    """The implementation descriptor named by --impl, read once per session."""
    if _IMPL_KEY not in config.stash:
        from harness.impl import load_impl

        config.stash[_IMPL_KEY] = load_impl(config.getoption("--impl"))
    return config.stash[_IMPL_KEY]


@pytest.fixture(scope="session")
def impl(pytestconfig: pytest.Config) -> Any:
    return _load_impl(pytestconfig)


def pytest_runtest_setup(item: pytest.Item) -> None:
    meta = conformance_meta(item)
    if meta is None or meta["level"] != "extended":
        return
    if meta["feature"] not in _load_impl(item.config).features:
        pytest.skip(f"{_UNSUPPORTED}: {meta['feature']} is not claimed by the implementation")


@pytest.fixture(scope="session")
def grid_factory(pytestconfig: pytest.Config, impl: Any, tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> GridFactory:
    """Opens this session's grids and meshes (work directory, seed, backend, preflight, teardown)."""
    factory = GridFactory(pytestconfig, tmp_path_factory, impl, request.session)
    pytestconfig.stash[FACTORY_KEY] = factory
    return factory


@pytest.fixture(scope="session")
def grid(pytestconfig: pytest.Config, grid_factory: GridFactory) -> Iterator[Any]:
    """The running grid of --grid-topology for this session, torn down at the end, pass or fail."""
    with grid_factory.open(pytestconfig.getoption("--grid-topology"), purpose="grid") as the_grid:
        yield the_grid


_PROPERTY = "agn-conformance"
_DEMO_INPUTS_KEY = pytest.StashKey[Any]()
#: What each scenario took from a demo folder, as report records, gathered where the report is written: an
#: xdist worker reads the folder and sends its records with each test report (user property _DEMO_PROPERTY).
_DEMO_RECORDS_KEY = pytest.StashKey[Any]()
_DEMO_PROPERTY = "agn-conformance-demo-inputs"
_DEMO_SENT_KEY = pytest.StashKey[Any]()


def demo_inputs(config: pytest.Config, sites: Sequence[str], *, takes: frozenset[str] | None = None,
                scenario: str = "the scenario", aliases: Mapping[str, str] | None = None) -> Any:
    """The inputs of the demo folder --grid-demo-dir names for a scenario of `sites` that takes `takes`
    (default: everything it can; harness.demo_dir.ALL_INPUTS), with `aliases` the demo's own names of its
    sites, read once per scenario (None without the option); the report lists what each scenario used and
    every key it could not. A --grid-demo-dir that is not a folder stops the session as a usage error."""
    path = config.getoption("--grid-demo-dir")
    if not path:
        return None
    from harness.demo_dir import ALL_INPUTS, DemoDirError, read_demo_dir

    wanted = ALL_INPUTS if takes is None else takes
    readings: dict[tuple[Any, ...], Any] = config.stash.setdefault(_DEMO_INPUTS_KEY, {})
    key = (tuple(sites), wanted, scenario, tuple(sorted((aliases or {}).items())))
    if key not in readings:
        try:
            readings[key] = read_demo_dir(Path(path), sites, takes=wanted, scenario=scenario, aliases=aliases)
        except DemoDirError as exc:
            pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
    return readings[key]


def _demo_records(config: pytest.Config) -> dict[str, Any]:
    """This process's demo folder readings as report records, keyed by scenario."""
    return {repr(key): reading.as_record() for key, reading in config.stash.get(_DEMO_INPUTS_KEY, {}).items()}


def _send_new_demo_records(config: pytest.Config, report: pytest.TestReport) -> None:
    """On an xdist worker: the records of scenarios read since the last report go to the controller with
    this one (each once), since the controller writes the report."""
    sent: set[str] = config.stash.setdefault(_DEMO_SENT_KEY, set())
    fresh = {key: record for key, record in _demo_records(config).items() if key not in sent}
    if fresh:
        sent.update(fresh)
        report.user_properties.append((_DEMO_PROPERTY, fresh))


def demo_inputs_record(by_scenario: Mapping[str, Any]) -> dict[str, Any] | None:
    """The report's demoInputs: the one scenario's record, or each scenario's in `by_scenario`."""
    records = list(by_scenario.values())
    if not records:
        return None
    if len(records) == 1:
        return records[0]
    return {"source": records[0]["source"], "readings": records,
            "used": [key for r in records for key in r["used"]],
            "unused": [u for r in records for u in r["unused"]]}


_TIMELINE_KEY = pytest.StashKey[Any]()


def _test_timeline(item: pytest.Item) -> Any:
    """The test's one timeline, made on first use: the `timeline` fixture (during setup) and the plugin (around
    the call) share it, so what a test records itself and what the harness records land in one timeline."""
    recorded = item.stash.get(_TIMELINE_KEY, None)
    if recorded is None:
        from harness.timeline import Timeline

        recorded = item.stash[_TIMELINE_KEY] = Timeline()
    return recorded


@pytest.fixture
def timeline(request: pytest.FixtureRequest) -> Any:
    """This test's timeline (harness.timeline.Timeline); what it records travels to the report."""
    return _test_timeline(request.node)


_FEATURES_KEY = pytest.StashKey[dict[str, str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """While a conformance test's phases run, the Grid API notes the extended features its inputs ask for
    (harness.feature_use); the teardown report carries them."""
    if item.get_closest_marker("conformance") is None:
        return (yield)
    from harness import feature_use

    with feature_use.recording(item.stash.setdefault(_FEATURES_KEY, {})):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A conformance test asking the backend for something it cannot do is skipped with the backend's reason.

    While the test runs its timeline is current (harness.timeline.recording), so the harness's waits and
    judgements (revision stages, mesh member states, distributions) record what they saw without a fixture.
    """
    if item.get_closest_marker("conformance") is None:
        return (yield)
    from harness.timeline import recording

    with recording(_test_timeline(item)):
        try:
            return (yield)
        except OperationUnsupported as exc:
            pytest.skip(f"not on this backend: {exc}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Tag each phase report with the test's conformance metadata (it travels to an xdist controller) and
    attach every open grid's and mesh's diagnostics to a failure."""
    report = yield
    meta = conformance_meta(item)
    if meta is None:
        return report
    factory = item.config.stash.get(FACTORY_KEY, None)
    if report.failed and factory is not None:
        attached = len(report.sections)
        for grid in factory.grids:
            report.sections.append((f"agn-conformance {grid.topology.name} grid", grid.diagnostics()))
        for mesh in factory.meshes:  # operator logs, mesh status and gateways of every running mesh
            report.sections.append(("agn-conformance mesh", mesh.diagnostics()))
        for title, text in report.sections[attached:]:  # the HTML page shows them with the failure
            _test_timeline(item).diagnostics(f"{title} ({report.when})", text)
    tagged: dict[str, Any] = {**meta, "id": item.stash.get(_ID_KEY, meta["id"]),
                              "statements": list(conformance_statements(item))}
    recorded = item.stash.get(_TIMELINE_KEY, None)
    if recorded is not None and report.when == "teardown" and recorded.events:
        tagged["timeline"] = recorded.records()  # once, complete, and only when it holds evidence
    used = item.stash.get(_FEATURES_KEY, None)
    if used and report.when == "teardown":
        tagged["featuresUsed"] = sorted(used)
    report.user_properties.append((_PROPERTY, tagged))
    if report.when == "teardown" and hasattr(item.config, "workerinput"):
        _send_new_demo_records(item.config, report)
    return report


class _Recorder:
    """Folds phase reports into one result per conformance id.

    `pytest_runtest_logreport` runs where the report is written: in the only process, or in the xdist
    controller, which receives every worker's reports with their user properties.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == _DEMO_PROPERTY and isinstance(value, Mapping):
                received: dict[str, Any] = self.config.stash.setdefault(_DEMO_RECORDS_KEY, {})
                received.update(value)
        meta: Any = next((value for name, value in report.user_properties if name == _PROPERTY), None)
        if meta is not None:
            _record(self.config, dict(meta), report)


def _record(config: pytest.Config, meta: dict[str, Any], report: pytest.TestReport) -> None:
    results = config.stash[_RESULTS_KEY]
    entry = results.setdefault(meta["id"], {"meta": meta, "outcome": "passed", "duration": 0.0, "message": ""})
    entry["duration"] += report.duration
    if meta.get("timeline"):
        entry["timeline"] = meta["timeline"]
    if meta.get("featuresUsed"):
        entry["featuresUsed"] = meta["featuresUsed"]
    if report.failed:
        entry["outcome"] = "failed"
        entry["message"] = failure_message(report)
        _write_diagnostics(config, meta["id"], report)
    elif report.skipped and entry["outcome"] != "failed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if reason.startswith(NOT_SELECTED) or reason.startswith(f"Skipped: {NOT_SELECTED}"):
            config.stash.setdefault(_NOT_SELECTED_KEY, set()).add(meta["id"])
        entry["outcome"] = ("unsupported" if _UNSUPPORTED in reason
                            else "notJudged" if is_not_judged(reason)
                            else "notApplicable" if reason.removeprefix("Skipped: ").startswith(NOT_APPLICABLE)
                            else "skipped")
        entry["message"] = reason


def _write_diagnostics(config: pytest.Config, test_id: str, report: pytest.TestReport) -> None:
    """With --conformance-diagnostics DIR: the failure in full and every section attached to it (the grids'
    overlays and log tails, captured output) in DIR/<id>.txt, appended phase by phase."""
    directory = config.getoption("--conformance-diagnostics")
    if not directory:
        return
    from harness.submission import diagnostics_name

    target = Path(directory) / diagnostics_name(test_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    # the assertion's own message first (what the report says), then where it failed
    parts = [f"=== {test_id}: failed in {report.when} ({report.nodeid})", failure_message(report), "",
             "=== traceback", str(report.longreprtext)]
    parts += [f"=== {title}\n{text}" for title, text in report.sections]
    with target.open("a", encoding="utf-8", errors="replace") as out:
        out.write("\n".join(parts) + "\n")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller has every result and writes the report
    path = config.getoption("--conformance-report")
    html_path = config.getoption("--conformance-html")
    junit_path = config.getoption("--conformance-junit")
    if not path and not html_path and not junit_path:
        return
    from harness import __version__
    from harness.report.model import TestResult
    from harness.report.writer import build_report, write_html, write_yaml

    results = [
        TestResult(id=test_id, profile=e["meta"]["profile"], level=e["meta"]["level"],
                   feature=e["meta"]["feature"], spec=e["meta"]["spec"], outcome=e["outcome"],
                   duration_s=round(e["duration"], 3), message=e["message"],
                   statements=tuple(e["meta"].get("statements", ())), timeline=tuple(e.get("timeline", ())),
                   features_used=tuple(e.get("featuresUsed", ())))
        for test_id, e in sorted(config.stash[_RESULTS_KEY].items())
    ]
    profiles_opt = config.getoption("--conformance-profiles")
    profiles = profiles_opt.split(",") if profiles_opt else sorted({r.profile for r in results})
    descriptor = _load_impl(config)
    from harness.impl_version import reported_version
    from harness.provenance import source_commit
    from harness.statements import shipped_statements

    probe = descriptor.implementation.version_command
    commit = source_commit()
    report = build_report(results, descriptor.implementation, backend=config.getoption("--grid-backend"),
                          harness_version=__version__, profiles=profiles,
                          features_claimed=descriptor.features, statements=shipped_statements(),
                          reported_version=reported_version(probe) if probe else None,
                          harness_commit=str(commit) if commit else None)
    inputs = demo_inputs_record({**config.stash.get(_DEMO_RECORDS_KEY, {}), **_demo_records(config)})
    if inputs is not None:
        report["demoInputs"] = inputs
    if path:
        write_yaml(report, Path(path))
    if html_path:
        write_html(report, results, Path(html_path))
    if junit_path:
        from harness.report.junit import write_junit

        write_junit(results, report, Path(junit_path))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say how many slow tests this run left out, and how to run them."""
    left_out = config.stash.get(_NOT_SELECTED_KEY, set())
    if left_out:
        terminalreporter.write_line(f"agn-conformance: {len(left_out)} slow test(s) not selected, reported as skipped "
                                    f"({', '.join(sorted(left_out))}); run them with --slow")


__all__ = ["NOT_APPLICABLE", "NOT_SELECTED", "PROFILES", "conformance_meta", "demo_inputs"]
